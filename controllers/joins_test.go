//go:build envtest

package controllers

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/consumergroup-operator/consumergroup-operator/api/v1alpha1"
	"github.com/consumergroup-operator/consumergroup-operator/internal/plan"
	"github.com/consumergroup-operator/consumergroup-operator/internal/testenv"
	"github.com/consumergroup-operator/consumergroup-operator/pkg/protocol"
)

// TestPodsReadyTogetherJoinInOneRebalance: ten member pods of a Cooperative group become Ready 50 ms
// apart, as a Deployment's do. With the join window, the first is published alone and the other nine
// together when the window closes: four generations (the group's with no member yet, the first pod's, the
// revocation and the grant). Without it, each join is published as it comes, and every member
// acknowledges each generation. Either way every queue ends with one reader, and none had two.
func TestPodsReadyTogetherJoinInOneRebalance(t *testing.T) {
	const members, queues = 10, 16
	fill := func(t *testing.T, window time.Duration) (generation int64, acks int64) {
		ns := newNamespace(t)
		startManager(t, ns, func(r *ConsumerGroupReconciler) { r.JoinWindow = window })
		written := countAcks(t, ns)
		own := testenv.NewOwnership()
		cooperativeGroup(ns, "j", queues, 30).Create(t, k8s)
		pods := make([]*corev1.Pod, members)
		for i := range pods {
			pods[i] = testenv.Pod(ns, fmt.Sprintf("j-%d", i), "j").NotReady().Create(t, k8s)
			startSimMember(t, "j", pods[i], own)
		}
		time.Sleep(200 * time.Millisecond) // the members have started and wait for their pods' readiness
		for _, p := range pods {
			testenv.SetReady(t, k8s, p, true)
			time.Sleep(50 * time.Millisecond)
		}
		waitForSettled(t, ns, "j", own, queues, members)
		if v := own.Violations(); len(v) > 0 {
			t.Fatalf("queues had two readers: %v", v)
		}
		time.Sleep(300 * time.Millisecond) // the last acknowledgements land
		return getGroup(t, ns, "j").Status.AssignmentGeneration, written.Load()
	}
	var withGen, withAcks int64
	t.Run("window", func(t *testing.T) {
		withGen, withAcks = fill(t, 2*time.Second)
		if withGen > 4 {
			t.Fatalf("generation %d after the pods joined within the window; want at most 4: no member, the first, the revocation and the grant", withGen)
		}
	})
	t.Run("no window", func(t *testing.T) {
		gen, acks := fill(t, 0)
		t.Logf("generations %d (window: %d), acknowledgements %d (window: %d)", gen, withGen, acks, withAcks)
		if gen <= withGen || acks <= withAcks {
			t.Fatalf("without the window: generation %d and %d acknowledgements, with it %d and %d; the window saves nothing here", gen, acks, withGen, withAcks)
		}
	})
}

// countAcks counts, from a watch of ns's Leases until the test ends, the acknowledgements as the API server
// sees them: Lease writes that change the acknowledged generation of a Lease already seen (a Lease's
// creation, which acknowledges nothing, is not one). Renewals write the Lease too, on their own schedule,
// and are not counted.
func countAcks(t testing.TB, ns string) *atomic.Int64 {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	w, err := newClientset(t).CoordinationV1().Leases(ns).Watch(ctx, metav1.ListOptions{})
	must(t, err)
	t.Cleanup(w.Stop)
	var n atomic.Int64
	go func() {
		acked := map[string]string{}
		for ev := range w.ResultChan() {
			l, ok := ev.Object.(*coordinationv1.Lease)
			if !ok {
				continue
			}
			if a := l.Annotations[protocol.AckedGenerationAnnotation]; a != acked[l.Name] {
				if _, seen := acked[l.Name]; seen {
					n.Add(1)
				}
				acked[l.Name] = a
			}
		}
	}()
	return &n
}

// TestAcknowledgementsShareStatusWrites: while a group fills, its members acknowledge generation after
// generation. With AckStatusInterval, a status that changes only acknowledgements is written no sooner than
// the interval after the group's last status write, the acknowledgements within it together; the status
// still comes to show every member's last acknowledgement. Without it, such writes follow each other within
// moments.
func TestAcknowledgementsShareStatusWrites(t *testing.T) {
	const members, queues, interval = 12, 24, 3 * time.Second
	// fill returns, of each status write that changed only acknowledgements, how long after the write
	// before it the watch saw it.
	fill := func(t *testing.T, interval time.Duration) (gaps []time.Duration, writes int) {
		ns := newNamespace(t)
		startManager(t, ns, func(r *ConsumerGroupReconciler) { r.AckStatusInterval, r.JoinWindow = interval, 2*time.Second })
		seen := watchStatusWrites(t, ns, "s")
		own := testenv.NewOwnership()
		cooperativeGroup(ns, "s", queues, 30).Create(t, k8s)
		for i := range members {
			p := testenv.Pod(ns, fmt.Sprintf("s-%d", i), "s").NotReady().Create(t, k8s)
			startSimMember(t, "s", p, own)
			testenv.SetReady(t, k8s, p, true)
			time.Sleep(100 * time.Millisecond)
		}
		waitForSettled(t, ns, "s", own, queues, members)
		if v := own.Violations(); len(v) > 0 {
			t.Fatalf("queues had two readers: %v", v)
		}
		// The status comes to show each member's acknowledgement of the generation in force.
		eventually(t, interval+10*time.Second, func() error {
			g := getGroup(t, ns, "s")
			if len(g.Status.Members) != members {
				return fmt.Errorf("%d members in the status, want %d", len(g.Status.Members), members)
			}
			for _, m := range g.Status.Members {
				if m.AckedGeneration == nil || *m.AckedGeneration != g.Status.AssignmentGeneration {
					return fmt.Errorf("member %s acknowledged %v in the status, generation %d in force", m.Pod, m.AckedGeneration, g.Status.AssignmentGeneration)
				}
			}
			return nil
		})
		statuses := seen()
		for i := 1; i < len(statuses); i++ {
			if plan.OnlyAcknowledgementsChanged(&statuses[i-1].status, &statuses[i].status) {
				gaps = append(gaps, statuses[i].at.Sub(statuses[i-1].at))
			}
		}
		return gaps, len(statuses)
	}
	t.Run("interval", func(t *testing.T) {
		gaps, writes := fill(t, interval)
		t.Logf("%d status writes; acknowledgements alone, after: %v", writes, gaps)
		// Acknowledgements that land with another change (the last of a handoff ends it: a condition
		// changes) are written at once, with it; the ones checked here are those written alone.
		for _, gap := range gaps {
			if gap < interval-500*time.Millisecond {
				t.Fatalf("a status of acknowledgements alone written %v after the last write, within the %v interval", gap, interval)
			}
		}
	})
	t.Run("no interval", func(t *testing.T) {
		gaps, writes := fill(t, 0)
		t.Logf("%d status writes; acknowledgements alone, after: %v", writes, gaps)
		if !slices.ContainsFunc(gaps, func(gap time.Duration) bool { return gap < interval-500*time.Millisecond }) {
			t.Fatalf("without the interval no status of acknowledgements alone came within %v of the last write (%v): the interval's check cannot fail", interval, gaps)
		}
	})
}

// statusSeen is a status of a group as a watch saw it, and when.
type statusSeen struct {
	status v1alpha1.ConsumerGroupStatus
	at     time.Time
}

// watchStatusWrites watches group name of ns until the test ends; the function it returns gives the
// statuses seen so far, the creation's first. After its creation only the operator writes the group, its
// status.
func watchStatusWrites(t testing.TB, ns, name string) func() []statusSeen {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	wc, err := client.NewWithWatch(restConfig, client.Options{Scheme: testScheme})
	must(t, err)
	w, err := wc.Watch(ctx, &v1alpha1.ConsumerGroupList{}, client.InNamespace(ns))
	must(t, err)
	t.Cleanup(w.Stop)
	var mu sync.Mutex
	var seen []statusSeen
	go func() {
		for ev := range w.ResultChan() {
			if g, ok := ev.Object.(*v1alpha1.ConsumerGroup); ok && g.Name == name && (ev.Type == watch.Added || ev.Type == watch.Modified) {
				mu.Lock()
				seen = append(seen, statusSeen{status: g.Status, at: time.Now()})
				mu.Unlock()
			}
		}
	}()
	return func() []statusSeen {
		mu.Lock()
		defer mu.Unlock()
		return slices.Clone(seen)
	}
}
