// Command consumergroup-operator runs the ConsumerGroup controller: it decides which consumer pod reads
// which message queue and publishes the decision in a ConfigMap per group.
package main

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"runtime/debug"
	"strconv"
	"strings"
	"time"

	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	"github.com/consumergroup-operator/consumergroup-operator/internal/manager"
	"github.com/consumergroup-operator/consumergroup-operator/internal/version"
	"github.com/consumergroup-operator/consumergroup-operator/pkg/protocol"
)

// config is what the command line asks for.
type config struct {
	printVersion  bool
	metrics       manager.MetricsServing
	probeAddr     string
	pprofAddr     string
	leaderElect   bool
	leaderElectNS string
	namespaces    string
	// nodeViewsNamespace is where the node views are kept; empty keeps none.
	nodeViewsNamespace string
	maxClockSkew       time.Duration
	joinWindow         time.Duration
	ackStatusInterval  time.Duration
	concurrentPasses   int
	gcPercent          int
	nameServers        manager.NameServerFlags
	election           manager.LeaderElectionTimings
	clientLimit        manager.ClientRateLimit
	zap                zap.Options
}

// parseFlags reads args (without the command's name) into a config.
func parseFlags(fs *flag.FlagSet, args []string) (*config, error) {
	c := &config{}
	fs.BoolVar(&c.printVersion, "version", false, "Print the version, commit, build date and Go version, and exit.")
	fs.StringVar(&c.metrics.BindAddress, "metrics-bind-address", manager.DefaultMetricsServing.BindAddress,
		"Address the metrics endpoint binds to; 0 disables it.")
	fs.BoolVar(&c.metrics.Secure, "metrics-secure", manager.DefaultMetricsServing.Secure,
		"Serve the metrics over HTTPS, only to clients whose bearer token the API server authenticates and authorizes to get /metrics (the metrics-reader ClusterRole). "+
			"false serves plain HTTP to anybody who reaches the address.")
	fs.StringVar(&c.metrics.CertDir, "metrics-cert-path", "",
		"Directory holding the metrics endpoint's certificate and key (reloaded when they change); empty: a self-signed certificate generated at start.")
	fs.StringVar(&c.metrics.CertName, "metrics-cert-name", manager.DefaultMetricsServing.CertName, "The certificate's file name in --metrics-cert-path.")
	fs.StringVar(&c.metrics.KeyName, "metrics-cert-key", manager.DefaultMetricsServing.KeyName, "The key's file name in --metrics-cert-path.")
	fs.BoolVar(&c.metrics.EnableHTTP2, "enable-http2", false,
		"Let metrics clients speak HTTP/2; off, HTTP/2's rapid reset and stream cancellation attacks (CVE-2023-44487, CVE-2023-39325) cannot reach the operator.")
	fs.StringVar(&c.probeAddr, "health-probe-bind-address", ":8081", "Address the health and readiness probes bind to.")
	fs.StringVar(&c.pprofAddr, "pprof-bind-address", "0",
		"Address Go's profiles (/debug/pprof/) are served on, plain HTTP to anybody who reaches it; 0, the default, serves none. For measuring memory and CPU, not for production.")
	fs.BoolVar(&c.leaderElect, "leader-elect", false, "Elect a leader through a Lease so that only one replica reconciles.")
	fs.StringVar(&c.leaderElectNS, "leader-election-namespace", "", "Namespace of the leader election Lease (default: the pod's namespace).")
	fs.DurationVar(&c.election.LeaseDuration, "leader-elect-lease-duration", manager.DefaultLeaderElection.LeaseDuration,
		"How long standby replicas wait, after the leader's last renewal, before one takes over: the failover time when a leader dies without releasing its Lease.")
	fs.DurationVar(&c.election.RenewDeadline, "leader-elect-renew-deadline", manager.DefaultLeaderElection.RenewDeadline,
		"How long the leader keeps trying to renew before it stops leading; less than the lease duration.")
	fs.DurationVar(&c.election.RetryPeriod, "leader-elect-retry-period", manager.DefaultLeaderElection.RetryPeriod,
		"How often the leader renews and standbys try to acquire; a leader that stops on SIGTERM releases its Lease, and a standby takes over within about this long.")
	fs.StringVar(&c.namespaces, "namespaces", "", "Comma-separated namespaces to watch; empty watches all namespaces.")
	fs.StringVar(&c.nodeViewsNamespace, "node-views-namespace", "",
		"Keep node views in this namespace (the operator's own), for node agents to confirm their members' views with one read a node (docs/protocol.md, node mode). "+
			"Empty, the default, keeps none: every member confirms its own view.")
	fs.DurationVar(&c.maxClockSkew, "max-clock-skew", protocol.DefaultMaxClockSkew,
		"How far the clocks of member pods and of the operator may differ; a claim stands this much past its Lease's duration.")
	fs.DurationVar(&c.joinWindow, "join-window", manager.DefaultJoinWindow,
		"How long after a group's last generation pods that only joined wait, so that pods becoming Ready together join in one rebalance "+
			"rather than one each, every member acknowledging each; a pod that leaves, or a handoff in flight, publishes at once. 0 publishes each join at once.")
	fs.DurationVar(&c.ackStatusInterval, "ack-status-interval", manager.DefaultAckStatusInterval,
		"The least time between two writes of a group's status that change only its members' acknowledged generations; "+
			"the first after a quiet interval is written at once, those within it together at its end. 0 writes each at once.")
	fs.IntVar(&c.concurrentPasses, "concurrent-passes", manager.DefaultConcurrentPasses,
		"How many groups' passes run at once; a group's own passes never overlap. A pass mostly waits on the API server: "+
			"more help only where it answers quickly.")
	fs.StringVar(&c.nameServers.CredentialsNamespace, "credentials-namespace", "",
		"The one namespace where ClusterNameServers' Secrets (credentials, CA certificates) are read (default: the pod's namespace). "+
			"The operator's Role lets it read Secrets there and nowhere else.")
	fs.StringVar(&c.nameServers.InlineCIDRs, "inline-name-server-cidrs", "",
		"Comma-separated CIDRs: honour the name servers a ConsumerGroup names in its own spec (spec.nameServer.addresses or service), dialling only addresses in these ranges, "+
			"with credentials from the group's own namespace. Empty, the default, refuses them: on a cluster shared by tenants, use ClusterNameServers. "+
			"Loopback and link-local addresses need a CIDR within them; the API server's addresses need their own /32.")
	fs.Func("inline-name-server-ports", "Comma-separated ports inline name servers may use (with --inline-name-server-cidrs); empty allows any port.",
		func(v string) error {
			for _, p := range strings.Split(v, ",") {
				n, err := strconv.ParseInt(strings.TrimSpace(p), 10, 32)
				if err != nil || n < 1 || n > 65535 {
					return fmt.Errorf("port %q: want 1 to 65535", p)
				}
				c.nameServers.InlinePorts = append(c.nameServers.InlinePorts, int32(n))
			}
			return nil
		})
	fs.IntVar(&c.gcPercent, "gc-percent", manager.DefaultGCPercent,
		"The garbage collector's target, as GOGC says it: how far, in percent of what was live after a collection, the heap grows before the next. "+
			"Lower holds less memory for more CPU. GOGC, when set, wins.")
	var qps float64
	fs.Float64Var(&qps, "kube-api-qps", float64(manager.DefaultClientRateLimit.QPS),
		"Requests a second the operator sends the API server, for each kind of object, after a burst. "+
			"The default is sized for 10,000 consumer pods: about 1,000 groups, whose two generations of writes after an event that touches them all "+
			"(a failover, a drained zone) go out in about 20 s; it is also the most a reconcile loop gone wrong can send.")
	fs.IntVar(&c.clientLimit.Burst, "kube-api-burst", manager.DefaultClientRateLimit.Burst,
		"Requests the operator may send the API server at once, for each kind of object, above --kube-api-qps: a few dozen groups' writes, so that a few groups changing never wait.")
	c.zap.BindFlags(fs)
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	c.clientLimit.QPS = float32(qps)
	var valueErr error
	if c.gcPercent < 1 {
		valueErr = fmt.Errorf("--gc-percent %d: want 1 or more", c.gcPercent)
	}
	if c.concurrentPasses < 1 {
		valueErr = errors.Join(valueErr, fmt.Errorf("--concurrent-passes %d: want 1 or more", c.concurrentPasses))
	}
	return c, errors.Join(c.election.Validate(), c.clientLimit.Validate(), c.metrics.Validate(), valueErr)
}

func main() {
	c, err := parseFlags(flag.CommandLine, os.Args[1:])
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	if c.printVersion {
		fmt.Println(version.Get().String("consumergroup-operator"))
		return
	}
	ctrl.SetLogger(zap.New(zap.UseFlagOptions(&c.zap)))
	setupLog := ctrl.Log.WithName("setup")
	if percent, set := manager.GCPercent(os.Getenv, c.gcPercent); set {
		debug.SetGCPercent(percent)
	}
	switch limit, err := manager.SoftMemoryLimit(os.Getenv, os.ReadFile); {
	case err != nil:
		setupLog.Error(err, "Failed to read the container's memory limit; no soft memory limit set")
	case limit > 0:
		debug.SetMemoryLimit(limit)
		setupLog.Info("Set the soft memory limit to nine tenths of the container's", "bytes", limit)
	}

	ctx := ctrl.SetupSignalHandler()
	namespaces := c.namespaces
	if namespaces != "" && c.nodeViewsNamespace != "" {
		namespaces += "," + c.nodeViewsNamespace // the node views are read through the cache too
	}
	mgrOpts := manager.Options(c.metrics.BindAddress, c.probeAddr, c.leaderElect, c.leaderElectNS, namespaces)
	c.election.Apply(&mgrOpts)
	c.metrics.Apply(&mgrOpts)
	mgrOpts.PprofBindAddress = c.pprofAddr
	mgr, err := ctrl.NewManager(c.clientLimit.Apply(ctrl.GetConfigOrDie()), mgrOpts)
	if err != nil {
		setupLog.Error(err, "Failed to create the manager")
		os.Exit(1)
	}
	nameServers, err := c.nameServers.Policy(ctx, mgr.GetConfig())
	if err != nil {
		setupLog.Error(err, "Invalid --inline-name-server-cidrs")
		os.Exit(2)
	}
	if err := manager.Setup(ctx, mgr, manager.Settings{MaxClockSkew: c.maxClockSkew, NameServers: nameServers, NodeViewsNamespace: c.nodeViewsNamespace, JoinWindow: c.joinWindow, AckStatusInterval: c.ackStatusInterval, ConcurrentPasses: c.concurrentPasses}); err != nil {
		setupLog.Error(err, "Failed to set up the controller")
		os.Exit(1)
	}
	v := version.Get()
	setupLog.Info("Starting the manager", "version", v.Version, "commit", v.Commit, "built", v.Date,
		"metrics", c.metrics.BindAddress, "metricsSecure", c.metrics.Secure, "kubeAPIQPS", c.clientLimit.QPS, "kubeAPIBurst", c.clientLimit.Burst)
	if err := mgr.Start(ctx); err != nil {
		setupLog.Error(err, "The manager stopped with an error")
		os.Exit(1)
	}
}
