// Command consumergroup-agent runs beside a consumer in a ConsumerGroup member pod and serves the pod's
// assignment over localhost HTTP, so a consumer in any language can follow the protocol of
// docs/protocol.md without a Kubernetes client:
//
//	GET  /v1/assignment                      the assignment in force, and the topics the operator assigns
//	GET  /v1/assignment?after=N&timeout=30s  wait for a generation other than N
//	POST /v1/ack {"generation":N}            the consumer applied generation N
//	POST /v1/drain                           the pod is shutting down: wait until the operator released its
//	                                         queues, then hold and claim nothing until the agent restarts
//	PUT  /v1/load {"loads":{"t/b/0":1.5}}    the load of the queues the consumer reads
//	GET  /healthz                            200 once the assignment is read, the Lease renewed and the view confirmed
//
// `consumergroup-agent probe [-listen addr]` is its liveness probe, for an exec probe: it exits 1 unless
// /healthz answers 200.
//
// `consumergroup-agent node [-node NAME] [-namespace NS] [-listen ADDR] [-min-read-interval 1s]
// [-heartbeat 8s] [-pod NAME]` is the node agent of node mode instead (package nodeagent), one per node,
// run by a DaemonSet: it answers the confirmation requests of the members on its node with reads of the
// node's view, and renews its node's heartbeat Lease every quarter of -heartbeat. It reads NODE_NAME,
// POD_NAMESPACE and POD_NAME from the environment, and listens on :9443 by default (members reach it
// through a Service with internalTrafficPolicy Local), or on $(HOST_IP):9443 when HOST_IP is set.
//
// It reads POD_NAME, POD_NAMESPACE, POD_UID, CONSUMER_GROUP and MEMBER_ID from the environment, and
// NODE_AGENT and NODE_AGENT_TOKEN_FILE, which make the member confirm its view through the node agent.
//
// The API has no authentication: whoever reaches it can acknowledge for the consumer or drain the pod. It
// listens on loopback only, unless -allow-non-loopback says otherwise.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/signal"
	"syscall"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/klog/v2"

	"github.com/consumergroup-operator/consumergroup-operator/internal/version"
	"github.com/consumergroup-operator/consumergroup-operator/pkg/member"
	"github.com/consumergroup-operator/consumergroup-operator/pkg/protocol"
)

func main() {
	klog.InitFlags(nil)
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	if len(os.Args) > 1 && os.Args[1] == probeCommand {
		os.Exit(probe(ctx, os.Args[2:], os.Stderr))
	}
	if len(os.Args) > 1 && os.Args[1] == nodeCommand {
		if err := runNode(ctx, os.Args[2:], os.Getenv, os.Stderr); err != nil {
			klog.ErrorS(err, "Node agent failed")
			klog.Flush()
			os.Exit(1)
		}
		return
	}
	if err := run(ctx, flag.CommandLine, os.Args[1:]); err != nil {
		klog.ErrorS(err, "Agent failed")
		klog.Flush()
		os.Exit(1)
	}
}

// run parses flags and the environment, then serves until ctx ends.
func run(ctx context.Context, fs *flag.FlagSet, args []string) error {
	listen := fs.String("listen", "127.0.0.1:8089", "address to serve the HTTP API on: a loopback address or localhost, unless -"+allowNonLoopbackFlag+" is set")
	allowNonLoopback := fs.Bool(allowNonLoopbackFlag, false, "allow -listen on an address other than loopback; the API has no authentication, so anyone who reaches it can acknowledge for the consumer or drain the pod")
	kubeconfig := fs.String("kubeconfig", "", "kubeconfig file; the pod's service account when empty")
	leaseDuration := fs.Duration("lease-duration", 0, "the member Lease's duration (whole seconds); it is renewed every third of it, and the consumer must stop reading within the last third once it cannot be. "+
		"0, the default: 60s, or 10m in node mode ($NODE_AGENT)")
	maxClockSkew := fs.Duration("max-clock-skew", protocol.DefaultMaxClockSkew, "how far this pod's clock may differ from the operator's and other pods'; the same value as the operator's --max-clock-skew")
	autoAck := fs.Bool("auto-ack", false, "acknowledge each assignment as soon as it is read, for consumers that never call /v1/ack")
	drainAckTimeout := fs.Duration("drain-ack-timeout", member.DefaultDrainAckTimeout, "how long a drain waits for the consumer to acknowledge the release of its queues before acknowledging it")
	contactTimeout := fs.Duration("contact-timeout", protocol.DefaultContactTimeout, "how long the consumer may read without the agent confirming that its view of the assignment is current; the agent confirms four times per timeout with a metadata read; negative turns this off, and the consumer then stops only when the Lease cannot be renewed")
	stopTimeout := fs.Duration("stop-timeout", protocol.DefaultStopTimeout, "how long the consumer takes, at most, to stop reading a queue once the agent serves an assignment without it; with -contact-timeout it bounds how soon the operator may hand a cut-off pod's queues on")
	maxPoll := fs.Duration("max-poll-timeout", 5*time.Minute, "longest timeout a long-poll may ask for")
	drainTimeout := fs.Duration("drain-timeout", 10*time.Minute, "longest a drain waits; also its timeout when the request gives none")
	printVersion := fs.Bool("version", false, "print the version, commit, build date and Go version, and exit")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *printVersion {
		_, err := fmt.Println(version.Get().String("consumergroup-agent"))
		return err
	}
	if err := checkListen(*listen, *allowNonLoopback); err != nil {
		return err
	}

	cfg, err := member.ConfigFromEnv()
	if err != nil {
		return err
	}
	cfg.LeaseDuration, cfg.MaxClockSkew, cfg.AutoAck, cfg.DrainAckTimeout = *leaseDuration, *maxClockSkew, *autoAck, *drainAckTimeout
	cfg.ContactTimeout, cfg.StopTimeout = *contactTimeout, *stopTimeout

	restConfig, err := clientcmd.BuildConfigFromFlags("", *kubeconfig)
	if err != nil {
		return fmt.Errorf("loading the Kubernetes client configuration: %w", err)
	}
	restConfig.UserAgent = "consumergroup-agent"
	// The member watches one ConfigMap as a watch list, whose stream the API server gzips event by event
	// when asked: for events of a few kilobytes that is CPU on both ends for little, and the stream's
	// decompressor holds some 40 KB in the member for as long as the watch lasts.
	restConfig.DisableCompression = true
	cs, err := kubernetes.NewForConfig(restConfig)
	if err != nil {
		return err
	}
	client, err := member.New(cs, cfg)
	if err != nil {
		return err
	}

	ln, err := net.Listen("tcp", *listen)
	if err != nil {
		return fmt.Errorf("listening on %s: %w", *listen, err)
	}
	logger := klog.FromContext(ctx)
	logger.Info("Serving assignment", "address", ln.Addr().String(), "group", cfg.Group, "pod", cfg.Pod, "lease", client.LeaseName())
	return serve(ctx, client, ln, limits{defaultPoll: min(30*time.Second, *maxPoll), maxPoll: *maxPoll, drain: *drainTimeout}, newGroupTopics(cs, cfg))
}

// allowNonLoopbackFlag names the flag that lets the agent listen beyond the pod's loopback.
const allowNonLoopbackFlag = "allow-non-loopback"

// checkListen refuses an address to listen on that is not loopback (an IP literal, or localhost) unless
// allowed: the API has no authentication, so reaching it from outside the pod must be asked for.
func checkListen(addr string, allowNonLoopback bool) error {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("-listen=%s: %w", addr, err)
	}
	if allowNonLoopback || host == "localhost" {
		return nil
	}
	if ip, err := netip.ParseAddr(host); err == nil && ip.IsLoopback() {
		return nil
	}
	what := fmt.Sprintf("%q is not a loopback address", host)
	if host == "" {
		what = "an empty host listens on every address"
	}
	return fmt.Errorf("-listen=%s: %s; the agent's API has no authentication, so it listens on 127.0.0.1, ::1 or localhost only, unless -%s is set",
		addr, what, allowNonLoopbackFlag)
}

// serve runs the member client and the HTTP API on ln until ctx ends. topics, when not nil, is read once
// before the API is served, so that a client never sees an assignment before the topics the operator
// assigns while they can be read, and then follows the group.
func serve(ctx context.Context, client *member.Client, ln net.Listener, l limits, topics *groupTopics) error {
	runCtx, cancelRun := context.WithCancel(context.WithoutCancel(ctx))
	runDone := make(chan error, 1)
	go func() { runDone <- client.Run(runCtx) }()
	topicsDone := make(chan struct{})
	if topics != nil {
		topics.refresh(ctx)
		go func() { topics.run(runCtx, client); close(topicsDone) }()
	} else {
		close(topicsDone)
	}

	srv := &http.Server{
		Handler:           newHandler(client, l, topics),
		ReadHeaderTimeout: 5 * time.Second,
		ReadTimeout:       10 * time.Second,
		IdleTimeout:       2 * time.Minute,
		// No WriteTimeout: long-polls and drains are bounded by their own timeouts.
		BaseContext: func(net.Listener) context.Context { return ctx },
	}
	err := serveHTTP(ctx, srv, ln, func() {})
	// The Lease stays: it is deleted with the pod, and a restarted agent takes it over.
	cancelRun()
	<-topicsDone
	if runErr := <-runDone; runErr != nil && err == nil {
		err = runErr
	}
	return err
}

// serveHTTP serves srv on ln until ctx ends or serving fails, calls before, then shuts srv down, giving
// the requests in flight 5 s. It returns why serving failed; nil when ctx ended it.
func serveHTTP(ctx context.Context, srv *http.Server, ln net.Listener, before func()) error {
	serveDone := make(chan error, 1)
	go func() { serveDone <- srv.Serve(ln) }()
	var err error
	select {
	case <-ctx.Done():
	case err = <-serveDone:
	}
	before()
	shutdownCtx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = srv.Shutdown(shutdownCtx)
	if errors.Is(err, http.ErrServerClosed) {
		err = nil
	}
	return err
}
