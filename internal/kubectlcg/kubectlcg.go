// Package kubectlcg is the kubectl plugin kubectl-cg: it answers, from the live state of a cluster, who
// reads what in a ConsumerGroup (describe, who-has), what a change would move (plan), and freezes or
// unfreezes a group for an incident (pause, resume). It reads what the operator reads and computes plans
// with the operator's own code (observe.PreviewGroup); only pause and resume write.
package kubectlcg

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/cli-runtime/pkg/genericiooptions"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"github.com/consumergroup-operator/consumergroup-operator/api/v1alpha1"
	"github.com/consumergroup-operator/consumergroup-operator/internal/observe"
	"github.com/consumergroup-operator/consumergroup-operator/internal/plan"
	"github.com/consumergroup-operator/consumergroup-operator/internal/scheme"
	"github.com/consumergroup-operator/consumergroup-operator/pkg/allocate"
	"github.com/consumergroup-operator/consumergroup-operator/pkg/protocol"
)

// options are the flags every command shares: kubectl's (kubeconfig, context, namespace, ...) and -o.
type options struct {
	kube    *genericclioptions.ConfigFlags
	output  string
	streams genericiooptions.IOStreams
	// now is the clock, for Lease ages.
	now func() time.Time
}

// NewCommand is kubectl-cg's root command, writing to streams.
func NewCommand(streams genericiooptions.IOStreams) *cobra.Command {
	o := &options{kube: genericclioptions.NewConfigFlags(true), streams: streams, now: time.Now}
	root := &cobra.Command{
		Use:   "kubectl-cg",
		Short: "Inspect and steer ConsumerGroups: who reads what, what a change would move, pause and resume",
		// Errors are printed once, by main; usage only when the command line is wrong.
		SilenceErrors: true,
		SilenceUsage:  true,
	}
	o.kube.AddFlags(root.PersistentFlags())
	root.PersistentFlags().StringVarP(&o.output, "output", "o", "table", "output format: table, json or yaml")
	root.AddCommand(describeCommand(o), whoHasCommand(o), planCommand(o), pauseCommand(o, true), pauseCommand(o, false))
	root.SetOut(streams.Out)
	root.SetErr(streams.ErrOut)
	return root
}

// client is a client of the API server the flags name, and the namespace they name.
func (o *options) client() (client.Client, string, error) {
	cfg, err := o.kube.ToRESTConfig()
	if err != nil {
		return nil, "", err
	}
	ns, _, err := o.kube.ToRawKubeConfigLoader().Namespace()
	if err != nil {
		return nil, "", err
	}
	c, err := client.New(cfg, client.Options{Scheme: scheme.New()})
	return c, ns, err
}

// group connects to the API server and reads the named group in the flags' namespace.
func (o *options) group(ctx context.Context, name string) (client.Client, *v1alpha1.ConsumerGroup, error) {
	c, ns, err := o.client()
	if err != nil {
		return nil, nil, err
	}
	var g v1alpha1.ConsumerGroup
	if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, &g); err != nil {
		return nil, nil, fmt.Errorf("consumergroup %s/%s: %w", ns, name, err)
	}
	return c, &g, nil
}

// preview reads the named group and computes its preview as it is.
func (o *options) preview(ctx context.Context, name string) (*v1alpha1.ConsumerGroup, *plan.Preview, error) {
	c, g, err := o.group(ctx, name)
	if err != nil {
		return nil, nil, err
	}
	pv, err := observe.PreviewGroup(ctx, c, g, o.now())
	return g, pv, err
}

// answer is what a command found: written as a table, or with -o as JSON or YAML.
type answer interface {
	table(w io.Writer) error
}

// previewCommand is a command that reads the group its first argument names, computes its preview as it
// is, and prints what answer makes of them.
func (o *options) previewCommand(use, short string, args cobra.PositionalArgs,
	answerOf func(g *v1alpha1.ConsumerGroup, pv *plan.Preview, args []string) (answer, error)) *cobra.Command {
	return &cobra.Command{
		Use:   use,
		Short: short,
		Args:  args,
		RunE: func(cmd *cobra.Command, args []string) error {
			g, pv, err := o.preview(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			a, err := answerOf(g, pv, args)
			if err != nil {
				return err
			}
			return o.print(a)
		},
	}
}

// print writes a as JSON or YAML, or as its table for -o table.
func (o *options) print(a answer) error {
	switch o.output {
	case "table", "":
		return a.table(o.streams.Out)
	case "json":
		b, err := json.MarshalIndent(a, "", "  ")
		if err != nil {
			return err
		}
		_, err = fmt.Fprintf(o.streams.Out, "%s\n", b)
		return err
	case "yaml":
		b, err := yaml.Marshal(a)
		if err != nil {
			return err
		}
		_, err = o.streams.Out.Write(b)
		return err
	default:
		return fmt.Errorf("unknown output format %q: table, json or yaml", o.output)
	}
}

// ranges writes queues compactly, per topic and broker, ids as ranges: "orders/broker-a/0-3,8".
func ranges(queues []allocate.Queue) string {
	var parts []string
	for _, b := range protocol.Compact(queues) {
		parts = append(parts, b.Topic+"/"+b.Broker+"/"+b.IDs)
	}
	if len(parts) == 0 {
		return "-"
	}
	return strings.Join(parts, " ")
}

// table writes aligned columns. It keeps the first write error, which flush returns.
type table struct {
	tw  *tabwriter.Writer
	err error
}

func newTable(w io.Writer) *table { return &table{tw: tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)} }

func (t *table) printf(format string, args ...any) {
	if t.err == nil {
		_, t.err = fmt.Fprintf(t.tw, format, args...)
	}
}

func (t *table) flush() error {
	if t.err != nil {
		return t.err
	}
	return t.tw.Flush()
}
