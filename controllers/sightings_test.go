package controllers

import (
	"context"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"

	"github.com/consumergroup-operator/consumergroup-operator/pkg/protocol"
)

func TestSight(t *testing.T) {
	const skew = time.Second
	at := func(s int) time.Time { return t0.Add(time.Duration(s) * time.Second) }
	// renewed is pod's Lease (UID lease-<pod>, 15 s) as written with renewTime written.
	renewed := func(pod string, written time.Time) protocol.LeaseState { return lease(pod, 1, qs(0), written) }
	type pass struct {
		now  time.Time
		read []protocol.LeaseState
		// want is each Lease counted, by name, with the renewal time the operator counts; vanished and
		// backwards name Leases.
		want      map[string]time.Time
		vanished  []string
		backwards []string
	}
	cases := []struct {
		name   string
		passes []pass
	}{
		{"first sight counts as renewed now, whatever the Lease says", []pass{
			{now: at(100), read: []protocol.LeaseState{renewed("a", at(-3600)), renewed("b", at(7200))},
				want: map[string]time.Time{"g.a": at(100), "g.b": at(100)}},
		}},
		{"an unchanged renewTime keeps its sighting; a new one is seen now", []pass{
			{now: at(0), read: []protocol.LeaseState{renewed("a", at(0))}, want: map[string]time.Time{"g.a": at(0)}},
			{now: at(10), read: []protocol.LeaseState{renewed("a", at(0))}, want: map[string]time.Time{"g.a": at(0)}},
			{now: at(12), read: []protocol.LeaseState{renewed("a", at(5))}, want: map[string]time.Time{"g.a": at(12)}},
		}},
		{"a renewTime set back counts as a renewal and is reported", []pass{
			{now: at(0), read: []protocol.LeaseState{renewed("a", at(0))}, want: map[string]time.Time{"g.a": at(0)}},
			{now: at(10), read: []protocol.LeaseState{renewed("a", at(-3600))}, want: map[string]time.Time{"g.a": at(10)}, backwards: []string{"g.a"}},
		}},
		{"a vanished Lease stands until its duration passes on the operator's clock", []pass{
			{now: at(0), read: []protocol.LeaseState{renewed("a", at(0)), renewed("b", at(0))}, want: map[string]time.Time{"g.a": at(0), "g.b": at(0)}},
			{now: at(5), read: []protocol.LeaseState{renewed("b", at(0))}, want: map[string]time.Time{"g.a": at(0), "g.b": at(0)}, vanished: []string{"g.a"}},
			{now: at(15), read: []protocol.LeaseState{renewed("b", at(0))}, want: map[string]time.Time{"g.a": at(0), "g.b": at(0)}, vanished: []string{"g.a"}},
			{now: at(16), read: []protocol.LeaseState{renewed("b", at(0))}, want: map[string]time.Time{"g.b": at(0)}},
		}},
		{"a Lease written again by the same incarnation replaces the vanished one", []pass{
			{now: at(0), read: []protocol.LeaseState{renewed("a", at(0))}, want: map[string]time.Time{"g.a": at(0)}},
			{now: at(3), read: []protocol.LeaseState{withLeaseUID(renewed("a", at(3)), "lease-a2")}, want: map[string]time.Time{"g.a": at(3)}},
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var prev map[types.UID]sighting
			for i, p := range c.passes {
				var out sightedLeases
				prev, out = sight(prev, p.read, p.now, skew)
				got := map[string]time.Time{}
				var vanished []string
				for _, l := range out.leases {
					got[l.Name] = l.RenewTime
					if out.vanished[l.UID] {
						vanished = append(vanished, l.Name)
					}
				}
				if len(got) != len(p.want) || len(out.leases) != len(p.want) {
					t.Fatalf("pass %d counts %v, want %v", i, got, p.want)
				}
				for name, w := range p.want {
					if !got[name].Equal(w) {
						t.Fatalf("pass %d counts %s renewed at %v, want %v", i, name, got[name].Sub(t0), w.Sub(t0))
					}
				}
				if !slices.Equal(vanished, p.vanished) || !slices.Equal(out.backwards, p.backwards) {
					t.Fatalf("pass %d: vanished %v, backwards %v; want %v, %v", i, vanished, out.backwards, p.vanished, p.backwards)
				}
			}
		})
	}
}

func withLeaseUID(l protocol.LeaseState, uid string) protocol.LeaseState {
	l.UID = types.UID(uid)
	return l
}

// A member keeps the queues its own claim lists even when another Lease claims them too; a queue it does
// not claim waits while another claims it, and, with nothing published, a queue nobody claims waits for
// the recovery.
func TestHandoffKeepsWhatAMemberClaims(t *testing.T) {
	group := testGroup(averagely, 4)
	forged := lease("ghost", 1, qs(0, 1, 2), t0)
	obs := world([]corev1.Pod{pod("p0")}, lease("p0", 1, qs(0, 1), t0), forged)
	d := decide(group, obs, env(group, t0))
	if got := entryOf(d, "p0"); !slices.Equal(got, qs(0, 1)) {
		t.Fatalf("p0 gets %v; want its claimed 0 and 1 kept, 2 held back for the other claim, 3 for the recovery", got)
	}
}

func TestAckCeiling(t *testing.T) {
	group := testGroup(averagely, 2)
	group.Status.AssignmentGeneration = 7
	obs := world([]corev1.Pod{pod("p0")}, lease("p0", 7+2*recoveryStep+1, qs(0, 1), t0))
	d := decide(group, obs, env(group, t0))
	if d.generation > 7+recoveryStep || d.suspectLeases == nil || d.suspectLeases.Reason != ReasonLeaseTampered {
		t.Fatalf("an acknowledgement above any published generation gave generation %d, finding %v", d.generation, d.suspectLeases)
	}
	if l := d.memberLeases["p0"]; l == nil || l.AckedGeneration != 0 {
		t.Fatalf("the acknowledgement was counted: %+v", l)
	}
}

func TestGenerationExhausted(t *testing.T) {
	group := testGroup(averagely, 2)
	group.Status.AssignmentGeneration = protocol.MaxGeneration
	d := decide(group, world([]corev1.Pod{pod("p0")}), env(group, t0))
	if d.problem == nil || d.problem.Reason != ReasonGenerationExhausted || d.rebalanced || d.generation < 0 {
		t.Fatalf("problem %v, rebalanced %v, generation %d", d.problem, d.rebalanced, d.generation)
	}
}

// A write that meets a newer object is retried quickly a few times, then through the controller's
// exponential backoff; a pass that gets through starts the count again.
func TestRetryBacksOffWhenAWriteKeepsFailing(t *testing.T) {
	r := &ConsumerGroupReconciler{}
	key := types.NamespacedName{Namespace: "ns", Name: "g"}
	exists := apierrors.NewAlreadyExists(schema.GroupResource{Resource: "configmaps"}, "g-assignment-0")
	for i := 1; i <= maxQuickRetries; i++ {
		if res, err := r.retry(context.Background(), key, "assignment", exists); err != nil || res.RequeueAfter != conflictRetry {
			t.Fatalf("retry %d: %v, %v; want a quick retry", i, res, err)
		}
	}
	if _, err := r.retry(context.Background(), key, "assignment", exists); err == nil {
		t.Fatalf("retry %d was quick again: a write in the way would be retried every %v for ever", maxQuickRetries+1, conflictRetry)
	}
	r.quickRetries.reset(key)
	if res, err := r.retry(context.Background(), key, "assignment", exists); err != nil || res.RequeueAfter != conflictRetry {
		t.Fatalf("after a pass that got through: %v, %v; want a quick retry", res, err)
	}
}
