//go:build scale

package scale

import (
	"context"
	"fmt"
	"maps"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/consumergroup-operator/consumergroup-operator/api/v1alpha1"
	"github.com/consumergroup-operator/consumergroup-operator/internal/testenv"
	"github.com/consumergroup-operator/consumergroup-operator/pkg/protocol"
)

// Many groups: 1,000 groups of 10 pods in 20 namespaces, 10,000 pods, served by one operator process.
const (
	manyNamespaces = 20
	manyGroups     = 1000
	podsPerGroup   = 10
	// manyRSSTarget and manyRestartTarget are issue 6's targets.
	manyRSSTarget     = 200 << 20
	manyRestartTarget = 30 * time.Second
	// manyReadyTimeout bounds the first operator's publication of all 1,000 assignments; manyRestartTimeout
	// the second operator's pass over them. Both are far above the targets so that a slow run still
	// yields figures.
	manyReadyTimeout   = 10 * time.Minute
	manyRestartTimeout = 5 * time.Minute
	// settleTime passes after the last group became Ready before the memory is read, so that the
	// operator's last writes, events and watch updates are behind it.
	settleTime = 5 * time.Second
)

// manyFigures are what one run over 1,000 groups measured.
type manyFigures struct {
	// setup is the time to create the groups and the pods (Running and Ready), before any operator runs.
	setup time.Duration
	// ready is the time from starting the operator to all groups being Ready.
	ready time.Duration
	// rss and hwm are the first operator's resident and peak resident memory once it settled.
	rss, hwm int64
	// restart is the time from starting a second operator to its having reconciled every group with an
	// empty work queue.
	restart time.Duration
	// reconciles is how many passes the second operator made in that time.
	reconciles float64
	// restartRSS and restartHWM are the second operator's memory at that point.
	restartRSS, restartHWM int64
	// changed counts the groups and assignment ConfigMaps whose resourceVersion the restart changed.
	changed []string
	// apiWrites counts, from the API server's metrics, the writes to configmaps and consumergroups during
	// the restart; -1 when the metrics could not be read.
	apiWrites float64
}

// TestManyGroups runs the operator as its own process over 1,000 groups of 10 pods each: every group
// becomes Ready, the operator's memory stays within target, and an operator started after it reconciles
// every group within target without writing anything.
func TestManyGroups(t *testing.T) {
	f := runManyGroups(t)
	if f.rss > manyRSSTarget || f.hwm > manyRSSTarget {
		t.Errorf("the operator's memory with %d pods in %d groups: RSS %s, peak %s; the target is %s",
			manyGroups*podsPerGroup, manyGroups, mib(f.rss), mib(f.hwm), mib(manyRSSTarget))
	}
	if f.restart > manyRestartTarget {
		t.Errorf("after a restart the operator took %s to reconcile %d groups; the target is %s (load %s)",
			f.restart.Round(time.Millisecond), manyGroups, manyRestartTarget, testenv.LoadAverage())
	}
	if len(f.changed) > 0 {
		t.Errorf("the restarted operator changed %d objects that were up to date: %s", len(f.changed), strings.Join(first(f.changed, 20), ", "))
	}
	if f.apiWrites > 0 {
		t.Errorf("the API server counted %v writes to configmaps and consumergroups while the restarted operator reconciled; want 0", f.apiWrites)
	}
}

// BenchmarkManyGroups reports the figures of one run over 1,000 groups. A run takes minutes and keeps
// its control plane until the benchmark ends, so run one iteration (the default -benchtime does too).
//
//	make test-scale SCALE_FLAGS='-run ^$$ -bench ManyGroups -benchtime 1x'
func BenchmarkManyGroups(b *testing.B) {
	var f manyFigures
	for b.Loop() {
		f = runManyGroups(b)
	}
	b.ReportMetric(f.ready.Seconds(), "s-to-all-ready")
	b.ReportMetric(float64(f.rss)/(1<<20), "MiB-rss")
	b.ReportMetric(float64(f.hwm)/(1<<20), "MiB-peak-rss")
	b.ReportMetric(f.restart.Seconds(), "s-restart")
	b.ReportMetric(float64(f.restartRSS)/(1<<20), "MiB-restart-rss")
	b.ReportMetric(float64(f.restartHWM)/(1<<20), "MiB-restart-peak-rss")
	b.ReportMetric(float64(len(f.changed)), "objects-changed-by-restart")
	b.ReportMetric(f.apiWrites, "api-writes-on-restart")
}

func runManyGroups(tb testing.TB) manyFigures {
	var f manyFigures
	c := startCluster(tb)
	// The process measured is the code under test, not a stale bin/manager.
	bin := testenv.Build(tb, "manager", ".", testenv.VersionStamp{})
	kubeconfig := adminKubeconfig(tb, c)
	logPath := operatorLog(tb)
	tb.Cleanup(func() {
		if tb.Failed() {
			tb.Logf("last lines of the operator's log:\n%s", tail(logPath, 40))
		}
	})

	// The world exists before the operator starts, as it does when the operator is installed into a
	// running cluster; the time to all Ready is then the operator's alone.
	start := time.Now()
	var pods []*corev1.Pod
	var groups []*v1alpha1.ConsumerGroup
	for n := range manyNamespaces {
		c.createNamespace(tb, nsName(n))
	}
	for i := range manyGroups {
		ns, name := nsName(i%manyNamespaces), fmt.Sprintf("group-%04d", i)
		groups = append(groups, manyGroup(ns, name, i))
		for j := range podsPerGroup {
			pods = append(pods, memberPod(ns, fmt.Sprintf("%s-%d", name, j), name))
		}
	}
	must(tb, testenv.Parallel(context.Background(), len(groups), 8, func(i int) error { return c.client.Create(context.Background(), groups[i]) }))
	c.createPods(tb, pods)
	f.setup = time.Since(start)
	tb.Logf("created %d groups and %d pods in %s (load %s)", len(groups), len(pods), f.setup.Round(time.Millisecond), testenv.LoadAverage())

	start = time.Now()
	op := startOperator(tb, bin, kubeconfig, logPath)
	waitAllReady(tb, c, manyReadyTimeout)
	f.ready = time.Since(start)
	tb.Logf("first operator: all %d groups Ready %s after it started (load %s)", manyGroups, f.ready.Round(time.Millisecond), testenv.LoadAverage())
	time.Sleep(settleTime)
	f.rss, f.hwm = op.memory(tb)
	tb.Logf("first operator, settled: RSS %s, peak RSS %s (load %s)", mib(f.rss), mib(f.hwm), testenv.LoadAverage())
	op.stop(tb)

	before := resourceVersions(tb, c)
	writesBefore, err := apiServerWrites(c)
	switch {
	case err != nil:
		tb.Logf("the API server's metrics could not be read, so its write count is not checked: %v", err)
	case writesBefore < 2*manyGroups:
		// Creating the groups and publishing their assignments wrote at least this much; a lower count
		// means the metric's labels changed and a zero after the restart would prove nothing.
		tb.Errorf("the API server counts %v writes to configmaps and consumergroups so far; at least %d were made", writesBefore, 2*manyGroups)
	}

	start = time.Now()
	op = startOperator(tb, bin, kubeconfig, logPath)
	testenv.Poll(tb, manyRestartTimeout, 100*time.Millisecond, nil, func() error {
		ms, err := op.scrape(context.Background())
		if err != nil {
			return err
		}
		ours := func(l map[string]string) bool {
			return l["controller"] == "consumergroup" || l["name"] == "consumergroup"
		}
		f.reconciles = ms.sum("controller_runtime_reconcile_total", ours)
		depth := ms.sum("workqueue_depth", ours)
		active := ms.sum("controller_runtime_active_workers", ours)
		if f.reconciles < manyGroups || depth > 0 || active > 0 {
			return fmt.Errorf("%v reconciles, %v queued, %v in progress", f.reconciles, depth, active)
		}
		return nil
	})
	f.restart = time.Since(start)
	f.restartRSS, f.restartHWM = op.memory(tb)
	tb.Logf("second operator: %v reconciles, queue empty, %s after it started; RSS %s, peak RSS %s (load %s)",
		f.reconciles, f.restart.Round(time.Millisecond), mib(f.restartRSS), mib(f.restartHWM), testenv.LoadAverage())

	// A write would land during the pass that decided it; the pause covers the API round trip.
	time.Sleep(2 * time.Second)
	after := resourceVersions(tb, c)
	for _, key := range slices.Sorted(maps.Keys(before)) {
		if after[key] != before[key] {
			f.changed = append(f.changed, key)
		}
	}
	for key := range after {
		if _, ok := before[key]; !ok {
			f.changed = append(f.changed, key+" (new)")
		}
	}
	f.apiWrites = -1
	if err == nil {
		writesAfter, err := apiServerWrites(c)
		if err != nil {
			tb.Logf("the API server's metrics could not be read, so its write count is not checked: %v", err)
		} else {
			f.apiWrites = writesAfter - writesBefore
		}
	}
	tb.Logf("restart: %d objects changed, %v writes to configmaps and consumergroups counted by the API server", len(f.changed), f.apiWrites)
	waitAllReady(tb, c, time.Second)
	op.stop(tb)
	return f
}

// manyGroup is one of the 1,000 groups: 16 queues over 2 brokers, selecting its 10 pods.
func manyGroup(ns, name string, i int) *v1alpha1.ConsumerGroup {
	strategy := v1alpha1.Sticky
	if i%2 == 1 {
		strategy = v1alpha1.Averagely
	}
	return &v1alpha1.ConsumerGroup{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: v1alpha1.ConsumerGroupSpec{
			Selector: metav1.LabelSelector{MatchLabels: map[string]string{"app": name}},
			Strategy: v1alpha1.Strategy{Type: strategy},
			Topics: []v1alpha1.Topic{{Name: "orders", Brokers: []v1alpha1.Broker{
				{Name: "broker-a", Queues: 8}, {Name: "broker-b", Queues: 8},
			}}},
		},
	}
}

func nsName(n int) string { return fmt.Sprintf("tenant-%02d", n) }

// waitAllReady waits until every group in the cluster is Ready, and names some that are not otherwise.
func waitAllReady(tb testing.TB, c *cluster, timeout time.Duration) {
	tb.Helper()
	var notReady []string
	testenv.Poll(tb, timeout, time.Second, func() string { return "not Ready:\n" + strings.Join(first(notReady, 5), "\n") }, func() error {
		var list v1alpha1.ConsumerGroupList
		if err := c.client.List(context.Background(), &list); err != nil {
			return err
		}
		notReady = notReady[:0]
		for i := range list.Items {
			if g := &list.Items[i]; !isReady(g) {
				notReady = append(notReady, fmt.Sprintf("%s/%s:\n%s", g.Namespace, g.Name, conditions(g)))
			}
		}
		if len(list.Items) != manyGroups || len(notReady) > 0 {
			return fmt.Errorf("%d of %d groups Ready", len(list.Items)-len(notReady), manyGroups)
		}
		return nil
	})
}

// resourceVersions maps every group and every ConfigMap the operator manages to its resourceVersion.
func resourceVersions(tb testing.TB, c *cluster) map[string]string {
	tb.Helper()
	out := map[string]string{}
	var groups v1alpha1.ConsumerGroupList
	must(tb, c.client.List(context.Background(), &groups))
	for _, g := range groups.Items {
		out["consumergroup "+g.Namespace+"/"+g.Name] = g.ResourceVersion
	}
	var cms corev1.ConfigMapList
	must(tb, c.client.List(context.Background(), &cms, client.MatchingLabels{protocol.ManagedByLabel: protocol.ManagedByValue}))
	for _, cm := range cms.Items {
		out["configmap "+cm.Namespace+"/"+cm.Name] = cm.ResourceVersion
	}
	return out
}

// apiServerWrites is the API server's count of requests that change configmaps or consumergroups
// (create, update, patch, apply, delete), from its /metrics.
func apiServerWrites(c *cluster) (float64, error) {
	raw, err := c.clientset.Discovery().RESTClient().Get().AbsPath("/metrics").DoRaw(context.Background())
	if err != nil {
		return 0, err
	}
	ms, err := parseMetrics(strings.NewReader(string(raw)))
	if err != nil {
		return 0, err
	}
	writes := map[string]bool{"POST": true, "PUT": true, "PATCH": true, "APPLY": true, "DELETE": true, "DELETECOLLECTION": true}
	return ms.sum("apiserver_request_total", func(l map[string]string) bool {
		return writes[l["verb"]] && (l["resource"] == "configmaps" || l["resource"] == "consumergroups")
	}), nil
}

// operatorLog is where the operator processes of one run log, one after the other.
func operatorLog(tb testing.TB) string { return tb.TempDir() + "/operator.log" }

// tail is the last n lines of the file at path.
func tail(path string, n int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return err.Error()
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}

func first(s []string, n int) []string { return s[:min(n, len(s))] }

func mib(bytes int64) string { return fmt.Sprintf("%.1f MiB", float64(bytes)/(1<<20)) }
