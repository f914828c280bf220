package member_test

import (
	"context"
	"errors"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	testingclock "k8s.io/utils/clock/testing"

	"github.com/consumergroup-operator/consumergroup-operator/pkg/member"
	"github.com/consumergroup-operator/consumergroup-operator/pkg/protocol"
)

// TestStopsReadingAtTwoThirdsOfTheLease drives the member's clock by hand: once the member has not
// renewed its Lease for two thirds of the duration it hands its application generation 0, leaving the
// last third for the application to stop before the operator may count the Lease as expired. A fake
// clientset stands in for the API server: what is tested is the member's timing, not the API.
func TestStopsReadingAtTwoThirdsOfTheLease(t *testing.T) {
	const ns, pod, uid = "shop", "consumer-0", "uid-0"
	cs := fake.NewClientset(oneQueueAssignment(ns, pod, uid))
	c, clock := runOnFakeClock(t, cs, ns, pod, uid)

	cs.PrependReactor("update", "leases", func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, errors.New("the API server cannot be reached (injected)")
	})
	clock.Step(1900 * time.Millisecond) // a renewal, failed; 1.9 s since the last one that succeeded
	time.Sleep(100 * time.Millisecond)
	if a := c.Current(); a.Generation != 1 {
		t.Fatalf("before two thirds of the lease duration the member holds %+v", a)
	}
	clock.Step(200 * time.Millisecond) // 2.1 s: past two thirds of 3 s
	poll(t, func() bool { return c.Current().Generation == 0 })
	if reason := c.Status().Reason; !strings.Contains(reason, "has not been renewed for 2s") {
		t.Fatalf("reason %q", reason)
	}
}

// oneQueueAssignment is group "orders"'s assignment at generation 1, giving pod (UID uid) one queue.
func oneQueueAssignment(ns, pod, uid string) *corev1.ConfigMap {
	entry := protocol.NewEntry(pod, uid, 1, []protocol.Queue{{Topic: "orders", Broker: "a", ID: 0}})
	return &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: protocol.AssignmentName("orders"), ResourceVersion: "1",
			Annotations: map[string]string{protocol.GenerationAnnotation: "1"}},
		Data: map[string]string{pod: string(entry.Encode())},
	}
}

// runOnFakeClock runs a member of group "orders" for pod, with a 3 s Lease, on a fake clock that steps
// only when the test says so, until the test ends; it returns once generation 1 is in force (the first
// write took the Lease).
func runOnFakeClock(t *testing.T, cs *fake.Clientset, ns, pod, uid string) (*member.Client, *testingclock.FakeClock) {
	t.Helper()
	return runOnFakeClockFor(t, cs, ns, pod, uid, 3*time.Second)
}

// runOnFakeClockFor is runOnFakeClock with a Lease of the given duration.
func runOnFakeClockFor(t *testing.T, cs *fake.Clientset, ns, pod, uid string, leaseDuration time.Duration) (*member.Client, *testingclock.FakeClock) {
	t.Helper()
	clock := testingclock.NewFakeClock(time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC))
	c, err := member.New(cs, member.Config{Namespace: ns, Group: "orders", Pod: pod, PodUID: types.UID(uid), LeaseDuration: leaseDuration, Clock: clock})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	go func() { _ = c.Run(ctx) }()
	poll(t, func() bool { clock.Step(0); return c.Current().Generation == 1 })
	return c, clock
}

// poll waits, in real time, until done, for what runs on the member's goroutines.
func poll(t *testing.T, done func() bool) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); !done(); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("not done within 10 s")
		}
	}
}

// TestClaimsBeforeItReads: a generation that gives the member a queue its Lease does not claim yet
// reaches the application only once the Lease claims it. Otherwise, with the Lease unwritable (the pod
// cut off from the API server), the application would read a queue that its Lease, still claiming
// nothing, shows as free: a new pod of the same name, or the operator, could take it as released.
func TestClaimsBeforeItReads(t *testing.T) {
	const ns, pod, uid = "shop", "consumer-0", "uid-0"
	q0 := protocol.Queue{Topic: "orders", Broker: "a", ID: 0}
	assignment := func(generation int64, queues ...protocol.Queue) *corev1.ConfigMap {
		entry := protocol.NewEntry(pod, uid, generation, queues)
		return &corev1.ConfigMap{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: protocol.AssignmentName("orders"),
				Annotations: map[string]string{protocol.GenerationAnnotation: strconv.FormatInt(generation, 10)}},
			Data: map[string]string{pod: string(entry.Encode())},
		}
	}
	cs := fake.NewClientset(assignment(1))
	var cutOff atomic.Bool
	cs.PrependReactor("update", "leases", func(k8stesting.Action) (bool, runtime.Object, error) {
		if cutOff.Load() {
			return true, nil, errors.New("the API server cannot be reached (injected)")
		}
		return false, nil, nil
	})
	c, clock := runOnFakeClock(t, cs, ns, pod, uid)
	ctx := context.Background()

	cutOff.Store(true)
	if _, err := cs.CoreV1().ConfigMaps(ns).Update(ctx, assignment(2, q0), metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	poll(t, func() bool { return c.Status().PublishedGeneration == 2 })
	// It tries to write a claim for generation 2 at once, and fails.
	poll(t, func() bool { return claimWrites(cs) > 0 || c.Current().Generation == 2 })
	time.Sleep(100 * time.Millisecond)
	if a := c.Current(); a.Generation != 1 || len(a.Queues) != 0 {
		t.Fatalf("with its Lease claiming nothing, the member delivered %+v", a)
	}

	cutOff.Store(false)
	clock.Step(time.Second) // the next renewal, which carries the claim
	poll(t, func() bool { return c.Current().Generation == 2 })
	lease, err := cs.CoordinationV1().Leases(ns).Get(ctx, protocol.LeaseName("orders", pod), metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if s := protocol.ReadLease(lease); len(s.Claim) != 1 || s.Claim[0] != q0 {
		t.Fatalf("generation 2 delivered while the Lease claims %v", s.Claim)
	}
}

// claimWrites counts the Lease updates whose claim lists a queue.
func claimWrites(cs *fake.Clientset) int {
	n := 0
	for _, a := range cs.Actions() {
		if u, ok := a.(k8stesting.UpdateAction); ok && a.GetResource().Resource == "leases" {
			if l, ok := u.GetObject().(*coordinationv1.Lease); ok && len(protocol.ReadLease(l).Claim) > 0 {
				n++
			}
		}
	}
	return n
}

// TestStopsReadingWhenItCannotConfirmItsView: the member's reads of the assignment's resourceVersion fail
// while its Lease writes still succeed (a watch and reads cut off, or a hung view). Once it has not
// confirmed its view for the contact timeout it hands its application generation 0, although its Lease
// stands; its Lease promises the operator as much (stops-within-seconds: contact timeout plus stop timeout).
func TestStopsReadingWhenItCannotConfirmItsView(t *testing.T) {
	const ns, pod, uid = "shop", "consumer-0", "uid-0"
	cs := fake.NewClientset(oneQueueAssignment(ns, pod, uid))
	// A 30 s Lease is renewed every 10 s and fences the member after 20 s: what fences it first here is
	// contact alone.
	c, clock := runOnFakeClockFor(t, cs, ns, pod, uid, 30*time.Second)
	lease, err := cs.CoordinationV1().Leases(ns).Get(context.Background(), protocol.LeaseName("orders", pod), metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got := lease.Annotations[protocol.StopsWithinAnnotation]; got != "6" {
		t.Fatalf("the Lease promises %q seconds, want 6 (4 s contact timeout + 2 s stop timeout)", got)
	}

	var cutOff atomic.Bool
	cs.PrependReactor("get", "configmaps", func(k8stesting.Action) (bool, runtime.Object, error) {
		if cutOff.Load() {
			return true, nil, errors.New("the API server cannot be reached (injected)")
		}
		return false, nil, nil
	})
	cutOff.Store(true)
	for range 3 {
		clock.Step(time.Second) // a failed confirmation each second
		time.Sleep(50 * time.Millisecond)
	}
	if a := c.Current(); a.Generation != 1 {
		t.Fatalf("3 s after its last confirmation the member holds %+v", a)
	}
	clock.Step(1100 * time.Millisecond) // 4.1 s
	poll(t, func() bool { return c.Current().Generation == 0 })
	if reason := c.Status().Reason; !strings.Contains(reason, "has not confirmed for 4s") {
		t.Fatalf("reason %q", reason)
	}
	if lost := c.Status().ContactLost; !strings.Contains(lost, "the API server cannot be reached") {
		t.Fatalf("Status().ContactLost = %q; want it to say why (the agent's /healthz reports it)", lost)
	}

	cutOff.Store(false)
	clock.Step(time.Second)
	poll(t, func() bool { return c.Current().Generation == 1 })
	if lost := c.Status().ContactLost; lost != "" {
		t.Fatalf("after a confirmation Status().ContactLost = %q", lost)
	}
}

// TestANewPodTakesItsLeaseWithOneRequest: a pod whose name has no Lease creates it without reading it
// first, one request where a read and a create were two; a pod whose name has one (a restarted container)
// reads it once its create fails, and adopts it.
func TestANewPodTakesItsLeaseWithOneRequest(t *testing.T) {
	const ns, pod, uid = "billing", "consumer-1", "uid-1"
	leaseRequests := func(cs *fake.Clientset) []string {
		var verbs []string
		for _, a := range cs.Actions() {
			if a.GetResource().Resource == "leases" {
				verbs = append(verbs, a.GetVerb())
			}
		}
		return verbs
	}
	cs := fake.NewClientset(oneQueueAssignment(ns, pod, uid))
	runOnFakeClockFor(t, cs, ns, pod, uid, time.Hour)
	if got := leaseRequests(cs); len(got) == 0 || got[0] != "create" || slices.Contains(got, "get") {
		t.Fatalf("a new pod's Lease requests: %v, want a create and no read", got)
	}

	lease, err := cs.CoordinationV1().Leases(ns).Get(context.Background(), protocol.LeaseName("orders", pod), metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	restarted := fake.NewClientset(oneQueueAssignment(ns, pod, uid), lease)
	runOnFakeClockFor(t, restarted, ns, pod, uid, time.Hour)
	if got := leaseRequests(restarted); len(got) < 3 || strings.Join(got[:3], ",") != "create,get,update" {
		t.Fatalf("a restarted container's Lease requests: %v, want create (refused), get, update (adopted)", got)
	}
}
