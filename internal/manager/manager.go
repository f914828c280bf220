// Package manager builds the operator's controller-runtime manager: its scheme, its options and the
// controllers and health checks it runs. The operator's command and the local demo (hack/localdev) share it,
// so the demo runs exactly what a cluster runs.
package manager

import (
	"context"
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/consumergroup-operator/consumergroup-operator/controllers"
	"github.com/consumergroup-operator/consumergroup-operator/internal/scheme"
)

// LeaderElectionID names the Lease replicas compete for.
const LeaderElectionID = "consumergroup-operator.messaging.consumergroup.io"

// Scheme holds the API types the operator reads and writes (internal/scheme).
func Scheme() *runtime.Scheme { return scheme.New() }

// Options are the manager's options. The cache holds only what the reconciler reads: see
// controllers.CacheByObject.
// namespaces is a comma-separated list of namespaces to watch; empty watches all of them.
func Options(metricsAddr, probeAddr string, leaderElect bool, leaderElectNS, namespaces string) ctrl.Options {
	cacheOpts := cache.Options{
		ByObject:         controllers.CacheByObject(),
		DefaultTransform: controllers.CacheDefaultTransform(),
	}
	if namespaces != "" {
		cacheOpts.DefaultNamespaces = map[string]cache.Config{}
		for _, ns := range strings.Split(namespaces, ",") {
			cacheOpts.DefaultNamespaces[strings.TrimSpace(ns)] = cache.Config{}
		}
	}
	opts := ctrl.Options{
		Scheme:                  Scheme(),
		Cache:                   cacheOpts,
		Metrics:                 metricsserver.Options{BindAddress: metricsAddr},
		HealthProbeBindAddress:  probeAddr,
		LeaderElection:          leaderElect,
		LeaderElectionID:        LeaderElectionID,
		LeaderElectionNamespace: leaderElectNS,
		// The operator publishes nothing until it has become leader, so a replica that loses the lease can
		// stop at once.
		LeaderElectionReleaseOnCancel: true,
	}
	DefaultLeaderElection.Apply(&opts)
	return opts
}

// LeaderElectionTimings are the leader election's durations (client-go's leaderelection.LeaderElectionConfig).
type LeaderElectionTimings struct {
	LeaseDuration, RenewDeadline, RetryPeriod time.Duration
}

// DefaultLeaderElection is a 10 s lease duration, a 7 s renew deadline and a 500 ms retry period. A
// leader stopped by SIGTERM releases its Lease, and a standby tries to take it every retry period,
// jittered by client-go up to 2.2 times that: with 500 ms a rolling update of the operator hands over in
// about a second, where controller-runtime's 2 s could take 4.4 s. A leader that dies without releasing
// is replaced once the lease duration has passed: 10 s rather than controller-runtime's 15 s, so that a
// queue in the middle of a handoff when the leader dies waits less than 20 s for its new reader. The
// price is two Lease requests a second per replica, and a leader that cannot renew for 7 s steps down.
var DefaultLeaderElection = LeaderElectionTimings{LeaseDuration: 10 * time.Second, RenewDeadline: 7 * time.Second, RetryPeriod: 500 * time.Millisecond}

// Validate checks what client-go requires: lease duration > renew deadline > 1.2 × retry period > 0.
func (l LeaderElectionTimings) Validate() error {
	if l.RetryPeriod <= 0 || l.RenewDeadline <= l.RetryPeriod*12/10 || l.LeaseDuration <= l.RenewDeadline {
		return fmt.Errorf("leader election: want lease duration (%v) > renew deadline (%v) > 1.2 × retry period (%v) > 0",
			l.LeaseDuration, l.RenewDeadline, l.RetryPeriod)
	}
	return nil
}

// Apply sets the timings in opts.
func (l LeaderElectionTimings) Apply(opts *ctrl.Options) {
	opts.LeaseDuration, opts.RenewDeadline, opts.RetryPeriod = &l.LeaseDuration, &l.RenewDeadline, &l.RetryPeriod
}

// Settings are the reconciler's settings from the command line.
type Settings struct {
	// MaxClockSkew is how far the clocks of member pods and of the operator may differ
	// (protocol.DefaultMaxClockSkew when zero).
	MaxClockSkew time.Duration
	// NameServers is where groups may read routes from; the zero value lets them read from
	// ClusterNameServers only.
	NameServers controllers.NameServerPolicy
	// NodeViewsNamespace is where the operator keeps the node views node agents read (docs/protocol.md,
	// node mode); empty keeps none.
	NodeViewsNamespace string
	// JoinWindow is how long after a generation the pods that only joined wait, to join together in one
	// rebalance; 0 publishes each join at once.
	JoinWindow time.Duration
	// AckStatusInterval is the least time between two status writes of a group that change only its
	// members' acknowledged generations; 0 writes each at once.
	AckStatusInterval time.Duration
	// ConcurrentPasses is how many groups' passes run at once (controllers.DefaultConcurrentPasses when
	// zero).
	ConcurrentPasses int
}

// DefaultJoinWindow is the operator's join window (Settings.JoinWindow): long enough that the pods of a
// Deployment becoming Ready within a second or two of each other join in one rebalance, short next to the
// 20 s a RocketMQ client takes to notice a new member.
const DefaultJoinWindow = 2 * time.Second

// DefaultAckStatusInterval is the operator's Settings.AckStatusInterval. While a group fills, each
// member's acknowledgement of each generation changed the status, a write that costs the API server
// several times a Lease update; the first after a quiet interval is still written at once.
const DefaultAckStatusInterval = 10 * time.Second

// DefaultConcurrentPasses is how many groups' passes run at once (Settings.ConcurrentPasses).
const DefaultConcurrentPasses = controllers.DefaultConcurrentPasses

// Setup registers the controller and the health checks with mgr.
func Setup(ctx context.Context, mgr ctrl.Manager, s Settings) error {
	recorder, err := eventRecorder(ctx, mgr, "consumergroup-operator")
	if err != nil {
		return err
	}
	r := &controllers.ConsumerGroupReconciler{
		Client:       mgr.GetClient(),
		APIReader:    mgr.GetAPIReader(),
		Recorder:     recorder,
		Clock:        clock.RealClock{},
		MaxClockSkew: s.MaxClockSkew,
		NameServers:  s.NameServers,
		// The kubelets' node Leases tell of lost nodes long before the nodes turn NotReady.
		NodeLeaseNamespace: corev1.NamespaceNodeLease,
		NodeViewsNamespace: s.NodeViewsNamespace,
		JoinWindow:         s.JoinWindow,
		AckStatusInterval:  s.AckStatusInterval,
		ConcurrentPasses:   s.ConcurrentPasses,
	}
	if err := r.SetupWithManager(ctx, mgr); err != nil {
		return err
	}
	if err := mgr.AddHealthzCheck("healthz", healthz.Ping); err != nil {
		return err
	}
	return mgr.AddReadyzCheck("readyz", healthz.Ping)
}
