package plan

import (
	"fmt"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/consumergroup-operator/consumergroup-operator/api/v1alpha1"
	"github.com/consumergroup-operator/consumergroup-operator/internal/fixture"
	"github.com/consumergroup-operator/consumergroup-operator/pkg/allocate"
	"github.com/consumergroup-operator/consumergroup-operator/pkg/protocol"
)

var averagely = v1alpha1.Strategy{Type: v1alpha1.Averagely}

// entryOf is what d publishes for pod.
func entryOf(d *Decision, pod string) []allocate.Queue { return d.Report.Entries[pod].Queues }

// assertPartition fails unless no queue is published for two pods.
func assertPartition(t *testing.T, d *Decision) {
	t.Helper()
	owner := map[allocate.Queue]string{}
	for pod, e := range d.Report.Entries {
		for _, q := range e.Queues {
			if other, ok := owner[q]; ok {
				t.Fatalf("%s is published for %s and %s", q, other, pod)
			}
			owner[q] = pod
		}
	}
}

func TestDecidePublishesOnceAndThenWritesNothing(t *testing.T) {
	group := fixture.Group(averagely, 6)
	obs := world([]corev1.Pod{fixture.Pod("p0"), fixture.Pod("p1")})
	first := Decide(group, obs, env(group, fixture.T0))
	if first.Report.Problem != nil || len(first.Write.ConfigMaps) != 1 || !first.Report.Rebalance.Published || first.Report.Generation != 1 {
		t.Fatalf("first pass: problem=%v writes=%d rebalanced=%v generation=%d", first.Report.Problem, len(first.Write.ConfigMaps), first.Report.Rebalance.Published, first.Report.Generation)
	}
	if got := entryOf(first, "p0"); !slices.Equal(got, fixture.Qs(0, 1, 2)) {
		t.Fatalf("p0 gets %v, want queues 0-2", got)
	}
	next := applied(group, obs, first)
	if e := next.Published.Entries["p1"]; e.PodUID != "uid-p1" || !slices.Equal(e.Queues, fixture.Qs(3, 4, 5)) {
		t.Fatalf("p1's entry reads back as %+v", e)
	}

	again := Decide(group, next, env(group, fixture.T0.Add(time.Hour)))
	if len(again.Write.ConfigMaps) != 0 || again.Report.Rebalance.Published || again.Report.Generation != 1 {
		t.Fatalf("an unchanged world wrote %d objects (rebalanced %v, generation %d)", len(again.Write.ConfigMaps), again.Report.Rebalance.Published, again.Report.Generation)
	}
	reordered := *next
	reordered.Pods = []corev1.Pod{next.Pods[1], next.Pods[0]}
	if d := Decide(group, &reordered, env(group, fixture.T0)); len(d.Write.ConfigMaps) != 0 {
		t.Fatal("the same pods in another order changed the assignment")
	}
}

// TestDecideCooperativeMoveWaitsForTheClaim: a queue leaves its reader in one generation and reaches its
// new reader only once the old reader's Lease no longer claims it.
func TestDecideCooperativeMoveWaitsForTheClaim(t *testing.T) {
	group := fixture.Group(averagely, 6)
	obs := world([]corev1.Pod{fixture.Pod("p0")}, fixture.Lease("p0", 0, nil, fixture.T0))
	d := Decide(group, obs, env(group, fixture.T0))
	obs = applied(group, obs, d)
	obs.Leases = []protocol.LeaseState{fixture.Lease("p0", 1, fixture.Qs(0, 1, 2, 3, 4, 5), fixture.T0)}

	// p1 joins: Averagely gives it 3-5, which p0 must let go of first.
	obs.Pods = append(obs.Pods, fixture.Pod("p1"))
	obs.PodsByName = map[string]*corev1.Pod{"p0": &obs.Pods[0], "p1": &obs.Pods[1]}
	revoke := Decide(group, obs, env(group, fixture.T0))
	assertPartition(t, revoke)
	if revoke.Report.Generation != 2 || !slices.Equal(entryOf(revoke, "p0"), fixture.Qs(0, 1, 2)) || len(entryOf(revoke, "p1")) != 0 || revoke.Report.Handoff.Withheld != 3 {
		t.Fatalf("generation %d: p0 %v, p1 %v, %d withheld; want generation 2 revoking 3-5 from p0 and withholding them",
			revoke.Report.Generation, entryOf(revoke, "p0"), entryOf(revoke, "p1"), revoke.Report.Handoff.Withheld)
	}
	if revoke.Report.Rebalance.Moved != 3 {
		t.Errorf("moved %d, want the 3 queues revoked", revoke.Report.Rebalance.Moved)
	}
	obs = applied(group, obs, revoke)

	t.Run("the old reader's claim still lists the queues", func(t *testing.T) {
		stale := *obs
		stale.Leases = []protocol.LeaseState{fixture.Lease("p0", 2, fixture.Qs(0, 1, 2, 3, 4, 5), fixture.T0)}
		if d := Decide(group, &stale, env(group, fixture.T0.Add(time.Second))); len(entryOf(d, "p1")) != 0 {
			t.Fatalf("p1 got %v while p0's claim lists them", entryOf(d, "p1"))
		}
	})
	t.Run("acknowledged, nothing claimed any more", func(t *testing.T) {
		acked := *obs
		acked.Leases = []protocol.LeaseState{fixture.Lease("p0", 2, fixture.Qs(0, 1, 2), fixture.T0)}
		grant := Decide(group, &acked, env(group, fixture.T0.Add(time.Second)))
		assertPartition(t, grant)
		if grant.Report.Generation != 3 || !slices.Equal(entryOf(grant, "p1"), fixture.Qs(3, 4, 5)) || len(grant.Report.Bookkeeping.Revocations) != 0 {
			t.Fatalf("generation %d: p1 %v, revocations %v; want generation 3 granting 3-5", grant.Report.Generation, entryOf(grant, "p1"), grant.Report.Bookkeeping.Revocations)
		}
	})
	t.Run("no acknowledgement: fenced only if alive past the timeout", func(t *testing.T) {
		silent := *obs
		// p0 renewed before the deadline, then nothing: it may be cut off, and stops on its own.
		silent.Leases = []protocol.LeaseState{fixture.Lease("p0", 1, fixture.Qs(0, 1, 2, 3, 4, 5), fixture.T0.Add(29*time.Second))}
		if d := Decide(group, &silent, env(group, fixture.T0.Add(31*time.Second))); len(entryOf(d, "p1")) != 0 || len(d.Report.Handoff.Fenced) != 0 {
			t.Fatalf("p1 got %v (fenced %v) from a member that may be cut off", entryOf(d, "p1"), d.Report.Handoff.Fenced)
		}
		// p0 renewed after the deadline without acknowledging: a stuck application, fenced.
		silent.Leases = []protocol.LeaseState{fixture.Lease("p0", 1, fixture.Qs(0, 1, 2, 3, 4, 5), fixture.T0.Add(31*time.Second))}
		d := Decide(group, &silent, env(group, fixture.T0.Add(32*time.Second)))
		if len(d.Report.Handoff.Fenced) != 1 || !slices.Equal(entryOf(d, "p1"), fixture.Qs(3, 4, 5)) {
			t.Fatalf("fenced %v, p1 %v; want p0 fenced and 3-5 granted", d.Report.Handoff.Fenced, entryOf(d, "p1"))
		}
		if s := StatusFor(group, &d.Report, fixture.Metav1Time(fixture.T0)); !fixture.HasCondition(s.Conditions, v1alpha1.ConditionFenced, "True") {
			t.Errorf("Fenced condition missing: %v", s.Conditions)
		}
	})
}

// TestDecideGonePodsQueuesWaitForItsLease: a pod that is gone may still run; its queues wait for its
// Lease, unless the kubelet said its containers stopped.
func TestDecideGonePodsQueuesWaitForItsLease(t *testing.T) {
	group := fixture.Group(averagely, 4)
	obs := world([]corev1.Pod{fixture.Pod("p0"), fixture.Pod("p1")}, fixture.Lease("p0", 0, nil, fixture.T0), fixture.Lease("p1", 0, nil, fixture.T0))
	d := Decide(group, obs, env(group, fixture.T0))
	obs = applied(group, obs, d)
	obs.Leases = []protocol.LeaseState{fixture.Lease("p0", 1, fixture.Qs(0, 1), fixture.T0), fixture.Lease("p1", 1, fixture.Qs(2, 3), fixture.T0)}

	gone := *obs
	// p0 keeps renewing.
	gone.Leases = []protocol.LeaseState{fixture.Lease("p0", 1, fixture.Qs(0, 1), fixture.T0.Add(16*time.Second)), obs.Leases[1]}
	gone.Pods = gone.Pods[:1]
	gone.PodsByName = map[string]*corev1.Pod{"p0": &gone.Pods[0]}
	at := func(after time.Duration) *Decision { return Decide(group, &gone, env(group, fixture.T0.Add(after))) }
	if d := at(5 * time.Second); len(entryOf(d, "p0")) != 2 || len(d.Write.DeleteLeases) != 0 {
		t.Fatalf("5 s after p1's renewal p0 has %v and %d Leases are deleted; want p1's queues held", entryOf(d, "p0"), len(d.Write.DeleteLeases))
	}
	// Duration 15 s plus 1 s of clock skew.
	d = at(17 * time.Second)
	if len(entryOf(d, "p0")) != 4 || len(d.Write.DeleteLeases) != 1 || d.Write.DeleteLeases[0].Pod != "p1" {
		t.Fatalf("after p1's Lease expired p0 has %v and Leases %v are deleted; want all 4 queues and p1's Lease", entryOf(d, "p0"), d.Write.DeleteLeases)
	}

	terminated := *obs
	terminated.Pods = []corev1.Pod{obs.Pods[0], fixture.Pod("p1", fixture.Stopped)}
	terminated.PodsByName = map[string]*corev1.Pod{"p0": &terminated.Pods[0], "p1": &terminated.Pods[1]}
	d = Decide(group, &terminated, env(group, fixture.T0.Add(time.Second)))
	if len(entryOf(d, "p0")) != 4 || len(d.Write.DeleteLeases) != 1 {
		t.Fatalf("with p1's container terminated p0 has %v, Leases deleted %v; want all 4 and p1's Lease", entryOf(d, "p0"), d.Write.DeleteLeases)
	}
}

// TestDecideRecoversFromALostAssignment: with the assignment gone (or edited), each member keeps what it
// claims, and nothing else is given until every member acknowledged the generation published then.
func TestDecideRecoversFromALostAssignment(t *testing.T) {
	group := fixture.Group(averagely, 6)
	group.Status.AssignmentGeneration = 7
	pods := []corev1.Pod{fixture.Pod("p0"), fixture.Pod("p1"), fixture.Pod("p2")}
	// p0 claims 0-2; p1 claims 3; p2 claims nothing (a grant of 4-5 to it may have been in flight).
	obs := world(pods, fixture.Lease("p0", 7, fixture.Qs(0, 1, 2), fixture.T0), fixture.Lease("p1", 7, fixture.Qs(3), fixture.T0), fixture.Lease("p2", 6, nil, fixture.T0))
	d := Decide(group, obs, env(group, fixture.T0))
	if d.Report.Tampered == nil || d.Report.Tampered.Reason != v1alpha1.ReasonAssignmentDeleted {
		t.Fatalf("tampered = %v, want AssignmentDeleted", d.Report.Tampered)
	}
	assertPartition(t, d)
	if d.Report.Generation != 7+RecoveryStep || !slices.Equal(entryOf(d, "p0"), fixture.Qs(0, 1)) || !slices.Equal(entryOf(d, "p1"), fixture.Qs(3)) || len(entryOf(d, "p2")) != 0 {
		t.Fatalf("generation %d: p0 %v, p1 %v, p2 %v; want generation 7+recoveryStep keeping only claimed queues the target leaves",
			d.Report.Generation, entryOf(d, "p0"), entryOf(d, "p1"), entryOf(d, "p2"))
	}
	if d.Report.Handoff.Recovering != 3 {
		t.Fatalf("%d members in recovery, want 3", d.Report.Handoff.Recovering)
	}
	obs = applied(group, obs, d)

	// The assignment is trusted again. p0 and p1 acknowledged the recovery, p2 has not: what nobody claims
	// may go to p2, the one reader that may still hold anything, but to no one else.
	recovery := d.Report.Generation
	obs.Leases = []protocol.LeaseState{fixture.Lease("p0", recovery, fixture.Qs(0, 1), fixture.T0), fixture.Lease("p1", recovery, fixture.Qs(3), fixture.T0), fixture.Lease("p2", 6, nil, fixture.T0)}
	d = Decide(group, obs, env(group, fixture.T0.Add(time.Second)))
	if d.Report.Tampered != nil || !slices.Equal(entryOf(d, "p1"), fixture.Qs(3)) || !slices.Equal(entryOf(d, "p2"), fixture.Qs(4, 5)) {
		t.Fatalf("tampered %v, p1 %v, p2 %v; want queue 2 held back from p1 while p2 is in recovery", d.Report.Tampered, entryOf(d, "p1"), entryOf(d, "p2"))
	}
	obs = applied(group, obs, d)
	obs.Leases[2] = fixture.Lease("p2", d.Report.Generation, fixture.Qs(4, 5), fixture.T0)
	d = Decide(group, obs, env(group, fixture.T0.Add(2*time.Second)))
	assertPartition(t, d)
	if d.Report.Handoff.Recovering != 0 || !slices.Equal(entryOf(d, "p1"), fixture.Qs(2, 3)) || !slices.Equal(entryOf(d, "p2"), fixture.Qs(4, 5)) {
		t.Fatalf("recovering %d, p1 %v, p2 %v; want the unclaimed queues given once all acknowledged", d.Report.Handoff.Recovering, entryOf(d, "p1"), entryOf(d, "p2"))
	}
}

func TestDecideFindsEdits(t *testing.T) {
	group := fixture.Group(averagely, 4)
	obs := world([]corev1.Pod{fixture.Pod("p0"), fixture.Pod("p1")})
	obs = applied(group, obs, Decide(group, obs, env(group, fixture.T0)))
	for _, tc := range []struct {
		name string
		edit func(*corev1.ConfigMap)
		want string
	}{
		{"handoff annotation junk", func(cm *corev1.ConfigMap) { cm.Annotations[protocol.HandoffAnnotation] = "{" }, "no longer match"},
		{"entry swapped", func(cm *corev1.ConfigMap) { cm.Data["p0"] = cm.Data["p1"] }, "no longer match"},
		{"generation lowered", func(cm *corev1.ConfigMap) { cm.Annotations[protocol.GenerationAnnotation] = "0" }, "no longer match"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			edited := *obs
			edited.Index = obs.Index.DeepCopy()
			tc.edit(edited.Index)
			edited.SetPublished(protocol.ReadPublished("g", edited.Index, nil))
			d := Decide(group, &edited, env(group, fixture.T0))
			if d.Report.Tampered == nil || d.Report.Tampered.Reason != v1alpha1.ReasonAssignmentEdited || !strings.Contains(d.Report.Tampered.Message, tc.want) {
				t.Fatalf("tampered = %v, want AssignmentEdited saying %q", d.Report.Tampered, tc.want)
			}
			if d.Report.Generation != 1+RecoveryStep || len(d.Write.ConfigMaps) != 1 {
				t.Fatalf("generation %d with %d writes, want the assignment published again at generation 1+recoveryStep", d.Report.Generation, len(d.Write.ConfigMaps))
			}
		})
	}
	t.Run("labels removed", func(t *testing.T) {
		edited := *obs
		edited.Index = obs.Index.DeepCopy()
		edited.Index.Labels = nil
		d := Decide(group, &edited, env(group, fixture.T0))
		if d.Report.Tampered != nil || d.Report.Generation != 1 || len(d.Write.ConfigMaps) != 1 || len(d.Report.Restored) != 1 {
			t.Fatalf("tampered %v, generation %d, %d writes, restored %v; want the labels restored in place", d.Report.Tampered, d.Report.Generation, len(d.Write.ConfigMaps), d.Report.Restored)
		}
	})
}

func TestDecideNewPodUnderAnOldNameWaits(t *testing.T) {
	group := fixture.Group(averagely, 4)
	obs := world([]corev1.Pod{fixture.Pod("p0"), fixture.Pod("p1")}, fixture.Lease("p0", 0, nil, fixture.T0), fixture.Lease("p1", 0, nil, fixture.T0))
	obs = applied(group, obs, Decide(group, obs, env(group, fixture.T0)))
	obs.Leases = []protocol.LeaseState{fixture.Lease("p0", 1, fixture.Qs(0, 1), fixture.T0), fixture.Lease("p1", 1, fixture.Qs(2, 3), fixture.T0)}
	// p1 is force-deleted and created again at once: another UID, while the old one's claim stands.
	obs.Pods[1] = fixture.Pod("p1", fixture.WithUID("uid-p1-new"))
	obs.PodsByName["p1"] = &obs.Pods[1]
	d := Decide(group, obs, env(group, fixture.T0.Add(time.Second)))
	if _, listed := d.Report.Entries["p1"]; listed || len(entryOf(d, "p0")) != 2 {
		t.Fatalf("entries %v: want the new p1 left out and the old one's queues held", d.Report.Entries)
	}
	// Once the old claim lapsed, its Lease goes; the new pod becomes a member when it takes the Lease.
	obs.Leases[0] = fixture.Lease("p0", 1, fixture.Qs(0, 1), fixture.T0.Add(19*time.Second))
	later := Decide(group, obs, env(group, fixture.T0.Add(20*time.Second)))
	if len(entryOf(later, "p0")) != 4 || len(later.Write.DeleteLeases) != 1 || later.Write.DeleteLeases[0].PodUID != "uid-p1" {
		t.Fatalf("after the old claim lapsed: entries %v, Leases deleted %v", later.Report.Entries, later.Write.DeleteLeases)
	}
	taken := fixture.Lease("p1", 0, nil, fixture.T0.Add(20*time.Second))
	taken.PodUID = "uid-p1-new"
	obs.Leases[1] = taken
	joined := Decide(group, obs, env(group, fixture.T0.Add(21*time.Second)))
	if e, ok := joined.Report.Entries["p1"]; !ok || types.UID(e.PodUID) != "uid-p1-new" {
		t.Fatalf("the new p1 holding its Lease is not a member: %v", joined.Report.Entries)
	}
}

func TestDecideProblemsKeepThePublishedAssignment(t *testing.T) {
	group := fixture.Group(averagely, 6)
	obs := world([]corev1.Pod{fixture.Pod("p0"), fixture.Pod("p1")})
	obs = applied(group, obs, Decide(group, obs, env(group, fixture.T0)))
	bad := *obs
	bad.Pods = append(slices.Clone(obs.Pods), fixture.Pod("p2", fixture.WithAnnotation(v1alpha1.WeightAnnotation, "x")))
	d := Decide(group, &bad, env(group, fixture.T0))
	if d.Report.Problem == nil || d.Report.Problem.Reason != v1alpha1.ReasonInvalidMemberAnnotation || len(d.Write.ConfigMaps) != 0 || d.Report.Generation != 1 || len(d.Report.Entries) != 2 {
		t.Fatalf("problem %v, %d writes, generation %d, %d entries; want the published assignment kept", d.Report.Problem, len(d.Write.ConfigMaps), d.Report.Generation, len(d.Report.Entries))
	}

	byConfig := fixture.Group(v1alpha1.Strategy{Type: v1alpha1.ByConfig, ByConfig: &v1alpha1.ByConfigParameters{Assignments: []v1alpha1.MemberAssignment{
		{Member: "p0", Queues: []v1alpha1.QueueReference{{Topic: "t", Broker: "b", QueueID: 9}}},
	}}}, 6)
	d = Decide(byConfig, world([]corev1.Pod{fixture.Pod("p0")}), env(byConfig, fixture.T0))
	if d.Report.Problem == nil || d.Report.Problem.Reason != v1alpha1.ReasonInvalidStrategyParameters || !strings.HasPrefix(d.Report.Problem.Message, `spec.strategy.byConfig.assignments["p0"][0]`) {
		t.Fatalf("problem %v, want InvalidStrategyParameters naming spec.strategy.byConfig.assignments[\"p0\"][0]", d.Report.Problem)
	}
}

func TestDecideShardsLargeAssignments(t *testing.T) {
	group := fixture.Group(v1alpha1.Strategy{Type: v1alpha1.AveragelyByCircle}, 65536)
	var pods []corev1.Pod
	for i := range 4000 {
		pods = append(pods, fixture.Pod(fmt.Sprintf("consumer-%04d", i)))
	}
	obs := world(pods)
	d := Decide(group, obs, env(group, fixture.T0))
	if d.Report.Problem != nil || len(d.Write.ConfigMaps) < 3 || d.Write.ConfigMaps[len(d.Write.ConfigMaps)-1].Name != "g-assignment" {
		t.Fatalf("problem %v, %d writes; want shards and the index last", d.Report.Problem, len(d.Write.ConfigMaps))
	}
	obs = applied(group, obs, d)
	if len(obs.Published.Tampered) > 0 || len(obs.Published.Entries) != 4000 {
		t.Fatalf("the sharded assignment reads back with %v and %d entries", obs.Published.Tampered, len(obs.Published.Entries))
	}
	small := *obs
	small.Pods = pods[:10]
	small.PodsByName = map[string]*corev1.Pod{}
	for i := range small.Pods {
		small.PodsByName[small.Pods[i].Name] = &small.Pods[i]
	}
	group.Spec.Handoff.Mode = v1alpha1.Immediate
	d = Decide(group, &small, env(group, fixture.T0))
	if len(d.Write.ConfigMaps) != 1 || len(d.Write.DeleteShards) != len(obs.Shards) {
		t.Fatalf("shrinking: %d writes, %d of %d shards deleted", len(d.Write.ConfigMaps), len(d.Write.DeleteShards), len(obs.Shards))
	}
}

func TestDecideBroadcastingGivesEveryQueueAtOnce(t *testing.T) {
	group := fixture.Group(averagely, 4)
	group.Spec.MessageModel = v1alpha1.Broadcasting
	obs := world([]corev1.Pod{fixture.Pod("p0")}, fixture.Lease("p0", 0, nil, fixture.T0))
	obs = applied(group, obs, Decide(group, obs, env(group, fixture.T0)))
	obs.Leases = []protocol.LeaseState{fixture.Lease("p0", 1, fixture.Qs(0, 1, 2, 3), fixture.T0)}
	obs.Pods = append(obs.Pods, fixture.Pod("p1"))
	obs.PodsByName["p1"] = &obs.Pods[1]
	d := Decide(group, obs, env(group, fixture.T0))
	if len(entryOf(d, "p1")) != 4 || len(entryOf(d, "p0")) != 4 {
		t.Fatalf("p0 %v, p1 %v: want every queue for both", entryOf(d, "p0"), entryOf(d, "p1"))
	}
}

func FuzzDecodeHandoff(f *testing.F) {
	f.Add(HandoffState{Revocations: []Revocation{{Pod: "p", UID: "u", Generation: 2, At: fixture.T0, Queues: protocol.Compact(fixture.Qs(1, 2))}}}.encode())
	f.Add(`{"version":2,"fenced":[{"pod":"p","uid":"u","generation":1,"all":true}]}`)
	f.Add(`{"version":2,"reserved":[{"member":"m","queues":[{"topic":"t","broker":"b","ids":"9-1"}]}]}`)
	f.Fuzz(func(t *testing.T, raw string) {
		s, err := decodeHandoff(raw, nil)
		if err != nil {
			return
		}
		again, err := decodeHandoff(s.encode(), nil)
		if err != nil || len(again.Revocations) != len(s.Revocations) || len(again.Fenced) != len(s.Fenced) || len(again.Reserved) != len(s.Reserved) {
			t.Fatalf("re-encoding %q: %+v, %v", raw, again, err)
		}
	})
}

// TestDecideAClaimOfAnUnknownFormatHoldsEverythingBack: a member one protocol version ahead writes a claim
// this operator cannot read; the operator takes the safe side and says so.
func TestDecideAClaimOfAnUnknownFormatHoldsEverythingBack(t *testing.T) {
	group := fixture.Group(averagely, 4)
	obs := world([]corev1.Pod{fixture.Pod("p0"), fixture.Pod("p1")}, fixture.Lease("p0", 0, nil, fixture.T0), fixture.Lease("p1", 0, nil, fixture.T0))
	obs = applied(group, obs, Decide(group, obs, env(group, fixture.T0)))
	future := fixture.Lease("p1", 1, fixture.Qs(2, 3), fixture.T0)
	future.HasClaim, future.Claim, future.ClaimErr = true, nil, fmt.Errorf("claim has format version 2; this reader knows version 1")
	obs.Leases = []protocol.LeaseState{fixture.Lease("p0", 1, fixture.Qs(0, 1), fixture.T0), future}
	// p1 leaves: its queues would go to p0, but p1 may be reading anything.
	obs.Pods = obs.Pods[:1]
	d := Decide(group, obs, env(group, fixture.T0.Add(time.Second)))
	if len(entryOf(d, "p0")) != 2 || d.Report.Tampered == nil || d.Report.Tampered.Reason != v1alpha1.ReasonClaimUnreadable || !strings.Contains(d.Report.Tampered.Message, "g.p1") {
		t.Fatalf("p0 %v, tampered %v; want p1's queues held back and ClaimUnreadable naming its Lease", entryOf(d, "p0"), d.Report.Tampered)
	}
}

// TestDecideUnreadableClaimsProveNothing: a member whose own claim cannot be read is not known to hold
// anything, so another incarnation that may hold anything still keeps queues from it. (Found by the
// randomized handoff test: a force-deleted, cut-off pod's claim and its successor's claim both junk.)
func TestDecideUnreadableClaimsProveNothing(t *testing.T) {
	group := fixture.Group(averagely, 4)
	obs := world([]corev1.Pod{fixture.Pod("p0"), fixture.Pod("p1")}, fixture.Lease("p0", 0, nil, fixture.T0), fixture.Lease("p1", 0, nil, fixture.T0))
	obs = applied(group, obs, Decide(group, obs, env(group, fixture.T0)))
	junk := func(l protocol.LeaseState) protocol.LeaseState {
		l.Claim, l.ClaimErr = nil, fmt.Errorf("decoding claim: junk")
		return l
	}
	// p1 was force-deleted while cut off: its Lease still stands. Someone filled p1's claim with junk and
	// deleted the assignment; p0's claim is junk as well.
	obs.Leases = []protocol.LeaseState{junk(fixture.Lease("p0", 1, fixture.Qs(0, 1), fixture.T0)), junk(fixture.Lease("p1", 1, fixture.Qs(2, 3), fixture.T0))}
	obs.Pods = obs.Pods[:1]
	obs.PodsByName = map[string]*corev1.Pod{"p0": &obs.Pods[0]}
	obs.Index = nil
	obs.SetPublished(protocol.ReadPublished("g", nil, nil))
	group.Status.AssignmentGeneration = 1
	d := Decide(group, obs, env(group, fixture.T0.Add(time.Second)))
	if got := entryOf(d, "p0"); len(got) != 0 {
		t.Fatalf("p0 gets %v while p1, cut off, may still read anything; want nothing until the claims read again", got)
	}
}

// TestDecideLeavesItsObservationAsRead: a Lease acknowledging a generation never published is counted as
// acknowledging none, in the decision's own copy; the observation it was given stays as read.
func TestDecideLeavesItsObservationAsRead(t *testing.T) {
	group := fixture.Group(averagely, 6)
	observe := func() *Observation {
		return world([]corev1.Pod{fixture.Pod("p0"), fixture.Pod("p1")}, fixture.Lease("p0", 1_000_000, fixture.Qs(0, 1), fixture.T0), fixture.Lease("p1", 0, nil, fixture.T0))
	}
	obs, asRead := observe(), observe()
	d := Decide(group, obs, env(group, fixture.T0))
	if d.Report.SuspectLeases == nil || !strings.Contains(d.Report.SuspectLeases.Message, "acknowledges generation 1000000") {
		t.Fatalf("the acknowledgement of a generation never published is not reported: %+v", d.Report.SuspectLeases)
	}
	if !reflect.DeepEqual(obs, asRead) {
		t.Fatalf("decide changed its observation: Leases %+v, were %+v", obs.Leases, asRead.Leases)
	}
}

// TestPlanHandoffKeepsASoonerLook: the handoff's next deadline does not push back a look again that an
// earlier step of the pass asked for.
func TestPlanHandoffKeepsASoonerLook(t *testing.T) {
	group := fixture.Group(averagely, 6)
	dc := newDecider(group, world([]corev1.Pod{fixture.Pod("p0")}), env(group, fixture.T0))
	for _, step := range dc.planSteps() {
		if prob := step(); prob != nil {
			t.Fatalf("planning stopped: %v", prob)
		}
	}
	dc.d.lookAgainAt(fixture.T0, fixture.T0.Add(time.Second))
	if prob := dc.planHandoff(); prob != nil {
		t.Fatalf("planHandoff: %v", prob)
	}
	if dc.d.RequeueAfter <= 0 || dc.d.RequeueAfter > time.Second {
		t.Fatalf("after planHandoff the pass looks again after %v, want at most the 1s asked for before it", dc.d.RequeueAfter)
	}
}

func TestGenerationsLeft(t *testing.T) {
	for _, tc := range []struct {
		name  string
		floor int64
		stops bool
	}{
		{"nothing published yet", 0, false},
		{"an ordinary generation", 41, false},
		{"a recovery step still fits under the largest", protocol.MaxGeneration - RecoveryStep, false},
		{"a recovery step no longer fits", protocol.MaxGeneration - RecoveryStep + 1, true},
		{"the largest a member accepts", protocol.MaxGeneration, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			prob := generationsLeft(tc.floor)
			if (prob != nil) != tc.stops {
				t.Fatalf("generationsLeft(%d) = %v, want a problem: %v", tc.floor, prob, tc.stops)
			}
			if prob != nil && (prob.Reason != v1alpha1.ReasonGenerationExhausted || !strings.Contains(prob.Message, fmt.Sprint(tc.floor))) {
				t.Fatalf("the problem does not say the generations ran out at %d: %+v", tc.floor, prob)
			}
		})
	}
}

func TestStampRevocations(t *testing.T) {
	made := Revocation{Pod: "b", UID: "uid-b"}
	earlier := Revocation{Pod: "a", UID: "uid-a", Generation: 3}
	for _, tc := range []struct {
		name  string
		state HandoffState
		want  []Revocation
	}{
		{"none", HandoffState{}, nil},
		{"one made by this pass takes the generation that publishes it", HandoffState{Revocations: []Revocation{made}},
			[]Revocation{{Pod: "b", UID: "uid-b", Generation: 7}}},
		{"an earlier one keeps its generation, in generation order", HandoffState{Revocations: []Revocation{made, earlier}},
			[]Revocation{earlier, {Pod: "b", UID: "uid-b", Generation: 7}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := slices.Clone(tc.state.Revocations)
			got := stampRevocations(tc.state, 7)
			if !reflect.DeepEqual(got.Revocations, tc.want) {
				t.Fatalf("stamped %+v, want %+v", got.Revocations, tc.want)
			}
			if !reflect.DeepEqual(tc.state.Revocations, before) {
				t.Fatalf("the handoff's own state changed: %+v, was %+v", tc.state.Revocations, before)
			}
		})
	}
}
