package plan

import (
	"maps"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/consumergroup-operator/consumergroup-operator/api/v1alpha1"
	"github.com/consumergroup-operator/consumergroup-operator/internal/fixture"
	"github.com/consumergroup-operator/consumergroup-operator/pkg/protocol"
)

// A queue set that shrinks (a broker turned read-only, a topic gone) republishes: the entries no longer
// list the queues that left, although what the rest of the plan gives each member is unchanged.
func TestDecideRepublishesWhenQueuesLeave(t *testing.T) {
	t0 := time.Unix(1e9, 0)
	group := fixture.Group(v1alpha1.Strategy{Type: v1alpha1.Averagely}, 8)
	group.Spec.Handoff.Mode = v1alpha1.Immediate
	obs := world(podsNamed("p0"))
	obs.Scope = TopologyOf(group, nil).Scope()
	d := Decide(group, obs, env(group, t0))
	if !d.Report.Rebalance.Published || len(entryOf(d, "p0")) != 8 {
		t.Fatalf("first pass: rebalanced %v, p0 gets %v", d.Report.Rebalance.Published, entryOf(d, "p0"))
	}
	next := applied(group, obs, d)
	shrunk := fixture.Group(v1alpha1.Strategy{Type: v1alpha1.Averagely}, 4)
	shrunk.Spec.Handoff.Mode = v1alpha1.Immediate
	next.Scope = TopologyOf(shrunk, nil).Scope()
	next.SetPublished(protocol.ReadPublishedIn(shrunk.Name, next.Index, next.Shards, next.Scope, next.Scope.Len()))
	d2 := Decide(shrunk, next, env(shrunk, t0.Add(time.Second)))
	if !d2.Report.Rebalance.Published || d2.Report.Generation <= d.Report.Generation || !slices.Equal(entryOf(d2, "p0"), fixture.Qs(0, 1, 2, 3)) {
		t.Fatalf("after the queue set shrank: rebalanced %v, generation %d (was %d), p0 gets %v", d2.Report.Rebalance.Published, d2.Report.Generation, d.Report.Generation, entryOf(d2, "p0"))
	}
}

func podsNamed(names ...string) []corev1.Pod {
	out := make([]corev1.Pod, len(names))
	for i, n := range names {
		out[i] = fixture.Pod(n)
	}
	return out
}

func TestTopologyOf(t *testing.T) {
	group := fixture.Group(v1alpha1.Strategy{Type: v1alpha1.Averagely}, 2)
	group.Spec.Topics = append(group.Spec.Topics, v1alpha1.Topic{Name: "d"})
	group.Spec.NameServer = &v1alpha1.NameServer{Addresses: []string{"n:1"}, RetryTopic: v1alpha1.RetryTopicIgnore,
		BrokerZones: []v1alpha1.BrokerZone{{Broker: "x", Zone: "zx"}}}
	routes := &v1alpha1.RoutesStatus{Topics: []v1alpha1.TopicRoute{{Name: "d", ReadTime: &metav1.Time{},
		Brokers: []v1alpha1.BrokerRoute{{Name: "x", Queues: 3}, {Name: "r1@y", Queues: 1}, {Name: "z", Queues: 0}}}}}
	spec := group.Spec.DeepCopy()
	topo := TopologyOf(group, routes)
	want := []v1alpha1.Topic{group.Spec.Topics[0], {Name: "d", Brokers: []v1alpha1.Broker{{Name: "x", Queues: 3, Zone: "zx"}, {Name: "r1@y", Queues: 1, Zone: "r1"}, {Name: "z"}}}}
	if len(topo) != 2 || topo[1].Name != "d" || !slices.Equal(topo[1].Brokers, want[1].Brokers) {
		t.Fatalf("topology %+v", topo)
	}
	if !equality.Semantic.DeepEqual(spec, &group.Spec) {
		t.Fatal("topologyOf changed the group's spec")
	}
	if topo.Scope().Len() != 6 {
		t.Fatalf("scope of %d queues, want 6", topo.Scope().Len())
	}
	if got := topo.BrokerZones(); len(got) != 2 || got["x"] != "zx" || got["r1@y"] != "r1" {
		t.Fatalf("broker zones %v", got)
	}
	if plain := fixture.Group(v1alpha1.Strategy{Type: v1alpha1.Averagely}, 2); !slices.EqualFunc(TopologyOf(plain, nil), plain.Spec.Topics, func(a, b v1alpha1.Topic) bool {
		return equality.Semantic.DeepEqual(a, b)
	}) {
		t.Fatal("a group without spec.nameServer is planned with its spec's topics")
	}
}

// A broker that two topics give different zones has one zone, the same wherever it is read: the plan's
// queue list, the preview and the metrics all read Topology.BrokerZones.
func TestBrokerZonesOfABrokerInTwoTopics(t *testing.T) {
	for _, tc := range []struct {
		name   string
		topics Topology
		want   map[string]string
	}{
		{"one topic", Topology{{Name: "a", Brokers: []v1alpha1.Broker{{Name: "x", Queues: 1, Zone: "z1"}, {Name: "y", Queues: 1}}}},
			map[string]string{"x": "z1"}},
		{"two zones, topics in RocketMQ's order", Topology{
			{Name: "a", Brokers: []v1alpha1.Broker{{Name: "x", Queues: 1, Zone: "z-a"}}},
			{Name: "b", Brokers: []v1alpha1.Broker{{Name: "x", Queues: 1, Zone: "z-b"}}},
		}, map[string]string{"x": "z-b"}},
		{"two zones, topics written in the other order", Topology{
			{Name: "b", Brokers: []v1alpha1.Broker{{Name: "x", Queues: 1, Zone: "z-b"}}},
			{Name: "a", Brokers: []v1alpha1.Broker{{Name: "x", Queues: 1, Zone: "z-a"}}},
		}, map[string]string{"x": "z-b"}},
		{"a zone in one topic only", Topology{
			{Name: "b", Brokers: []v1alpha1.Broker{{Name: "x", Queues: 1}}},
			{Name: "a", Brokers: []v1alpha1.Broker{{Name: "x", Queues: 1, Zone: "z-a"}}},
		}, map[string]string{"x": "z-a"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := tc.topics.BrokerZones(); !maps.Equal(got, tc.want) {
				t.Errorf("BrokerZones = %v, want %v", got, tc.want)
			}
		})
	}
}
