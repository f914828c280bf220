package controllers

import (
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/consumergroup-operator/consumergroup-operator/api/v1alpha1"
	"github.com/consumergroup-operator/consumergroup-operator/pkg/nameserver"
	"github.com/consumergroup-operator/consumergroup-operator/pkg/protocol"
)

// A queue set that shrinks (a broker turned read-only, a topic gone) republishes: the entries no longer
// list the queues that left, although what the rest of the plan gives each member is unchanged.
func TestDecideRepublishesWhenQueuesLeave(t *testing.T) {
	t0 := time.Unix(1e9, 0)
	group := testGroup(v1alpha1.Strategy{Type: v1alpha1.Averagely}, 8)
	group.Spec.Handoff.Mode = v1alpha1.Immediate
	obs := world(podsNamed("p0"))
	obs.scope = topologyOf(group, nil).scope()
	d := decide(group, obs, env(group, t0))
	if !d.report.rebalance.published || len(entryOf(d, "p0")) != 8 {
		t.Fatalf("first pass: rebalanced %v, p0 gets %v", d.report.rebalance.published, entryOf(d, "p0"))
	}
	next := applied(group, obs, d)
	shrunk := testGroup(v1alpha1.Strategy{Type: v1alpha1.Averagely}, 4)
	shrunk.Spec.Handoff.Mode = v1alpha1.Immediate
	next.scope = topologyOf(shrunk, nil).scope()
	next.setPublished(protocol.ReadPublishedIn(shrunk.Name, next.index, next.shards, next.scope, next.scope.Len()))
	d2 := decide(shrunk, next, env(shrunk, t0.Add(time.Second)))
	if !d2.report.rebalance.published || d2.report.generation <= d.report.generation || !slices.Equal(entryOf(d2, "p0"), qs(0, 1, 2, 3)) {
		t.Fatalf("after the queue set shrank: rebalanced %v, generation %d (was %d), p0 gets %v", d2.report.rebalance.published, d2.report.generation, d.report.generation, entryOf(d2, "p0"))
	}
}

func podsNamed(names ...string) []corev1.Pod {
	out := make([]corev1.Pod, len(names))
	for i, n := range names {
		out[i] = pod(n)
	}
	return out
}

func TestMergeRoutes(t *testing.T) {
	t0 := time.Unix(1e9, 0)
	group := testGroup(v1alpha1.Strategy{Type: v1alpha1.Averagely}, 1)
	group.Spec.Topics = []v1alpha1.Topic{{Name: "t"}, {Name: "s", Brokers: []v1alpha1.Broker{{Name: "b", Queues: 2}}}}
	group.Spec.NameServer = &v1alpha1.NameServer{Addresses: []string{"n:1"}, RefreshIntervalSeconds: ptr.To[int32](10), GroupName: "G"}
	if got := discoveredTopics(group); !slices.Equal(got, []string{"t", "%RETRY%G"}) {
		t.Fatalf("discovered %v", got)
	}
	route := func(brokers ...nameserver.QueueData) nameserver.Answer {
		return nameserver.Answer{Route: &nameserver.Route{QueueDatas: brokers}}
	}
	read := func(at time.Time, answers map[string]nameserver.Answer) *routeRead {
		return &routeRead{at: at, answers: answers, answeredBy: "n:1"}
	}
	group.Generation = 3
	src := &routeSource{interval: 10 * time.Second, zones: []v1alpha1.BrokerZone{{Broker: "a", Zone: "za"}}}
	first := map[string]nameserver.Answer{
		"t":        route(nameserver.QueueData{BrokerName: "b", ReadQueueNums: 8, Perm: 6}, nameserver.QueueData{BrokerName: "a", ReadQueueNums: 4, Perm: 2}),
		"%RETRY%G": route(nameserver.QueueData{BrokerName: "b", ReadQueueNums: 1, Perm: 6}),
	}
	r := mergeRoutes(group, nil, read(t0, first), src)
	if r.ReadTime == nil || !r.ReadTime.Time.Equal(t0) || r.NameServer != "n:1" || r.ObservedGeneration != 3 || len(r.Topics) != 2 {
		t.Fatalf("routes %+v", r)
	}
	if b := r.Topics[0].Brokers; len(b) != 2 || b[0] != (v1alpha1.BrokerRoute{Name: "a", Queues: 0, ReadQueueNums: 4, Perm: 2, Zone: "za"}) || b[1].Queues != 8 {
		t.Fatalf("t's brokers %+v", b)
	}

	// A read that finds the same routes changes nothing, times included: it writes nothing.
	if same := mergeRoutes(group, r, read(t0.Add(5*time.Second), first), src); !equality.Semantic.DeepEqual(same, r) {
		t.Fatalf("an unchanged read gives %+v, want %+v", same, r)
	}
	// A read that changes one topic dates that topic and the routes, not the other topic.
	grown := map[string]nameserver.Answer{"t": first["t"], "%RETRY%G": route(nameserver.QueueData{BrokerName: "b", ReadQueueNums: 2, Perm: 6})}
	if g := mergeRoutes(group, r, read(t0.Add(6*time.Second), grown), src); !g.ReadTime.Time.Equal(t0.Add(6*time.Second)) ||
		!g.Topics[0].ReadTime.Time.Equal(t0) || !g.Topics[1].ReadTime.Time.Equal(t0.Add(6*time.Second)) {
		t.Fatalf("after one topic changed: %+v", g)
	}

	// Nobody answers for t: it keeps its brokers, and the routes were not read in full.
	r2 := mergeRoutes(group, r, read(t0.Add(10*time.Second), map[string]nameserver.Answer{"%RETRY%G": route(nameserver.QueueData{BrokerName: "b", ReadQueueNums: 1, Perm: 6})}), src)
	if !r2.ReadTime.Time.Equal(t0) || len(r2.Topics[0].Brokers) != 2 || !r2.Topics[0].ReadTime.Time.Equal(t0) {
		t.Fatalf("after a partial read: %+v", r2)
	}

	// t is reported absent: kept for three intervals (30 s), then dropped.
	absent := map[string]nameserver.Answer{"t": {Absent: true}, "%RETRY%G": route()}
	r3 := mergeRoutes(group, r2, read(t0.Add(20*time.Second), absent), src)
	r4 := mergeRoutes(group, r3, read(t0.Add(49*time.Second), absent), src)
	r5 := mergeRoutes(group, r4, read(t0.Add(51*time.Second), absent), src)
	if r3.Topics[0].AbsentSince == nil || len(r4.Topics[0].Brokers) != 2 || len(r5.Topics[0].Brokers) != 0 {
		t.Fatalf("absent: after 0 s %+v, 29 s %+v, 31 s %+v", r3.Topics[0], r4.Topics[0], r5.Topics[0])
	}
	// Back: at once, and the clock restarts.
	r6 := mergeRoutes(group, r5, read(t0.Add(60*time.Second), map[string]nameserver.Answer{"t": route(nameserver.QueueData{BrokerName: "b", ReadQueueNums: 2, Perm: 6}), "%RETRY%G": route()}), src)
	if r6.Topics[0].AbsentSince != nil || len(r6.Topics[0].Brokers) != 1 {
		t.Fatalf("back: %+v", r6.Topics[0])
	}

	// The spec drops t: so do the routes, without a read.
	group.Spec.Topics = group.Spec.Topics[1:]
	if r7 := mergeRoutes(group, r6, nil, src); len(r7.Topics) != 1 || r7.Topics[0].Name != "%RETRY%G" {
		t.Fatalf("after the spec dropped t: %+v", r7.Topics)
	}
	// And without spec.nameServer there are none.
	group.Spec.NameServer = nil
	if r8 := mergeRoutes(group, r6, nil, src); r8 != nil {
		t.Fatalf("without a name server: %+v", r8)
	}
}

func TestTopologyOf(t *testing.T) {
	group := testGroup(v1alpha1.Strategy{Type: v1alpha1.Averagely}, 2)
	group.Spec.Topics = append(group.Spec.Topics, v1alpha1.Topic{Name: "d"})
	group.Spec.NameServer = &v1alpha1.NameServer{Addresses: []string{"n:1"}, RetryTopic: v1alpha1.RetryTopicIgnore,
		BrokerZones: []v1alpha1.BrokerZone{{Broker: "x", Zone: "zx"}}}
	routes := &v1alpha1.RoutesStatus{Topics: []v1alpha1.TopicRoute{{Name: "d", ReadTime: &metav1.Time{},
		Brokers: []v1alpha1.BrokerRoute{{Name: "x", Queues: 3}, {Name: "r1@y", Queues: 1}, {Name: "z", Queues: 0}}}}}
	spec := group.Spec.DeepCopy()
	topo := topologyOf(group, routes)
	want := []v1alpha1.Topic{group.Spec.Topics[0], {Name: "d", Brokers: []v1alpha1.Broker{{Name: "x", Queues: 3, Zone: "zx"}, {Name: "r1@y", Queues: 1, Zone: "r1"}, {Name: "z"}}}}
	if len(topo) != 2 || topo[1].Name != "d" || !slices.Equal(topo[1].Brokers, want[1].Brokers) {
		t.Fatalf("topology %+v", topo)
	}
	if !equality.Semantic.DeepEqual(spec, &group.Spec) {
		t.Fatal("topologyOf changed the group's spec")
	}
	if topo.scope().Len() != 6 {
		t.Fatalf("scope of %d queues, want 6", topo.scope().Len())
	}
	if got := topo.brokerZones(); len(got) != 2 || got["x"] != "zx" || got["r1@y"] != "r1" {
		t.Fatalf("broker zones %v", got)
	}
	if plain := testGroup(v1alpha1.Strategy{Type: v1alpha1.Averagely}, 2); !slices.EqualFunc(topologyOf(plain, nil), plain.Spec.Topics, func(a, b v1alpha1.Topic) bool {
		return equality.Semantic.DeepEqual(a, b)
	}) {
		t.Fatal("a group without spec.nameServer is planned with its spec's topics")
	}
}
