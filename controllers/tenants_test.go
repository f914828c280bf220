//go:build envtest

package controllers

import (
	"context"
	"fmt"
	"runtime"
	"strings"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/consumergroup-operator/consumergroup-operator/api/v1alpha1"
	"github.com/consumergroup-operator/consumergroup-operator/internal/observe"
	"github.com/consumergroup-operator/consumergroup-operator/internal/plan"
	"github.com/consumergroup-operator/consumergroup-operator/internal/testenv"
	"github.com/consumergroup-operator/consumergroup-operator/pkg/protocol"
)

// These tests write what an untrusted tenant, a buggy client or a compromised consumer pod may write into
// a group's namespace, against the real API server and the operator, and check that it neither exhausts
// the operator's memory nor makes two pods read one queue, nor takes queues from a member that reads them.

// hostileQueues lists 16 brokers with every id: 1,048,576 queues in a few hundred bytes.
func hostileQueues() []protocol.BrokerQueues {
	var groups []protocol.BrokerQueues
	for b := range 16 {
		groups = append(groups, protocol.BrokerQueues{Topic: "t", Broker: fmt.Sprintf("b%02d", b), IDs: "0-65535"})
	}
	return groups
}

// createHostileLease creates a Lease labelled for group, for a pod that does not exist, whose claim and
// load report each name every id of 16 brokers.
func createHostileLease(t *testing.T, ns, group, pod string) {
	t.Helper()
	loads := make([]protocol.BrokerLoads, 0, 16)
	for _, g := range hostileQueues() {
		loads = append(loads, protocol.BrokerLoads{Topic: g.Topic, Broker: g.Broker, IDs: "0-65535", Loads: make([]float64, 65536)})
	}
	now := metav1.NewMicroTime(time.Now().Add(time.Hour))
	lease := &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{
			Name: protocol.LeaseName(group, pod), Namespace: ns, Labels: map[string]string{protocol.GroupLabel: group},
			Annotations: map[string]string{
				protocol.PodAnnotation:   pod,
				protocol.ClaimAnnotation: protocol.Claim{Version: protocol.ClaimVersion, PodUID: "uid-" + pod, Acked: 1, Queues: hostileQueues()}.Encode(),
				protocol.LoadAnnotation:  protocol.LoadReport{Version: protocol.LoadVersion, Queues: loads}.Encode(),
			},
		},
		Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To(pod), LeaseDurationSeconds: ptr.To[int32](3600), RenewTime: &now},
	}
	must(t, k8s.Create(context.Background(), lease))
}

// heapInUse is the operator process's live heap after a collection.
func heapInUse() uint64 {
	var m runtime.MemStats
	runtime.GC()
	runtime.GC()
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}

// TestHostileObjectsDoNotExhaustMemory writes 100 Leases whose claims and load reports name 1,048,576
// queues each, and a 1 MiB shard ConfigMap claiming to be the group's, whose entries each name every id of
// the spec's broker and far beyond. Read through the group's spec, they cost what the spec's 16 queues
// cost: the operator's heap stays within 64 MiB of what it was, and a member joining afterwards gets its
// queues in seconds.
func TestHostileObjectsDoNotExhaustMemory(t *testing.T) {
	ns, own, _ := settledGroup(t, "h", 16, 60, 2, memberOptions)
	base := heapInUse()
	for i := range 100 {
		createHostileLease(t, ns, "h", fmt.Sprintf("ghost-%03d", i))
	}
	g := getGroup(t, ns, "h")
	data := map[string]string{}
	entry := fmt.Sprintf(`{"version":1,"generation":%d,"member":"x","queues":[{"topic":"t","broker":"b","ids":"0-65535"}]}`, g.Status.AssignmentGeneration)
	for i := 0; len(data)*(len(entry)+12) < 1<<20-64<<10; i++ {
		data[fmt.Sprintf("pod-%07d", i)] = entry
	}
	must(t, k8s.Create(context.Background(), &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{
			Name: protocol.ShardName("h", 0), Namespace: ns, Labels: map[string]string{protocol.GroupLabel: "h"},
			OwnerReferences: []metav1.OwnerReference{{APIVersion: protocol.GroupAPIVersion, Kind: protocol.GroupKind, Name: "h", UID: g.UID, Controller: ptr.To(true)}},
		},
		Data: data,
	}))

	joined := time.Now()
	startSimMember(t, "h", testenv.Pod(ns, "h-2", "h").Create(t, k8s), own)
	eventually(t, waitFor, func() error {
		if n := own.ReadingByPod("h-2"); n == 0 {
			return fmt.Errorf("the member that joined reads nothing")
		}
		return nil
	})
	t.Logf("a member joining beside 100 hostile Leases and a 1 MiB hostile shard read its first queue after %v", time.Since(joined).Round(time.Millisecond))
	// Several passes over the hostile objects, then the heap.
	time.Sleep(2 * time.Second)
	grown := int64(heapInUse()) - int64(base)
	t.Logf("heap grew by %d MiB", grown>>20)
	if grown > 64<<20 {
		t.Fatalf("the operator's heap grew by %d MiB with 100 hostile Leases and a 1 MiB hostile ConfigMap", grown>>20)
	}
	assertNoOverlap(t, own)
}

// TestRenewTimeSetBackDoesNotMoveQueues: another writer sets a member's renewTime an hour back. The
// operator times renewals by its own clock, so the member keeps its queues, nobody else is given them, and
// the Lease is reported.
func TestRenewTimeSetBackDoesNotMoveQueues(t *testing.T) {
	long := testenv.MemberOptions{LeaseDuration: 60 * time.Second, MaxClockSkew: testClockSkew, DrainAckTimeout: time.Second}
	ns, own, ms := settledGroup(t, "r", 12, 60, 2, long)
	victim := ms[1]
	held := own.Reading(victim.Reader())
	must(t, retry.RetryOnConflict(retry.DefaultRetry, func() error {
		var lease coordinationv1.Lease
		must(t, k8s.Get(context.Background(), types.NamespacedName{Namespace: ns, Name: protocol.LeaseName("r", "r-1")}, &lease))
		lease.Spec.RenewTime = ptr.To(metav1.NewMicroTime(time.Now().Add(-time.Hour)))
		return k8s.Update(context.Background(), &lease)
	}))
	// A pod joining makes the operator plan again while the Lease says an hour ago.
	startSimMember(t, "r", testenv.Pod(ns, "r-2", "r").Create(t, k8s), own)
	waitForEvent(t, ns, "r", v1alpha1.ReasonLeaseTampered)
	if msgs := eventMessages(t, ns, "r", v1alpha1.ReasonLeaseTampered); !strings.Contains(strings.Join(msgs, "\n"), protocol.LeaseName("r", "r-1")) {
		t.Errorf("the Warning events do not name the Lease set back: %q", msgs)
	}
	waitForSettled(t, ns, "r", own, 12, 3)
	assertNoOverlap(t, own)
	if lost := len(held) - len(own.Reading(victim.Reader())); lost > len(held)-4 {
		t.Errorf("the member whose renewTime was set back went from %d queues to %d", len(held), len(held)-lost)
	}
}

// TestForgedClaimDoesNotTakeQueues: a Lease for a pod that does not exist claims a member's queues, with
// a renewTime an hour ahead. The member keeps reading them: keeping a queue adds no reader, and taking it
// away would not stop the forged claimant.
func TestForgedClaimDoesNotTakeQueues(t *testing.T) {
	ns, own, ms := settledGroup(t, "f", 8, 60, 2, memberOptions)
	queues := own.Reading(ms[0].Reader())
	ahead := metav1.NewMicroTime(time.Now().Add(time.Hour))
	must(t, k8s.Create(context.Background(), &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{
			Name: protocol.LeaseName("f", "nobody"), Namespace: ns, Labels: map[string]string{protocol.GroupLabel: "f"},
			Annotations: map[string]string{protocol.PodAnnotation: "nobody", protocol.AckedGenerationAnnotation: "1",
				protocol.ClaimAnnotation: protocol.NewClaim("uid-nobody", 1, queues).Encode()},
		},
		Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To("nobody"), LeaseDurationSeconds: ptr.To[int32](3), RenewTime: &ahead},
	}))
	// The Lease's creation starts a pass that plans with the forged claim in sight.
	deadline := time.Now().Add(4 * time.Second)
	for time.Now().Before(deadline) {
		for _, q := range queues {
			if own.Readers(q) == 0 {
				t.Fatalf("queue %v went unread after a forged Lease claimed it", q)
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	assertNoOverlap(t, own)
	// The forged claim is never renewed: once it lapses on the operator's clock the group settles.
	waitForSettled(t, ns, "f", own, 8, 2)
}

// TestVanishedLeaseIsNotEvidence deletes the Lease of a member cut off from the API server, then
// force-deletes its pod. The process reads on until it fences itself; its queues must wait for that.
func TestVanishedLeaseIsNotEvidence(t *testing.T) {
	ns, own, ms := settledGroup(t, "v", 12, 60, 3, memberOptions)
	cut := ms[1]
	if len(own.Reading(cut.Reader())) == 0 {
		t.Fatal("v-1 reads nothing")
	}
	cut.Partition(true)
	must(t, k8s.Delete(context.Background(), &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: protocol.LeaseName("v", "v-1")}}))
	must(t, k8s.Delete(context.Background(), cut.Pod, client.GracePeriodSeconds(0)))
	eventually(t, waitFor, func() error {
		if err := k8s.Get(context.Background(), client.ObjectKeyFromObject(cut.Pod), &corev1.Pod{}); !apierrors.IsNotFound(err) {
			return fmt.Errorf("pod v-1 still exists (%v)", err)
		}
		return nil
	})
	eventually(t, waitFor, func() error {
		if got := own.Reading(cut.Reader()); len(got) > 0 {
			return fmt.Errorf("the partitioned v-1 still reads %d queues", len(got))
		}
		return nil
	})
	waitForSettled(t, ns, "v", own, 12, 2)
	assertNoOverlap(t, own)
}

// TestForeignConfigMapIsNotAdopted: a ConfigMap a user created under the name of a group's assignment is
// neither written, adopted nor deleted; the group says which object is in the way, and publishes once it
// is gone.
func TestForeignConfigMapIsNotAdopted(t *testing.T) {
	ns := newNamespace(t)
	startManager(t, ns)
	theirs := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: protocol.AssignmentName("o"), Namespace: ns}, Data: map[string]string{"settings": "keep me"}}
	must(t, k8s.Create(context.Background(), theirs))
	cooperativeGroup(ns, "o", 4, 30).Create(t, k8s)
	testenv.Pod(ns, "o-0", "o").Create(t, k8s)

	g := waitForCondition(t, ns, "o", v1alpha1.ConditionStalled, metav1.ConditionTrue, v1alpha1.ReasonNotOwned)
	if c := meta.FindStatusCondition(g.Status.Conditions, v1alpha1.ConditionStalled); !strings.Contains(c.Message, theirs.Name) {
		t.Errorf("Stalled says %q, which does not name the ConfigMap", c.Message)
	}
	waitForEvent(t, ns, "o", v1alpha1.ReasonNotOwned)
	time.Sleep(time.Second)
	var now corev1.ConfigMap
	must(t, k8s.Get(context.Background(), client.ObjectKeyFromObject(theirs), &now))
	if now.Data["settings"] != "keep me" || len(now.Data) != 1 || len(now.OwnerReferences) != 0 || now.ResourceVersion != theirs.ResourceVersion {
		t.Fatalf("the user's ConfigMap was changed: data %v, owners %v", now.Data, now.OwnerReferences)
	}

	must(t, k8s.Delete(context.Background(), theirs))
	waitForCondition(t, ns, "o", v1alpha1.ConditionStalled, metav1.ConditionFalse, v1alpha1.ReasonHealthy)
	// The group's first generation is recorded in its status before it is published.
	eventually(t, waitFor, func() error {
		if cm := getAssignment(t, ns, "o"); cm == nil || !observe.ControlledBy(cm, getGroup(t, ns, "o")) {
			return fmt.Errorf("the group did not publish its own assignment once the user's ConfigMap was gone: %v", cm)
		}
		return nil
	})
}

// TestAcknowledgementAboveAnyGenerationIsIgnored: a member that stopped renewing has its Lease rewritten
// to acknowledge generation 2^50, in the annotation and in its claim. The acknowledgement neither moves the
// group's generations up nor counts, and is reported.
func TestAcknowledgementAboveAnyGenerationIsIgnored(t *testing.T) {
	ns, own, ms := settledGroup(t, "a", 6, 60, 3, memberOptions)
	before := getGroup(t, ns, "a").Status.AssignmentGeneration
	ms[0].Stop()
	huge := int64(1) << 50
	must(t, retry.RetryOnConflict(retry.DefaultRetry, func() error {
		var lease coordinationv1.Lease
		must(t, k8s.Get(context.Background(), types.NamespacedName{Namespace: ns, Name: protocol.LeaseName("a", "a-0")}, &lease))
		c, queues, err := protocol.DecodeClaim(lease.Annotations[protocol.ClaimAnnotation])
		must(t, err)
		lease.Annotations[protocol.ClaimAnnotation] = protocol.NewClaim(c.PodUID, huge, queues).Encode()
		lease.Annotations[protocol.AckedGenerationAnnotation] = fmt.Sprint(huge)
		return k8s.Update(context.Background(), &lease)
	}))
	waitForEvent(t, ns, "a", v1alpha1.ReasonLeaseTampered)
	// The stopped member's Lease lapses and its queues move to the two others.
	waitForSettled(t, ns, "a", own, 6, 2)
	if after := getGroup(t, ns, "a").Status.AssignmentGeneration; after > before+plan.RecoveryStep {
		t.Fatalf("generation went from %d to %d after a Lease acknowledged %d", before, after, huge)
	}
	assertNoOverlap(t, own)
}

// TestClaimOutsideTheSpecIsReported: a stopped member's Lease is rewritten to claim, beside its own
// queues, 100 queues of a broker the spec does not name, while acknowledging the published generation.
// They are counted, never listed, and the Warning event names the Lease.
func TestClaimOutsideTheSpecIsReported(t *testing.T) {
	ns, own, ms := settledGroup(t, "o", 6, 60, 3, memberOptions)
	ms[0].Stop()
	must(t, retry.RetryOnConflict(retry.DefaultRetry, func() error {
		var lease coordinationv1.Lease
		must(t, k8s.Get(context.Background(), types.NamespacedName{Namespace: ns, Name: protocol.LeaseName("o", "o-0")}, &lease))
		c, queues, err := protocol.DecodeClaim(lease.Annotations[protocol.ClaimAnnotation])
		must(t, err)
		for id := range int32(100) {
			queues = append(queues, protocol.Queue{Topic: "t", Broker: "not-in-spec", ID: id})
		}
		lease.Annotations[protocol.ClaimAnnotation] = protocol.NewClaim(c.PodUID, c.Acked, queues).Encode()
		return k8s.Update(context.Background(), &lease)
	}))
	waitForEvent(t, ns, "o", v1alpha1.ReasonLeaseTampered)
	msgs := strings.Join(eventMessages(t, ns, "o", v1alpha1.ReasonLeaseTampered), "\n")
	if !strings.Contains(msgs, protocol.LeaseName("o", "o-0")+": its claim or load report lists 100 queues outside the spec") {
		t.Errorf("the Warning events do not report the 100 queues outside the spec: %q", msgs)
	}
	waitForSettled(t, ns, "o", own, 6, 2)
	assertNoOverlap(t, own)
}
