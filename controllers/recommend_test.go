package controllers

import (
	"slices"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"

	"github.com/consumergroup-operator/consumergroup-operator/api/v1alpha1"
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
	l := lease(pod, acked, claim, t0)
	l.Load = load
	return l
}

// A pass sums the members' reports, counting an unreported queue at the mean, and recommends a count;
// without reports it keeps the last recommendation.
func TestDecideRecommendsMembers(t *testing.T) {
	group := testGroup(v1alpha1.Strategy{Type: v1alpha1.Sticky}, 4)
	group.Spec.Autoscaling = &v1alpha1.Autoscaling{TargetLoadPerMember: "25"}
	obs := world([]corev1.Pod{pod("p0"), pod("p1")},
		loadLease("p0", 0, nil, map[allocate.Queue]float64{qs(0)[0]: 40, qs(1)[0]: 20}),
		loadLease("p1", 0, nil, map[allocate.Queue]float64{qs(2)[0]: 30}))
	d := decide(group, obs, env(group, t0))
	// 40 + 20 + 30, and t/b/3 at the mean, 30: 120, over 25 each: 5, at most the 4 queues.
	if d.report.totalLoad == nil || *d.report.totalLoad != 120 || d.report.recommended == nil || *d.report.recommended != 4 {
		t.Fatalf("total %v, recommended %v; want 120 and 4", ptrString(d.report.totalLoad), ptrString(d.report.recommended))
	}
	status := statusFor(group, &d.report, metav1Time(t0))
	if status.TotalLoad != "120" || status.RecommendedMembers == nil || *status.RecommendedMembers != 4 {
		t.Fatalf("status says total %q, recommended %v", status.TotalLoad, status.RecommendedMembers)
	}
	var m groupMetrics
	m.record(group, topologyOf(group, nil), &group.Status, &status, obs, d, t0)
	l := prometheus.Labels{"namespace": "ns", "group": "g"}
	if got, load := testutil.ToFloat64(recommendedGauge.With(l)), testutil.ToFloat64(loadGauge.With(l)); got != 4 || load != 120 {
		t.Errorf("consumergroup_recommended_members %v, consumergroup_load %v; want 4 and 120", got, load)
	}
	if d.requeueAfter == 0 || d.requeueAfter > v1alpha1.DefaultLoadRebalanceInterval {
		t.Errorf("requeue after %s: want a look at the loads within %s", d.requeueAfter, v1alpha1.DefaultLoadRebalanceInterval)
	}

	group.Status.RecommendedMembers = ptr.To(int32(3))
	quiet := world([]corev1.Pod{pod("p0"), pod("p1")}, lease("p0", 0, nil, t0), lease("p1", 0, nil, t0))
	if d := decide(group, quiet, env(group, t0.Add(time.Minute))); d.report.totalLoad != nil || d.report.recommended == nil || *d.report.recommended != 3 {
		t.Errorf("without reports: total %v, recommended %v; want none and the last recommendation, 3", ptrString(d.report.totalLoad), ptrString(d.report.recommended))
	}
}

func ptrString[T any](p *T) any {
	if p == nil {
		return "nil"
	}
	return *p
}

// A rebalance counts the load it moves beside the queues: a Cooperative move when the queue is revoked,
// not again when it is granted.
func TestDecideCountsMovedLoad(t *testing.T) {
	group := testGroup(averagely, 6)
	loads := map[allocate.Queue]float64{}
	for i, q := range qs(0, 1, 2, 3, 4, 5) {
		loads[q] = float64(i + 1)
	}
	obs := world([]corev1.Pod{pod("p0")}, lease("p0", 0, nil, t0))
	obs = applied(group, obs, decide(group, obs, env(group, t0)))
	obs.leases = []protocol.LeaseState{loadLease("p0", 1, qs(0, 1, 2, 3, 4, 5), loads)}

	obs.pods = append(obs.pods, pod("p1"))
	obs.podsByName = map[string]*corev1.Pod{"p0": &obs.pods[0], "p1": &obs.pods[1]}
	revoke := decide(group, obs, env(group, t0))
	if revoke.report.rebalance.moved != 3 || revoke.report.rebalance.movedLoad != 4+5+6 {
		t.Fatalf("revoking 3-5 from p0: moved %d queues, load %v; want 3 and 15", revoke.report.rebalance.moved, revoke.report.rebalance.movedLoad)
	}
	obs = applied(group, obs, revoke)
	obs.leases = []protocol.LeaseState{loadLease("p0", 2, qs(0, 1, 2), loads)}
	grant := decide(group, obs, env(group, t0.Add(time.Second)))
	if !slices.Equal(entryOf(grant, "p1"), qs(3, 4, 5)) || grant.report.rebalance.moved != 0 || grant.report.rebalance.movedLoad != 0 {
		t.Fatalf("granting 3-5 to p1 (%v): moved %d queues, load %v; want the grant counted as no move", entryOf(grant, "p1"), grant.report.rebalance.moved, grant.report.rebalance.movedLoad)
	}

	// Without reports nothing says what a queue weighs: no load is counted.
	quiet := world([]corev1.Pod{pod("p0"), pod("p1")}, lease("p0", 0, nil, t0))
	if d := decide(group, quiet, env(group, t0)); d.report.rebalance.movedLoad != 0 {
		t.Errorf("without load reports: moved load %v, want 0", d.report.rebalance.movedLoad)
	}
}
