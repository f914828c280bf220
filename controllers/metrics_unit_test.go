package controllers

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"

	"github.com/consumergroup-operator/consumergroup-operator/api/v1alpha1"
	"github.com/consumergroup-operator/consumergroup-operator/internal/fixture"
	"github.com/consumergroup-operator/consumergroup-operator/internal/plan"
	"github.com/consumergroup-operator/consumergroup-operator/internal/testenv"
	"github.com/consumergroup-operator/consumergroup-operator/pkg/allocate"
)

func TestCrossZoneCountsOnlyKnownZones(t *testing.T) {
	group := testenv.Group("ns", "g").Topic("t", testenv.Broker("a", 4, "zone-a"), testenv.Broker("b", 4, "zone-b"), testenv.Broker("c", 4, "")).Obj()
	members := []plan.Member{
		{Member: allocate.Member{ID: "m-a", Zone: "zone-a"}},
		{Member: allocate.Member{ID: "m-b", Zone: "zone-b"}},
		{Member: allocate.Member{ID: "m-none"}},
	}
	q := func(broker string, id int32) allocate.Queue {
		return allocate.Queue{Topic: "t", Broker: broker, ID: id}
	}
	owners := allocate.Plan{
		"m-a":    {q("a", 0), q("a", 1), q("b", 0), q("c", 0)}, // b/0 is across zones; c has no zone
		"m-b":    {q("b", 1), q("a", 2), q("a", 3)},            // a/2 and a/3 are across zones
		"m-none": {q("a", 4), q("b", 2)},                       // the member's zone is unknown
	}
	if got := crossZone(plan.TopologyOf(group, nil), members, owners); got != 3 {
		t.Errorf("crossZone = %d, want 3", got)
	}
}

func TestImbalanceWeighsMembers(t *testing.T) {
	members := []plan.Member{
		{Member: allocate.Member{ID: "heavy", Weight: 2}},
		{Member: allocate.Member{ID: "light", Weight: 1}},
	}
	ids := func(n int) []allocate.Queue { return make([]allocate.Queue, n) }
	for _, tc := range []struct {
		plan allocate.Plan
		want float64
	}{
		{allocate.Plan{"heavy": ids(8), "light": ids(4)}, 1},   // 4 per unit of weight each
		{allocate.Plan{"heavy": ids(6), "light": ids(6)}, 1.5}, // light: 6 per unit, mean 4
		{allocate.Plan{}, 0},
	} {
		owned := 0
		for _, qs := range tc.plan {
			owned += len(qs)
		}
		if got := imbalance(members, tc.plan, owned); got != tc.want {
			t.Errorf("imbalance(%v) = %v, want %v", tc.plan, got, tc.want)
		}
	}
}

func TestLeastCrossZoneCountsOnlyKnownZones(t *testing.T) {
	group := testenv.Group("ns", "g").Topic("t", testenv.Broker("a", 4, "zone-a"), testenv.Broker("b", 4, "zone-b"), testenv.Broker("c", 4, "")).Obj()
	zoneC := []plan.Member{
		{Member: allocate.Member{ID: "m-a", Zone: "zone-a"}},
		{Member: allocate.Member{ID: "m-c1", Zone: "zone-c"}},
		{Member: allocate.Member{ID: "m-c2", Zone: "zone-c"}},
	}
	// 4 queues each: m-a reads broker a's, and broker b's 4 go to zone-c, which has no broker.
	if got := leastCrossZone(plan.TopologyOf(group, nil), zoneC); got != 4 {
		t.Errorf("leastCrossZone with zone-c members = %d, want 4", got)
	}
	// A member of no zone counts nothing: broker b's queues go to it.
	zoneC[2].Zone = ""
	if got := leastCrossZone(plan.TopologyOf(group, nil), zoneC); got != 0 {
		t.Errorf("leastCrossZone with a member of no zone = %d, want 0", got)
	}
}

// The load and recommendation gauges follow the pass: the load the members report, the status's
// recommendation, and no recommendation gauge once the status has none.
func TestRecordLoadAndRecommendation(t *testing.T) {
	group := fixture.Group(v1alpha1.Strategy{Type: v1alpha1.Sticky}, 4)
	obs := &plan.Observation{PodsByName: map[string]*corev1.Pod{}}
	d := &plan.Decision{Report: plan.Report{TotalLoad: ptr.To(120.0)}}
	status := v1alpha1.ConsumerGroupStatus{RecommendedMembers: ptr.To(int32(4))}
	var mem memory
	recordMetrics(&mem, group, plan.TopologyOf(group, nil), &group.Status, &status, obs, d, fixture.T0)
	l := prometheus.Labels{"namespace": group.Namespace, "group": group.Name}
	if got, load := testutil.ToFloat64(recommendedGauge.With(l)), testutil.ToFloat64(loadGauge.With(l)); got != 4 || load != 120 {
		t.Errorf("consumergroup_recommended_members %v, consumergroup_load %v; want 4 and 120", got, load)
	}
	status.RecommendedMembers = nil
	recordMetrics(&mem, group, plan.TopologyOf(group, nil), &group.Status, &status, obs, d, fixture.T0)
	if recommendedGauge.Delete(l) {
		t.Errorf("consumergroup_recommended_members still has a series for the group once its status recommends nothing")
	}
}
