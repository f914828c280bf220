package main

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"runtime/pprof"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apiserver/pkg/authentication/serviceaccount"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/util/flowcontrol"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/consumergroup-operator/consumergroup-operator/internal/manager"
	"github.com/consumergroup-operator/consumergroup-operator/internal/testenv"
	"github.com/consumergroup-operator/consumergroup-operator/pkg/allocate"
)

// run measures the world o asks for, writing progress lines to progress.
func run(ctx context.Context, o options, progress io.Writer) (result, error) {
	say := func(format string, args ...any) {
		_, _ = fmt.Fprintf(progress, "%s "+format+"\n", append([]any{time.Now().Format("15:04:05")}, args...)...)
	}
	w := layout(o)
	res := result{Design: o.design, GOGC: o.gogc, ControlPlaneGOGC: o.controlPlaneGOGC, ControlPlaneMemoryLimit: o.controlPlaneMemoryLimit, ProgramGOGC: o.programGOGC, Pods: len(w.pods), Groups: len(w.groups), Nodes: len(w.nodes), Queues: len(w.groups) * o.queuesPerGroup}
	if err := checkRoom(o, res); err != nil {
		return res, err
	}
	root, work, err := workspace()
	if err != nil {
		return res, err
	}
	defer func() { _ = os.RemoveAll(work) }()

	// The machine watch stops the run, with the reason, once memory or the temporary disk runs short.
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	go watchRoom(ctx, o.minAvailableMemory, cancel)
	failed := func(err error) error {
		if cause := context.Cause(ctx); cause != nil && !errors.Is(cause, context.Canceled) {
			return cause
		}
		return err
	}

	say("building the control plane's binaries and the operator")
	assets, operatorBin, err := buildBinaries(ctx, root, work)
	if err != nil {
		return res, failed(err)
	}
	say("starting etcd and kube-apiserver")
	env, cfg, err := startControlPlane(o, root, assets)
	if err != nil {
		return res, err
	}
	defer func() { _ = env.Stop() }()
	cfg = unlimited(cfg)
	var own atomic.Int64
	c, metricsClient, kubeconfig, err := clients(env, cfg, &own, work)
	if err != nil {
		return res, err
	}

	say("starting the operator")
	operatorArgs, err := operatorFlags(ctx, o, c)
	if err != nil {
		return res, err
	}
	op, err := startOperator(operatorBin, kubeconfig, cmp.Or(o.operatorLog, filepath.Join(work, "operator.log")), o.gogc, operatorArgs...)
	if err != nil {
		return res, err
	}
	defer op.kill()
	if res.OperatorBaselineRSSBytes, err = baseline(ctx, op); err != nil {
		return res, failed(err)
	}
	say("operator with nothing to serve: RSS %.1f MiB", float64(res.OperatorBaselineRSSBytes)/(1<<20))

	if err := serveAndMeasure(ctx, o, w, c, cfg, op, metricsClient, &own, &res, say, failed); err != nil {
		return res, err
	}
	return res, nil
}

// startControlPlane starts etcd and kube-apiserver from assets, with the CRDs of the module at root and
// o's GOGC and GOMEMLIMIT for them.
func startControlPlane(o options, root, assets string) (*envtest.Environment, *rest.Config, error) {
	env := &envtest.Environment{
		BinaryAssetsDirectory: assets,
		CRDDirectoryPaths:     []string{filepath.Join(root, "config", "crd", "bases")},
		ErrorIfCRDPathMissing: true,
	}
	// etcd and the API server inherit this program's environment.
	restoreGOGC, restoreLimit := setEnv("GOGC", o.controlPlaneGOGC), setEnv("GOMEMLIMIT", o.controlPlaneMemoryLimit)
	cfg, err := env.Start()
	restoreGOGC()
	restoreLimit()
	if err != nil {
		return nil, nil, fmt.Errorf("starting the control plane: %w", err)
	}
	return env, cfg, nil
}

// workspace is the module's root and a new temporary directory for the run's files.
func workspace() (root, work string, err error) {
	if root, err = moduleRoot(); err != nil {
		return "", "", err
	}
	work, err = os.MkdirTemp("", "consumergroup-scale-")
	return root, work, err
}

// baseline is the operator's RSS with nothing to serve, once it has started and synced its caches.
func baseline(ctx context.Context, op *operatorProcess) (int64, error) {
	if err := sleep(ctx, 15*time.Second); err != nil {
		return 0, err
	}
	rss, _, err := op.memory()
	return rss, err
}

// operatorFlags are the operator's flags for o: its logging, and in node mode its node views, in a
// namespace of its own that this creates.
func operatorFlags(ctx context.Context, o options, c client.Client) ([]string, error) {
	// Times to the nanosecond: the log of a recovery is read as a timeline.
	logging := []string{"--zap-log-level=" + o.operatorLogLevel, "--zap-time-encoding=rfc3339nano"}
	if o.design != designNode {
		return logging, nil
	}
	if err := c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: operatorNamespace}}); err != nil {
		return nil, fmt.Errorf("creating namespace %s: %w", operatorNamespace, err)
	}
	return append(logging, "--node-views-namespace="+operatorNamespace), nil
}

// serveAndMeasure creates w, runs its members, and measures the steady window and a lost node into res.
func serveAndMeasure(ctx context.Context, o options, w world, c client.Client, cfg *rest.Config, op *operatorProcess, metricsClient kubernetes.Interface,
	own *atomic.Int64, res *result, say func(string, ...any), failed func(error) error,
) error {
	start := time.Now()
	if err := createWorld(ctx, c, w, o.workers, say); err != nil {
		return failed(err)
	}
	kubelets := startKubelets(ctx, c, w.nodes)
	memberOpts, agents, err := liveness(ctx, o, w, cfg, metricsClient, say)
	if err != nil {
		return failed(err)
	}
	if agents != nil {
		defer agents.close()
	}
	res.SetupSeconds = time.Since(start).Seconds()

	say("starting %d members", len(w.pods))
	ownership := testenv.NewOwnership()
	members, err := startMembers(ctx, o, w, cfg, ownership, memberOpts, say)
	defer stopMembers(members, o.programHeapProfile, say)
	if err != nil {
		return failed(err)
	}
	readStart := time.Now()
	if err := awaitEveryQueueRead(ctx, ownership, res.Queues, say); err != nil {
		return failed(fmt.Errorf("%w (operator log: %s)", err, op.logPath))
	}
	res.ReadSeconds = time.Since(readStart).Seconds()

	say("every queue has its reader; settling for %v, then counting requests for %v", o.settle, o.window)
	if err := sleep(ctx, o.settle); err != nil {
		return failed(err)
	}
	if err := measureWindow(ctx, o, op, metricsClient, own, res); err != nil {
		return failed(err)
	}
	res.Load = testenv.LoadAverage()
	say("%.3f API requests per member per second; operator RSS %.1f MiB", res.APIRequestsPerMemberSecond, float64(res.OperatorRSSBytes)/(1<<20))

	// The readings start before the cut: the node's members fence themselves within seconds of losing
	// their agent, and the queues to recover are those they read until then.
	watched, err := watchRecovery(ctx, op, o)
	if err != nil {
		return failed(err)
	}
	cut := busiestNode(w.nodes, readersOn(ownership, members))
	say("cutting off %s", w.nodes[cut])
	if agents != nil {
		agents.cutOff(w.nodes[cut])
	}
	rec, err := cutNode(ctx, kubelets, ownership, members, w, cut, o)
	queue, watchErr := watched()
	if err := errors.Join(err, watchErr); err != nil {
		return failed(err)
	}
	res.RecoveryQueueDepthMax, res.RecoveryQueueWaitSeconds = queue.Depth, queue.WaitSeconds
	res.RecoveryMaxSeconds, res.RecoveredQueues, res.Recovered = rec.longest.Seconds(), rec.queues, rec.complete
	res.CutAfterNodeRenewalSeconds = rec.sinceRenewal.Seconds()
	res.Overlaps = len(ownership.Violations())
	for _, v := range ownership.Violations() {
		say("read twice: %s", v)
	}
	// The RSS stays the window's, which OperatorBytesPerPod was computed from; the peak covers the recovery.
	if _, res.OperatorPeakRSSBytes, err = op.memory(); err != nil {
		return err
	}
	return nil
}

// liveness sets up the members' liveness design: nothing more in per-member mode; in node mode an agent
// for each node, and a token bound to each pod for its agent. It returns each member's options.
func liveness(ctx context.Context, o options, w world, cfg *rest.Config, cs kubernetes.Interface, say func(string, ...any)) (func(i int) testenv.MemberOptions, *nodeAgents, error) {
	if o.design == designPerMember {
		return func(int) testenv.MemberOptions { return testenv.MemberOptions{} }, nil, nil
	}
	say("starting %d node agents; requesting a token for each pod", len(w.nodes))
	agents, err := startNodeAgents(ctx, cfg, w.nodes)
	if err != nil {
		return nil, nil, err
	}
	tokens, err := memberTokens(ctx, cs, w.pods, o.workers)
	if err != nil {
		agents.close()
		return nil, nil, err
	}
	return func(i int) testenv.MemberOptions {
		token := tokens[i]
		node := w.pods[i].Spec.NodeName
		return testenv.MemberOptions{NodeAgent: agents.url(node), NodeAgentToken: func() (string, error) { return token, nil }, NodeAgentCall: agents.call(node)}
	}, agents, nil
}

// nodeConfigs are the members' client configurations, one per node: the members on a node share its
// connections to the API server, as far as HTTP/2's streams allow, so that 20,000 members do not hold
// 20,000 connections, more than a process may open here. Each member still sends its own requests, with
// its own rate limit, and is cut off on its own (testenv.RunMember wraps the transport).
func nodeConfigs(cfg *rest.Config, nodes []string) (map[string]*rest.Config, error) {
	out := make(map[string]*rest.Config, len(nodes))
	for _, node := range nodes {
		// Uncompressed, as the member sidecar asks (cmd/consumergroup-agent): the transport is given, so
		// the members' own DisableCompression would not reach it.
		memberCfg := ownConnections(cfg)
		memberCfg.DisableCompression = true
		rt, err := rest.TransportFor(memberCfg)
		if err != nil {
			return nil, err
		}
		c := rest.CopyConfig(cfg)
		c.RateLimiter = nil // each member limits itself as client-go does by default
		c.Transport, c.TLSClientConfig = rt, rest.TLSClientConfig{}
		out[node] = c
	}
	return out, nil
}

// ownConnections is cfg with a dialer of its own. client-go shares one transport, and so one pool of
// connections, among all the clients whose TLS configuration is the same, and here that is every
// client of the run: 20,000 members' watches alone then need 80 HTTP/2 connections of the API server's
// 250 streams each, and whenever the pool has no free stream, as while the API server queues requests,
// every request waiting dials a connection of its own, and all but one are closed once their TLS
// handshakes are done (an overloaded 20,000-pod run spent a fifth of the API server's CPU in
// handshakes). A real member holds its own connection. With a dialer of its own, a client's transport is
// its own (the cache keys on the dialer), and the members of a node, about 100 watches and what they
// send, share their node's connections.
func ownConnections(cfg *rest.Config) *rest.Config {
	cfg = rest.CopyConfig(cfg)
	cfg.Dial = (&net.Dialer{Timeout: 30 * time.Second, KeepAlive: 30 * time.Second}).DialContext
	return cfg
}

// startMembers runs a member for each of w's pods, at -start-rate as a rollout would start them, not all
// in one instant. It returns the members it started, for the caller to stop, also when it fails.
func startMembers(ctx context.Context, o options, w world, cfg *rest.Config, own *testenv.Ownership, memberOpts func(i int) testenv.MemberOptions,
	say func(string, ...any)) ([]*testenv.SimMember, error) {
	nodeCfgs, err := nodeConfigs(cfg, w.nodes)
	if err != nil {
		return nil, err
	}
	var pace <-chan time.Time
	if o.startRate > 0 {
		t := time.NewTicker(time.Second / time.Duration(o.startRate))
		defer t.Stop()
		pace = t.C
	}
	members := make([]*testenv.SimMember, 0, len(w.pods))
	start := time.Now()
	for i, p := range w.pods {
		if pace != nil {
			select {
			case <-ctx.Done():
				return members, ctx.Err()
			case <-pace:
			}
		}
		m, err := testenv.RunMember(asServiceAccount(nodeCfgs[p.Spec.NodeName], p), w.groups[i/o.podsPerGroup].Name, p, own, memberOpts(i))
		if err != nil {
			return members, err
		}
		members = append(members, m)
		if n := len(members); n%1000 == 0 || n == len(w.pods) {
			say("members started: %d of %d (%.0f a second)", n, len(w.pods), float64(n)/time.Since(start).Seconds())
		}
	}
	return members, nil
}

// stopMembers stops members, once it has written this program's heap profile to heapProfile, with them
// still running, when one is asked for.
func stopMembers(members []*testenv.SimMember, heapProfile string, say func(string, ...any)) {
	if err := saveProgramHeapProfile(heapProfile); err != nil {
		say("program heap profile: %v", err)
	}
	for _, m := range members {
		m.Stop()
	}
}

// asServiceAccount is cfg sending its requests as pod's service account would (impersonated), as a member
// does with its pod's token: API Priority and Fairness then puts them where a cluster puts its members'
// requests (flow schema service-accounts, priority level workload-low), whose seats and queues bound
// them, rather than exempt them as it does this program's own requests (system:masters). RBAC grants
// them what the members' Role of docs/protocol.md grants (memberRBAC).
func asServiceAccount(cfg *rest.Config, pod *corev1.Pod) *rest.Config {
	cfg = rest.CopyConfig(cfg)
	cfg.Impersonate = rest.ImpersonationConfig{
		UserName: serviceaccount.MakeUsername(pod.Namespace, pod.Spec.ServiceAccountName),
		Groups:   append(serviceaccount.MakeGroupNames(pod.Namespace), user.AllAuthenticated),
	}
	return cfg
}

// memberRBAC grants the members' service accounts what a member reads and writes: the rules of the
// members' Role in docs/protocol.md, for every namespace of the run.
func memberRBAC() []client.Object {
	role := &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: memberServiceAccount}, Rules: []rbacv1.PolicyRule{
		{APIGroups: []string{""}, Resources: []string{"configmaps"}, Verbs: []string{"get", "list", "watch"}},
		{APIGroups: []string{"coordination.k8s.io"}, Resources: []string{"leases"}, Verbs: []string{"create", "get", "update"}},
		{APIGroups: []string{"messaging.consumergroup.io"}, Resources: []string{"consumergroups"}, Verbs: []string{"get"}},
	}}
	binding := &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: memberServiceAccount},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: memberServiceAccount},
		Subjects: []rbacv1.Subject{{Kind: rbacv1.GroupKind, APIGroup: rbacv1.GroupName, Name: serviceaccount.AllServiceAccountsGroup}}}
	return []client.Object{role, binding}
}

// setEnv sets the environment variable key to value, unless value is empty, and returns what restores it.
func setEnv(key, value string) (restore func()) {
	if value == "" {
		return func() {}
	}
	old, had := os.LookupEnv(key)
	_ = os.Setenv(key, value)
	return func() {
		if had {
			_ = os.Setenv(key, old)
		} else {
			_ = os.Unsetenv(key)
		}
	}
}

// setProgramGC sets this program's own collector's target to gogc (a whole number, or off); Go's default
// stays when it is empty. A target above Go's default comes with a soft memory limit of half of what the
// machine has available beyond minAvailable, so that the collector works harder before the run's own
// watch on memory (watchRoom) stops it: at 9,000 members, GOGC 400 alone held 7 GiB.
func setProgramGC(gogc string, available, minAvailable int64) {
	var n int
	switch {
	case gogc == "":
		return
	case gogc == "off":
		n = -1
	default:
		var err error
		if n, err = strconv.Atoi(gogc); err != nil {
			return
		}
	}
	debug.SetGCPercent(n)
	if (n < 0 || n > 100) && available > minAvailable {
		debug.SetMemoryLimit(programMemoryLimit(available, minAvailable))
	}
}

// programMemoryLimit is the program's soft memory limit with a collector target above Go's default.
func programMemoryLimit(available, minAvailable int64) int64 { return (available - minAvailable) / 2 }

// unlimited is cfg without a client-side rate limit: setup is not what is measured.
func unlimited(cfg *rest.Config) *rest.Config {
	cfg = rest.CopyConfig(cfg)
	cfg.RateLimiter = flowcontrol.NewFakeAlwaysRateLimiter()
	return cfg
}

// buildBinaries builds (or finds cached) etcd and kube-apiserver, and builds the operator into work.
func buildBinaries(ctx context.Context, root, work string) (assets, operatorBin string, err error) {
	if assets, err = controlPlaneBinaries(ctx, root); err != nil {
		return "", "", err
	}
	operatorBin = filepath.Join(work, "manager")
	return assets, operatorBin, goBuild(ctx, root, operatorBin, ".")
}

// clients are this program's client, every request of which is counted in own, so that the API server's
// count can be told apart from the operator's and the members'; a client of the API server's metrics
// that is not counted (/metrics is no resource, and the API server's count leaves it out too); and a
// kubeconfig for the operator.
func clients(env *envtest.Environment, cfg *rest.Config, own *atomic.Int64, work string) (client.Client, kubernetes.Interface, string, error) {
	c, err := client.New(countRequests(cfg, own), client.Options{Scheme: manager.Scheme()})
	if err != nil {
		return nil, nil, "", err
	}
	metricsClient, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, nil, "", err
	}
	kubeconfig, err := adminKubeconfig(env, work)
	return c, metricsClient, kubeconfig, err
}

// measureWindow counts the API server's requests over o.window, less own's, and reads the operator's
// memory at its end (and its heap profile when asked), into res.
func measureWindow(ctx context.Context, o options, op *operatorProcess, metricsClient kubernetes.Interface, own *atomic.Int64, res *result) error {
	before, err := apiRequests(ctx, metricsClient)
	if err != nil {
		return err
	}
	queueBefore, err := op.groupQueue(ctx)
	if err != nil {
		return err
	}
	ownBefore, windowStart := own.Load(), time.Now()
	cpuBefore, err := op.cpuSeconds()
	if err != nil {
		return err
	}
	sharesBefore, err := readCPUShares()
	if err != nil {
		return err
	}
	stopProfile, err := profileCPU(o.cpuProfile)
	if err != nil {
		return err
	}
	err = sleep(ctx, o.window)
	if err := errors.Join(err, stopProfile()); err != nil {
		return err
	}
	after, err := apiRequests(ctx, metricsClient)
	if err != nil {
		return err
	}
	res.WindowSeconds = time.Since(windowStart).Seconds()
	queueAfter, err := op.groupQueue(ctx)
	if err != nil {
		return err
	}
	res.OperatorPassesPerSecond = (queueAfter.Passes - queueBefore.Passes) / res.WindowSeconds
	if res.OperatorCPUSeconds, err = op.cpuSeconds(); err != nil {
		return err
	}
	res.OperatorWindowCPUSeconds = res.OperatorCPUSeconds - cpuBefore
	sharesAfter, err := readCPUShares()
	if err != nil {
		return err
	}
	res.ProgramWindowCPUSeconds = sharesAfter.Program - sharesBefore.Program
	res.APIServerWindowCPUSeconds = sharesAfter.APIServer - sharesBefore.APIServer
	res.EtcdWindowCPUSeconds = sharesAfter.Etcd - sharesBefore.Etcd
	res.RequestsPerSecond, res.APIRequestsPerMemberSecond = requestRates(before, after, float64(own.Load()-ownBefore), res.WindowSeconds, res.Pods)
	if res.OperatorRSSBytes, res.OperatorPeakRSSBytes, err = op.memory(); err != nil {
		return err
	}
	res.OpenFiles = openFiles()
	stats, err := op.memStats(ctx)
	if err != nil {
		return err
	}
	res.OperatorHeapInuseBytes, res.OperatorHeapIdleBytes, res.OperatorStackBytes, res.OperatorNextGCBytes = stats.HeapInuse, stats.HeapIdleUnreleased, stats.StackInuse, stats.NextGC
	if o.heapProfile != "" {
		if err := op.saveHeapProfile(ctx, o.heapProfile); err != nil {
			return err
		}
	}
	res.OperatorBytesPerPod = float64(res.OperatorRSSBytes-res.OperatorBaselineRSSBytes) / float64(res.Pods)
	return nil
}

// profileCPU profiles this program's CPU into file until the function it returns is called; it does
// nothing when file is empty.
func profileCPU(file string) (stop func() error, err error) {
	if file == "" {
		return func() error { return nil }, nil
	}
	f, err := os.Create(file)
	if err != nil {
		return nil, err
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		return nil, errors.Join(err, f.Close())
	}
	return func() error {
		pprof.StopCPUProfile()
		return f.Close()
	}, nil
}

// saveProgramHeapProfile writes this program's heap profile, after a collection so that it counts what
// is live, to file; it does nothing when file is empty.
func saveProgramHeapProfile(file string) error {
	if file == "" {
		return nil
	}
	runtime.GC()
	f, err := os.Create(file)
	if err != nil {
		return err
	}
	return errors.Join(pprof.WriteHeapProfile(f), f.Close())
}

// moduleRoot is the directory of this module's go.mod.
func moduleRoot() (string, error) {
	out, err := exec.Command("go", "env", "GOMOD").Output()
	if err != nil {
		return "", fmt.Errorf("go env GOMOD: %w", err)
	}
	gomod := strings.TrimSpace(string(out))
	if gomod == "" || gomod == os.DevNull {
		return "", errors.New("run from within the consumergroup-operator module (go run ./hack/scale)")
	}
	return filepath.Dir(gomod), nil
}

// controlPlaneBinaries is the directory of etcd and kube-apiserver: KUBEBUILDER_ASSETS when set, else
// what hack/envtest-bins.sh builds (once; it is cached).
func controlPlaneBinaries(ctx context.Context, root string) (string, error) {
	if dir := os.Getenv("KUBEBUILDER_ASSETS"); dir != "" {
		return dir, nil
	}
	cmd := exec.CommandContext(ctx, filepath.Join(root, "hack", "envtest-bins.sh"))
	cmd.Dir, cmd.Stderr = root, os.Stderr
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("hack/envtest-bins.sh: %w", err)
	}
	return strings.TrimSpace(string(out)), nil
}

func goBuild(ctx context.Context, root, out, pkg string) error {
	cmd := exec.CommandContext(ctx, "go", "build", "-o", out, pkg)
	cmd.Dir = root
	if b, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("go build %s: %w\n%s", pkg, err, b)
	}
	return nil
}

// adminKubeconfig writes a kubeconfig for a system:masters user of env's API server, for the operator.
func adminKubeconfig(env *envtest.Environment, dir string) (string, error) {
	user, err := env.AddUser(envtest.User{Name: "scale-operator", Groups: []string{"system:masters"}}, nil)
	if err != nil {
		return "", err
	}
	kc, err := user.KubeConfig()
	if err != nil {
		return "", err
	}
	path := filepath.Join(dir, "kubeconfig")
	return path, os.WriteFile(path, kc, 0o600)
}

// createWorld creates w's namespaces, groups, node Leases and pods (Running and Ready, as a kubelet would
// report them), with a progress line every 1,000 pods.
func createWorld(ctx context.Context, c client.Client, w world, workers int, say func(string, ...any)) error {
	for _, o := range memberRBAC() {
		if err := c.Create(ctx, o); err != nil {
			return fmt.Errorf("creating the members' RBAC: %w", err)
		}
	}
	for _, ns := range w.namespaces {
		if err := c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
			return fmt.Errorf("creating namespace %s: %w", ns, err)
		}
		if err := c.Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: memberServiceAccount}}); err != nil {
			return fmt.Errorf("creating service account %s/%s: %w", ns, memberServiceAccount, err)
		}
	}
	if err := testenv.Parallel(ctx, len(w.groups), workers, func(i int) error {
		return c.Create(ctx, w.groups[i].DeepCopy())
	}); err != nil {
		return fmt.Errorf("creating groups: %w", err)
	}
	now := metav1.NowMicro()
	if err := testenv.Parallel(ctx, len(w.nodes), workers, func(i int) error {
		n := node(w.nodes[i], i)
		status := n.Status
		if err := c.Create(ctx, n); err != nil {
			return err
		}
		n.Status = status
		if err := c.Status().Update(ctx, n); err != nil {
			return err
		}
		return c.Create(ctx, nodeLease(w.nodes[i], now))
	}); err != nil {
		return fmt.Errorf("creating nodes: %w", err)
	}
	say("created %d namespaces, %d groups, %d nodes and their Leases; creating %d pods", len(w.namespaces), len(w.groups), len(w.nodes), len(w.pods))
	var created atomic.Int64
	start := time.Now()
	return testenv.Parallel(ctx, len(w.pods), workers, func(i int) error {
		p := w.pods[i]
		if err := c.Create(ctx, p); err != nil {
			return fmt.Errorf("creating pod %s/%s: %w", p.Namespace, p.Name, err)
		}
		if err := testenv.MarkRunning(ctx, c, p, true); err != nil {
			return fmt.Errorf("writing the status of pod %s/%s: %w", p.Namespace, p.Name, err)
		}
		if n := created.Add(1); n%1000 == 0 || int(n) == len(w.pods) {
			rate := float64(n) / time.Since(start).Seconds()
			say("pods: %d of %d (%.0f a second)", n, len(w.pods), rate)
		}
		return nil
	})
}

// kubelets renew the nodes' Leases as kubelets do, every quarter of the duration, spread over the
// interval, with one update each (a read too only after a failed one); a node can be stopped, as a node
// that is lost.
type kubelets struct {
	stopped sync.Map // node name → struct{}
	renewed sync.Map // node name → time.Time of its last renewal that returned
}

func startKubelets(ctx context.Context, c client.Client, nodes []string) *kubelets {
	k := &kubelets{}
	interval := kubeletLeaseSeconds * time.Second / 4
	for i, node := range nodes {
		go func() {
			// Spread the renewals as kubelets started at different times would.
			if sleep(ctx, time.Duration(i)*interval/time.Duration(len(nodes))) != nil {
				return
			}
			t := time.NewTicker(interval)
			defer t.Stop()
			var l *coordinationv1.Lease
			for {
				if _, stopped := k.stopped.Load(node); !stopped {
					if l = renewNodeLease(ctx, c, node, l); l != nil {
						k.renewed.Store(node, time.Now())
					}
				}
				select {
				case <-ctx.Done():
					return
				case <-t.C:
				}
			}
		}()
	}
	return k
}

// renewNodeLease renews node's Lease as the kubelet does: an update of the Lease as last written (last),
// read again only when there is none (no write yet, or the last failed). It returns the Lease written, or
// nil when the renewal failed.
func renewNodeLease(ctx context.Context, c client.Client, node string, last *coordinationv1.Lease) *coordinationv1.Lease {
	if last == nil {
		last = &coordinationv1.Lease{}
		if err := c.Get(ctx, client.ObjectKey{Namespace: nodeLeaseNamespace, Name: node}, last); err != nil {
			return nil
		}
	}
	now := metav1.NowMicro()
	last.Spec.RenewTime = &now
	if err := c.Update(ctx, last); err != nil {
		return nil
	}
	return last
}

func (k *kubelets) stop(node string) { k.stopped.Store(node, struct{}{}) }

// sinceRenewal is how long ago node's last renewal returned; 0 when none has.
func (k *kubelets) sinceRenewal(node string) time.Duration {
	if at, ok := k.renewed.Load(node); ok {
		return time.Since(at.(time.Time))
	}
	return 0
}

// awaitEveryQueueRead waits until each of the world's queues has exactly one reader by the members' own
// records, with a progress line every 10 s.
func awaitEveryQueueRead(ctx context.Context, own *testenv.Ownership, queues int, say func(string, ...any)) error {
	const limit = 10 * time.Minute
	deadline := time.Now().Add(limit)
	lastSay := time.Now()
	for {
		read := own.ReadQueues()
		if read == queues {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("after %v, %d of %d queues have a reader", limit, read, queues)
		}
		if time.Since(lastSay) > 10*time.Second {
			say("queues read: %d of %d", read, queues)
			lastSay = time.Now()
		}
		if err := sleep(ctx, 200*time.Millisecond); err != nil {
			return err
		}
	}
}

// recovery is how a cut-off node's queues found new readers.
type recovery struct {
	queues   int
	longest  time.Duration
	complete bool
	// sinceRenewal is how long before the cut the node's Lease was last renewed.
	sinceRenewal time.Duration
}

// busiestNode is the index of the node whose members read the most queues now, the first of them on a
// tie: on a saturated machine the members of one node may all be fenced for a moment (their agent's read
// late), and a node whose members read nothing has nothing to recover.
func busiestNode(nodes []string, reading func(node string) int) int {
	busiest, most := 0, -1
	for i, node := range nodes {
		if n := reading(node); n > most {
			busiest, most = i, n
		}
	}
	return busiest
}

// readersOn counts the queues the members on each node read now, from their own records: one look at
// each member for all nodes, where one for each node and member made 4 million at 20,000 members.
func readersOn(own *testenv.Ownership, members []*testenv.SimMember) func(node string) int {
	reading := map[string]int{}
	for _, m := range members {
		reading[m.Pod.Spec.NodeName] += len(own.Reading(m.Reader()))
	}
	return func(node string) int { return reading[node] }
}

// cutNode stops node n's kubelet and cuts its members off the API server, as a lost or partitioned node,
// and waits until every queue its members read has a reader elsewhere, or o.recoveryLimit.
func cutNode(ctx context.Context, k *kubelets, own *testenv.Ownership, members []*testenv.SimMember, w world, n int, o options) (recovery, error) {
	cutReaders := map[string]bool{}
	var onNode []*testenv.SimMember
	for _, m := range members {
		if m.Pod.Spec.NodeName == w.nodes[n] {
			cutReaders[m.Reader()] = true
			onNode = append(onNode, m)
		}
	}
	waiting := map[allocate.Queue]bool{}
	for _, m := range onNode {
		for _, q := range own.Reading(m.Reader()) {
			waiting[q] = true
		}
	}
	rec := recovery{queues: len(waiting)}
	if len(waiting) == 0 {
		return rec, fmt.Errorf("the members of %s read no queue: nothing to recover", w.nodes[n])
	}
	var mu sync.Mutex
	var cutAt time.Time
	own.Observe(func(reader string, queues []allocate.Queue) {
		mu.Lock()
		defer mu.Unlock()
		if cutAt.IsZero() || cutReaders[reader] {
			return
		}
		for _, q := range queues {
			if waiting[q] {
				delete(waiting, q)
				rec.longest = max(rec.longest, time.Since(cutAt))
			}
		}
	})
	mu.Lock()
	cutAt = time.Now()
	rec.sinceRenewal = k.sinceRenewal(w.nodes[n])
	k.stop(w.nodes[n])
	for _, m := range onNode {
		m.Partition(true)
	}
	mu.Unlock()
	deadline := cutAt.Add(o.recoveryLimit)
	for time.Now().Before(deadline) {
		mu.Lock()
		left := len(waiting)
		mu.Unlock()
		if left == 0 {
			rec.complete = true
			return rec, nil
		}
		if err := sleep(ctx, 100*time.Millisecond); err != nil {
			return rec, err
		}
	}
	mu.Lock()
	defer mu.Unlock()
	rec.longest = o.recoveryLimit
	return rec, nil
}

// recoveryReadInterval is how often the recovery reads the operator's metrics: at 20,000 pods, their
// series for each of its 2,000 groups cost the operator a sixth of its CPU when read every second.
const recoveryReadInterval = 5 * time.Second

// watchRecovery reads the operator's group queue every recoveryReadInterval from now on until the
// function it returns is called, and its CPU profile over o.recoveryLimit when o.operatorCPUProfile asks
// for it. That function returns the most groups waiting at any read, and how long the passes that started
// meanwhile waited, on average; with a profile, it returns once the profile is written.
func watchRecovery(ctx context.Context, op *operatorProcess, o options) (done func() (groupQueue, error), err error) {
	first, err := op.groupQueue(ctx)
	if err != nil {
		return nil, err
	}
	profiled := make(chan error, 1)
	if o.operatorCPUProfile != "" {
		go func() { profiled <- op.saveCPUProfile(ctx, o.operatorCPUProfile, o.recoveryLimit) }()
	} else {
		profiled <- nil
	}
	sampling, stopSampling := context.WithCancel(ctx)
	deepest := first.Depth
	last := first
	sampled := make(chan error, 1)
	go func() {
		defer close(sampled)
		for sleep(sampling, recoveryReadInterval) == nil {
			q, err := op.groupQueue(sampling)
			if err != nil {
				if sampling.Err() == nil {
					sampled <- err
				}
				return
			}
			deepest, last = max(deepest, q.Depth), q
		}
	}()
	return func() (groupQueue, error) {
		stopSampling()
		sampleErr := <-sampled
		// The profile runs its whole length: it is written only once it ends.
		profileErr := <-profiled
		out := groupQueue{Depth: deepest}
		if n := last.Waits - first.Waits; n > 0 {
			out.WaitSeconds = (last.WaitSeconds - first.WaitSeconds) / n
		}
		return out, errors.Join(profileErr, sampleErr)
	}, nil
}

// sleep waits d or until ctx ends.
func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}
