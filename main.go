// Command consumergroup-operator runs the ConsumerGroup controller: it decides which consumer pod reads
// which message queue and publishes the decision in a ConfigMap per group.
package main

import (
	"flag"
	"fmt"
	"os"
	"time"

	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	"github.com/consumergroup-operator/consumergroup-operator/internal/manager"
	"github.com/consumergroup-operator/consumergroup-operator/internal/version"
	"github.com/consumergroup-operator/consumergroup-operator/pkg/protocol"
)

func main() {
	var (
		metricsAddr   string
		probeAddr     string
		leaderElect   bool
		leaderElectNS string
		namespaces    string
		maxClockSkew  time.Duration
		election      manager.LeaderElectionTimings
		printVersion  bool
	)
	flag.BoolVar(&printVersion, "version", false, "Print the version, commit, build date and Go version, and exit.")
	flag.StringVar(&metricsAddr, "metrics-bind-address", ":8080", "Address the metrics endpoint binds to; 0 disables it.")
	flag.StringVar(&probeAddr, "health-probe-bind-address", ":8081", "Address the health and readiness probes bind to.")
	flag.BoolVar(&leaderElect, "leader-elect", false, "Elect a leader through a Lease so that only one replica reconciles.")
	flag.StringVar(&leaderElectNS, "leader-election-namespace", "", "Namespace of the leader election Lease (default: the pod's namespace).")
	flag.DurationVar(&election.LeaseDuration, "leader-elect-lease-duration", manager.DefaultLeaderElection.LeaseDuration,
		"How long standby replicas wait, after the leader's last renewal, before one takes over: the failover time when a leader dies without releasing its Lease.")
	flag.DurationVar(&election.RenewDeadline, "leader-elect-renew-deadline", manager.DefaultLeaderElection.RenewDeadline,
		"How long the leader keeps trying to renew before it stops leading; less than the lease duration.")
	flag.DurationVar(&election.RetryPeriod, "leader-elect-retry-period", manager.DefaultLeaderElection.RetryPeriod,
		"How often the leader renews and standbys try to acquire; a leader that stops on SIGTERM releases its Lease, and a standby takes over within about this long.")
	flag.StringVar(&namespaces, "namespaces", "", "Comma-separated namespaces to watch; empty watches all namespaces.")
	flag.DurationVar(&maxClockSkew, "max-clock-skew", protocol.DefaultMaxClockSkew,
		"How far the clocks of member pods and of the operator may differ; a claim stands this much past its Lease's duration.")
	opts := zap.Options{}
	opts.BindFlags(flag.CommandLine)
	flag.Parse()
	if printVersion {
		fmt.Println(version.Get().String("consumergroup-operator"))
		return
	}
	ctrl.SetLogger(zap.New(zap.UseFlagOptions(&opts)))
	setupLog := ctrl.Log.WithName("setup")

	ctx := ctrl.SetupSignalHandler()
	if err := election.Validate(); err != nil {
		setupLog.Error(err, "Invalid leader election flags")
		os.Exit(2)
	}
	mgrOpts := manager.Options(metricsAddr, probeAddr, leaderElect, leaderElectNS, namespaces)
	election.Apply(&mgrOpts)
	mgr, err := ctrl.NewManager(ctrl.GetConfigOrDie(), mgrOpts)
	if err != nil {
		setupLog.Error(err, "Failed to create the manager")
		os.Exit(1)
	}
	if err := manager.Setup(ctx, mgr, maxClockSkew); err != nil {
		setupLog.Error(err, "Failed to set up the controller")
		os.Exit(1)
	}
	v := version.Get()
	setupLog.Info("Starting the manager", "version", v.Version, "commit", v.Commit, "built", v.Date)
	if err := mgr.Start(ctx); err != nil {
		setupLog.Error(err, "The manager stopped with an error")
		os.Exit(1)
	}
}
