package controllers

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"

	"github.com/consumergroup-operator/consumergroup-operator/api/v1alpha1"
	"github.com/consumergroup-operator/consumergroup-operator/pkg/allocate"
	"github.com/consumergroup-operator/consumergroup-operator/pkg/protocol"
)

// rawLease is the Lease the member on pod (UID "uid-<pod>") writes, renewed at renewed with a 15 s
// duration, as the API server stores it, with the Lease UID uid.
func rawLease(pod, uid string, renewed time.Time) *coordinationv1.Lease {
	m := protocol.MemberLease{Group: "g", GroupUID: "group-uid", Pod: pod, PodUID: types.UID("uid-" + pod), Member: pod,
		Duration: 15 * time.Second, Acked: 1, Claim: qs(0)}
	l := m.Apply(nil, "ns", &renewed, &renewed)
	l.ResourceVersion, l.UID = "1", types.UID(uid)
	return l
}

func TestSight(t *testing.T) {
	const skew = time.Second
	at := func(s int) time.Time { return t0.Add(time.Duration(s) * time.Second) }
	renewed := func(pod string, written time.Time) *coordinationv1.Lease { return rawLease(pod, "lease-"+pod, written) }
	type pass struct {
		// events are watch events seen before the pass, each at its own time.
		events []struct {
			at    time.Time
			lease *coordinationv1.Lease
		}
		now  time.Time
		read []*coordinationv1.Lease
		// want is each Lease counted, by name, with the renewal time the operator counts; vanished and
		// backwards name Leases.
		want      map[string]time.Time
		vanished  []string
		backwards []string
		// renewedBy, when set, is each Lease's RenewedBy, by name: what lateness counts from.
		renewedBy map[string]time.Time
	}
	event := func(at time.Time, l *coordinationv1.Lease) []struct {
		at    time.Time
		lease *coordinationv1.Lease
	} {
		return []struct {
			at    time.Time
			lease *coordinationv1.Lease
		}{{at, l}}
	}
	cases := []struct {
		name   string
		passes []pass
	}{
		{"first sight counts as renewed now, whatever the Lease says", []pass{
			{now: at(100), read: []*coordinationv1.Lease{renewed("a", at(-3600)), renewed("b", at(7200))},
				want: map[string]time.Time{"g.a": at(100), "g.b": at(100)}},
		}},
		{"an unchanged renewTime keeps its sighting; a new one is seen now", []pass{
			{now: at(0), read: []*coordinationv1.Lease{renewed("a", at(0))}, want: map[string]time.Time{"g.a": at(0)}},
			{now: at(10), read: []*coordinationv1.Lease{renewed("a", at(0))}, want: map[string]time.Time{"g.a": at(0)}},
			{now: at(12), read: []*coordinationv1.Lease{renewed("a", at(5))}, want: map[string]time.Time{"g.a": at(12)}},
		}},
		{"a renewal counts when its watch event arrived, not when the next pass reads it", []pass{
			{now: at(0), read: []*coordinationv1.Lease{renewed("a", at(0))}, want: map[string]time.Time{"g.a": at(0)}},
			{events: event(at(5), renewed("a", at(-1000))), now: at(14), read: []*coordinationv1.Lease{renewed("a", at(-1000))},
				want: map[string]time.Time{"g.a": at(5)}, backwards: []string{"g.a"}},
		}},
		{"a renewTime set back counts as a renewal and is reported", []pass{
			{now: at(0), read: []*coordinationv1.Lease{renewed("a", at(0))}, want: map[string]time.Time{"g.a": at(0)}},
			{now: at(10), read: []*coordinationv1.Lease{renewed("a", at(-3600))}, want: map[string]time.Time{"g.a": at(10)}, backwards: []string{"g.a"}},
		}},
		{"a vanished Lease stands until its duration passes on the operator's clock", []pass{
			{now: at(0), read: []*coordinationv1.Lease{renewed("a", at(0)), renewed("b", at(0))}, want: map[string]time.Time{"g.a": at(0), "g.b": at(0)}},
			{now: at(5), read: []*coordinationv1.Lease{renewed("b", at(0))}, want: map[string]time.Time{"g.a": at(0), "g.b": at(0)}, vanished: []string{"g.a"}},
			{now: at(15), read: []*coordinationv1.Lease{renewed("b", at(0))}, want: map[string]time.Time{"g.a": at(0), "g.b": at(0)}, vanished: []string{"g.a"}},
			{now: at(16), read: []*coordinationv1.Lease{renewed("b", at(0))}, want: map[string]time.Time{"g.b": at(0)}},
		}},
		{"a Lease seen only by its watch events stands after it vanishes", []pass{
			{events: event(at(2), renewed("a", at(2))), now: at(4), want: map[string]time.Time{"g.a": at(2)}, vanished: []string{"g.a"}},
			{now: at(18), want: map[string]time.Time{}},
		}},
		{"lateness counts a renewal seen after the fact from the time it states plus the skew, never later than seen", []pass{
			{now: at(100), read: []*coordinationv1.Lease{renewed("a", at(90)), renewed("b", at(7200)), renewed("c", at(100))},
				want:      map[string]time.Time{"g.a": at(100), "g.b": at(100), "g.c": at(100)},
				renewedBy: map[string]time.Time{"g.a": at(91), "g.b": at(100), "g.c": at(100)}},
			{now: at(105), read: []*coordinationv1.Lease{renewed("a", at(90)), renewed("b", at(7200)), renewed("c", at(100))},
				want:      map[string]time.Time{"g.a": at(100), "g.b": at(100), "g.c": at(100)},
				renewedBy: map[string]time.Time{"g.a": at(91), "g.b": at(100), "g.c": at(100)}},
		}},
		{"lateness counts a renewal seen as it happens from the sighting, whatever the Lease states", []pass{
			{now: at(0), read: []*coordinationv1.Lease{renewed("a", at(-50)), renewed("b", at(-50))},
				want: map[string]time.Time{"g.a": at(0), "g.b": at(0)}, renewedBy: map[string]time.Time{"g.a": at(-49), "g.b": at(-49)}},
			{events: event(at(5), renewed("a", at(-45))), now: at(10), read: []*coordinationv1.Lease{renewed("a", at(-45)), renewed("b", at(-40))},
				want: map[string]time.Time{"g.a": at(5), "g.b": at(10)}, renewedBy: map[string]time.Time{"g.a": at(5), "g.b": at(10)}},
		}},
		{"a vanished Lease seen after the fact keeps its lateness", []pass{
			{now: at(100), read: []*coordinationv1.Lease{renewed("a", at(95))}, want: map[string]time.Time{"g.a": at(100)}, renewedBy: map[string]time.Time{"g.a": at(96)}},
			{now: at(101), want: map[string]time.Time{"g.a": at(100)}, vanished: []string{"g.a"}, renewedBy: map[string]time.Time{"g.a": at(96)}},
		}},
		{"a Lease written again by the same incarnation replaces the vanished one", []pass{
			{now: at(0), read: []*coordinationv1.Lease{renewed("a", at(0))}, want: map[string]time.Time{"g.a": at(0)}},
			{now: at(3), read: []*coordinationv1.Lease{rawLease("a", "lease-a2", at(3))}, want: map[string]time.Time{"g.a": at(3)}},
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var s leaseSightings
			key := types.NamespacedName{Namespace: "ns", Name: "g"}
			for i, p := range c.passes {
				for _, e := range p.events {
					s.saw(key, e.lease, e.at)
				}
				out := s.observe(key, p.read, nil, p.now, skew)
				got, gotBy := map[string]time.Time{}, map[string]time.Time{}
				var vanished []string
				for _, l := range out.leases {
					got[l.Name], gotBy[l.Name] = l.RenewTime, l.RenewedBy
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
				for name, w := range p.renewedBy {
					if !gotBy[name].Equal(w) {
						t.Fatalf("pass %d counts %s late from %v, want %v", i, name, gotBy[name].Sub(t0), w.Sub(t0))
					}
				}
				if !slices.Equal(vanished, p.vanished) || !slices.Equal(out.backwards, p.backwards) {
					t.Fatalf("pass %d: vanished %v, backwards %v; want %v, %v", i, vanished, out.backwards, p.vanished, p.backwards)
				}
			}
		})
	}
}

// With nothing published, a member keeps the queues only its own claim lists; one another Lease claims
// too waits, as does a queue only the other claims, and a queue nobody claims waits for the recovery.
// (With trusted bookkeeping a member keeps its claimed queues whoever else claims them:
// TestForgedClaimDoesNotTakeQueues.)
func TestHandoffKeepsWhatAMemberClaims(t *testing.T) {
	group := testGroup(averagely, 4)
	forged := lease("ghost", 1, qs(1, 2), t0)
	obs := world([]corev1.Pod{pod("p0")}, lease("p0", 1, qs(0, 1), t0), forged)
	d := decide(group, obs, env(group, t0))
	if got := entryOf(d, "p0"); !slices.Equal(got, qs(0)) {
		t.Fatalf("p0 gets %v; want its claimed 0 kept, 1 and 2 held back for the other claim, 3 for the recovery", got)
	}
}

func TestAckCeiling(t *testing.T) {
	group := testGroup(averagely, 2)
	group.Status.AssignmentGeneration = 7
	obs := world([]corev1.Pod{pod("p0")}, lease("p0", 7+2*recoveryStep+1, qs(0, 1), t0))
	d := decide(group, obs, env(group, t0))
	if d.report.generation > 7+recoveryStep || d.report.suspectLeases == nil || d.report.suspectLeases.Reason != v1alpha1.ReasonLeaseTampered {
		t.Fatalf("an acknowledgement above any published generation gave generation %d, finding %v", d.report.generation, d.report.suspectLeases)
	}
	if l := d.report.memberLeases["p0"]; l == nil || l.AckedGeneration != 0 {
		t.Fatalf("the acknowledgement was counted: %+v", l)
	}
}

func TestGenerationExhausted(t *testing.T) {
	group := testGroup(averagely, 2)
	group.Status.AssignmentGeneration = protocol.MaxGeneration
	d := decide(group, world([]corev1.Pod{pod("p0")}), env(group, t0))
	if d.report.problem == nil || d.report.problem.Reason != v1alpha1.ReasonGenerationExhausted || d.report.rebalance.published || d.report.generation < 0 {
		t.Fatalf("problem %v, rebalanced %v, generation %d", d.report.problem, d.report.rebalance.published, d.report.generation)
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

// An operator that starts after a member's pod and Lease both vanished still holds back the queues its
// bookkeeping was revoking from that member, for one lease duration from its start: the member may be
// cut off and still reading them.
func TestRestartedOperatorHoldsBackRevokedQueuesOfAVanishedMember(t *testing.T) {
	group := testGroup(averagely, 4)
	p0, p1 := pod("p0"), pod("p1")
	both := world([]corev1.Pod{p0, p1}, lease("p0", 0, nil, t0), lease("p1", 0, nil, t0))
	first := decide(group, both, env(group, t0))
	settled := applied(group, both, first)
	settled.leases = []protocol.LeaseState{lease("p0", first.report.generation, entryOf(first, "p0"), t0), lease("p1", first.report.generation, entryOf(first, "p1"), t0)}
	held := entryOf(first, "p1")
	if len(held) == 0 {
		t.Fatal("p1 was given nothing")
	}

	// p1's pod is force-deleted while its Lease stands: its queues are revoked, not yet released.
	gone := *settled
	gone.pods = []corev1.Pod{p0}
	gone.podsByName = map[string]*corev1.Pod{"p0": &gone.pods[0]}
	revoking := decide(group, &gone, env(group, t0.Add(time.Second)))
	if !strings.Contains(applied(group, &gone, revoking).published.Handoff, `"pod":"p1"`) {
		t.Fatalf("no revocation from p1: %s", applied(group, &gone, revoking).published.Handoff)
	}

	// The operator restarts; p1's Lease was deleted meanwhile. Nothing but the bookkeeping names p1.
	restarted := applied(group, &gone, revoking)
	restarted.leases = []protocol.LeaseState{lease("p0", revoking.report.generation, entryOf(revoking, "p0"), t0.Add(2*time.Second))}
	now := t0.Add(3 * time.Second)
	restarted.sightedSince = now
	d := decide(group, restarted, env(group, now))
	for _, q := range held {
		if slices.Contains(entryOf(d, "p0"), q) {
			t.Fatalf("queue %v of the vanished p1 went to p0 at once after the restart: %v", q, entryOf(d, "p0"))
		}
	}
	after := *restarted
	after.leases = []protocol.LeaseState{lease("p0", revoking.report.generation, entryOf(revoking, "p0"), now.Add(16*time.Second))}
	later := decide(group, &after, env(group, now.Add(17*time.Second)))
	if len(entryOf(later, "p0")) != 4 {
		t.Fatalf("a lease duration after the restart p0 holds %v, want every queue", entryOf(later, "p0"))
	}
}

// An operator that starts and finds the assignment gone knows nothing of pods whose Lease vanished before
// it started: for one lease duration from its start, a queue nobody claims goes to nobody.
func TestRestartedOperatorWithoutBookkeepingWaitsALeaseDuration(t *testing.T) {
	group := testGroup(averagely, 4)
	group.Status.AssignmentGeneration = 5
	obs := world([]corev1.Pod{pod("p0")}, lease("p0", 5, qs(0), t0))
	obs.sightedSince = t0
	first := decide(group, obs, env(group, t0.Add(time.Second)))
	if !slices.Equal(entryOf(first, "p0"), qs(0)) || first.requeueAfter == 0 {
		t.Fatalf("right after the start p0 gets %v (look again in %v); want only what it claims", entryOf(first, "p0"), first.requeueAfter)
	}
	// The next pass trusts what the first published, and p0 acknowledged it: the recovery is over, yet
	// the queues nobody claims wait for the lease duration the first pass recorded.
	next := applied(group, obs, first)
	next.leases = []protocol.LeaseState{lease("p0", first.report.generation, qs(0), t0.Add(2*time.Second))}
	if d := decide(group, next, env(group, t0.Add(3*time.Second))); !slices.Equal(entryOf(d, "p0"), qs(0)) {
		t.Fatalf("before a lease duration from the start p0 gets %v", entryOf(d, "p0"))
	}
	next.leases = []protocol.LeaseState{lease("p0", first.report.generation, qs(0), t0.Add(16*time.Second))}
	if d := decide(group, next, env(group, t0.Add(17*time.Second))); len(entryOf(d, "p0")) != 4 {
		t.Fatalf("a lease duration after the start p0 gets %v, want every queue", entryOf(d, "p0"))
	}
}

func TestClaimsOutsideSpec(t *testing.T) {
	current := protocol.Published{Exists: true, Generation: 5}
	stale := protocol.Published{Exists: true, Generation: 5, Outside: 3}
	for _, tc := range []struct {
		name      string
		published protocol.Published
		acked     int64
		outside   int
		want      bool
	}{
		{"acknowledged a generation that lists none", current, 5, 2, true},
		{"acknowledged above it", current, 6, 2, true},
		{"nothing outside", current, 5, 0, false},
		{"still applying the generation that dropped them", current, 4, 2, false},
		{"the published generation predates the spec", stale, 5, 2, false},
		{"nothing published", protocol.Published{}, 5, 2, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := &decider{obs: &observation{published: tc.published}}
			l := protocol.LeaseState{AckedGeneration: tc.acked, Outside: tc.outside}
			if got := p.claimsOutsideSpec(l); got != tc.want {
				t.Fatalf("claimsOutsideSpec = %v, want %v", got, tc.want)
			}
		})
	}
}

// An operator that starts and finds the assignment gone, in a group whose every Lease promises to stop
// within 2 s, holds queues nobody claims until 2 s plus the margin after its own first write returned,
// not for the 60 s Lease: that write gave nothing to a pod it never saw. A group with a Lease that makes
// no promise waits the Lease's duration, as before.
func TestRestartedOperatorWithoutBookkeepingWaitsThePromise(t *testing.T) {
	for _, tc := range []struct {
		name    string
		promise time.Duration
		wantAt  time.Duration
	}{
		{"every Lease promises", 2 * time.Second, 2*time.Second + contactMargin},
		{"a Lease without a promise", 0, time.Minute},
	} {
		group := testGroup(averagely, 4)
		group.Status.AssignmentGeneration = 5
		obs := world([]corev1.Pod{pod("p0")}, promisingLease("p0", 5, qs(0), t0, tc.promise))
		obs.sightedSince = t0
		first := decide(group, obs, env(group, t0.Add(time.Second)))
		if !slices.Equal(entryOf(first, "p0"), qs(0)) {
			t.Fatalf("%s: right after the start p0 gets %v, want only what it claims", tc.name, entryOf(first, "p0"))
		}
		written := t0.Add(time.Second)
		next := applied(group, obs, first)
		next.firstWrittenAt = written
		at := func(d time.Duration) []allocate.Queue {
			next.leases = []protocol.LeaseState{promisingLease("p0", first.report.generation, qs(0), written.Add(d), tc.promise)}
			return entryOf(decide(group, next, env(group, written.Add(d))), "p0")
		}
		if got := at(tc.wantAt - 100*time.Millisecond); !slices.Equal(got, qs(0)) {
			t.Fatalf("%s: before %v from the first write p0 gets %v, want only what it claims", tc.name, tc.wantAt, got)
		}
		if got := at(tc.wantAt); len(got) != 4 {
			t.Fatalf("%s: %v after the first write p0 gets %v, want every queue", tc.name, tc.wantAt, got)
		}
	}
}
