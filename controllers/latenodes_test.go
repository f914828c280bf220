package controllers

import (
	"context"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	clocktesting "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/consumergroup-operator/consumergroup-operator/internal/fixture"
	"github.com/consumergroup-operator/consumergroup-operator/internal/observe"
)

func renewedNodeLease(node string, at time.Time) *coordinationv1.Lease {
	return &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: node},
		Spec: coordinationv1.LeaseSpec{LeaseDurationSeconds: ptr.To[int32](40), RenewTime: ptr.To(metav1.NewMicroTime(at))}}
}

func TestNodeOverdue(t *testing.T) {
	const skew = time.Second
	var s observe.NodeLeaseSightings
	s.Saw(renewedNodeLease("n1", fixture.T0), fixture.T0, skew)
	s.Saw(renewedNodeLease("n1", fixture.T0.Add(time.Second)), fixture.T0.Add(time.Second), skew) // seen as it happens
	late := fixture.T0.Add(13 * time.Second)                                                      // 12 s after the renewal seen at 1 s
	cases := []struct {
		name string
		node string
		now  time.Time
		due  bool
		wait time.Duration
	}{
		{"a node never seen", "n2", late, false, 0},
		{"before the deadline", "n1", late.Add(-4 * time.Second), false, 4 * time.Second},
		{"at the deadline", "n1", late, true, 0},
		{"past it", "n1", late.Add(time.Minute), true, 0},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if due, wait := nodeOverdue(&s, tc.node, tc.now, skew); due != tc.due || wait != tc.wait {
				t.Fatalf("overdue %v, wait %v; want %v, %v", due, wait, tc.due, tc.wait)
			}
		})
	}
}

// TestLateNodesWakeTheGroupsOfAnOverdueNodeOnly: a node's timer wakes its groups once the node is overdue,
// and only then: a node that renewed since the timer was set has it set again, to its new deadline.
func TestLateNodesWakeTheGroupsOfAnOverdueNodeOnly(t *testing.T) {
	const skew = time.Second
	clk := clocktesting.NewFakeClock(fixture.T0)
	var s observe.NodeLeaseSightings
	l := newTestLateNodes(&s, clk, skew)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	s.Saw(renewedNodeLease("n1", fixture.T0), clk.Now(), skew)
	l.check(ctx, "n1") // not yet overdue: set again
	if len(l.woken) != 0 {
		t.Fatalf("woken %d groups of a node not overdue", len(l.woken))
	}
	clk.Step(12 * time.Second)
	// The timer set again falls due at the node's deadline.
	fireDue(t, l.queue, "n1", l.check)
	if len(l.woken) != 1 {
		t.Fatalf("woken %d groups of an overdue node, want 1", len(l.woken))
	}
	if e := <-l.woken; e.Object.GetName() != "group-on-n1" || e.Object.GetNamespace() != "ns" {
		t.Fatalf("woke %s/%s", e.Object.GetNamespace(), e.Object.GetName())
	}
	l.check(ctx, "n2") // never seen: nothing
	if len(l.woken) != 0 {
		t.Fatalf("woke the groups of a node never seen")
	}
}

// TestLateNodesWaitOutADisruption: while more than two nodes, and more than a tenth of them, are overdue
// at once, an overdue node's timer wakes nothing and looks again within disruptedRecheck; once the others
// have renewed, the node still silent has its groups woken.
func TestLateNodesWaitOutADisruption(t *testing.T) {
	const skew = time.Second
	clk := clocktesting.NewFakeClock(fixture.T0)
	var s observe.NodeLeaseSightings
	l := newTestLateNodes(&s, clk, skew)
	nodes := []string{"n0", "n1", "n2", "n3", "n4", "n5", "n6", "n7", "n8", "n9"}
	for _, node := range nodes {
		s.Saw(renewedNodeLease(node, clk.Now()), clk.Now(), skew)
	}
	// The first three nodes renew at 6 s, the other seven not: at 12 s seven of ten are overdue.
	clk.Step(6 * time.Second)
	for _, node := range nodes[:3] {
		s.Saw(renewedNodeLease(node, clk.Now()), clk.Now(), skew)
	}
	clk.Step(6 * time.Second)
	l.check(context.Background(), "n9")
	if len(l.woken) != 0 {
		t.Fatalf("woke %d groups while seven of ten nodes were overdue", len(l.woken))
	}
	// Six of the seven renew: n9 alone is overdue, and its timer, set again, wakes its groups.
	for _, node := range nodes[3:9] {
		s.Saw(renewedNodeLease(node, clk.Now()), clk.Now(), skew)
	}
	clk.Step(disruptedRecheck)
	fireDue(t, l.queue, "n9", l.check)
	if len(l.woken) != 1 {
		t.Fatalf("woken %d groups once n9 alone was overdue, want 1", len(l.woken))
	}
	if e := <-l.woken; e.Object.GetName() != "group-on-n9" {
		t.Fatalf("woke %s", e.Object.GetName())
	}
}

// newTestLateNodes is a lateNodes of s on clk whose nodes each have one group, "ns/group-on-<node>".
func newTestLateNodes(s *observe.NodeLeaseSightings, clk *clocktesting.FakeClock, skew time.Duration) *lateNodes {
	groups := func(_ context.Context, node string) []reconcile.Request {
		return []reconcile.Request{{NamespacedName: types.NamespacedName{Namespace: "ns", Name: "group-on-" + node}}}
	}
	return newLateNodes(s, clk, skew, groups)
}
