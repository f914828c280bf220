package controllers

import (
	"fmt"
	"maps"
	"runtime"
	"slices"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/consumergroup-operator/consumergroup-operator/api/v1alpha1"
	"github.com/consumergroup-operator/consumergroup-operator/internal/fixture"
	"github.com/consumergroup-operator/consumergroup-operator/internal/plan"
	"github.com/consumergroup-operator/consumergroup-operator/internal/testenv"
	"github.com/consumergroup-operator/consumergroup-operator/pkg/allocate"
	"github.com/consumergroup-operator/consumergroup-operator/pkg/protocol"
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
	t.Cleanup(func() { forgetMetrics(client.ObjectKeyFromObject(group)) })
	l := map[string]string{"namespace": group.Namespace, "group": group.Name}
	series := gatherGroupMetrics(t)
	if got, load := series.value("consumergroup_recommended_members", l), series.value("consumergroup_load", l); got != 4 || load != 120 {
		t.Errorf("consumergroup_recommended_members %v, consumergroup_load %v; want 4 and 120", got, load)
	}
	status.RecommendedMembers = nil
	recordMetrics(&mem, group, plan.TopologyOf(group, nil), &group.Status, &status, obs, d, fixture.T0)
	if got := gatherGroupMetrics(t).value("consumergroup_recommended_members", l); got != -1 {
		t.Errorf("consumergroup_recommended_members is %v once the status recommends nothing; want no series", got)
	}
}

// The series a group's values make: every condition with its three statuses, the rebalances by reason,
// the handoff histogram's cumulative buckets; and none once the group is forgotten. The pedantic registry
// also checks each series against the descriptions the collector gives.
func TestGroupSeriesCollected(t *testing.T) {
	key := types.NamespacedName{Namespace: "metrics-unit", Name: "g"}
	t.Cleanup(func() { forgetMetrics(key) })
	groupMetrics.update(key, func(s *groupSeries) {
		s.members = 3
		s.conditions = []conditionStatus{{v1alpha1.ConditionReady, metav1.ConditionTrue}, {v1alpha1.ConditionStalled, metav1.ConditionUnknown}}
		s.rebalances[slices.Index(rebalanceReasons[:], rebalanceHandoff)] = 2
		for _, seconds := range []float64{0.2, 0.2, 4, 1000} {
			s.handoffs.observe(seconds)
		}
		s.routeErrors = map[string]uint64{"Timeout": 5}
	})
	l := map[string]string{"namespace": key.Namespace, "group": key.Name}
	with := func(kv ...string) map[string]string {
		out := maps.Clone(l)
		for i := 0; i+1 < len(kv); i += 2 {
			out[kv[i]] = kv[i+1]
		}
		return out
	}
	series := gatherGroupMetrics(t)
	for _, want := range []struct {
		name   string
		labels map[string]string
		value  float64
	}{
		{"consumergroup_members", l, 3},
		{"consumergroup_status_condition", with("type", "Ready", "status", "True"), 1},
		{"consumergroup_status_condition", with("type", "Ready", "status", "False"), 0},
		{"consumergroup_status_condition", with("type", "Ready", "status", "Unknown"), 0},
		{"consumergroup_status_condition", with("type", "Stalled", "status", "Unknown"), 1},
		{"consumergroup_status_condition", with("type", "Stalled", "status", "True"), 0},
		{"consumergroup_rebalances_total", with("reason", "handoff"), 2},
		{"consumergroup_rebalances_total", with("reason", "spec"), -1},
		{"consumergroup_routes_read_errors_total", with("reason", "Timeout"), 5},
		{"consumergroup_recommended_members", l, -1},
	} {
		if got := series.value(want.name, want.labels); got != want.value {
			t.Errorf("%s%v = %v, want %v", want.name, want.labels, got, want.value)
		}
	}
	h := series.find("consumergroup_handoff_duration_seconds", l).GetHistogram()
	cumulative := map[float64]uint64{}
	for _, b := range h.GetBucket() {
		cumulative[b.GetUpperBound()] = b.GetCumulativeCount()
	}
	if h.GetSampleCount() != 4 || h.GetSampleSum() != 1004.4 || cumulative[0.1] != 0 || cumulative[0.25] != 2 || cumulative[5] != 3 || cumulative[300] != 3 {
		t.Errorf("handoff histogram: count %d, sum %v, buckets %v; want 4, 1004.4, and 0 to 0.1 s, 2 to 0.25 s, 3 to 5 s and to 300 s",
			h.GetSampleCount(), h.GetSampleSum(), cumulative)
	}
	forgetMetrics(key)
	if got := gatherGroupMetrics(t).value("consumergroup_members", l); got != -1 {
		t.Errorf("consumergroup_members of a forgotten group = %v, want no series", got)
	}
}

// gathered are the families one gathering of the group metrics made.
type gathered []*dto.MetricFamily

// gatherGroupMetrics gathers the group metrics through a pedantic registry, which fails on any series
// that does not match the collector's descriptions.
func gatherGroupMetrics(t *testing.T) gathered {
	t.Helper()
	reg := prometheus.NewPedanticRegistry()
	if err := reg.Register(groupMetrics); err != nil {
		t.Fatal(err)
	}
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	return families
}

// find is the series of family name whose labels are exactly labels; nil when there is none.
func (g gathered) find(name string, labels map[string]string) *dto.Metric {
	for _, f := range g {
		if f.GetName() != name {
			continue
		}
		for _, m := range f.GetMetric() {
			got := map[string]string{}
			for _, l := range m.GetLabel() {
				got[l.GetName()] = l.GetValue()
			}
			if maps.Equal(got, labels) {
				return m
			}
		}
	}
	return nil
}

// value is the value of a gauge or counter series; -1 when there is none.
func (g gathered) value(name string, labels map[string]string) float64 {
	switch m := g.find(name, labels); {
	case m == nil:
		return -1
	case m.Gauge != nil:
		return m.GetGauge().GetValue()
	default:
		return m.GetCounter().GetValue()
	}
}

// settledGroupSeries sets a group's series as a pass of a settled group with handoffs and its eight
// conditions leaves them.
func settledGroupSeries(s *groupSeries) {
	s.members, s.queues, s.generation = 10, 16, 7
	s.bytes = optional{900, true}
	s.published = true
	s.rebalances[0], s.rebalances[1] = 1, 3
	s.handoffs.observe(1.5)
	conditions := make([]conditionStatus, len(v1alpha1.ConditionTypes))
	for i, c := range v1alpha1.ConditionTypes {
		conditions[i] = conditionStatus{c, metav1.ConditionFalse}
	}
	s.conditions = append(s.conditions[:0], conditions...)
}

// BenchmarkGroupSeriesMemory reports the bytes of heap that one group's metrics hold between scrapes, as a
// pass of a settled group with handoffs and its eight conditions leaves them.
//
//	go test ./controllers -run '^$' -bench GroupSeriesMemory -count 6
func BenchmarkGroupSeriesMemory(b *testing.B) {
	heap := func() uint64 {
		runtime.GC()
		var m runtime.MemStats
		runtime.ReadMemStats(&m)
		return m.HeapAlloc
	}
	const groups = 1000
	var perGroup float64
	for i := 0; b.Loop(); i++ {
		before := heap()
		keys := make([]types.NamespacedName, groups)
		for g := range keys {
			keys[g] = types.NamespacedName{Namespace: fmt.Sprintf("bench-%d-ns-%d", i, g/50), Name: fmt.Sprintf("group-%d", g)}
			groupMetrics.update(keys[g], settledGroupSeries)
		}
		perGroup = float64(heap()-before) / groups
		for _, k := range keys {
			forgetMetrics(k)
		}
	}
	b.ReportMetric(perGroup, "B/group")
}

// TestHandoffDurationsKeepNothingOnceHandedOn: a queue revoked at one pass and granted at a later one is
// timed from the first to the second, and once no handoff is in flight the group keeps no map of them,
// not even an empty one sized for the last handoff.
func TestHandoffDurationsKeepNothingOnceHandedOn(t *testing.T) {
	q := func(id int32) protocol.Queue { return protocol.Queue{Topic: "t", Broker: "b", ID: id} }
	entries := func(queues ...protocol.Queue) map[string]protocol.PublishedEntry {
		return map[string]protocol.PublishedEntry{"p0": {Queues: queues}}
	}
	var mem memory
	key := types.NamespacedName{Namespace: "ns", Name: "g"}
	start := time.Unix(1000, 0)
	pass := func(at time.Duration, published, decided map[string]protocol.PublishedEntry) []float64 {
		obs := &plan.Observation{Published: protocol.Published{Exists: true, Entries: published}}
		d := &plan.Decision{Report: plan.Report{Assignment: plan.Assignment{Entries: decided}, QueueCount: 4}}
		return handoffDurations(&mem, key, obs, d, start.Add(at))
	}
	if got := pass(0, entries(q(0), q(1), q(2), q(3)), entries(q(0), q(1))); len(got) != 0 {
		t.Errorf("revoking two queues timed %v", got)
	}
	mem.with(key, func(g *groupMemory) {
		if len(g.revoked) != 2 {
			t.Errorf("after revoking two queues the group holds %v", g.revoked)
		}
	})
	if got := pass(3*time.Second, entries(q(0), q(1)), entries(q(0), q(1), q(2), q(3))); !slices.Equal(got, []float64{3, 3}) {
		t.Errorf("granting them again timed %v, want 3 s each", got)
	}
	mem.with(key, func(g *groupMemory) {
		if g.revoked != nil {
			t.Errorf("with no handoff in flight the group keeps %#v, want nil", g.revoked)
		}
	})
	if got := pass(4*time.Second, entries(q(0), q(1), q(2), q(3)), entries(q(0), q(1), q(2), q(3))); len(got) != 0 {
		t.Errorf("an unchanged assignment timed %v", got)
	}
	mem.with(key, func(g *groupMemory) {
		if g.revoked != nil {
			t.Errorf("a pass that revokes nothing made %#v, want nil", g.revoked)
		}
	})
}

// The series of a group share their labels' pairs, with each other and with the other groups of the
// namespace, and a forgotten group leaves none of its own behind.
func TestGroupSeriesShareTheirLabelPairs(t *testing.T) {
	a, b := types.NamespacedName{Namespace: "metrics-pairs", Name: "a"}, types.NamespacedName{Namespace: "metrics-pairs", Name: "b"}
	t.Cleanup(func() { forgetMetrics(a); forgetMetrics(b) })
	for _, key := range []types.NamespacedName{a, b} {
		groupMetrics.update(key, func(s *groupSeries) {
			s.members = 2
			s.conditions = []conditionStatus{{v1alpha1.ConditionReady, metav1.ConditionTrue}}
		})
	}
	pairs := map[string]map[*dto.LabelPair]bool{}
	for _, f := range gatherGroupMetrics(t) {
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "namespace" && l.GetValue() == a.Namespace || l.GetName() == "group" && l.GetValue() == a.Name {
					if pairs[l.GetName()] == nil {
						pairs[l.GetName()] = map[*dto.LabelPair]bool{}
					}
					pairs[l.GetName()][l] = true
				}
			}
		}
	}
	if len(pairs["namespace"]) != 1 || len(pairs["group"]) != 1 {
		t.Errorf("the series of %s hold %d namespace pairs and %d group pairs, want one of each, shared", a, len(pairs["namespace"]), len(pairs["group"]))
	}
	forgetMetrics(a)
	forgetMetrics(b)
	groupMetrics.mu.Lock()
	defer groupMetrics.mu.Unlock()
	for k := range groupMetrics.pairs {
		if k[0] == "namespace" && k[1] == a.Namespace || k[0] == "group" && (k[1] == a.Name || k[1] == b.Name) {
			t.Errorf("the pair %s=%s outlived its groups", k[0], k[1])
		}
	}
}

// BenchmarkGroupMetricsGather reports what one scrape of 1,000 groups' series allocates, as a settled
// group with handoffs and its eight conditions has them.
//
//	go test ./controllers -run '^$' -bench GroupMetricsGather -count 6
func BenchmarkGroupMetricsGather(b *testing.B) {
	const groups = 1000
	keys := make([]types.NamespacedName, groups)
	for g := range keys {
		keys[g] = types.NamespacedName{Namespace: fmt.Sprintf("gather-ns-%d", g/50), Name: fmt.Sprintf("group-%d", g)}
		groupMetrics.update(keys[g], settledGroupSeries)
	}
	b.Cleanup(func() {
		for _, k := range keys {
			forgetMetrics(k)
		}
	})
	reg := prometheus.NewRegistry()
	if err := reg.Register(groupMetrics); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := reg.Gather(); err != nil {
			b.Fatal(err)
		}
	}
}
