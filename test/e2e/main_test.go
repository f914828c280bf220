//go:build e2e

// Package e2e tests the operator on a whole cluster (internal/cluster): the real kube-controller-manager
// and kube-scheduler, and kwok's nodes in three zones. Workloads are Deployments and StatefulSets changed
// as users change them; each pod's consumer is a simulated member (testenv.SimMember) that records what
// its application reads, so that "no queue has two readers" is checked from the members' own records.
//
//	make test-e2e
package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	"github.com/consumergroup-operator/consumergroup-operator/internal/cluster"
	"github.com/consumergroup-operator/consumergroup-operator/internal/manager"
	"github.com/consumergroup-operator/consumergroup-operator/internal/testenv"
)

var (
	// admin is the cluster's administrator: tests create and change workloads with it.
	admin     client.Client
	adminCS   kubernetes.Interface
	adminRest *rest.Config
	// operatorWrites counts the operator's requests that change something.
	operatorWrites testenv.WriteCounter
	// operatorLog receives the operator's log, which TestNamespaceDeletion reads for error loops.
	operatorLog string
)

func TestMain(m *testing.M) {
	os.Exit(run(m))
}

func run(m *testing.M) int {
	if os.Getenv("KUBEBUILDER_ASSETS") == "" {
		fmt.Fprintln(os.Stderr, "KUBEBUILDER_ASSETS is not set: run the tests with `make test-e2e`, which builds the cluster's binaries (hack/envtest-bins.sh) and sets it")
		return 1
	}
	dir, err := os.MkdirTemp("", "consumergroup-e2e-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	operatorLog = filepath.Join(dir, "operator.log")
	logFile, err := os.Create(operatorLog)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	logf.SetLogger(zap.New(zap.WriteTo(logFile)))

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	c, err := cluster.Start(ctx, cluster.Options{Dir: dir, CRDDirectoryPaths: []string{filepath.Join("..", "..", "config", "crd", "bases")}})
	if err != nil {
		fmt.Fprintln(os.Stderr, "starting the cluster:", err, "(logs in", dir+")")
		return 1
	}
	code := 1
	defer func() {
		cancel()
		if err := c.Stop(); err != nil {
			fmt.Fprintln(os.Stderr, err)
		}
		if code == 0 {
			_ = os.RemoveAll(dir)
		} else {
			fmt.Fprintln(os.Stderr, "the cluster's and the operator's logs are in", dir)
		}
	}()

	adminRest = c.Config
	if admin, err = client.New(adminRest, client.Options{Scheme: manager.Scheme()}); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	adminCS = kubernetes.NewForConfigOrDie(adminRest)

	// The operator, as main.go builds it, with its writes counted.
	opCfg := rest.CopyConfig(adminRest)
	operatorWrites.Wrap(opCfg)
	mgr, err := ctrl.NewManager(opCfg, manager.Options("0", "0", false, "", ""))
	if err == nil {
		err = manager.Setup(ctx, mgr, manager.Settings{})
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "setting up the operator:", err)
		return 1
	}
	done := make(chan error, 1)
	go func() { done <- mgr.Start(ctx) }()
	code = m.Run()
	cancel()
	if err := <-done; err != nil {
		fmt.Fprintln(os.Stderr, "the operator:", err)
		code = 1
	}
	return code
}
