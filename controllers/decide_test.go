package controllers

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
	"github.com/consumergroup-operator/consumergroup-operator/pkg/allocate"
	"github.com/consumergroup-operator/consumergroup-operator/pkg/protocol"
)

var averagely = v1alpha1.Strategy{Type: v1alpha1.Averagely}

// entryOf is what d publishes for pod.
func entryOf(d *decision, pod string) []allocate.Queue { return d.report.entries[pod].Queues }

// assertPartition fails unless no queue is published for two pods.
func assertPartition(t *testing.T, d *decision) {
	t.Helper()
	owner := map[allocate.Queue]string{}
	for pod, e := range d.report.entries {
		for _, q := range e.Queues {
			if other, ok := owner[q]; ok {
				t.Fatalf("%s is published for %s and %s", q, other, pod)
			}
			owner[q] = pod
		}
	}
}

func TestDecidePublishesOnceAndThenWritesNothing(t *testing.T) {
	group := testGroup(averagely, 6)
	obs := world([]corev1.Pod{pod("p0"), pod("p1")})
	first := decide(group, obs, env(group, t0))
	if first.report.problem != nil || len(first.write.configMaps) != 1 || !first.report.rebalance.published || first.report.generation != 1 {
		t.Fatalf("first pass: problem=%v writes=%d rebalanced=%v generation=%d", first.report.problem, len(first.write.configMaps), first.report.rebalance.published, first.report.generation)
	}
	if got := entryOf(first, "p0"); !slices.Equal(got, qs(0, 1, 2)) {
		t.Fatalf("p0 gets %v, want queues 0-2", got)
	}
	next := applied(group, obs, first)
	if e := next.published.Entries["p1"]; e.PodUID != "uid-p1" || !slices.Equal(e.Queues, qs(3, 4, 5)) {
		t.Fatalf("p1's entry reads back as %+v", e)
	}

	again := decide(group, next, env(group, t0.Add(time.Hour)))
	if len(again.write.configMaps) != 0 || again.report.rebalance.published || again.report.generation != 1 {
		t.Fatalf("an unchanged world wrote %d objects (rebalanced %v, generation %d)", len(again.write.configMaps), again.report.rebalance.published, again.report.generation)
	}
	reordered := *next
	reordered.pods = []corev1.Pod{next.pods[1], next.pods[0]}
	if d := decide(group, &reordered, env(group, t0)); len(d.write.configMaps) != 0 {
		t.Fatal("the same pods in another order changed the assignment")
	}
}

// TestDecideCooperativeMoveWaitsForTheClaim: a queue leaves its reader in one generation and reaches its
// new reader only once the old reader's Lease no longer claims it.
func TestDecideCooperativeMoveWaitsForTheClaim(t *testing.T) {
	group := testGroup(averagely, 6)
	obs := world([]corev1.Pod{pod("p0")}, lease("p0", 0, nil, t0))
	d := decide(group, obs, env(group, t0))
	obs = applied(group, obs, d)
	obs.leases = []protocol.LeaseState{lease("p0", 1, qs(0, 1, 2, 3, 4, 5), t0)}

	// p1 joins: Averagely gives it 3-5, which p0 must let go of first.
	obs.pods = append(obs.pods, pod("p1"))
	obs.podsByName = map[string]*corev1.Pod{"p0": &obs.pods[0], "p1": &obs.pods[1]}
	revoke := decide(group, obs, env(group, t0))
	assertPartition(t, revoke)
	if revoke.report.generation != 2 || !slices.Equal(entryOf(revoke, "p0"), qs(0, 1, 2)) || len(entryOf(revoke, "p1")) != 0 || revoke.report.handoff.withheld != 3 {
		t.Fatalf("generation %d: p0 %v, p1 %v, %d withheld; want generation 2 revoking 3-5 from p0 and withholding them",
			revoke.report.generation, entryOf(revoke, "p0"), entryOf(revoke, "p1"), revoke.report.handoff.withheld)
	}
	if revoke.report.rebalance.moved != 3 {
		t.Errorf("moved %d, want the 3 queues revoked", revoke.report.rebalance.moved)
	}
	obs = applied(group, obs, revoke)

	t.Run("the old reader's claim still lists the queues", func(t *testing.T) {
		stale := *obs
		stale.leases = []protocol.LeaseState{lease("p0", 2, qs(0, 1, 2, 3, 4, 5), t0)}
		if d := decide(group, &stale, env(group, t0.Add(time.Second))); len(entryOf(d, "p1")) != 0 {
			t.Fatalf("p1 got %v while p0's claim lists them", entryOf(d, "p1"))
		}
	})
	t.Run("acknowledged, nothing claimed any more", func(t *testing.T) {
		acked := *obs
		acked.leases = []protocol.LeaseState{lease("p0", 2, qs(0, 1, 2), t0)}
		grant := decide(group, &acked, env(group, t0.Add(time.Second)))
		assertPartition(t, grant)
		if grant.report.generation != 3 || !slices.Equal(entryOf(grant, "p1"), qs(3, 4, 5)) || len(grant.report.bookkeeping.Revocations) != 0 {
			t.Fatalf("generation %d: p1 %v, revocations %v; want generation 3 granting 3-5", grant.report.generation, entryOf(grant, "p1"), grant.report.bookkeeping.Revocations)
		}
	})
	t.Run("no acknowledgement: fenced only if alive past the timeout", func(t *testing.T) {
		silent := *obs
		// p0 renewed before the deadline, then nothing: it may be cut off, and stops on its own.
		silent.leases = []protocol.LeaseState{lease("p0", 1, qs(0, 1, 2, 3, 4, 5), t0.Add(29*time.Second))}
		if d := decide(group, &silent, env(group, t0.Add(31*time.Second))); len(entryOf(d, "p1")) != 0 || len(d.report.handoff.fenced) != 0 {
			t.Fatalf("p1 got %v (fenced %v) from a member that may be cut off", entryOf(d, "p1"), d.report.handoff.fenced)
		}
		// p0 renewed after the deadline without acknowledging: a stuck application, fenced.
		silent.leases = []protocol.LeaseState{lease("p0", 1, qs(0, 1, 2, 3, 4, 5), t0.Add(31*time.Second))}
		d := decide(group, &silent, env(group, t0.Add(32*time.Second)))
		if len(d.report.handoff.fenced) != 1 || !slices.Equal(entryOf(d, "p1"), qs(3, 4, 5)) {
			t.Fatalf("fenced %v, p1 %v; want p0 fenced and 3-5 granted", d.report.handoff.fenced, entryOf(d, "p1"))
		}
		if s := statusFor(group, &d.report, metav1Time(t0)); !hasCondition(s.Conditions, v1alpha1.ConditionFenced, "True") {
			t.Errorf("Fenced condition missing: %v", s.Conditions)
		}
	})
}

// TestDecideGonePodsQueuesWaitForItsLease: a pod that is gone may still run; its queues wait for its
// Lease, unless the kubelet said its containers stopped.
func TestDecideGonePodsQueuesWaitForItsLease(t *testing.T) {
	group := testGroup(averagely, 4)
	obs := world([]corev1.Pod{pod("p0"), pod("p1")}, lease("p0", 0, nil, t0), lease("p1", 0, nil, t0))
	d := decide(group, obs, env(group, t0))
	obs = applied(group, obs, d)
	obs.leases = []protocol.LeaseState{lease("p0", 1, qs(0, 1), t0), lease("p1", 1, qs(2, 3), t0)}

	gone := *obs
	// p0 keeps renewing.
	gone.leases = []protocol.LeaseState{lease("p0", 1, qs(0, 1), t0.Add(16*time.Second)), obs.leases[1]}
	gone.pods = gone.pods[:1]
	gone.podsByName = map[string]*corev1.Pod{"p0": &gone.pods[0]}
	at := func(after time.Duration) *decision { return decide(group, &gone, env(group, t0.Add(after))) }
	if d := at(5 * time.Second); len(entryOf(d, "p0")) != 2 || len(d.write.deleteLeases) != 0 {
		t.Fatalf("5 s after p1's renewal p0 has %v and %d Leases are deleted; want p1's queues held", entryOf(d, "p0"), len(d.write.deleteLeases))
	}
	// Duration 15 s plus 1 s of clock skew.
	d = at(17 * time.Second)
	if len(entryOf(d, "p0")) != 4 || len(d.write.deleteLeases) != 1 || d.write.deleteLeases[0].Pod != "p1" {
		t.Fatalf("after p1's Lease expired p0 has %v and Leases %v are deleted; want all 4 queues and p1's Lease", entryOf(d, "p0"), d.write.deleteLeases)
	}

	terminated := *obs
	terminated.pods = []corev1.Pod{obs.pods[0], pod("p1", stopped)}
	terminated.podsByName = map[string]*corev1.Pod{"p0": &terminated.pods[0], "p1": &terminated.pods[1]}
	d = decide(group, &terminated, env(group, t0.Add(time.Second)))
	if len(entryOf(d, "p0")) != 4 || len(d.write.deleteLeases) != 1 {
		t.Fatalf("with p1's container terminated p0 has %v, Leases deleted %v; want all 4 and p1's Lease", entryOf(d, "p0"), d.write.deleteLeases)
	}
}

// TestDecideRecoversFromALostAssignment: with the assignment gone (or edited), each member keeps what it
// claims, and nothing else is given until every member acknowledged the generation published then.
func TestDecideRecoversFromALostAssignment(t *testing.T) {
	group := testGroup(averagely, 6)
	group.Status.AssignmentGeneration = 7
	pods := []corev1.Pod{pod("p0"), pod("p1"), pod("p2")}
	// p0 claims 0-2; p1 claims 3; p2 claims nothing (a grant of 4-5 to it may have been in flight).
	obs := world(pods, lease("p0", 7, qs(0, 1, 2), t0), lease("p1", 7, qs(3), t0), lease("p2", 6, nil, t0))
	d := decide(group, obs, env(group, t0))
	if d.report.tampered == nil || d.report.tampered.Reason != v1alpha1.ReasonAssignmentDeleted {
		t.Fatalf("tampered = %v, want AssignmentDeleted", d.report.tampered)
	}
	assertPartition(t, d)
	if d.report.generation != 7+recoveryStep || !slices.Equal(entryOf(d, "p0"), qs(0, 1)) || !slices.Equal(entryOf(d, "p1"), qs(3)) || len(entryOf(d, "p2")) != 0 {
		t.Fatalf("generation %d: p0 %v, p1 %v, p2 %v; want generation 7+recoveryStep keeping only claimed queues the target leaves",
			d.report.generation, entryOf(d, "p0"), entryOf(d, "p1"), entryOf(d, "p2"))
	}
	if d.report.handoff.recovering != 3 {
		t.Fatalf("%d members in recovery, want 3", d.report.handoff.recovering)
	}
	obs = applied(group, obs, d)

	// The assignment is trusted again. p0 and p1 acknowledged the recovery, p2 has not: what nobody claims
	// may go to p2, the one reader that may still hold anything, but to no one else.
	recovery := d.report.generation
	obs.leases = []protocol.LeaseState{lease("p0", recovery, qs(0, 1), t0), lease("p1", recovery, qs(3), t0), lease("p2", 6, nil, t0)}
	d = decide(group, obs, env(group, t0.Add(time.Second)))
	if d.report.tampered != nil || !slices.Equal(entryOf(d, "p1"), qs(3)) || !slices.Equal(entryOf(d, "p2"), qs(4, 5)) {
		t.Fatalf("tampered %v, p1 %v, p2 %v; want queue 2 held back from p1 while p2 is in recovery", d.report.tampered, entryOf(d, "p1"), entryOf(d, "p2"))
	}
	obs = applied(group, obs, d)
	obs.leases[2] = lease("p2", d.report.generation, qs(4, 5), t0)
	d = decide(group, obs, env(group, t0.Add(2*time.Second)))
	assertPartition(t, d)
	if d.report.handoff.recovering != 0 || !slices.Equal(entryOf(d, "p1"), qs(2, 3)) || !slices.Equal(entryOf(d, "p2"), qs(4, 5)) {
		t.Fatalf("recovering %d, p1 %v, p2 %v; want the unclaimed queues given once all acknowledged", d.report.handoff.recovering, entryOf(d, "p1"), entryOf(d, "p2"))
	}
}

func TestDecideFindsEdits(t *testing.T) {
	group := testGroup(averagely, 4)
	obs := world([]corev1.Pod{pod("p0"), pod("p1")})
	obs = applied(group, obs, decide(group, obs, env(group, t0)))
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
			edited.index = obs.index.DeepCopy()
			tc.edit(edited.index)
			edited.setPublished(protocol.ReadPublished("g", edited.index, nil))
			d := decide(group, &edited, env(group, t0))
			if d.report.tampered == nil || d.report.tampered.Reason != v1alpha1.ReasonAssignmentEdited || !strings.Contains(d.report.tampered.Message, tc.want) {
				t.Fatalf("tampered = %v, want AssignmentEdited saying %q", d.report.tampered, tc.want)
			}
			if d.report.generation != 1+recoveryStep || len(d.write.configMaps) != 1 {
				t.Fatalf("generation %d with %d writes, want the assignment published again at generation 1+recoveryStep", d.report.generation, len(d.write.configMaps))
			}
		})
	}
	t.Run("labels removed", func(t *testing.T) {
		edited := *obs
		edited.index = obs.index.DeepCopy()
		edited.index.Labels = nil
		d := decide(group, &edited, env(group, t0))
		if d.report.tampered != nil || d.report.generation != 1 || len(d.write.configMaps) != 1 || len(d.report.restored) != 1 {
			t.Fatalf("tampered %v, generation %d, %d writes, restored %v; want the labels restored in place", d.report.tampered, d.report.generation, len(d.write.configMaps), d.report.restored)
		}
	})
}

func TestDecideNewPodUnderAnOldNameWaits(t *testing.T) {
	group := testGroup(averagely, 4)
	obs := world([]corev1.Pod{pod("p0"), pod("p1")}, lease("p0", 0, nil, t0), lease("p1", 0, nil, t0))
	obs = applied(group, obs, decide(group, obs, env(group, t0)))
	obs.leases = []protocol.LeaseState{lease("p0", 1, qs(0, 1), t0), lease("p1", 1, qs(2, 3), t0)}
	// p1 is force-deleted and created again at once: another UID, while the old one's claim stands.
	obs.pods[1] = pod("p1", withUID("uid-p1-new"))
	obs.podsByName["p1"] = &obs.pods[1]
	d := decide(group, obs, env(group, t0.Add(time.Second)))
	if _, listed := d.report.entries["p1"]; listed || len(entryOf(d, "p0")) != 2 {
		t.Fatalf("entries %v: want the new p1 left out and the old one's queues held", d.report.entries)
	}
	// Once the old claim lapsed, its Lease goes; the new pod becomes a member when it takes the Lease.
	obs.leases[0] = lease("p0", 1, qs(0, 1), t0.Add(19*time.Second))
	later := decide(group, obs, env(group, t0.Add(20*time.Second)))
	if len(entryOf(later, "p0")) != 4 || len(later.write.deleteLeases) != 1 || later.write.deleteLeases[0].PodUID != "uid-p1" {
		t.Fatalf("after the old claim lapsed: entries %v, Leases deleted %v", later.report.entries, later.write.deleteLeases)
	}
	taken := lease("p1", 0, nil, t0.Add(20*time.Second))
	taken.PodUID = "uid-p1-new"
	obs.leases[1] = taken
	joined := decide(group, obs, env(group, t0.Add(21*time.Second)))
	if e, ok := joined.report.entries["p1"]; !ok || types.UID(e.PodUID) != "uid-p1-new" {
		t.Fatalf("the new p1 holding its Lease is not a member: %v", joined.report.entries)
	}
}

func TestDecideProblemsKeepThePublishedAssignment(t *testing.T) {
	group := testGroup(averagely, 6)
	obs := world([]corev1.Pod{pod("p0"), pod("p1")})
	obs = applied(group, obs, decide(group, obs, env(group, t0)))
	bad := *obs
	bad.pods = append(slices.Clone(obs.pods), pod("p2", withAnnotation(v1alpha1.WeightAnnotation, "x")))
	d := decide(group, &bad, env(group, t0))
	if d.report.problem == nil || d.report.problem.Reason != v1alpha1.ReasonInvalidMemberAnnotation || len(d.write.configMaps) != 0 || d.report.generation != 1 || len(d.report.entries) != 2 {
		t.Fatalf("problem %v, %d writes, generation %d, %d entries; want the published assignment kept", d.report.problem, len(d.write.configMaps), d.report.generation, len(d.report.entries))
	}

	byConfig := testGroup(v1alpha1.Strategy{Type: v1alpha1.ByConfig, ByConfig: &v1alpha1.ByConfigParameters{Assignments: []v1alpha1.MemberAssignment{
		{Member: "p0", Queues: []v1alpha1.QueueReference{{Topic: "t", Broker: "b", QueueID: 9}}},
	}}}, 6)
	d = decide(byConfig, world([]corev1.Pod{pod("p0")}), env(byConfig, t0))
	if d.report.problem == nil || d.report.problem.Reason != v1alpha1.ReasonInvalidStrategyParameters || !strings.HasPrefix(d.report.problem.Message, `spec.strategy.byConfig.assignments["p0"][0]`) {
		t.Fatalf("problem %v, want InvalidStrategyParameters naming spec.strategy.byConfig.assignments[\"p0\"][0]", d.report.problem)
	}
}

func TestDecideShardsLargeAssignments(t *testing.T) {
	group := testGroup(v1alpha1.Strategy{Type: v1alpha1.AveragelyByCircle}, 65536)
	var pods []corev1.Pod
	for i := range 4000 {
		pods = append(pods, pod(fmt.Sprintf("consumer-%04d", i)))
	}
	obs := world(pods)
	d := decide(group, obs, env(group, t0))
	if d.report.problem != nil || len(d.write.configMaps) < 3 || d.write.configMaps[len(d.write.configMaps)-1].Name != "g-assignment" {
		t.Fatalf("problem %v, %d writes; want shards and the index last", d.report.problem, len(d.write.configMaps))
	}
	obs = applied(group, obs, d)
	if len(obs.published.Tampered) > 0 || len(obs.published.Entries) != 4000 {
		t.Fatalf("the sharded assignment reads back with %v and %d entries", obs.published.Tampered, len(obs.published.Entries))
	}
	small := *obs
	small.pods = pods[:10]
	small.podsByName = map[string]*corev1.Pod{}
	for i := range small.pods {
		small.podsByName[small.pods[i].Name] = &small.pods[i]
	}
	group.Spec.Handoff.Mode = v1alpha1.Immediate
	d = decide(group, &small, env(group, t0))
	if len(d.write.configMaps) != 1 || len(d.write.deleteShards) != len(obs.shards) {
		t.Fatalf("shrinking: %d writes, %d of %d shards deleted", len(d.write.configMaps), len(d.write.deleteShards), len(obs.shards))
	}
}

func TestDecideBroadcastingGivesEveryQueueAtOnce(t *testing.T) {
	group := testGroup(averagely, 4)
	group.Spec.MessageModel = v1alpha1.Broadcasting
	obs := world([]corev1.Pod{pod("p0")}, lease("p0", 0, nil, t0))
	obs = applied(group, obs, decide(group, obs, env(group, t0)))
	obs.leases = []protocol.LeaseState{lease("p0", 1, qs(0, 1, 2, 3), t0)}
	obs.pods = append(obs.pods, pod("p1"))
	obs.podsByName["p1"] = &obs.pods[1]
	d := decide(group, obs, env(group, t0))
	if len(entryOf(d, "p1")) != 4 || len(entryOf(d, "p0")) != 4 {
		t.Fatalf("p0 %v, p1 %v: want every queue for both", entryOf(d, "p0"), entryOf(d, "p1"))
	}
}

func FuzzDecodeHandoff(f *testing.F) {
	f.Add(handoffState{Revocations: []revocation{{Pod: "p", UID: "u", Generation: 2, At: t0, Queues: protocol.Compact(qs(1, 2))}}}.encode())
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
	group := testGroup(averagely, 4)
	obs := world([]corev1.Pod{pod("p0"), pod("p1")}, lease("p0", 0, nil, t0), lease("p1", 0, nil, t0))
	obs = applied(group, obs, decide(group, obs, env(group, t0)))
	future := lease("p1", 1, qs(2, 3), t0)
	future.HasClaim, future.Claim, future.ClaimErr = true, nil, fmt.Errorf("claim has format version 2; this reader knows version 1")
	obs.leases = []protocol.LeaseState{lease("p0", 1, qs(0, 1), t0), future}
	// p1 leaves: its queues would go to p0, but p1 may be reading anything.
	obs.pods = obs.pods[:1]
	d := decide(group, obs, env(group, t0.Add(time.Second)))
	if len(entryOf(d, "p0")) != 2 || d.report.tampered == nil || d.report.tampered.Reason != v1alpha1.ReasonClaimUnreadable || !strings.Contains(d.report.tampered.Message, "g.p1") {
		t.Fatalf("p0 %v, tampered %v; want p1's queues held back and ClaimUnreadable naming its Lease", entryOf(d, "p0"), d.report.tampered)
	}
}

// TestDecideUnreadableClaimsProveNothing: a member whose own claim cannot be read is not known to hold
// anything, so another incarnation that may hold anything still keeps queues from it. (Found by the
// randomized handoff test: a force-deleted, cut-off pod's claim and its successor's claim both junk.)
func TestDecideUnreadableClaimsProveNothing(t *testing.T) {
	group := testGroup(averagely, 4)
	obs := world([]corev1.Pod{pod("p0"), pod("p1")}, lease("p0", 0, nil, t0), lease("p1", 0, nil, t0))
	obs = applied(group, obs, decide(group, obs, env(group, t0)))
	junk := func(l protocol.LeaseState) protocol.LeaseState {
		l.Claim, l.ClaimErr = nil, fmt.Errorf("decoding claim: junk")
		return l
	}
	// p1 was force-deleted while cut off: its Lease still stands. Someone filled p1's claim with junk and
	// deleted the assignment; p0's claim is junk as well.
	obs.leases = []protocol.LeaseState{junk(lease("p0", 1, qs(0, 1), t0)), junk(lease("p1", 1, qs(2, 3), t0))}
	obs.pods = obs.pods[:1]
	obs.podsByName = map[string]*corev1.Pod{"p0": &obs.pods[0]}
	obs.index = nil
	obs.setPublished(protocol.ReadPublished("g", nil, nil))
	group.Status.AssignmentGeneration = 1
	d := decide(group, obs, env(group, t0.Add(time.Second)))
	if got := entryOf(d, "p0"); len(got) != 0 {
		t.Fatalf("p0 gets %v while p1, cut off, may still read anything; want nothing until the claims read again", got)
	}
}

// TestDecideLeavesItsObservationAsRead: a Lease acknowledging a generation never published is counted as
// acknowledging none, in the decision's own copy; the observation it was given stays as read.
func TestDecideLeavesItsObservationAsRead(t *testing.T) {
	group := testGroup(averagely, 6)
	observe := func() *observation {
		return world([]corev1.Pod{pod("p0"), pod("p1")}, lease("p0", 1_000_000, qs(0, 1), t0), lease("p1", 0, nil, t0))
	}
	obs, asRead := observe(), observe()
	d := decide(group, obs, env(group, t0))
	if d.report.suspectLeases == nil || !strings.Contains(d.report.suspectLeases.Message, "acknowledges generation 1000000") {
		t.Fatalf("the acknowledgement of a generation never published is not reported: %+v", d.report.suspectLeases)
	}
	if !reflect.DeepEqual(obs, asRead) {
		t.Fatalf("decide changed its observation: Leases %+v, were %+v", obs.leases, asRead.leases)
	}
}

// TestPlanHandoffKeepsASoonerLook: the handoff's next deadline does not push back a look again that an
// earlier step of the pass asked for.
func TestPlanHandoffKeepsASoonerLook(t *testing.T) {
	group := testGroup(averagely, 6)
	dc := newDecider(group, world([]corev1.Pod{pod("p0")}), env(group, t0))
	for _, step := range dc.planSteps() {
		if prob := step(); prob != nil {
			t.Fatalf("planning stopped: %v", prob)
		}
	}
	dc.d.lookAgainAt(t0, t0.Add(time.Second))
	if prob := dc.planHandoff(); prob != nil {
		t.Fatalf("planHandoff: %v", prob)
	}
	if dc.d.requeueAfter <= 0 || dc.d.requeueAfter > time.Second {
		t.Fatalf("after planHandoff the pass looks again after %v, want at most the 1s asked for before it", dc.d.requeueAfter)
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
		{"a recovery step still fits under the largest", protocol.MaxGeneration - recoveryStep, false},
		{"a recovery step no longer fits", protocol.MaxGeneration - recoveryStep + 1, true},
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
	made := revocation{Pod: "b", UID: "uid-b"}
	earlier := revocation{Pod: "a", UID: "uid-a", Generation: 3}
	for _, tc := range []struct {
		name  string
		state handoffState
		want  []revocation
	}{
		{"none", handoffState{}, nil},
		{"one made by this pass takes the generation that publishes it", handoffState{Revocations: []revocation{made}},
			[]revocation{{Pod: "b", UID: "uid-b", Generation: 7}}},
		{"an earlier one keeps its generation, in generation order", handoffState{Revocations: []revocation{made, earlier}},
			[]revocation{earlier, {Pod: "b", UID: "uid-b", Generation: 7}}},
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
