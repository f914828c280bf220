package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/klog/v2"

	"github.com/consumergroup-operator/consumergroup-operator/pkg/nodeagent"
	"github.com/consumergroup-operator/consumergroup-operator/pkg/protocol"
)

// nodeCommand is the first argument that makes the agent a node agent (package nodeagent) instead of a
// member's sidecar: `consumergroup-agent node`, run by a DaemonSet, answers the confirmations of the
// node-mode members on its node.
const nodeCommand = "node"

// Environment variables the node agent reads; its DaemonSet sets them from the downward API.
const (
	envNodeName     = "NODE_NAME"
	envPodNamespace = "POD_NAMESPACE"
	envPodName      = "POD_NAME"
	envHostIP       = "HOST_IP"
)

// nodeOptions are the node agent's settings, from its flags and environment.
type nodeOptions struct {
	node, namespace, pod, listen, kubeconfig string
	minReadInterval, heartbeat               time.Duration
}

// parseNodeFlags reads the node agent's settings from args, with defaults from getenv. It refuses to go
// on without a node name or a namespace, or, with a heartbeat, without its pod's name. It listens on every
// address of its pod, where the Service with internalTrafficPolicy Local that members call sends them, or
// on $HOST_IP when that is set (a pod on the host's network).
func parseNodeFlags(args []string, getenv func(string) string, out io.Writer) (nodeOptions, error) {
	fs := flag.NewFlagSet(nodeCommand, flag.ContinueOnError)
	fs.SetOutput(out)
	var o nodeOptions
	listenDefault := ":" + strconv.Itoa(protocol.DefaultNodeAgentPort)
	if ip := getenv(envHostIP); ip != "" {
		listenDefault = net.JoinHostPort(ip, strconv.Itoa(protocol.DefaultNodeAgentPort))
	}
	fs.StringVar(&o.node, "node", getenv(envNodeName), "the node the agent serves: it reads that node's view and answers only pods on it; $"+envNodeName+" by default")
	fs.StringVar(&o.namespace, "namespace", getenv(envPodNamespace), "the namespace of the node views: the operator's; $"+envPodNamespace+" by default")
	fs.StringVar(&o.listen, "listen", listenDefault, fmt.Sprintf("address to serve on; :%d, or $%s:%d when $%s is set", protocol.DefaultNodeAgentPort, envHostIP, protocol.DefaultNodeAgentPort, envHostIP))
	fs.StringVar(&o.kubeconfig, "kubeconfig", "", "kubeconfig file; the pod's service account when empty")
	fs.DurationVar(&o.minReadInterval, "min-read-interval", nodeagent.DefaultMinReadInterval, "the shortest time between two reads of the node view: what the agent costs the API server, and up to how long a member's request waits")
	fs.DurationVar(&o.heartbeat, "heartbeat", protocol.DefaultNodeAgentHeartbeat, fmt.Sprintf("the duration of the agent's heartbeat Lease, in the namespace of the node views, which it renews every quarter of it: at least %v, in whole seconds; a negative value turns the heartbeat off", nodeagent.MinHeartbeat))
	fs.StringVar(&o.pod, "pod", getenv(envPodName), "the agent's pod name, the holder of its heartbeat Lease; $"+envPodName+" by default")
	if err := fs.Parse(args); err != nil {
		return nodeOptions{}, err
	}
	if fs.NArg() > 0 {
		return nodeOptions{}, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	var errs []error
	if o.node == "" {
		errs = append(errs, fmt.Errorf("the node name is required: set -node or $%s (from spec.nodeName)", envNodeName))
	}
	if o.namespace == "" {
		errs = append(errs, fmt.Errorf("the namespace of the node views is required: set -namespace or $%s (from metadata.namespace)", envPodNamespace))
	}
	if o.listen == "" {
		errs = append(errs, errors.New("an address to listen on is required: -listen is empty"))
	}
	if o.minReadInterval <= 0 {
		errs = append(errs, fmt.Errorf("-min-read-interval=%v must be positive", o.minReadInterval))
	}
	if o.heartbeat >= 0 && o.heartbeat < nodeagent.MinHeartbeat {
		errs = append(errs, fmt.Errorf("-heartbeat=%v must be at least %v, or negative to turn the heartbeat off", o.heartbeat, nodeagent.MinHeartbeat))
	}
	if o.heartbeat >= 0 && o.pod == "" {
		errs = append(errs, fmt.Errorf("the pod name, the holder of the heartbeat Lease, is required: set -pod or $%s (from metadata.name), or turn the heartbeat off with a negative -heartbeat", envPodName))
	}
	return o, errors.Join(errs...)
}

// runNode runs the node agent with args until ctx ends.
func runNode(ctx context.Context, args []string, getenv func(string) string, out io.Writer) error {
	o, err := parseNodeFlags(args, getenv, out)
	if err != nil {
		return err
	}
	restConfig, err := clientcmd.BuildConfigFromFlags("", o.kubeconfig)
	if err != nil {
		return fmt.Errorf("loading the Kubernetes client configuration: %w", err)
	}
	restConfig.UserAgent = "consumergroup-agent-node"
	cs, err := kubernetes.NewForConfig(restConfig)
	if err != nil {
		return err
	}
	agent, err := nodeagent.New(nodeagent.Config{Node: o.node, Namespace: o.namespace, Client: cs, MinReadInterval: o.minReadInterval,
		Heartbeat: o.heartbeat, Pod: o.pod})
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", o.listen)
	if err != nil {
		return fmt.Errorf("listening on %s: %w", o.listen, err)
	}
	klog.FromContext(ctx).Info("Serving node agent", "address", ln.Addr().String(), "node", o.node, "nodeViews", o.namespace, "heartbeat", o.heartbeat)
	return serveNode(ctx, agent, ln)
}

// serveNode serves agent on ln until ctx ends (SIGTERM), then stops: the requests still waiting are
// answered 503 once the agent's reader has stopped, and the server shuts down.
func serveNode(ctx context.Context, agent *nodeagent.Server, ln net.Listener) error {
	ctx, stop := context.WithCancel(ctx)
	defer stop()
	runDone := make(chan error, 1)
	go func() { runDone <- agent.Run(ctx) }()
	srv := &http.Server{
		Handler:           agent.Handler(),
		Protocols:         nodeagent.Protocols(),
		ReadHeaderTimeout: 5 * time.Second,
		ReadTimeout:       10 * time.Second,
		WriteTimeout:      30 * time.Second,
		IdleTimeout:       2 * time.Minute,
		BaseContext:       func(net.Listener) context.Context { return ctx },
	}
	// The reader stops first, and answers the requests still waiting 503: Shutdown need not wait for them.
	err := serveHTTP(ctx, srv, ln, stop)
	if runErr := <-runDone; runErr != nil && err == nil {
		err = runErr
	}
	return err
}
