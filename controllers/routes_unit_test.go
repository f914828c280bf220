package controllers

import (
	"slices"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/event"

	"github.com/consumergroup-operator/consumergroup-operator/api/v1alpha1"
	"github.com/consumergroup-operator/consumergroup-operator/internal/fixture"
	"github.com/consumergroup-operator/consumergroup-operator/internal/plan"
	"github.com/consumergroup-operator/consumergroup-operator/pkg/nameserver"
)

func TestMergeRoutes(t *testing.T) {
	t0 := time.Unix(1e9, 0)
	group := fixture.Group(v1alpha1.Strategy{Type: v1alpha1.Averagely}, 1)
	group.Spec.Topics = []v1alpha1.Topic{{Name: "t"}, {Name: "s", Brokers: []v1alpha1.Broker{{Name: "b", Queues: 2}}}}
	group.Spec.NameServer = &v1alpha1.NameServer{Addresses: []string{"n:1"}, RefreshIntervalSeconds: ptr.To[int32](10), GroupName: "G"}
	if got := plan.DiscoveredTopics(group); !slices.Equal(got, []string{"t", "%RETRY%G"}) {
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

// A group's pass runs when the route discovery records other routes, and not for other status writes,
// its own included.
func TestRoutesChanged(t *testing.T) {
	routes := func(queues int32) *v1alpha1.RoutesStatus {
		return &v1alpha1.RoutesStatus{Topics: []v1alpha1.TopicRoute{{Name: "t", Brokers: []v1alpha1.BrokerRoute{{Name: "b", Queues: queues}}}}}
	}
	withStatus := func(s v1alpha1.ConsumerGroupStatus) *v1alpha1.ConsumerGroup {
		return &v1alpha1.ConsumerGroup{Status: s}
	}
	for _, tc := range []struct {
		name          string
		before, after v1alpha1.ConsumerGroupStatus
		want          bool
	}{
		{"first routes recorded", v1alpha1.ConsumerGroupStatus{}, v1alpha1.ConsumerGroupStatus{Routes: routes(4)}, true},
		{"a broker's queues changed", v1alpha1.ConsumerGroupStatus{Routes: routes(4)}, v1alpha1.ConsumerGroupStatus{Routes: routes(8)}, true},
		{"routes dropped", v1alpha1.ConsumerGroupStatus{Routes: routes(4)}, v1alpha1.ConsumerGroupStatus{}, true},
		{"the pass's own status write", v1alpha1.ConsumerGroupStatus{Routes: routes(4)}, v1alpha1.ConsumerGroupStatus{Routes: routes(4), AssignmentGeneration: 2}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := event.UpdateEvent{ObjectOld: withStatus(tc.before), ObjectNew: withStatus(tc.after)}
			if got := routesChanged().Update(e); got != tc.want {
				t.Errorf("routesChanged = %v, want %v", got, tc.want)
			}
		})
	}
}
