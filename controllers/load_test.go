//go:build envtest

package controllers

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"k8s.io/utils/ptr"

	"github.com/consumergroup-operator/consumergroup-operator/api/v1alpha1"
	"github.com/consumergroup-operator/consumergroup-operator/internal/fixture"
	"github.com/consumergroup-operator/consumergroup-operator/internal/testenv"
	"github.com/consumergroup-operator/consumergroup-operator/pkg/allocate"
	"github.com/consumergroup-operator/consumergroup-operator/pkg/protocol"
)

// TestBalanceByLoad runs a Sticky group balanced by load with two members that report, through their
// Leases, the load of the queues they read. When load alone unbalances the group, the operator moves
// queues within an interval (plus a renewal), no sooner than an interval after its last rebalance, through
// the Cooperative handoff, so that no queue ever has two readers.
func TestBalanceByLoad(t *testing.T) {
	const interval = 3 * time.Second
	ns := newNamespace(t)
	startManager(t, ns)
	own := testenv.NewOwnership()
	testenv.Group(ns, "lg").Topic("t", testenv.Broker("b", 8, "")).
		Strategy(v1alpha1.Strategy{Type: v1alpha1.Sticky, Sticky: &v1alpha1.StickyParameters{
			BalanceBy: v1alpha1.BalanceByLoad, LoadRebalanceIntervalSeconds: ptr.To(int32(interval / time.Second)),
		}}).
		Handoff(v1alpha1.Handoff{Mode: v1alpha1.Cooperative, RevokeTimeoutSeconds: ptr.To(int32(30))}).Create(t, k8s)
	members := []*testenv.SimMember{
		startSimMember(t, "lg", testenv.Pod(ns, "lg-0", "lg").Create(t, k8s), own),
		startSimMember(t, "lg", testenv.Pod(ns, "lg-1", "lg").Create(t, k8s), own),
	}
	testenv.AwaitEachReading(t, own, members, 4, 20*time.Second)

	// Each member reports, every 200 ms, the load of what it reads, from one table of per-queue loads.
	var mu sync.Mutex
	queueLoad := map[allocate.Queue]float64{}
	setHot := func(hot []allocate.Queue) {
		mu.Lock()
		defer mu.Unlock()
		for id := range int32(8) {
			queueLoad[allocate.Queue{Topic: "t", Broker: "b", ID: id}] = 1
		}
		for _, q := range hot {
			queueLoad[q] = 10
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	for _, m := range members {
		go func() {
			for ctx.Err() == nil {
				mu.Lock()
				report := map[allocate.Queue]float64{}
				for _, q := range own.Reading(m.Reader()) {
					report[q] = queueLoad[q]
				}
				mu.Unlock()
				_ = m.Client.ReportLoad(report)
				time.Sleep(200 * time.Millisecond)
			}
		}()
	}
	// carried is each member's load; balanced says whether every member is within the bound (44 in all,
	// 22 each, hottest queue 10: at most max(1.1*22, 22+10)), and the stricter aim, 1.1*22, is met.
	carried := func() []float64 {
		mu.Lock()
		defer mu.Unlock()
		out := make([]float64, len(members))
		for i, m := range members {
			for _, q := range own.Reading(m.Reader()) {
				out[i] += queueLoad[q]
			}
		}
		return out
	}
	// rebalances notes when each new rebalanced-at value of the assignment was first seen.
	var seen []time.Time
	var last string
	watchRebalances := func() {
		cm := getAssignment(t, ns, "lg")
		if at := cm.Annotations[protocol.RebalancedAtAnnotation]; at != last {
			last = at
			seen = append(seen, time.Now())
		}
	}
	watchRebalances()
	awaitBalance := func(phase string, since time.Time) time.Time {
		t.Helper()
		testenv.Poll(t, interval+15*time.Second, 50*time.Millisecond, func() string { return fmt.Sprintf("loads %v", carried()) }, func() error {
			watchRebalances()
			loads := carried()
			for i, l := range loads {
				if l > 1.1*22 {
					return fmt.Errorf("%s: %s carries %v", phase, members[i].Pod.Name, l)
				}
			}
			return nil
		})
		took := time.Since(since)
		if took > interval+5*time.Second {
			t.Errorf("%s: balanced %s after the loads changed, more than an interval (%s) and a few renewals", phase, took.Round(time.Millisecond), interval)
		}
		return seen[len(seen)-1]
	}

	// Phase 1: lg-0's four queues turn hot: it carries 40 of 44.
	setHot(own.Reading(members[0].Reader()))
	first := awaitBalance("lg-0 hot", time.Now())
	// Phase 2, at once: what lg-1 reads now turns hot. The operator waits out the interval since its last
	// rebalance before it moves anything again.
	flipped := time.Now()
	setHot(own.Reading(members[1].Reader()))
	awaitBalance("lg-1 hot", flipped)
	var lastOfFirst time.Time
	for _, at := range seen {
		if !at.After(flipped) {
			lastOfFirst = at
		}
	}
	for _, at := range seen {
		if at.After(flipped) {
			if gap := at.Sub(lastOfFirst); gap < interval-200*time.Millisecond {
				t.Errorf("a load-only rebalance came %s after the last one (first of the run at %s), less than the interval %s", gap.Round(time.Millisecond), first.Format(time.StampMilli), interval)
			}
			break
		}
	}
	if v := own.Violations(); len(v) > 0 {
		t.Errorf("queues read by two members: %v", v)
	}
}

// TestRecommendedMembers: members report load through their Leases, and the group's status recommends
// how many members that load needs at spec.autoscaling.targetLoadPerMember.
func TestRecommendedMembers(t *testing.T) {
	ns := newNamespace(t)
	startManager(t, ns)
	own := testenv.NewOwnership()
	g := testenv.Group(ns, "ag").Topic("t", testenv.Broker("b", 8, "")).Strategy(v1alpha1.Strategy{Type: v1alpha1.Sticky}).Obj()
	g.Spec.Autoscaling = &v1alpha1.Autoscaling{TargetLoadPerMember: "12.5"}
	must(t, k8s.Create(context.Background(), g))
	members := []*testenv.SimMember{
		startSimMember(t, "ag", testenv.Pod(ns, "ag-0", "ag").Create(t, k8s), own),
		startSimMember(t, "ag", testenv.Pod(ns, "ag-1", "ag").Create(t, k8s), own),
	}
	testenv.AwaitEachReading(t, own, members, 4, 20*time.Second)
	// 8 queues at 10 each: 80, over 12.5 per member: 7 members.
	for _, m := range members {
		report := map[allocate.Queue]float64{}
		for _, q := range own.Reading(m.Reader()) {
			report[q] = 10
		}
		must(t, m.Client.ReportLoad(report))
	}
	// The reports reach the Leases with the next renewal (every second here), and the group's pass
	// follows loadPassDelay later.
	eventually(t, loadPassDelay+10*time.Second, func() error {
		g := getGroup(t, ns, "ag")
		if g.Status.TotalLoad != "80" {
			return fmt.Errorf("status.totalLoad %q, want 80", g.Status.TotalLoad)
		}
		if r := g.Status.RecommendedMembers; r == nil || *r != 7 {
			return fmt.Errorf("status.recommendedMembers %v, want 7", fixture.PtrString(r))
		}
		return nil
	})
}
