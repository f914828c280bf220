package plan

import (
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"

	"github.com/consumergroup-operator/consumergroup-operator/api/v1alpha1"
	"github.com/consumergroup-operator/consumergroup-operator/internal/fixture"
	"github.com/consumergroup-operator/consumergroup-operator/pkg/allocate"
	"github.com/consumergroup-operator/consumergroup-operator/pkg/protocol"
)

func TestRecommendMembers(t *testing.T) {
	for _, tc := range []struct {
		name           string
		total, target  float64
		queues         int
		previous, want int32
	}{
		{"rounds up", 430, 100, 48, 0, 5},
		{"at least one", 0, 100, 48, 0, 1},
		{"no more than the queues (a member without a queue reads nothing)", 10000, 100, 12, 0, 12},
		{"up at once", 501, 100, 48, 5, 6},
		{"down not within 10% of the lower count's capacity", 395, 100, 48, 5, 5},
		{"down once 10% below it", 355, 100, 48, 5, 4},
		{"down several at once", 100, 100, 48, 5, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := recommendMembers(tc.total, tc.target, tc.queues, tc.previous); got != tc.want {
				t.Errorf("recommendMembers(%v, %v, %d, %d) = %d, want %d", tc.total, tc.target, tc.queues, tc.previous, got, tc.want)
			}
		})
	}
}

// loadLease is lease with a load report.
func loadLease(pod string, acked int64, claim []allocate.Queue, load map[allocate.Queue]float64) protocol.LeaseState {
	l := fixture.Lease(pod, acked, claim, fixture.T0)
	l.Load = load
	return l
}

// A pass sums the members' reports, counting an unreported queue at the mean, and recommends a count;
// without reports it keeps the last recommendation.
func TestDecideRecommendsMembers(t *testing.T) {
	group := fixture.Group(v1alpha1.Strategy{Type: v1alpha1.Sticky}, 4)
	group.Spec.Autoscaling = &v1alpha1.Autoscaling{TargetLoadPerMember: "25"}
	obs := world([]corev1.Pod{fixture.Pod("p0"), fixture.Pod("p1")},
		loadLease("p0", 0, nil, map[allocate.Queue]float64{fixture.Qs(0)[0]: 40, fixture.Qs(1)[0]: 20}),
		loadLease("p1", 0, nil, map[allocate.Queue]float64{fixture.Qs(2)[0]: 30}))
	d := Decide(group, obs, env(group, fixture.T0))
	// 40 + 20 + 30, and t/b/3 at the mean, 30: 120, over 25 each: 5, at most the 4 queues.
	if d.Report.TotalLoad == nil || *d.Report.TotalLoad != 120 || d.Report.Recommended == nil || *d.Report.Recommended != 4 {
		t.Fatalf("total %v, recommended %v; want 120 and 4", fixture.PtrString(d.Report.TotalLoad), fixture.PtrString(d.Report.Recommended))
	}
	status := StatusFor(group, &d.Report, fixture.Metav1Time(fixture.T0))
	if status.TotalLoad != "120" || status.RecommendedMembers == nil || *status.RecommendedMembers != 4 {
		t.Fatalf("status says total %q, recommended %v", status.TotalLoad, status.RecommendedMembers)
	}
	if d.RequeueAfter == 0 || d.RequeueAfter > v1alpha1.DefaultLoadRebalanceInterval {
		t.Errorf("requeue after %s: want a look at the loads within %s", d.RequeueAfter, v1alpha1.DefaultLoadRebalanceInterval)
	}

	group.Status.RecommendedMembers = ptr.To(int32(3))
	quiet := world([]corev1.Pod{fixture.Pod("p0"), fixture.Pod("p1")}, fixture.Lease("p0", 0, nil, fixture.T0), fixture.Lease("p1", 0, nil, fixture.T0))
	if d := Decide(group, quiet, env(group, fixture.T0.Add(time.Minute))); d.Report.TotalLoad != nil || d.Report.Recommended == nil || *d.Report.Recommended != 3 {
		t.Errorf("without reports: total %v, recommended %v; want none and the last recommendation, 3", fixture.PtrString(d.Report.TotalLoad), fixture.PtrString(d.Report.Recommended))
	}
}

// A rebalance counts the load it moves beside the queues: a Cooperative move when the queue is revoked,
// not again when it is granted.
func TestDecideCountsMovedLoad(t *testing.T) {
	group := fixture.Group(averagely, 6)
	loads := map[allocate.Queue]float64{}
	for i, q := range fixture.Qs(0, 1, 2, 3, 4, 5) {
		loads[q] = float64(i + 1)
	}
	obs := world([]corev1.Pod{fixture.Pod("p0")}, fixture.Lease("p0", 0, nil, fixture.T0))
	obs = applied(group, obs, Decide(group, obs, env(group, fixture.T0)))
	obs.Leases = []protocol.LeaseState{loadLease("p0", 1, fixture.Qs(0, 1, 2, 3, 4, 5), loads)}

	obs.Pods = append(obs.Pods, fixture.Pod("p1"))
	obs.PodsByName = map[string]*corev1.Pod{"p0": &obs.Pods[0], "p1": &obs.Pods[1]}
	revoke := Decide(group, obs, env(group, fixture.T0))
	if revoke.Report.Rebalance.Moved != 3 || revoke.Report.Rebalance.MovedLoad != 4+5+6 {
		t.Fatalf("revoking 3-5 from p0: moved %d queues, load %v; want 3 and 15", revoke.Report.Rebalance.Moved, revoke.Report.Rebalance.MovedLoad)
	}
	obs = applied(group, obs, revoke)
	obs.Leases = []protocol.LeaseState{loadLease("p0", 2, fixture.Qs(0, 1, 2), loads)}
	grant := Decide(group, obs, env(group, fixture.T0.Add(time.Second)))
	if !slices.Equal(entryOf(grant, "p1"), fixture.Qs(3, 4, 5)) || grant.Report.Rebalance.Moved != 0 || grant.Report.Rebalance.MovedLoad != 0 {
		t.Fatalf("granting 3-5 to p1 (%v): moved %d queues, load %v; want the grant counted as no move", entryOf(grant, "p1"), grant.Report.Rebalance.Moved, grant.Report.Rebalance.MovedLoad)
	}

	// Without reports nothing says what a queue weighs: no load is counted.
	quiet := world([]corev1.Pod{fixture.Pod("p0"), fixture.Pod("p1")}, fixture.Lease("p0", 0, nil, fixture.T0))
	if d := Decide(group, quiet, env(group, fixture.T0)); d.Report.Rebalance.MovedLoad != 0 {
		t.Errorf("without load reports: moved load %v, want 0", d.Report.Rebalance.MovedLoad)
	}
}
