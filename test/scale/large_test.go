//go:build scale

package scale

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/consumergroup-operator/consumergroup-operator/api/v1alpha1"
	"github.com/consumergroup-operator/consumergroup-operator/internal/manager"
	"github.com/consumergroup-operator/consumergroup-operator/internal/testenv"
	"github.com/consumergroup-operator/consumergroup-operator/pkg/member"
	"github.com/consumergroup-operator/consumergroup-operator/pkg/protocol"
)

// The large group: 16 brokers of 4,096 queues (65,536, the most one broker entry allows) read by 2,048
// member pods.
const (
	largeBrokers         = 16
	largeQueuesPerBroker = 4096
	largeMembers         = 2048
	// largeJoinTarget is issue 6's target for publishing the rebalance after one member joins.
	largeJoinTarget = 2 * time.Second
	// largeSettleTimeout bounds the first assignment of all 2,048 members, pod creation included.
	largeSettleTimeout = 10 * time.Minute
	// largeJoinTimeout bounds one join; far above the target, so that a slow pass still yields a figure.
	largeJoinTimeout = 2 * time.Minute
	// memberSample is how many members read their entry back through pkg/member, as a pod would.
	memberSample = 8
)

// TestLargeGroup publishes the assignment of a 65,536-queue group to 2,048 members, times the rebalance
// when a 2,049th member joins, and reads every entry back: every queue is owned exactly once, and a sample
// of members sees its own entry through the pod-side package.
//
// Sticky and Averagely give each member a few runs of consecutive queue ids, so their entries stay small
// (about 170 and 135 bytes) and fit one ConfigMap. AveragelyByCircle deals the queues out one by one, so
// every member holds two single ids on each of the 16 brokers (about 1 KB): its assignment is the one the
// operator spreads over shard ConfigMaps.
func TestLargeGroup(t *testing.T) {
	for _, strategy := range []v1alpha1.StrategyType{v1alpha1.Sticky, v1alpha1.Averagely, v1alpha1.AveragelyByCircle} {
		t.Run(string(strategy), func(t *testing.T) {
			lg := setupLargeGroup(t, strategy)
			joiner := lg.newPod("joiner-0")
			took, p := lg.join(t, joiner)
			t.Logf("%s: join of member %d published in %s (%d ConfigMaps: %d shards; %d bytes of data, generation %d; load %s)",
				strategy, len(lg.members)+1, took.Round(time.Millisecond), p.configMaps, p.shards, p.bytes, p.generation, testenv.LoadAverage())

			// Read back from the API server, not from the watch that timed the join.
			members := append(slices.Clone(lg.members), joiner.Name)
			p, err := readPublished(context.Background(), lg.c.client, lg.ns, lg.name)
			must(t, err)
			if err := p.checkComplete(lg.space, members); err != nil {
				t.Fatalf("after the join, the published assignment is not complete: %v\nconditions:\n%s", err, conditions(lg.group(t)))
			}
			lg.checkMembersRead(t, p, append(sample(lg.pods, memberSample-1), joiner))
			if took > largeJoinTarget {
				t.Errorf("the join took %s to publish; the target is %s (load %s)", took.Round(time.Millisecond), largeJoinTarget, testenv.LoadAverage())
			}
		})
	}
}

// BenchmarkLargeGroupRebalance reports the seconds from a 2,049th member becoming Ready to the
// published assignment giving it its queues, with all 2,049 members' entries at the new generation. Between
// iterations, outside the timing, the member leaves again. Sticky fits one ConfigMap; AveragelyByCircle
// is spread over shards.
//
//	make test-scale SCALE_FLAGS='-run ^$$ -bench LargeGroupRebalance -benchtime 3x'
func BenchmarkLargeGroupRebalance(b *testing.B) {
	for _, strategy := range []v1alpha1.StrategyType{v1alpha1.Sticky, v1alpha1.AveragelyByCircle} {
		b.Run(string(strategy), func(b *testing.B) {
			lg := setupLargeGroup(b, strategy)
			var total, worst time.Duration
			n := 0
			for b.Loop() {
				b.StopTimer()
				joiner := lg.newPod(fmt.Sprintf("joiner-%d", n))
				b.StartTimer()
				took, p := lg.join(b, joiner)
				b.StopTimer()
				total += took
				worst = max(worst, took)
				n++
				b.Logf("join %d: %s, %d shards, %d bytes (load %s)", n, took.Round(time.Millisecond), p.shards, p.bytes, testenv.LoadAverage())
				lg.leave(b, joiner)
				b.StartTimer()
			}
			b.ReportMetric(total.Seconds()/float64(n), "s/join")
			b.ReportMetric(worst.Seconds(), "max-s/join")
		})
	}
}

// largeGroup is the large group on its own control plane, with the operator running in this process.
type largeGroup struct {
	c        *cluster
	ns, name string
	space    queueSpace
	pods     []*corev1.Pod
	// members are the pod names of pods, which the group's assignment lists.
	members []string
}

// setupLargeGroup starts a control plane and the operator, creates the group and its 2,048 members, and
// waits until their assignment is published complete.
func setupLargeGroup(tb testing.TB, strategy v1alpha1.StrategyType) *largeGroup {
	tb.Helper()
	lg := &largeGroup{c: startCluster(tb), ns: "large", name: "large"}
	lg.c.createNamespace(tb, lg.ns)
	startInProcessOperator(tb, lg.c)

	g := &v1alpha1.ConsumerGroup{
		ObjectMeta: metav1.ObjectMeta{Namespace: lg.ns, Name: lg.name},
		Spec: v1alpha1.ConsumerGroupSpec{
			Selector: metav1.LabelSelector{MatchLabels: map[string]string{"app": lg.name}},
			Strategy: v1alpha1.Strategy{Type: strategy},
			// No consumer runs in these pods to acknowledge a revocation, so a cooperative handoff would
			// wait out the revoke timeout; Immediate times the operator's own work, which this measures.
			Handoff: v1alpha1.Handoff{Mode: v1alpha1.Immediate},
		},
	}
	topic := v1alpha1.Topic{Name: "orders"}
	for i := range largeBrokers {
		topic.Brokers = append(topic.Brokers, v1alpha1.Broker{Name: fmt.Sprintf("broker-%02d", i), Queues: largeQueuesPerBroker})
	}
	g.Spec.Topics = []v1alpha1.Topic{topic}
	must(tb, lg.c.client.Create(context.Background(), g))
	lg.space = spaceOf(g)

	start := time.Now()
	for i := range largeMembers {
		lg.pods = append(lg.pods, lg.newPod(fmt.Sprintf("consumer-%04d", i)))
		lg.members = append(lg.members, lg.pods[i].Name)
	}
	lg.c.createPods(tb, lg.pods)
	created := time.Since(start)
	testenv.Poll(tb, largeSettleTimeout, time.Second, func() string { return "conditions:\n" + conditions(lg.group(tb)) }, func() error {
		if g := lg.group(tb); tooLarge(g) {
			tb.Fatalf("the operator refused the assignment as too large:\n%s", conditions(g))
		}
		p, err := readPublished(context.Background(), lg.c.client, lg.ns, lg.name)
		if err == nil {
			err = p.checkComplete(lg.space, lg.members)
		}
		return err
	})
	tb.Logf("%s: %d pods created in %s; all %d members assigned %s after the first pod (load %s)",
		strategy, largeMembers, created.Round(time.Millisecond), largeMembers, time.Since(start).Round(time.Millisecond), testenv.LoadAverage())
	return lg
}

func (lg *largeGroup) newPod(name string) *corev1.Pod { return memberPod(lg.ns, name, lg.name) }

func (lg *largeGroup) group(tb testing.TB) *v1alpha1.ConsumerGroup {
	tb.Helper()
	var g v1alpha1.ConsumerGroup
	must(tb, lg.c.client.Get(context.Background(), types.NamespacedName{Namespace: lg.ns, Name: lg.name}, &g))
	return &g
}

// join creates pod, makes it Ready and returns the time from its Ready status write to the watch
// delivering an assignment that is complete over lg.members and pod, with the assignment it read then.
// The pod is created NotReady first, so that the timing starts when it becomes a member.
func (lg *largeGroup) join(tb testing.TB, pod *corev1.Pod) (time.Duration, published) {
	tb.Helper()
	ctx := context.Background()
	must(tb, lg.c.createPod(ctx, pod, false))
	members := append(slices.Clone(lg.members), pod.Name)

	w, cms := lg.watchConfigMaps(tb)
	defer w.Stop()
	start := time.Now()
	must(tb, lg.c.setPodReady(ctx, pod, true))
	timeout := time.After(largeJoinTimeout)
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	var last error
	for {
		select {
		case ev, ok := <-w.ResultChan():
			if !ok {
				tb.Fatalf("the ConfigMap watch closed while waiting for the join")
			}
			cm, isCM := ev.Object.(*corev1.ConfigMap)
			if !isCM {
				continue
			}
			switch ev.Type {
			case watch.Added, watch.Modified:
				cms[cm.Name] = *cm
			case watch.Deleted:
				delete(cms, cm.Name)
			default:
				continue
			}
			at := time.Since(start)
			p, err := decodePublished(lg.name, mapValues(cms))
			if err == nil {
				err = p.checkComplete(lg.space, members)
			}
			if err == nil {
				return at, p
			}
			last = err
		case <-tick.C:
			// The operator writes nothing when it refuses the plan, so the watch would stay silent.
			if g := lg.group(tb); tooLarge(g) {
				tb.Fatalf("the operator refused the assignment after the join as too large:\n%s", conditions(g))
			}
		case <-timeout:
			tb.Fatalf("the join was not published within %s: %v\nconditions:\n%s", largeJoinTimeout, last, conditions(lg.group(tb)))
		}
	}
}

// leave makes pod NotReady and waits until the assignment is complete over lg.members again.
func (lg *largeGroup) leave(tb testing.TB, pod *corev1.Pod) {
	tb.Helper()
	must(tb, lg.c.setPodReady(context.Background(), pod, false))
	testenv.Poll(tb, largeJoinTimeout, 100*time.Millisecond, func() string { return "conditions:\n" + conditions(lg.group(tb)) }, func() error {
		p, err := readPublished(context.Background(), lg.c.client, lg.ns, lg.name)
		if err != nil {
			return err
		}
		return p.checkComplete(lg.space, lg.members)
	})
}

// watchConfigMaps lists the group's ConfigMaps and watches them from there.
func (lg *largeGroup) watchConfigMaps(tb testing.TB) (watch.Interface, map[string]corev1.ConfigMap) {
	tb.Helper()
	ctx := context.Background()
	sel := labels.SelectorFromSet(labels.Set{protocol.GroupLabel: lg.name}).String()
	list, err := lg.c.clientset.CoreV1().ConfigMaps(lg.ns).List(ctx, metav1.ListOptions{LabelSelector: sel})
	must(tb, err)
	cms := map[string]corev1.ConfigMap{}
	for _, cm := range list.Items {
		cms[cm.Name] = cm
	}
	w, err := lg.c.clientset.CoreV1().ConfigMaps(lg.ns).Watch(ctx, metav1.ListOptions{LabelSelector: sel, ResourceVersion: list.ResourceVersion})
	must(tb, err)
	return w, cms
}

// checkMembersRead runs the pod-side client for each of pods, as the pod would, and checks that the
// assignment it puts in force is the pod's entry in p.
func (lg *largeGroup) checkMembersRead(tb testing.TB, p published, pods []*corev1.Pod) {
	tb.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, len(pods))
	clients := make([]*member.Client, len(pods))
	for i, pod := range pods {
		c, err := member.New(kubernetes.NewForConfigOrDie(lg.c.cfg), member.Config{
			Namespace: lg.ns, Group: lg.name, Pod: pod.Name, PodUID: pod.UID, AutoAck: true,
		})
		must(tb, err)
		clients[i] = c
		go func() { done <- c.Run(ctx) }()
	}
	defer func() {
		cancel()
		for range pods {
			if err := <-done; err != nil {
				tb.Errorf("member client: %v", err)
			}
		}
	}()
	for i, c := range clients {
		want := p.entries[pods[i].Name]
		testenv.Poll(tb, time.Minute, 50*time.Millisecond, nil, func() error {
			a := c.Current()
			switch {
			case a.Generation != want.entry.Generation:
				return fmt.Errorf("pod %s: the member client has generation %d in force, want %d", pods[i].Name, a.Generation, want.entry.Generation)
			case a.Member != want.entry.Member:
				return fmt.Errorf("pod %s: the member client reads member %q, want %q", pods[i].Name, a.Member, want.entry.Member)
			case !slices.Equal(a.Queues, want.queues):
				return fmt.Errorf("pod %s: the member client reads %d queues, the entry lists %d (the entry is in shard %d of %d)",
					pods[i].Name, len(a.Queues), len(want.queues), protocol.ShardOf(pods[i].Name, p.shards), p.shards)
			}
			return nil
		})
	}
}

// startInProcessOperator runs the operator's manager, as main.go builds it, in this process until tb ends.
func startInProcessOperator(tb testing.TB, c *cluster) {
	tb.Helper()
	opts := manager.Options("0", "0", false, "", "")
	// Subtests and benchmark runs start the controller again in the same process.
	opts.Controller.SkipNameValidation = ptr.To(true)
	// What ctrl.GetConfigOrDie gives main.go when the kubeconfig sets no rate limit: none on the client
	// side, the API server's priority and fairness instead.
	cfg := rest.CopyConfig(c.cfg)
	cfg.QPS, cfg.Burst = -1, 0
	mgr, err := ctrl.NewManager(cfg, opts)
	must(tb, err)
	ctx, cancel := context.WithCancel(context.Background())
	must(tb, manager.Setup(ctx, mgr, manager.Settings{}))
	done := make(chan error, 1)
	go func() { done <- mgr.Start(ctx) }()
	tb.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			tb.Errorf("the operator stopped with an error: %v", err)
		}
	})
}

// tooLarge reports whether the group is Degraded because its assignment does not fit.
func tooLarge(g *v1alpha1.ConsumerGroup) bool {
	c := meta.FindStatusCondition(g.Status.Conditions, "Degraded")
	return c != nil && c.Status == metav1.ConditionTrue && c.Reason == "AssignmentTooLarge"
}

// sample picks n of pods, spread evenly.
func sample(pods []*corev1.Pod, n int) []*corev1.Pod {
	var out []*corev1.Pod
	for i := range n {
		out = append(out, pods[i*len(pods)/n])
	}
	return out
}

func mapValues(m map[string]corev1.ConfigMap) []corev1.ConfigMap {
	out := make([]corev1.ConfigMap, 0, len(m))
	for _, v := range m {
		out = append(out, v)
	}
	return out
}
