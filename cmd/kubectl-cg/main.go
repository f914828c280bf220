// Command kubectl-cg is a kubectl plugin for ConsumerGroups: kubectl cg describe, who-has, plan, pause
// and resume. Put it on the PATH (make build writes bin/kubectl-cg) or install it with krew
// (make release VERSION=x.y.z writes its archives and dist/kubectl-cg.yaml, the manifest).
package main

import (
	"fmt"
	"os"

	"k8s.io/cli-runtime/pkg/genericiooptions"

	"github.com/consumergroup-operator/consumergroup-operator/internal/kubectlcg"
	"github.com/consumergroup-operator/consumergroup-operator/internal/version"
)

func main() {
	cmd := kubectlcg.NewCommand(genericiooptions.IOStreams{In: os.Stdin, Out: os.Stdout, ErrOut: os.Stderr})
	cmd.Version = version.Get().String("kubectl-cg")
	cmd.SetVersionTemplate("{{.Version}}\n")
	if err := cmd.Execute(); err != nil {
		fmt.Fprintln(os.Stderr, "error:", err)
		os.Exit(1)
	}
}
