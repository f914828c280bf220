package member_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
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
	entry := protocol.NewEntry(pod, uid, 1, []protocol.Queue{{Topic: "orders", Broker: "a", ID: 0}})
	cs := fake.NewClientset(&corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: protocol.AssignmentName("orders"), ResourceVersion: "1",
			Annotations: map[string]string{protocol.GenerationAnnotation: "1"}},
		Data: map[string]string{pod: string(entry.Encode())},
	})
	clock := testingclock.NewFakeClock(time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC))
	c, err := member.New(cs, member.Config{Namespace: ns, Group: "orders", Pod: pod, PodUID: uid, LeaseDuration: 3 * time.Second, Clock: clock})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() { _ = c.Run(ctx) }()

	// The first write takes the Lease; the clock steps only when the test says so.
	poll(t, func() bool { clock.Step(0); return c.Current().Generation == 1 })

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

// poll waits, in real time, until done, for what runs on the member's goroutines.
func poll(t *testing.T, done func() bool) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); !done(); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("not done within 10 s")
		}
	}
}
