//go:build envtest

package controllers

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/consumergroup-operator/consumergroup-operator/api/v1alpha1"
	"github.com/consumergroup-operator/consumergroup-operator/internal/testenv"
	"github.com/consumergroup-operator/consumergroup-operator/pkg/protocol"
)

// These tests reproduce faults of real clusters that break "no queue has two readers" unless safety rests
// on what the members claim: the assignment deleted or edited by someone else in the middle of a handoff,
// and a pod force-deleted while its process runs on, cut off from the API server. Each checks, from what
// the members' applications read and when (testenv.Ownership), that no queue ever had two readers.

// assertNoOverlap fails the test if any queue had two readers.
func assertNoOverlap(t *testing.T, own *testenv.Ownership) {
	t.Helper()
	if v := own.Violations(); len(v) > 0 {
		t.Fatalf("queues had two readers at once (%d times); first: %v", len(v), v[:min(len(v), 5)])
	}
}

// waitForGeneration waits until the assignment publishes a generation above after and returns it.
func waitForGeneration(t *testing.T, ns, group string, after int64) *corev1.ConfigMap {
	t.Helper()
	var cm *corev1.ConfigMap
	eventually(t, waitFor, func() error {
		cm = getAssignment(t, ns, group)
		if cm == nil {
			return fmt.Errorf("no assignment")
		}
		if p := protocol.ReadPublished(group, cm, nil); p.Generation <= after {
			return fmt.Errorf("generation %d, waiting for one above %d", p.Generation, after)
		}
		return nil
	})
	return cm
}

// eventMessages are the messages of the events of reason about group.
func eventMessages(t *testing.T, ns, group, reason string) []string {
	t.Helper()
	var list eventsv1.EventList
	must(t, k8s.List(context.Background(), &list, client.InNamespace(ns)))
	var out []string
	for _, e := range list.Items {
		if e.Regarding.Name == group && e.Reason == reason {
			out = append(out, e.Note)
		}
	}
	return out
}

// TestAssignmentDeletedMidHandoff deletes the assignment ConfigMap right after the operator revoked
// queues for a newcomer, while the members that must let go of them are still applying the revocation.
// Published again from nothing, the plan would give the newcomer those queues at once; the members'
// claims keep them until their readers acknowledged.
func TestAssignmentDeletedMidHandoff(t *testing.T) {
	ns, own, old := settledGroup(t, "d", 24, 60, 3, memberOptions)
	before := protocol.ReadPublished("d", getAssignment(t, ns, "d"), nil).Generation

	// The old members now take two seconds to apply anything; the newcomer applies at once.
	for _, m := range old {
		m.ApplyDelay.Store(int64(2 * time.Second))
	}
	startSimMember(t, "d", testenv.Pod(ns, "d-3", "d").Create(t, k8s), own)
	revoking := waitForGeneration(t, ns, "d", before)
	if !strings.Contains(revoking.Annotations[protocol.HandoffAnnotation], `"revocations"`) {
		t.Fatalf("generation after the join revokes nothing: %s", revoking.Annotations[protocol.HandoffAnnotation])
	}
	must(t, k8s.Delete(context.Background(), revoking, client.Preconditions{UID: &revoking.UID}))

	waitForSettled(t, ns, "d", own, 24, 4)
	assertNoOverlap(t, own)
	waitForEvent(t, ns, "d", v1alpha1.ReasonAssignmentDeleted)
	g := getGroup(t, ns, "d")
	if c := meta.FindStatusCondition(g.Status.Conditions, v1alpha1.ConditionTampered); c == nil || c.Status != metav1.ConditionFalse {
		t.Errorf("Tampered is %v once every member caught up, want False", c)
	}
}

// TestJunkInEverythingTheOperatorReads writes junk into every annotation and entry of the assignment, and
// into a member's claim, while a stuck member has a revocation pending. The revocation must not be
// forgotten: the stuck member's queues stay with it until it lets go (or its revoke timeout fences it),
// the junk is reported in a Warning event and the Tampered condition, and the assignment is restored.
func TestJunkInEverythingTheOperatorReads(t *testing.T) {
	ns, own, ms := settledGroup(t, "j", 12, 60, 2, memberOptions)
	stuck := ms[0]

	// j-0 stops acknowledging; a newcomer makes the operator revoke some of its queues.
	stuck.Acking.Store(false)
	startSimMember(t, "j", testenv.Pod(ns, "j-2", "j").Create(t, k8s), own)
	eventually(t, waitFor, func() error {
		if !strings.Contains(getAssignment(t, ns, "j").Annotations[protocol.HandoffAnnotation], `"pod":"j-0"`) {
			return fmt.Errorf("no revocation from j-0 yet")
		}
		return nil
	})
	held := own.Reading(stuck.Reader())

	editAssignment(t, ns, "j", func(cm *corev1.ConfigMap) {
		for k := range cm.Annotations {
			cm.Annotations[k] = "{junk"
		}
		for k := range cm.Data {
			cm.Data[k] = `{"version":1,"generation":1,"member":"x","queues":[{"topic":"t","broker":"b","ids":"0-11"}]}`
		}
	})
	junkClaim := func() {
		must(t, retry.RetryOnConflict(retry.DefaultRetry, func() error {
			var lease coordinationv1.Lease
			must(t, k8s.Get(context.Background(), types.NamespacedName{Namespace: ns, Name: protocol.LeaseName("j", "j-1")}, &lease))
			lease.Annotations[protocol.ClaimAnnotation] = "junk"
			lease.Annotations[protocol.AckedGenerationAnnotation] = "999"
			return k8s.Update(context.Background(), &lease)
		}))
	}
	junkClaim()

	// For a while the stuck member keeps everything it read, and nobody else is given any of it.
	time.Sleep(3 * time.Second)
	assertNoOverlap(t, own)
	if got := own.Reading(stuck.Reader()); len(got) != len(held) {
		t.Fatalf("the stuck member reads %d queues, %d before", len(got), len(held))
	}
	waitForEvent(t, ns, "j", v1alpha1.ReasonAssignmentEdited)
	if msgs := eventMessages(t, ns, "j", v1alpha1.ReasonAssignmentEdited); !strings.Contains(strings.Join(msgs, "\n"), "ConfigMap j-assignment") {
		t.Errorf("the Warning events do not name what changed: %q", msgs)
	}
	// j-1 writes its claim again at its next renewal, a second later: on a busy machine the operator's pass
	// may read its Lease only after that, and see nothing to report. The junk is written again until
	// a pass has seen it.
	eventually(t, waitFor, func() error {
		if len(eventMessages(t, ns, "j", v1alpha1.ReasonClaimUnreadable)) > 0 {
			return nil
		}
		junkClaim()
		return fmt.Errorf("no %s event for j yet", v1alpha1.ReasonClaimUnreadable)
	})
	if msgs := eventMessages(t, ns, "j", v1alpha1.ReasonClaimUnreadable); !strings.Contains(strings.Join(msgs, "\n"), protocol.LeaseName("j", "j-1")) {
		t.Errorf("the Warning events do not name the Lease whose claim is junk: %q", msgs)
	}

	// Once it acknowledges again, the group settles and reports itself intact.
	stuck.Acking.Store(true)
	startSimMember(t, "j", testenv.Pod(ns, "j-3", "j").Create(t, k8s), own)
	waitForSettled(t, ns, "j", own, 12, 4)
	waitForCondition(t, ns, "j", v1alpha1.ConditionTampered, metav1.ConditionFalse, v1alpha1.ReasonIntact)
	assertNoOverlap(t, own)
}

// TestForceDeletedPartitionedPod cuts a member off from the API server and force-deletes its pod, as one
// does for a pod on a node that stopped answering, then creates a pod of the same name. The old process
// reads on until its Lease runs out; its queues wait for that, and the new pod reads none of them before.
func TestForceDeletedPartitionedPod(t *testing.T) {
	ns, own, ms := settledGroup(t, "p", 12, 60, 3, memberOptions)
	cut := ms[1]
	held := own.Reading(cut.Reader())
	if len(held) == 0 {
		t.Fatal("p-1 reads nothing")
	}

	cut.Partition(true)
	must(t, k8s.Delete(context.Background(), cut.Pod, client.GracePeriodSeconds(0)))
	eventually(t, waitFor, func() error {
		if err := k8s.Get(context.Background(), client.ObjectKeyFromObject(cut.Pod), &corev1.Pod{}); !apierrors.IsNotFound(err) {
			return fmt.Errorf("pod p-1 still exists (%v)", err)
		}
		return nil
	})
	replacement := startSimMember(t, "p", testenv.Pod(ns, "p-1", "p").Create(t, k8s), own)

	// The partitioned process stops reading on its own when its Lease runs out; then the queues move.
	eventually(t, waitFor, func() error {
		if got := own.Reading(cut.Reader()); len(got) > 0 {
			return fmt.Errorf("the partitioned p-1 still reads %d queues", len(got))
		}
		return nil
	})
	waitForSettled(t, ns, "p", own, 12, 3)
	assertNoOverlap(t, own)
	if len(own.Reading(replacement.Reader())) == 0 {
		t.Error("the new p-1 reads nothing once settled")
	}
	// The old incarnation's Lease went once its claim lapsed; the new pod holds the Lease of its name.
	eventually(t, waitFor, func() error {
		var lease coordinationv1.Lease
		if err := k8s.Get(context.Background(), types.NamespacedName{Namespace: ns, Name: protocol.LeaseName("p", "p-1")}, &lease); err != nil {
			return err
		}
		if s := protocol.ReadLease(&lease); s.PodUID != replacement.Pod.UID {
			return fmt.Errorf("Lease p.p-1 is held by %s, want the new pod %s", s.PodUID, replacement.Pod.UID)
		}
		return nil
	})
}

// TestCrashedMemberReleasesAtOnce: when the kubelet reports a member's container terminated, its claim no
// longer stands, and its queues move without waiting for its Lease to expire.
func TestCrashedMemberReleasesAtOnce(t *testing.T) {
	// A lease duration far longer than the test waits.
	long := testenv.MemberOptions{LeaseDuration: 60 * time.Second, MaxClockSkew: testClockSkew, DrainAckTimeout: time.Second}
	ns, own, ms := settledGroup(t, "c", 8, 60, 2, long)
	crashed := ms[1]
	crashed.Stop()
	must(t, retry.RetryOnConflict(retry.DefaultRetry, func() error {
		must(t, k8s.Get(context.Background(), client.ObjectKeyFromObject(crashed.Pod), crashed.Pod))
		return testenv.MarkStopped(context.Background(), k8s, crashed.Pod)
	}))
	start := time.Now()
	waitForSettled(t, ns, "c", own, 8, 1)
	if took := time.Since(start); took > 20*time.Second {
		t.Fatalf("the crashed member's queues moved after %v, as if its Lease had to expire", took)
	}
	assertNoOverlap(t, own)
	eventually(t, waitFor, func() error {
		var lease coordinationv1.Lease
		err := k8s.Get(context.Background(), types.NamespacedName{Namespace: ns, Name: protocol.LeaseName("c", "c-1")}, &lease)
		if apierrors.IsNotFound(err) {
			return nil
		}
		return fmt.Errorf("the crashed member's Lease is still there (%v)", err)
	})
}
