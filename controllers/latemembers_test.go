package controllers

import (
	"context"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/workqueue"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/consumergroup-operator/consumergroup-operator/internal/fixture"
	"github.com/consumergroup-operator/consumergroup-operator/internal/observe"
	"github.com/consumergroup-operator/consumergroup-operator/pkg/protocol"
)

// promisingLease is the Lease of pod's member with a 60 s duration (a renewal every 20 s, overdue 30 s
// after the last seen) and a promise, renewed at renewed.
func promisingLease(pod string, renewed time.Time) *coordinationv1.Lease {
	m := protocol.MemberLease{Group: "g", GroupUID: "group-uid", Pod: pod, PodUID: types.UID("uid-" + pod), Member: pod,
		Duration: time.Minute, StopsWithin: 6 * time.Second, Acked: 1, Claim: fixture.Qs(0)}
	l := m.Apply(nil, "ns", &renewed, &renewed)
	l.ResourceVersion, l.UID = "1", types.UID("lease-"+pod)
	return l
}

// TestLateMembersWakeAGroupOnlyWhenAMemberIsOverdue: a group's member timer, set by a pass to its members'
// earliest deadline, is set again when renewals seen since moved that deadline, and wakes the group once
// a member is overdue; a group forgotten is left alone.
func TestLateMembersWakeAGroupOnlyWhenAMemberIsOverdue(t *testing.T) {
	const skew = time.Second
	clk := clocktesting.NewFakeClock(fixture.T0)
	var m memory
	group := types.NamespacedName{Namespace: "ns", Name: "g"}
	saw := func(l *coordinationv1.Lease) {
		m.WithSightings(group, clk.Now(), func(s *observe.Sightings) { s.Saw(l, clk.Now()) })
	}
	l := newLateMembers(&m, clk, skew)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	saw(promisingLease("a", clk.Now()))
	clk.Step(5 * time.Second)
	saw(promisingLease("b", clk.Now()))
	// The pass at 5 s finds a's deadline, 30 s, the earliest.
	l.arm(group, clk.Now(), fixture.T0.Add(30*time.Second))
	clk.Step(15 * time.Second)
	saw(promisingLease("a", clk.Now())) // a renews at 20 s: overdue at 50 s now
	clk.Step(10 * time.Second)          // 30 s
	fire(t, l, group)
	if len(l.woken) != 0 {
		t.Fatalf("woke the group at 30 s: a renewed at 20 s, and b is due at 35 s")
	}
	clk.Step(5 * time.Second) // 35 s: b is overdue; the timer was set again for it
	fire(t, l, group)
	if len(l.woken) != 1 {
		t.Fatalf("woken %d times at b's deadline, want once", len(l.woken))
	}
	if e := <-l.woken; e.Object.GetName() != "g" || e.Object.GetNamespace() != "ns" {
		t.Fatalf("woke %s/%s", e.Object.GetNamespace(), e.Object.GetName())
	}

	// The pass that b's deadline woke, at 35 s, acted on it; the next is a's, at 50 s.
	l.arm(group, clk.Now(), fixture.T0.Add(50*time.Second))
	clk.Step(15 * time.Second)
	fire(t, l, group)
	if len(l.woken) != 1 {
		t.Fatalf("woken %d times at a's deadline, want once", len(l.woken))
	}
	<-l.woken
	m.forget(group)
	l.check(ctx, group)
	if len(l.woken) != 0 {
		t.Fatalf("woke a group that is gone")
	}
}

// fire waits until group's timer falls due, and runs its check as Start would.
func fire(t *testing.T, l *lateMembers, group types.NamespacedName) {
	t.Helper()
	fireDue(t, l.queue, group, l.check)
}

// fireDue waits until want's timer in q falls due, and runs check on it as runDeadlines would.
func fireDue[T comparable](t *testing.T, q workqueue.TypedDelayingInterface[T], want T, check func(context.Context, T)) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for q.Len() == 0 && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	if q.Len() == 0 {
		t.Fatalf("no timer fell due: %v's was not set", want)
	}
	got, _ := q.Get()
	if got != want {
		t.Fatalf("the timer that fell due is %v's, want %v's", got, want)
	}
	check(context.Background(), got)
	q.Done(got)
}
