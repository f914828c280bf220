package controllers

import (
	"fmt"
	"maps"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	"github.com/consumergroup-operator/consumergroup-operator/api/v1alpha1"
	"github.com/consumergroup-operator/consumergroup-operator/pkg/allocate"
	"github.com/consumergroup-operator/consumergroup-operator/pkg/assignment"
)

func mem(id, zone string, weight int32) allocate.Member {
	return allocate.Member{ID: id, Zone: zone, Weight: weight}
}

func testGroup(strategy v1alpha1.Strategy) *v1alpha1.ConsumerGroup {
	return &v1alpha1.ConsumerGroup{
		ObjectMeta: metav1.ObjectMeta{Name: "g", Namespace: "ns", UID: types.UID("uid-1"), Generation: testGeneration},
		Spec: v1alpha1.ConsumerGroupSpec{
			Topics:   []v1alpha1.Topic{{Name: "t", Brokers: []v1alpha1.Broker{{Name: "b", Queues: 6}}}},
			Strategy: strategy,
		},
	}
}

// applied is what the API server holds after the writes of d: the observation of the next pass.
func applied(group *v1alpha1.ConsumerGroup, before observation, d decision) observation {
	obs := before
	obs.shards = maps.Clone(before.shards)
	if obs.shards == nil {
		obs.shards = map[string]*corev1.ConfigMap{}
	}
	for _, w := range d.writes {
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{
			Name: *w.Name, Namespace: *w.Namespace,
			Labels: w.Labels, Annotations: w.Annotations,
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "v", Kind: "ConsumerGroup", Name: group.Name, UID: group.UID, Controller: ptr.To(true)}},
		}, Data: w.Data}
		if cm.Name == AssignmentName(group.Name) {
			obs.configMap = cm
		} else {
			obs.shards[cm.Name] = cm
		}
	}
	for _, name := range d.deletes {
		delete(obs.shards, name)
	}
	return obs
}

func TestDecide(t *testing.T) {
	now := metav1.NewTime(time.Date(2026, 11, 30, 10, 0, 0, 0, time.UTC))
	group := testGroup(v1alpha1.Strategy{Type: v1alpha1.Averagely})
	pods := []corev1.Pod{pod("p0"), pod("p1")}

	first := decide(group, observation{pods: pods}, now)
	if first.problem != nil || len(first.writes) != 1 || !first.rebalanced {
		t.Fatalf("first pass: problem=%v writes=%d rebalanced=%v", first.problem, len(first.writes), first.rebalanced)
	}
	if first.current.generation != 1 || len(first.writes[0].Data) != 2 || first.queueCount != 6 {
		t.Fatalf("first pass published generation %d with %d keys and %d queues", first.current.generation, len(first.writes[0].Data), first.queueCount)
	}
	published := applied(group, observation{pods: pods}, first).configMap

	t.Run("unchanged world writes nothing", func(t *testing.T) {
		d := decide(group, observation{pods: pods, configMap: published}, metav1.NewTime(now.Add(time.Hour)))
		if len(d.writes) != 0 || d.rebalanced || d.problem != nil || d.current.generation != 1 {
			t.Fatalf("writes=%d rebalanced=%v problem=%v generation=%d", len(d.writes), d.rebalanced, d.problem, d.current.generation)
		}
	})
	t.Run("input order does not matter", func(t *testing.T) {
		d := decide(group, observation{pods: []corev1.Pod{pods[1], pods[0]}, configMap: published}, now)
		if len(d.writes) != 0 {
			t.Fatal("reordered pods changed the plan")
		}
	})
	t.Run("lost label is restored at the same generation", func(t *testing.T) {
		cm := published.DeepCopy()
		delete(cm.Labels, v1alpha1.GroupLabel)
		d := decide(group, observation{pods: pods, configMap: cm}, now)
		if len(d.writes) != 1 || d.rebalanced || d.writes[0].Annotations[v1alpha1.GenerationAnnotation] != "1" {
			t.Fatalf("writes=%d rebalanced=%v", len(d.writes), d.rebalanced)
		}
	})
	t.Run("new member rebalances with a new generation", func(t *testing.T) {
		d := decide(group, observation{pods: append(pods, pod("p2")), configMap: published}, now)
		if len(d.writes) != 1 || !d.rebalanced || d.current.generation != 2 || len(d.writes[0].Data) != 3 {
			t.Fatalf("writes=%d rebalanced=%v generation=%d", len(d.writes), d.rebalanced, d.current.generation)
		}
		// Averagely over 6 queues: p0 0-2 → 0-1, p1 3-5 → 2-3, p2 4-5: queue 2 moves p0→p1, 4 and 5 p1→p2.
		if d.moved != 3 {
			t.Errorf("moved %d queues, want 3", d.moved)
		}
	})
	t.Run("departed member's key goes", func(t *testing.T) {
		d := decide(group, observation{pods: pods[:1], configMap: published}, now)
		if len(d.writes) != 1 || len(d.writes[0].Data) != 1 || d.writes[0].Data["p0"] == "" {
			t.Fatalf("writes %v, want one ConfigMap with p0's entry only", d.writes)
		}
	})
	t.Run("deleted ConfigMap resumes after the status generation", func(t *testing.T) {
		g := group.DeepCopy()
		g.Status.AssignmentGeneration = 7
		d := decide(g, observation{pods: pods}, now)
		if d.current.generation != 8 {
			t.Fatalf("generation %d, want 8", d.current.generation)
		}
	})
	t.Run("problems keep the published assignment", func(t *testing.T) {
		bad := []corev1.Pod{pods[0], pods[1], pod("p2", withAnnotation(v1alpha1.WeightAnnotation, "x"))}
		d := decide(group, observation{pods: bad, configMap: published}, now)
		if d.problem == nil || len(d.writes) != 0 || d.current.generation != 1 || len(d.current.entries) != 2 {
			t.Fatalf("problem=%v writes=%d current generation=%d entries=%d", d.problem, len(d.writes), d.current.generation, len(d.current.entries))
		}
	})
	t.Run("strategy failure keeps the published assignment", func(t *testing.T) {
		// MachineRoomNearby needs every member's zone; these pods have none.
		g := testGroup(v1alpha1.Strategy{Type: v1alpha1.MachineRoomNearby})
		g.Spec.Topics[0].Brokers[0].Zone = "zone-a"
		d := decide(g, observation{pods: pods, configMap: published}, now)
		if d.problem == nil || d.problem.Reason != ReasonAllocationFailed || len(d.writes) != 0 {
			t.Fatalf("problem=%v writes=%d", d.problem, len(d.writes))
		}
	})
}

func TestPlanForRefusesAmbiguousPlans(t *testing.T) {
	members := []member{{Member: mem("a", "", 1), Pod: "a"}, {Member: mem("b", "", 1), Pod: "b"}}
	byConfig := func(assignments ...v1alpha1.MemberAssignment) *v1alpha1.ConsumerGroup {
		return testGroup(v1alpha1.Strategy{Type: v1alpha1.ByConfig, ByConfig: &v1alpha1.ByConfigParameters{Assignments: assignments}})
	}
	q := func(id int32) v1alpha1.QueueReference {
		return v1alpha1.QueueReference{Topic: "t", Broker: "b", QueueID: id}
	}
	cases := []struct {
		name  string
		group *v1alpha1.ConsumerGroup
		ok    bool
	}{
		{"disjoint lists", byConfig(v1alpha1.MemberAssignment{Member: "a", Queues: []v1alpha1.QueueReference{q(0), q(1)}}, v1alpha1.MemberAssignment{Member: "b", Queues: []v1alpha1.QueueReference{q(2)}}), true},
		{"queue for two members", byConfig(v1alpha1.MemberAssignment{Member: "a", Queues: []v1alpha1.QueueReference{q(0)}}, v1alpha1.MemberAssignment{Member: "b", Queues: []v1alpha1.QueueReference{q(0)}}), false},
		{"queue the spec does not list", byConfig(v1alpha1.MemberAssignment{Member: "a", Queues: []v1alpha1.QueueReference{q(9)}}), false},
		{"queue listed twice for one member", byConfig(v1alpha1.MemberAssignment{Member: "a", Queues: []v1alpha1.QueueReference{q(1), q(1)}}), false},
		{"negative virtual nodes", testGroup(v1alpha1.Strategy{Type: v1alpha1.ConsistentHash, ConsistentHash: &v1alpha1.ConsistentHashParameters{VirtualNodes: ptr.To[int32](-1)}}), false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, _, prob := planFor(tc.group, members, nil, nil)
			if (prob == nil) != tc.ok {
				t.Fatalf("problem %v, want ok=%v", prob, tc.ok)
			}
		})
	}
}

func TestStatusFor(t *testing.T) {
	now := metav1.NewTime(time.Date(2026, 11, 30, 10, 0, 0, 0, time.UTC))
	group := testGroup(v1alpha1.Strategy{Type: v1alpha1.Averagely})
	d := decide(group, observation{pods: []corev1.Pod{pod("p0"), pod("p1")}}, now)

	healthy := statusFor(group, d.current, 2, 6, nil, now)
	if healthy.ObservedGeneration != 2 || healthy.AssignmentGeneration != 1 || healthy.MemberCount != 2 || healthy.QueueCount != 6 {
		t.Fatalf("status %+v", healthy)
	}
	if healthy.LastRebalanceTime == nil || !healthy.LastRebalanceTime.Equal(&now) {
		t.Errorf("lastRebalanceTime %v, want %v", healthy.LastRebalanceTime, now)
	}
	assertCondition(t, healthy.Conditions, ConditionReady, metav1.ConditionTrue, ReasonAssigned)
	assertCondition(t, healthy.Conditions, ConditionDegraded, metav1.ConditionFalse, ReasonHealthy)

	// A later healthy pass keeps transition times; a problem flips both conditions and keeps the counts of
	// what stays published.
	group.Status = healthy
	later := metav1.NewTime(now.Add(time.Minute))
	again := statusFor(group, d.current, 2, 6, nil, later)
	if !again.Conditions[0].LastTransitionTime.Equal(&now) {
		t.Errorf("transition time moved without a flip")
	}
	degraded := statusFor(group, d.current, 0, 0, &problem{ReasonInvalidMemberAnnotation, "pod x is wrong"}, later)
	assertCondition(t, degraded.Conditions, ConditionReady, metav1.ConditionFalse, ReasonInvalidMemberAnnotation)
	assertCondition(t, degraded.Conditions, ConditionDegraded, metav1.ConditionTrue, ReasonInvalidMemberAnnotation)
	if degraded.MemberCount != 2 || degraded.QueueCount != 6 {
		t.Errorf("degraded status counts %d members, %d queues; want the published 2 and 6", degraded.MemberCount, degraded.QueueCount)
	}

	empty := statusFor(testGroup(v1alpha1.Strategy{Type: v1alpha1.Averagely}), publishedAssignment{}, 0, 6, nil, now)
	assertCondition(t, empty.Conditions, ConditionReady, metav1.ConditionFalse, ReasonNoMembers)
	if empty.AssignmentConfigMap != "" || empty.LastRebalanceTime != nil {
		t.Errorf("nothing published but status names %q at %v", empty.AssignmentConfigMap, empty.LastRebalanceTime)
	}
}

// testGeneration is the metadata.generation of testGroup's groups.
const testGeneration = 2

func assertCondition(t *testing.T, conditions []metav1.Condition, typ string, status metav1.ConditionStatus, reason string) {
	t.Helper()
	for _, c := range conditions {
		if c.Type != typ {
			continue
		}
		if c.Status != status || c.Reason != reason || c.ObservedGeneration != testGeneration || c.Message == "" {
			t.Errorf("%s = %s/%s observed %d %q; want %s/%s observed %d", typ, c.Status, c.Reason, c.ObservedGeneration, c.Message, status, reason, testGeneration)
		}
		return
	}
	t.Errorf("no %s condition in %v", typ, conditions)
}

func TestMovedQueues(t *testing.T) {
	q := func(i int) allocate.Queue { return allocate.Queue{Topic: "t", Broker: "b", ID: int32(i)} }
	before := allocate.Plan{"a": {q(0), q(1)}, "b": {q(2), q(3)}, "gone": {q(4)}}
	after := allocate.Plan{"a": {q(0), q(4)}, "b": {q(2), q(3), q(1)}, "new": nil}
	// q1 moved a→b; q4's owner left, so it does not count.
	if got := movedQueues(before, after); got != 1 {
		t.Fatalf("moved %d, want 1", got)
	}
}

func TestDecideShardsLargeAssignments(t *testing.T) {
	now := metav1.NewTime(time.Date(2026, 11, 30, 10, 0, 0, 0, time.UTC))
	group := testGroup(v1alpha1.Strategy{Type: v1alpha1.AveragelyByCircle})
	group.Spec.Topics = []v1alpha1.Topic{{Name: "orders"}}
	for b := range 16 {
		group.Spec.Topics[0].Brokers = append(group.Spec.Topics[0].Brokers, v1alpha1.Broker{Name: fmt.Sprintf("broker-%02d", b), Queues: 4096})
	}
	var pods []corev1.Pod
	for i := range 2048 {
		pods = append(pods, pod(fmt.Sprintf("consumer-%04d", i)))
	}
	// By circle, each member's 32 queues are scattered over the brokers: the entries take about 1.5 MB.
	d := decide(group, observation{pods: pods}, now)
	if d.problem != nil || d.current.shards < 2 || len(d.writes) != d.current.shards+1 {
		t.Fatalf("problem %v, %d shards, %d writes", d.problem, d.current.shards, len(d.writes))
	}
	main := d.writes[len(d.writes)-1]
	if *main.Name != AssignmentName("g") || len(main.Data) != 0 || main.Annotations[assignment.ShardsAnnotation] != fmt.Sprint(d.current.shards) {
		t.Fatalf("the assignment ConfigMap, written last, must name the shard count and hold no entries: %s %v", *main.Name, main.Annotations)
	}
	for _, w := range d.writes[:len(d.writes)-1] {
		size := 0
		for k, v := range w.Data {
			size += len(k) + len(v)
			if assignment.ShardName("g", assignment.ShardOf(k, d.current.shards)) != *w.Name {
				t.Fatalf("entry %s is in %s, not where readers look", k, *w.Name)
			}
		}
		if size > maxAssignmentBytes {
			t.Fatalf("shard %s holds %d bytes", *w.Name, size)
		}
	}
	obs := applied(group, observation{pods: pods}, d)
	back := readAssignment(obs.configMap, obs.shards)
	if len(back.entries) != 2048 || back.generation != 1 {
		t.Fatalf("read back %d entries at generation %d", len(back.entries), back.generation)
	}
	if again := decide(group, obs, now); len(again.writes) != 0 || len(again.deletes) != 0 {
		t.Fatalf("an unchanged sharded assignment was rewritten: %d writes, %d deletes", len(again.writes), len(again.deletes))
	}

	// Down to 64 members the entries fit one ConfigMap again, and the shards go.
	obs.pods = pods[:64]
	small := decide(group, obs, now)
	if small.current.shards != 1 || len(small.writes) != 1 || len(small.deletes) != d.current.shards {
		t.Fatalf("after scale-in: %d shards, %d writes, %d deletes", small.current.shards, len(small.writes), len(small.deletes))
	}
	if small.writes[0].Annotations[assignment.ShardsAnnotation] != "" || len(small.writes[0].Data) != 64 {
		t.Fatalf("unsharded ConfigMap: annotations %v, %d entries", small.writes[0].Annotations, len(small.writes[0].Data))
	}
}

func TestStatusForCapsMemberLines(t *testing.T) {
	current := publishedAssignment{generation: 3, entries: map[string]assignment.Entry{}}
	for i := range maxStatusMembers + 10 {
		pod := fmt.Sprintf("p-%05d", i)
		current.entries[pod] = assignment.NewEntry(pod, 3, nil)
	}
	s := statusFor(testGroup(v1alpha1.Strategy{Type: v1alpha1.Averagely}), current, maxStatusMembers+10, 0, nil, metav1.Now())
	if len(s.Members) != maxStatusMembers || int(s.MemberCount) != maxStatusMembers+10 || s.Members[0].ID != "p-00000" {
		t.Fatalf("%d member lines, memberCount %d, first %q", len(s.Members), s.MemberCount, s.Members[0].ID)
	}
}

func TestQueuesForListsQueuesInRocketMQOrder(t *testing.T) {
	spec := &v1alpha1.ConsumerGroupSpec{Topics: []v1alpha1.Topic{
		{Name: "payments", Brokers: []v1alpha1.Broker{{Name: "b", Queues: 2, Zone: "z2"}, {Name: "a", Queues: 1}}},
		{Name: "Orders", Brokers: []v1alpha1.Broker{{Name: "a", Queues: 1, Zone: "z1"}}},
	}}
	queues, zones := queuesFor(spec)
	want := "[Orders/a/0 payments/a/0 payments/b/0 payments/b/1]"
	if fmt.Sprint(queues) != want {
		t.Fatalf("queues %v, want %s", queues, want)
	}
	if !slices.IsSortedFunc(queues, allocate.CompareQueues) || zones["b"] != "z2" || zones["a"] != "z1" {
		t.Fatalf("not sorted, or zones %v", zones)
	}
	if spec.Topics[0].Name != "payments" || spec.Topics[0].Brokers[0].Name != "b" {
		t.Fatal("queuesFor reordered the spec")
	}
}

func TestDecideBroadcastingGivesNewMembersEveryQueueAtOnce(t *testing.T) {
	now := metav1.NewTime(time.Date(2026, 11, 30, 10, 0, 0, 0, time.UTC))
	group := testGroup(v1alpha1.Strategy{Type: v1alpha1.Averagely})
	group.Spec.MessageModel = v1alpha1.Broadcasting
	group.Spec.Handoff.Mode = v1alpha1.Cooperative
	pods := []corev1.Pod{pod("p0")}
	first := decide(group, observation{pods: pods, podUIDs: map[string]types.UID{"p0": "u0"}}, now)
	obs := applied(group, observation{pods: append(pods, pod("p1")), podUIDs: map[string]types.UID{"p0": "u0", "p1": "u1"}}, first)
	second := decide(group, obs, now)
	if len(second.current.entries) != 2 || second.withheld != 0 {
		t.Fatalf("entries %d, withheld %d", len(second.current.entries), second.withheld)
	}
	for pod, e := range second.current.entries {
		if n, _ := e.Count(); n != 6 {
			t.Errorf("%s reads %d queues, want all 6", pod, n)
		}
	}
}

func TestByConfigRefusesUnknownAndDuplicateQueuesNamingTheField(t *testing.T) {
	members := []member{{Member: mem("a", "", 1), Pod: "a"}}
	q := func(id int32) v1alpha1.QueueReference {
		return v1alpha1.QueueReference{Topic: "t", Broker: "b", QueueID: id}
	}
	for _, tc := range []struct {
		assignments []v1alpha1.MemberAssignment
		want        string
	}{
		// "gone" is no member now: its configuration is checked all the same.
		{[]v1alpha1.MemberAssignment{{Member: "a", Queues: []v1alpha1.QueueReference{q(0)}}, {Member: "gone", Queues: []v1alpha1.QueueReference{q(1), q(9)}}},
			`spec.strategy.byConfig.assignments["gone"][1]: queue t/b/9 does not exist`},
		{[]v1alpha1.MemberAssignment{{Member: "a", Queues: []v1alpha1.QueueReference{q(0)}}, {Member: "gone", Queues: []v1alpha1.QueueReference{q(0)}}},
			`spec.strategy.byConfig.assignments["gone"][0]: queue t/b/0 is already assigned at assignments["a"][0]`},
	} {
		g := testGroup(v1alpha1.Strategy{Type: v1alpha1.ByConfig, ByConfig: &v1alpha1.ByConfigParameters{Assignments: tc.assignments}})
		_, _, prob := planFor(g, members, nil, nil)
		if prob == nil || prob.Reason != ReasonInvalidStrategyParameters || prob.Message != tc.want {
			t.Errorf("problem %v, want %s: %s", prob, ReasonInvalidStrategyParameters, tc.want)
		}
	}
}

func TestStatusGenerationNeverGoesBack(t *testing.T) {
	g := testGroup(v1alpha1.Strategy{Type: v1alpha1.Averagely})
	g.Status.AssignmentGeneration = 7
	// The ConfigMap was deleted and the group cannot be planned: nothing is published now.
	s := statusFor(g, publishedAssignment{}, 0, 0, &problem{ReasonInvalidMemberAnnotation, "x"}, metav1.Now())
	if s.AssignmentGeneration != 7 {
		t.Fatalf("assignmentGeneration went back to %d", s.AssignmentGeneration)
	}
}
