// Command scale measures one operator serving many member pods, against a real etcd and kube-apiserver
// (the project's own control-plane binaries, hack/envtest-bins.sh), and prints what it costs:
//
//	go run ./hack/scale -pods 1000 -format json
//
// It starts the control plane, builds and starts the operator as its own process, measures its resident
// memory with nothing to serve, then creates the groups, the nodes' Leases (renewed as kubelets renew
// them) and the pods, and runs one member per pod: pkg/member, the client a real member embeds, so the
// members make exactly the requests real members make. Once every queue has its reader it counts, over a
// steady window, the API requests the API server served (its own apiserver_request_total, less what this
// program sent in place of kubelets) and the operator's memory. Last it cuts one node off, as a node lost
// or partitioned: its kubelet's Lease stops and its members lose the API server, and it times how long
// each of their queues waits for a new reader, from the members' own records, which also show any queue
// read by two members at once.
package main

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"regexp"
	"strconv"
	"syscall"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/klog/v2"

	"github.com/consumergroup-operator/consumergroup-operator/internal/manager"
)

func main() {
	opts, err := parseOptions(flag.CommandLine, os.Args[1:])
	if err != nil {
		fmt.Fprintln(os.Stderr, "scale:", err)
		os.Exit(2)
	}
	// The members cut off by the run log every failed request through client-go; what they do shows in
	// their records instead.
	klog.SetLogger(logr.Discard())
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	setProgramGC(opts.programGOGC, memAvailable(), opts.minAvailableMemory)
	res, err := run(ctx, opts, os.Stderr)
	if err != nil {
		// What the window measured is kept when a later step fails.
		if res.WindowSeconds > 0 {
			_ = printResult(os.Stdout, opts.format, res)
		}
		fmt.Fprintln(os.Stderr, "scale:", err)
		os.Exit(1)
	}
	if err := printResult(os.Stdout, opts.format, res); err != nil {
		fmt.Fprintln(os.Stderr, "scale:", err)
		os.Exit(1)
	}
	if res.Overlaps > 0 || !res.Recovered {
		os.Exit(1)
	}
}

// defaultProgramGOGC is this program's own collector's target unless -program-gogc says otherwise: four
// times Go's default, under a soft memory limit of half the memory available (setProgramGC), gives the
// control plane back much of the program's CPU.
const defaultProgramGOGC = "400"

// options are what the command line asks for.
type options struct {
	pods, podsPerGroup, podsPerNode, queuesPerGroup, groupsPerNamespace int
	settle, window, recoveryLimit                                       time.Duration
	format                                                              string
	// design is designNode or designPerMember.
	design string
	// minAvailableMemory is how much of the machine's memory must stay available: below it the run stops
	// with an error rather than let the kernel kill the API server, etcd or the operator.
	minAvailableMemory int64
	workers            int
	// heapProfile is where to write the operator's heap profile at the end of the window; none when empty.
	heapProfile string
	// cpuProfile is where to write this program's own CPU profile over the window; none when empty.
	cpuProfile string
	// programHeapProfile is where to write this program's own heap profile once its members have run,
	// at the end of the run or when it fails; none when empty.
	programHeapProfile string
	// operatorCPUProfile is where to write the operator's CPU profile over the recovery; none when empty.
	operatorCPUProfile string
	// operatorLog is where the operator writes its log, kept after the run; a file in the run's temporary
	// directory, removed with it, when empty. operatorLogLevel is its --zap-log-level.
	operatorLog, operatorLogLevel string
	// gogc is the operator's GOGC; Go's default when empty.
	gogc string
	// controlPlaneGOGC is the GOGC of the run's etcd and kube-apiserver; Go's default when empty.
	controlPlaneGOGC string
	// controlPlaneMemoryLimit is their GOMEMLIMIT; none when empty.
	controlPlaneMemoryLimit string
	// programGOGC is this program's own GOGC: its simulated members', agents' and kubelets' collector.
	programGOGC string
	// startRate is how many members start a second; 0 starts them all at once.
	startRate int
}

func parseOptions(fs *flag.FlagSet, args []string) (options, error) {
	var o options
	fs.IntVar(&o.pods, "pods", 1000, "Member pods to run.")
	fs.StringVar(&o.design, "design", designNode, "The members' liveness design (docs/protocol.md): node, a node agent on each node confirming its members' views, or per-member, each member confirming its own.")
	fs.IntVar(&o.podsPerGroup, "pods-per-group", 10, "Member pods in each ConsumerGroup.")
	fs.IntVar(&o.queuesPerGroup, "queues-per-group", 16, "Queues of each group (2 brokers, half each).")
	fs.IntVar(&o.podsPerNode, "pods-per-node", 30, "Member pods on each node: 150,000 pods on 5,000 nodes is 30.")
	fs.IntVar(&o.groupsPerNamespace, "groups-per-namespace", 50, "Groups in each namespace.")
	fs.DurationVar(&o.settle, "settle", 30*time.Second, "How long to let the world settle, once every queue has its reader, before the window.")
	fs.DurationVar(&o.window, "window", 60*time.Second, "The steady window over which requests are counted.")
	fs.DurationVar(&o.recoveryLimit, "recovery-limit", 90*time.Second, "How long to wait for a cut-off node's queues to find new readers.")
	fs.StringVar(&o.format, "format", "text", "Output: text or json.")
	fs.Int64Var(&o.minAvailableMemory, "min-available-memory", 1<<30, "Bytes of memory that must stay available (MemAvailable); below, the run stops with an error.")
	fs.IntVar(&o.workers, "workers", 16, "Goroutines creating objects.")
	fs.IntVar(&o.startRate, "start-rate", 0, "Members started a second, as a rollout starts them; 0 starts them all at once.")
	fs.StringVar(&o.gogc, "gogc", "", "The operator's GOGC (its garbage collector's target, percent of the live heap); the operator's own default (manager.DefaultGCPercent) when empty.")
	fs.StringVar(&o.controlPlaneGOGC, "control-plane-gogc", "", "The GOGC of the run's etcd and kube-apiserver; Go's default, 100, when empty. On a small machine a higher one leaves more of its cores to the requests: it does not change what is measured.")
	fs.StringVar(&o.controlPlaneMemoryLimit, "control-plane-memory-limit", "", "The GOMEMLIMIT of the run's etcd and kube-apiserver (such as 6GiB): a soft limit under which a high -control-plane-gogc collects more often rather than let the API server take the machine's memory from the members. None when empty.")
	fs.StringVar(&o.programGOGC, "program-gogc", defaultProgramGOGC, "This program's own GOGC: the collector of the members, agents and kubelets it stands in for, which on a cluster run on their own nodes. At Go's default, 100, it took a third of the program's CPU at 20,000 members, cores the API server and the operator need; the program's memory does not count in what is measured. Above 100 (or off), the program's soft memory limit is half of the memory available beyond -min-available-memory.")
	fs.StringVar(&o.operatorCPUProfile, "operator-cpu-profile", "", "Write the operator's CPU profile over the recovery (-recovery-limit long, whenever the recovery ends) to this file.")
	fs.StringVar(&o.operatorLog, "operator-log", "", "Keep the operator's log in this file (by default it goes with the run's temporary directory).")
	fs.StringVar(&o.operatorLogLevel, "operator-log-level", "info", "The operator's --zap-log-level: debug logs why each queue waits for a reader.")
	fs.StringVar(&o.heapProfile, "heap-profile", "", "Write the operator's heap profile at the end of the window to this file (go tool pprof reads it).")
	fs.StringVar(&o.cpuProfile, "cpu-profile", "", "Write this program's own CPU profile over the window (the simulated members, agents and kubelets) to this file.")
	fs.StringVar(&o.programHeapProfile, "program-heap-profile", "", "Write this program's own heap profile (the simulated members, agents and kubelets) to this file at the end of the run, or when it fails once the members have started, with them still running.")
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	return o, o.validate()
}

func (o options) validate() error {
	var errs []error
	positive := []struct {
		name  string
		value int
	}{{"-pods", o.pods}, {"-pods-per-group", o.podsPerGroup}, {"-queues-per-group", o.queuesPerGroup}, {"-pods-per-node", o.podsPerNode}, {"-groups-per-namespace", o.groupsPerNamespace}, {"-workers", o.workers}}
	for _, p := range positive {
		if p.value < 1 {
			errs = append(errs, fmt.Errorf("%s is %d: want 1 or more", p.name, p.value))
		}
	}
	if o.queuesPerGroup%2 != 0 {
		errs = append(errs, fmt.Errorf("-queues-per-group is %d: want an even number (two brokers)", o.queuesPerGroup))
	}
	if o.pods > 0 && o.podsPerGroup > 0 && o.pods%o.podsPerGroup != 0 {
		errs = append(errs, fmt.Errorf("-pods %d is not a multiple of -pods-per-group %d", o.pods, o.podsPerGroup))
	}
	if o.startRate < 0 {
		errs = append(errs, fmt.Errorf("-start-rate %d: want 0 (all at once) or more", o.startRate))
	}
	if o.window < time.Second {
		errs = append(errs, fmt.Errorf("-window %v: want 1s or more", o.window))
	}
	for _, g := range []struct{ name, value string }{{"-gogc", o.gogc}, {"-control-plane-gogc", o.controlPlaneGOGC}, {"-program-gogc", o.programGOGC}} {
		if g.value == "" || g.value == "off" {
			continue
		}
		if n, err := strconv.Atoi(g.value); err != nil || n < 1 {
			errs = append(errs, fmt.Errorf("%s %q: want a whole number of 1 or more, or off", g.name, g.value))
		}
	}
	if o.controlPlaneMemoryLimit != "" && !memoryLimitPattern.MatchString(o.controlPlaneMemoryLimit) {
		errs = append(errs, fmt.Errorf("-control-plane-memory-limit %q: want bytes, with B, KiB, MiB, GiB or TiB or none, as GOMEMLIMIT (6GiB)", o.controlPlaneMemoryLimit))
	}
	if o.design != designNode && o.design != designPerMember {
		errs = append(errs, fmt.Errorf("-design %q: want %s or %s", o.design, designNode, designPerMember))
	}
	if o.format != "text" && o.format != "json" {
		errs = append(errs, fmt.Errorf("-format %q: want text or json", o.format))
	}
	return errors.Join(errs...)
}

// memoryLimitPattern is the form of a GOMEMLIMIT.
var memoryLimitPattern = regexp.MustCompile(`^[0-9]+(B|KiB|MiB|GiB|TiB)?$`)

// result is what a run measured.
type result struct {
	// Design is the liveness design the members follow (docs/protocol.md): "per-member", each member
	// confirming its own view, or "node", a node agent on each node confirming its members' views.
	Design string `json:"design"`
	Pods   int    `json:"pods"`
	Groups int    `json:"groups"`
	Nodes  int    `json:"nodes"`
	Queues int    `json:"queues"`
	// OperatorBaselineRSSBytes is the operator's resident memory with nothing to serve; OperatorRSSBytes
	// at the end of the steady window; OperatorPeakRSSBytes its peak over the whole run.
	OperatorBaselineRSSBytes int64 `json:"operatorBaselineRSSBytes"`
	OperatorRSSBytes         int64 `json:"operatorRSSBytes"`
	OperatorPeakRSSBytes     int64 `json:"operatorPeakRSSBytes"`
	// OperatorHeapInuseBytes is the operator's heap in use at the end of the window (runtime.MemStats.HeapInuse):
	// its live objects and uncollected garbage, part of its RSS.
	OperatorHeapInuseBytes int64 `json:"operatorHeapInuseBytes"`
	// OperatorHeapIdleBytes are the heap's spans freed but not yet returned to the kernel (HeapIdle less
	// HeapReleased), OperatorStackBytes its goroutines' stacks, OperatorNextGCBytes the heap size at which
	// its next collection starts: with the heap in use, most of what its RSS holds above the empty
	// operator's.
	OperatorHeapIdleBytes int64 `json:"operatorHeapIdleBytes"`
	OperatorStackBytes    int64 `json:"operatorStackBytes"`
	OperatorNextGCBytes   int64 `json:"operatorNextGCBytes"`
	// OperatorCPUSeconds is the CPU time the operator used from its start to the end of the window, the
	// members' start among it; OperatorWindowCPUSeconds its part in the window.
	OperatorCPUSeconds       float64 `json:"operatorCPUSeconds"`
	OperatorWindowCPUSeconds float64 `json:"operatorWindowCPUSeconds"`
	// APIServerWindowCPUSeconds, EtcdWindowCPUSeconds and ProgramWindowCPUSeconds are the CPU time the API
	// server, etcd and this program (the members, agents and kubelets it stands in for) used in the
	// window: on one machine they share its cores with the operator.
	APIServerWindowCPUSeconds float64 `json:"apiServerWindowCPUSeconds"`
	EtcdWindowCPUSeconds      float64 `json:"etcdWindowCPUSeconds"`
	ProgramWindowCPUSeconds   float64 `json:"programWindowCPUSeconds"`
	// OpenFiles is how many files this program held open at the end of the window.
	OpenFiles int `json:"openFiles"`
	// GOGC is the operator's GOGC, ControlPlaneGOGC that of etcd and the API server; empty for Go's default.
	GOGC             string `json:"gogc,omitempty"`
	ControlPlaneGOGC string `json:"controlPlaneGOGC,omitempty"`
	// ControlPlaneMemoryLimit is their GOMEMLIMIT; empty for none.
	ControlPlaneMemoryLimit string `json:"controlPlaneMemoryLimit,omitempty"`
	// ProgramGOGC is this program's own: its simulated members', agents' and kubelets'.
	ProgramGOGC string `json:"programGOGC,omitempty"`
	// OperatorBytesPerPod is (OperatorRSSBytes - OperatorBaselineRSSBytes) / Pods.
	OperatorBytesPerPod float64 `json:"operatorBytesPerPod"`
	// APIRequestsPerMemberSecond is every request the API server counted over the window, less those this
	// program sent in place of kubelets, per member pod per second.
	APIRequestsPerMemberSecond float64 `json:"apiRequestsPerMemberSecond"`
	// RequestsPerSecond splits the same requests by verb and resource ("GET configmaps").
	RequestsPerSecond map[string]float64 `json:"requestsPerSecond"`
	WindowSeconds     float64            `json:"windowSeconds"`
	// RecoveryMaxSeconds is the longest a queue of the cut-off node waited for a new reader, from the cut;
	// Recovered says whether every one found one within the limit.
	RecoveryMaxSeconds float64 `json:"recoveryMaxSeconds"`
	RecoveredQueues    int     `json:"recoveredQueues"`
	Recovered          bool    `json:"recovered"`
	// CutAfterNodeRenewalSeconds is how long before the cut the node's kubelet last renewed its Lease: the
	// operator finds the node late 12 s after that renewal, so the protocol's own wait for the node's
	// queues (12 s, the promise of 6 s and 1 s) ends this much less than 19 s after the cut.
	CutAfterNodeRenewalSeconds float64 `json:"cutAfterNodeRenewalSeconds"`
	// OperatorPassesPerSecond are the operator's passes of groups a second over the window. Over the
	// recovery, RecoveryQueueDepthMax is the most groups its work queue held waiting for a pass (read
	// every recoveryReadInterval), and RecoveryQueueWaitSeconds how long the passes that started then
	// waited in it, on average.
	OperatorPassesPerSecond  float64 `json:"operatorPassesPerSecond"`
	RecoveryQueueDepthMax    float64 `json:"recoveryQueueDepthMax"`
	RecoveryQueueWaitSeconds float64 `json:"recoveryQueueWaitSeconds"`
	// Overlaps counts the instants at which a queue had two readers, by the members' own records.
	Overlaps int `json:"overlaps"`
	// SetupSeconds is the time to create the groups and pods; ReadSeconds from then until every queue had
	// its reader.
	SetupSeconds float64 `json:"setupSeconds"`
	ReadSeconds  float64 `json:"readSeconds"`
	// Load is the machine's load average (1, 5, 15 min) at the end of the window.
	Load string `json:"load"`
}

func printResult(w io.Writer, format string, r result) error {
	if format == "json" {
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		return enc.Encode(r)
	}
	mib := func(b int64) float64 { return float64(b) / (1 << 20) }
	_, err := fmt.Fprintf(w, `design                      %s
pods, groups, nodes, queues %d, %d, %d, %d
setup; every queue read     %.1f s; %.1f s later
operator RSS                %.1f MiB empty, %.1f MiB serving (peak %.1f MiB): %.0f bytes per pod
operator heap in use        %.1f MiB (GOGC %s); freed, not returned %.1f MiB; stacks %.1f MiB; next collection at %.1f MiB
operator CPU                %.1f s in all, %.1f s in the window (%.3f of a core)
cores used in the window    API server %.2f, etcd %.2f, this program (members, agents, kubelets) %.2f
API requests                %.3f per member per second over %.0f s
operator passes             %.1f a second in the window
recovery of a lost node     %d queues, the last after %.1f s (all recovered: %t); cut %.1f s after the node's last renewal
operator queue in recovery  at most %.0f groups waiting; a pass waited %.2f s on average
queues read twice           %d
load                        %s
`, r.Design, r.Pods, r.Groups, r.Nodes, r.Queues, r.SetupSeconds, r.ReadSeconds,
		mib(r.OperatorBaselineRSSBytes), mib(r.OperatorRSSBytes), mib(r.OperatorPeakRSSBytes), r.OperatorBytesPerPod,
		mib(r.OperatorHeapInuseBytes), cmp.Or(r.GOGC, strconv.Itoa(manager.DefaultGCPercent)), mib(r.OperatorHeapIdleBytes), mib(r.OperatorStackBytes), mib(r.OperatorNextGCBytes),
		r.OperatorCPUSeconds, r.OperatorWindowCPUSeconds, r.OperatorWindowCPUSeconds/max(r.WindowSeconds, 1),
		r.APIServerWindowCPUSeconds/max(r.WindowSeconds, 1), r.EtcdWindowCPUSeconds/max(r.WindowSeconds, 1), r.ProgramWindowCPUSeconds/max(r.WindowSeconds, 1),
		r.APIRequestsPerMemberSecond, r.WindowSeconds, r.OperatorPassesPerSecond, r.RecoveredQueues, r.RecoveryMaxSeconds, r.Recovered, r.CutAfterNodeRenewalSeconds,
		r.RecoveryQueueDepthMax, r.RecoveryQueueWaitSeconds, r.Overlaps, r.Load)
	if err != nil {
		return err
	}
	for _, k := range sortedKeys(r.RequestsPerSecond) {
		if _, err := fmt.Fprintf(w, "  %-40s %9.2f/s\n", k, r.RequestsPerSecond[k]); err != nil {
			return err
		}
	}
	return nil
}
