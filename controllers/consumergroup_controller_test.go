//go:build envtest

package controllers

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/consumergroup-operator/consumergroup-operator/api/v1alpha1"
	"github.com/consumergroup-operator/consumergroup-operator/internal/plan"
	"github.com/consumergroup-operator/consumergroup-operator/internal/testenv"
	"github.com/consumergroup-operator/consumergroup-operator/pkg/allocate"
	"github.com/consumergroup-operator/consumergroup-operator/pkg/protocol"
)

const waitFor = 20 * time.Second

// published is a group's assignment as read back: pod name → entry and queues.
type published = protocol.Published

func readPublished(cm *corev1.ConfigMap) (published, error) {
	p := protocol.ReadPublished(cm.Labels[protocol.GroupLabel], cm, nil)
	if len(p.Tampered) > 0 {
		return p, fmt.Errorf("the assignment does not read back: %v", p.Tampered)
	}
	return p, nil
}

// waitForAssignment waits until the group's ConfigMap lists exactly pods and check accepts it.
func waitForAssignment(t *testing.T, ns, group string, pods []string, check func(published) error) published {
	t.Helper()
	var last published
	eventually(t, waitFor, func() error {
		cm := getAssignment(t, ns, group)
		if cm == nil {
			return fmt.Errorf("no assignment ConfigMap yet")
		}
		var err error
		if last, err = readPublished(cm); err != nil {
			return err
		}
		got := slices.Sorted(maps.Keys(last.Entries))
		want := slices.Sorted(slices.Values(pods))
		if !slices.Equal(got, want) {
			return fmt.Errorf("assignment lists pods %v, want %v", got, want)
		}
		if check != nil {
			return check(last)
		}
		return nil
	})
	return last
}

// partitionOf checks that every one of want queues has exactly one owner in p.
func partitionOf(want int) func(published) error {
	return func(p published) error {
		seen := map[allocate.Queue]string{}
		for pod, e := range p.Entries {
			for _, q := range e.Queues {
				if other, dup := seen[q]; dup {
					return fmt.Errorf("queue %s is listed for %s and %s", q, other, pod)
				}
				seen[q] = pod
			}
		}
		if len(seen) != want {
			return fmt.Errorf("%d queues assigned, want %d", len(seen), want)
		}
		return nil
	}
}

func waitForCondition(t *testing.T, ns, group, condType string, status metav1.ConditionStatus, reason string) *v1alpha1.ConsumerGroup {
	t.Helper()
	var g *v1alpha1.ConsumerGroup
	eventually(t, waitFor, func() error {
		g = getGroup(t, ns, group)
		c := meta.FindStatusCondition(g.Status.Conditions, condType)
		if c == nil {
			return fmt.Errorf("no %s condition yet", condType)
		}
		if c.Status != status || c.Reason != reason || c.ObservedGeneration != g.Generation {
			return fmt.Errorf("%s is %s/%s (observed generation %d of %d), want %s/%s", condType, c.Status, c.Reason, c.ObservedGeneration, g.Generation, status, reason)
		}
		return nil
	})
	return g
}

func TestAssignmentForReadyPods(t *testing.T) {
	ns := newNamespace(t)
	startManager(t, ns)
	testenv.Group(ns, "orders").Topic("orders", testenv.Broker("broker-a", 8, ""), testenv.Broker("broker-b", 8, "")).Create(t, k8s)
	for i := range 3 {
		testenv.Pod(ns, fmt.Sprintf("orders-%d", i), "orders").Create(t, k8s)
	}
	testenv.Pod(ns, "orders-unready", "orders").NotReady().Create(t, k8s)
	testenv.Pod(ns, "other-app", "other").Create(t, k8s)

	p := waitForAssignment(t, ns, "orders", []string{"orders-0", "orders-1", "orders-2"}, partitionOf(16))
	for pod, e := range p.Entries {
		if e.Member != pod {
			t.Errorf("entry of %s names member %q, want the pod name", pod, e.Member)
		}
		if n := len(p.Entries[pod].Queues); n < 5 || n > 6 {
			t.Errorf("%s holds %d queues, want 5 or 6 (16 over 3)", pod, n)
		}
	}
	waitForCondition(t, ns, "orders", v1alpha1.ConditionReady, metav1.ConditionTrue, v1alpha1.ReasonAssigned)
	var g *v1alpha1.ConsumerGroup
	eventually(t, waitFor, func() error {
		if g = getGroup(t, ns, "orders"); g.Status.AssignmentGeneration != p.Generation {
			return fmt.Errorf("status shows generation %d, the ConfigMap %d", g.Status.AssignmentGeneration, p.Generation)
		}
		return nil
	})
	if g.Status.MemberCount != 3 || g.Status.QueueCount != 16 || g.Status.AssignmentGeneration != p.Generation {
		t.Errorf("status counts members=%d queues=%d generation=%d, want 3, 16, %d", g.Status.MemberCount, g.Status.QueueCount, g.Status.AssignmentGeneration, p.Generation)
	}
	if len(g.Status.Members) != 3 || g.Status.LastRebalanceTime == nil || g.Status.AssignmentConfigMap != "orders-assignment" {
		t.Errorf("status members=%v lastRebalanceTime=%v configMap=%q", g.Status.Members, g.Status.LastRebalanceTime, g.Status.AssignmentConfigMap)
	}
	cm := getAssignment(t, ns, "orders")
	if owner := metav1.GetControllerOf(cm); owner == nil || owner.UID != g.UID {
		t.Errorf("ConfigMap's controller is %v, want the group", owner)
	}
	if cm.Labels[protocol.GroupLabel] != "orders" {
		t.Errorf("ConfigMap labels %v lack the group label", cm.Labels)
	}
	waitForEvent(t, ns, "orders", EventRebalanced)
}

func TestScalingRebalances(t *testing.T) {
	ns := newNamespace(t)
	startManager(t, ns)
	testenv.Group(ns, "g").Topic("t", testenv.Broker("b", 12, "")).Create(t, k8s)
	pods := []*corev1.Pod{testenv.Pod(ns, "g-0", "g").Create(t, k8s), testenv.Pod(ns, "g-1", "g").Create(t, k8s)}
	first := waitForAssignment(t, ns, "g", []string{"g-0", "g-1"}, partitionOf(12))

	t.Run("scale up", func(t *testing.T) {
		pods = append(pods, testenv.Pod(ns, "g-2", "g").Create(t, k8s))
		p := waitForAssignment(t, ns, "g", []string{"g-0", "g-1", "g-2"}, partitionOf(12))
		if p.Generation != first.Generation+1 {
			t.Errorf("generation %d after scale-up, want %d", p.Generation, first.Generation+1)
		}
		for pod, e := range p.Entries {
			qs := e.Queues
			if len(qs) != 4 {
				t.Errorf("%s holds %d queues, want 4", pod, len(qs))
			}
		}
	})
	t.Run("pod goes NotReady", func(t *testing.T) {
		testenv.SetReady(t, k8s, pods[1], false)
		waitForAssignment(t, ns, "g", []string{"g-0", "g-2"}, partitionOf(12))
	})
	t.Run("pod deleted", func(t *testing.T) {
		must(t, k8s.Delete(context.Background(), pods[2]))
		waitForAssignment(t, ns, "g", []string{"g-0"}, partitionOf(12))
	})
	t.Run("pod labels no longer match", func(t *testing.T) {
		testenv.SetReady(t, k8s, pods[1], true)
		waitForAssignment(t, ns, "g", []string{"g-0", "g-1"}, partitionOf(12))
		p := pods[0].DeepCopy()
		must(t, k8s.Get(context.Background(), client.ObjectKeyFromObject(p), p))
		p.Labels["app"] = "elsewhere"
		must(t, k8s.Update(context.Background(), p))
		waitForAssignment(t, ns, "g", []string{"g-1"}, partitionOf(12))
	})
	t.Run("last member leaves", func(t *testing.T) {
		testenv.SetReady(t, k8s, pods[1], false)
		waitForAssignment(t, ns, "g", nil, nil)
		waitForCondition(t, ns, "g", v1alpha1.ConditionReady, metav1.ConditionFalse, v1alpha1.ReasonNoMembers)
	})
}

func TestBroadcasting(t *testing.T) {
	ns := newNamespace(t)
	startManager(t, ns)
	testenv.Group(ns, "b").Topic("t", testenv.Broker("x", 3, ""), testenv.Broker("y", 2, "")).Broadcasting().Create(t, k8s)
	testenv.Pod(ns, "b-0", "b").Create(t, k8s)
	testenv.Pod(ns, "b-1", "b").Create(t, k8s)
	waitForAssignment(t, ns, "b", []string{"b-0", "b-1"}, func(p published) error {
		for pod, e := range p.Entries {
			qs := e.Queues
			if len(qs) != 5 {
				return fmt.Errorf("%s holds %d queues, want all 5", pod, len(qs))
			}
		}
		return nil
	})
}

// TestEachStrategyEndToEnd runs every strategy the API offers once through the operator.
func TestEachStrategyEndToEnd(t *testing.T) {
	ns := newNamespace(t)
	startManager(t, ns)
	createNode(t, ns+"-node-a", "zone-a")
	createNode(t, ns+"-node-b", "zone-b")
	cases := []struct {
		strategy v1alpha1.Strategy
		// queues is how many of the 12 queues the plan covers.
		queues int
	}{
		{v1alpha1.Strategy{Type: v1alpha1.Averagely}, 12},
		{v1alpha1.Strategy{Type: v1alpha1.AveragelyByCircle}, 12},
		{v1alpha1.Strategy{Type: v1alpha1.ConsistentHash, ConsistentHash: &v1alpha1.ConsistentHashParameters{VirtualNodes: ptr.To[int32](50)}}, 12},
		{v1alpha1.Strategy{Type: v1alpha1.MachineRoomNearby, MachineRoomNearby: &v1alpha1.MachineRoomNearbyParameters{Inner: "AveragelyByCircle"}}, 12},
		// Only brokers named "<room>@<broker>" in a listed room count: 6 of the 12 queues.
		{v1alpha1.Strategy{Type: v1alpha1.ByMachineRoom, ByMachineRoom: &v1alpha1.ByMachineRoomParameters{MachineRooms: []string{"dc1"}}}, 6},
		{v1alpha1.Strategy{Type: v1alpha1.ByConfig, ByConfig: &v1alpha1.ByConfigParameters{Assignments: []v1alpha1.MemberAssignment{
			{Member: "s-byconfig-0", Queues: []v1alpha1.QueueReference{{Topic: "t", Broker: "dc1@a", QueueID: 0}, {Topic: "t", Broker: "dc2@b", QueueID: 5}}},
			{Member: "s-byconfig-1", Queues: []v1alpha1.QueueReference{{Topic: "t", Broker: "dc1@a", QueueID: 1}}},
		}}}, 3},
		{v1alpha1.Strategy{Type: v1alpha1.Sticky}, 12},
	}
	for _, tc := range cases {
		t.Run(string(tc.strategy.Type), func(t *testing.T) {
			name := "s-" + strings.ToLower(string(tc.strategy.Type))
			testenv.Group(ns, name).Topic("t", testenv.Broker("dc1@a", 6, "zone-a"), testenv.Broker("dc2@b", 6, "zone-b")).Strategy(tc.strategy).Create(t, k8s)
			testenv.Pod(ns, name+"-0", name).OnNode(ns+"-node-a").Create(t, k8s)
			testenv.Pod(ns, name+"-1", name).OnNode(ns+"-node-b").Create(t, k8s)
			p := waitForAssignment(t, ns, name, []string{name + "-0", name + "-1"}, partitionOf(tc.queues))
			if tc.strategy.Type == v1alpha1.MachineRoomNearby {
				// Each member reads only its own zone's broker.
				for pod, e := range p.Entries {
					qs := e.Queues
					want := map[string]string{name + "-0": "dc1@a", name + "-1": "dc2@b"}[pod]
					for _, q := range qs {
						if q.Broker != want {
							t.Errorf("%s holds %s, outside its zone", pod, q)
						}
					}
				}
			}
			waitForCondition(t, ns, name, v1alpha1.ConditionReady, metav1.ConditionTrue, v1alpha1.ReasonAssigned)
		})
	}
}

func TestZoneFromNodeLabel(t *testing.T) {
	ns := newNamespace(t)
	startManager(t, ns)
	nodeA := createNode(t, ns+"-a", "zone-a")
	createNode(t, ns+"-b", "zone-b")
	testenv.Group(ns, "z").Topic("t", testenv.Broker("broker-a", 4, "zone-a"), testenv.Broker("broker-b", 4, "zone-b")).
		Strategy(v1alpha1.Strategy{Type: v1alpha1.MachineRoomNearby}).Create(t, k8s)
	testenv.Pod(ns, "z-0", "z").OnNode(nodeA.Name).Create(t, k8s)
	testenv.Pod(ns, "z-1", "z").OnNode(ns+"-b").Create(t, k8s)
	// The annotation overrides the node's zone.
	testenv.Pod(ns, "z-2", "z").OnNode(nodeA.Name).Annotate(v1alpha1.ZoneAnnotation, "zone-b").Create(t, k8s)

	brokersOf := func(p published, pod string) []string {
		var out []string
		for _, q := range p.Entries[pod].Queues {
			if !slices.Contains(out, q.Broker) {
				out = append(out, q.Broker)
			}
		}
		return out
	}
	waitForAssignment(t, ns, "z", []string{"z-0", "z-1", "z-2"}, func(p published) error {
		if err := partitionOf(8)(p); err != nil {
			return err
		}
		if got := brokersOf(p, "z-0"); !slices.Equal(got, []string{"broker-a"}) || len(p.Entries["z-0"].Queues) != 4 {
			return fmt.Errorf("z-0 (zone-a) holds %v", p.Entries["z-0"].Queues)
		}
		if got := brokersOf(p, "z-2"); !slices.Equal(got, []string{"broker-b"}) {
			return fmt.Errorf("z-2 (zone-b by annotation) holds %v", p.Entries["z-2"].Queues)
		}
		return nil
	})

	// Moving node A to zone-b leaves zone-a without members: its queues go to everyone.
	nodeA.Labels[plan.ZoneLabel] = "zone-b"
	must(t, k8s.Update(context.Background(), nodeA))
	waitForAssignment(t, ns, "z", []string{"z-0", "z-1", "z-2"}, func(p published) error {
		if got := brokersOf(p, "z-0"); !slices.Contains(got, "broker-b") {
			return fmt.Errorf("z-0 (now zone-b) holds %v", p.Entries["z-0"].Queues)
		}
		return partitionOf(8)(p)
	})
}

func TestAnnotationIdentity(t *testing.T) {
	ns := newNamespace(t)
	startManager(t, ns)
	const key = "rocketmq.apache.org/client-id"
	testenv.Group(ns, "a").Topic("t", testenv.Broker("b", 4, "")).IdentityAnnotation(key).Create(t, k8s)
	testenv.Pod(ns, "a-0", "a").Annotate(key, "10.0.0.1@1").Create(t, k8s)
	testenv.Pod(ns, "a-1", "a").Annotate(key, "10.0.0.2@1").Create(t, k8s)
	waitForAssignment(t, ns, "a", []string{"a-0", "a-1"}, func(p published) error {
		if p.Entries["a-0"].Member != "10.0.0.1@1" || p.Entries["a-1"].Member != "10.0.0.2@1" {
			return fmt.Errorf("members %q, %q", p.Entries["a-0"].Member, p.Entries["a-1"].Member)
		}
		return partitionOf(4)(p)
	})

	// A second pod claiming the same id is refused; the published plan stays.
	before := getAssignment(t, ns, "a")
	testenv.Pod(ns, "a-2", "a").Annotate(key, "10.0.0.1@1").Create(t, k8s)
	waitForCondition(t, ns, "a", v1alpha1.ConditionDegraded, metav1.ConditionTrue, v1alpha1.ReasonDuplicateMemberID)
	if after := getAssignment(t, ns, "a"); after.ResourceVersion != before.ResourceVersion {
		t.Errorf("the ConfigMap was rewritten while the membership was invalid")
	}
}

func TestInvalidAnnotationKeepsLastPlan(t *testing.T) {
	ns := newNamespace(t)
	startManager(t, ns)
	testenv.Group(ns, "w").Topic("t", testenv.Broker("b", 6, "")).Create(t, k8s)
	testenv.Pod(ns, "w-0", "w").Create(t, k8s)
	testenv.Pod(ns, "w-1", "w").Create(t, k8s)
	waitForAssignment(t, ns, "w", []string{"w-0", "w-1"}, partitionOf(6))
	waitForCondition(t, ns, "w", v1alpha1.ConditionReady, metav1.ConditionTrue, v1alpha1.ReasonAssigned)
	before := getAssignment(t, ns, "w")

	bad := testenv.Pod(ns, "w-2", "w").Annotate(v1alpha1.WeightAnnotation, "heavy").Create(t, k8s)
	g := waitForCondition(t, ns, "w", v1alpha1.ConditionDegraded, metav1.ConditionTrue, v1alpha1.ReasonInvalidMemberAnnotation)
	if c := meta.FindStatusCondition(g.Status.Conditions, v1alpha1.ConditionReady); c.Status != metav1.ConditionFalse || !strings.Contains(c.Message, "w-2") {
		t.Errorf("Ready is %s: %q; want False naming the pod", c.Status, c.Message)
	}
	if g.Status.MemberCount != 2 {
		t.Errorf("status shows %d members, want the 2 of the plan still published", g.Status.MemberCount)
	}
	if after := getAssignment(t, ns, "w"); after.ResourceVersion != before.ResourceVersion {
		t.Errorf("the ConfigMap was rewritten while a pod's annotation was invalid")
	}
	waitForEvent(t, ns, "w", v1alpha1.ReasonInvalidMemberAnnotation)

	// Fixing the annotation brings the pod in.
	must(t, k8s.Get(context.Background(), client.ObjectKeyFromObject(bad), bad))
	bad.Annotations[v1alpha1.WeightAnnotation] = "2"
	must(t, k8s.Update(context.Background(), bad))
	waitForAssignment(t, ns, "w", []string{"w-0", "w-1", "w-2"}, partitionOf(6))
	waitForCondition(t, ns, "w", v1alpha1.ConditionDegraded, metav1.ConditionFalse, v1alpha1.ReasonHealthy)
}

func TestConfigMapRestored(t *testing.T) {
	ns := newNamespace(t)
	startManager(t, ns)
	testenv.Group(ns, "r").Topic("t", testenv.Broker("b", 4, "")).Create(t, k8s)
	testenv.Pod(ns, "r-0", "r").Create(t, k8s)
	testenv.Pod(ns, "r-1", "r").Create(t, k8s)
	first := waitForAssignment(t, ns, "r", []string{"r-0", "r-1"}, partitionOf(4))

	t.Run("deleted", func(t *testing.T) {
		must(t, k8s.Delete(context.Background(), getAssignment(t, ns, "r")))
		p := waitForAssignment(t, ns, "r", []string{"r-0", "r-1"}, partitionOf(4))
		if p.Generation <= first.Generation {
			t.Errorf("restored at generation %d, want more than %d so pods never see it go back", p.Generation, first.Generation)
		}
	})
	t.Run("entry edited", func(t *testing.T) {
		editAssignment(t, ns, "r", func(cm *corev1.ConfigMap) { cm.Data["r-0"] = cm.Data["r-1"] })
		waitForAssignment(t, ns, "r", []string{"r-0", "r-1"}, partitionOf(4))
	})
	t.Run("key added", func(t *testing.T) {
		editAssignment(t, ns, "r", func(cm *corev1.ConfigMap) { cm.Data["intruder"] = cm.Data["r-1"] })
		waitForAssignment(t, ns, "r", []string{"r-0", "r-1"}, partitionOf(4))
	})
	t.Run("each edit is reported and restored once", func(t *testing.T) {
		if n := len(eventMessages(t, ns, "r", v1alpha1.ReasonAssignmentEdited)); n == 0 {
			t.Fatal("no AssignmentEdited event")
		}
		before := getAssignment(t, ns, "r").ResourceVersion
		time.Sleep(time.Second)
		if after := getAssignment(t, ns, "r").ResourceVersion; after != before {
			t.Fatalf("the restored ConfigMap was written again (resourceVersion %s → %s)", before, after)
		}
	})
}

// editAssignment changes a group's assignment ConfigMap as a person with kubectl edit would, again if the
// operator wrote it in between.
func editAssignment(t *testing.T, ns, group string, change func(*corev1.ConfigMap)) {
	t.Helper()
	must(t, retry.RetryOnConflict(retry.DefaultRetry, func() error {
		cm := getAssignment(t, ns, group)
		change(cm)
		return k8s.Update(context.Background(), cm)
	}))
}

// TestNothingWrittenWhenNothingChanged checks steady state and a restart of the operator: passes that
// find the world as published write neither the ConfigMap nor the status.
func TestNothingWrittenWhenNothingChanged(t *testing.T) {
	ns := newNamespace(t)
	stop := startManager(t, ns)
	testenv.Group(ns, "s").Topic("t", testenv.Broker("b", 8, "")).Strategy(v1alpha1.Strategy{Type: v1alpha1.Sticky}).Create(t, k8s)
	pods := []*corev1.Pod{testenv.Pod(ns, "s-0", "s").Create(t, k8s), testenv.Pod(ns, "s-1", "s").Create(t, k8s)}
	waitForAssignment(t, ns, "s", []string{"s-0", "s-1"}, partitionOf(8))
	waitForCondition(t, ns, "s", v1alpha1.ConditionReady, metav1.ConditionTrue, v1alpha1.ReasonAssigned)

	versions := func() (string, string) {
		return getAssignment(t, ns, "s").ResourceVersion, getGroup(t, ns, "s").ResourceVersion
	}
	// Let the passes triggered by the status write settle before recording versions.
	time.Sleep(500 * time.Millisecond)
	cmVersion, groupVersion := versions()

	t.Run("steady state", func(t *testing.T) {
		passes := reconcileCount(t)
		// A pod change that does not affect membership triggers a pass.
		p := pods[0].DeepCopy()
		must(t, k8s.Get(context.Background(), client.ObjectKeyFromObject(p), p))
		p.Labels["unrelated"] = "yes"
		must(t, k8s.Update(context.Background(), p))
		waitForPassAfter(t, passes)
		if cm, g := versions(); cm != cmVersion || g != groupVersion {
			t.Errorf("a pass that changed nothing wrote: ConfigMap %s→%s, group %s→%s", cmVersion, cm, groupVersion, g)
		}
	})
	t.Run("fresh manager", func(t *testing.T) {
		stop()
		passes := reconcileCount(t)
		startManager(t, ns)
		waitForPassAfter(t, passes)
		if cm, g := versions(); cm != cmVersion || g != groupVersion {
			t.Errorf("a restarted operator wrote: ConfigMap %s→%s, group %s→%s", cmVersion, cm, groupVersion, g)
		}
	})
}

// waitForPassAfter waits until the controller has made a pass since its count was passes.
func waitForPassAfter(t *testing.T, passes float64) {
	t.Helper()
	eventually(t, waitFor, func() error {
		if reconcileCount(t) <= passes {
			return fmt.Errorf("no reconcile pass since %v", passes)
		}
		return nil
	})
}

func waitForEvent(t *testing.T, ns, group, reason string) {
	t.Helper()
	eventually(t, waitFor, func() error {
		var list eventsv1.EventList
		if err := k8s.List(context.Background(), &list, client.InNamespace(ns)); err != nil {
			return err
		}
		for _, e := range list.Items {
			if e.Regarding.Name == group && e.Reason == reason {
				return nil
			}
		}
		return fmt.Errorf("no %s event for %s among %d events", reason, group, len(list.Items))
	})
}

// TestSpecChangesReplan edits a group's spec: more queues, then another strategy. Each edit is planned
// and published, and the conditions report the new spec generation.
func TestSpecChangesReplan(t *testing.T) {
	ns := newNamespace(t)
	startManager(t, ns)
	testenv.Group(ns, "s").Topic("t", testenv.Broker("b", 4, "")).Strategy(v1alpha1.Strategy{Type: v1alpha1.Sticky}).Create(t, k8s)
	testenv.Pod(ns, "s-0", "s").Create(t, k8s)
	testenv.Pod(ns, "s-1", "s").Create(t, k8s)
	waitForAssignment(t, ns, "s", []string{"s-0", "s-1"}, partitionOf(4))

	// The operator writes the status meanwhile: an edit that loses the race is read and made again.
	edit := func(change func(*v1alpha1.ConsumerGroup)) {
		t.Helper()
		must(t, retry.RetryOnConflict(retry.DefaultRetry, func() error {
			g := getGroup(t, ns, "s")
			change(g)
			return k8s.Update(context.Background(), g)
		}))
	}
	edit(func(g *v1alpha1.ConsumerGroup) {
		g.Spec.Topics[0].Brokers[0].Queues = 6
		g.Spec.Topics = append(g.Spec.Topics, v1alpha1.Topic{Name: "u", Brokers: []v1alpha1.Broker{testenv.Broker("b", 2, "")}})
	})
	waitForAssignment(t, ns, "s", []string{"s-0", "s-1"}, partitionOf(8))
	g := waitForCondition(t, ns, "s", v1alpha1.ConditionReady, metav1.ConditionTrue, v1alpha1.ReasonAssigned)
	if g.Status.QueueCount != 8 {
		t.Errorf("status counts %d queues, want 8", g.Status.QueueCount)
	}

	edit(func(g *v1alpha1.ConsumerGroup) { g.Spec.Strategy = v1alpha1.Strategy{Type: v1alpha1.AveragelyByCircle} })
	waitForAssignment(t, ns, "s", []string{"s-0", "s-1"}, func(p published) error {
		// By circle over the sorted queues t/b/0-5, u/b/0-1: the first member takes every other queue.
		want := "[t/b/0 t/b/2 t/b/4 u/b/0]"
		if got := fmt.Sprint(p.Entries["s-0"].Queues); got != want {
			return fmt.Errorf("s-0 holds %s, want %s", got, want)
		}
		return partitionOf(8)(p)
	})
	waitForCondition(t, ns, "s", v1alpha1.ConditionReady, metav1.ConditionTrue, v1alpha1.ReasonAssigned)
}
