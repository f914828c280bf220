package plan

import (
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/consumergroup-operator/consumergroup-operator/api/v1alpha1"
	"github.com/consumergroup-operator/consumergroup-operator/internal/fixture"
	"github.com/consumergroup-operator/consumergroup-operator/pkg/allocate"
	"github.com/consumergroup-operator/consumergroup-operator/pkg/protocol"
)

// With nothing published, a member keeps the queues only its own claim lists; one another Lease claims
// too waits, as does a queue only the other claims, and a queue nobody claims waits for the recovery.
// (With trusted bookkeeping a member keeps its claimed queues whoever else claims them:
// TestForgedClaimDoesNotTakeQueues.)
func TestHandoffKeepsWhatAMemberClaims(t *testing.T) {
	group := fixture.Group(averagely, 4)
	forged := fixture.Lease("ghost", 1, fixture.Qs(1, 2), fixture.T0)
	obs := world([]corev1.Pod{fixture.Pod("p0")}, fixture.Lease("p0", 1, fixture.Qs(0, 1), fixture.T0), forged)
	d := Decide(group, obs, env(group, fixture.T0))
	if got := entryOf(d, "p0"); !slices.Equal(got, fixture.Qs(0)) {
		t.Fatalf("p0 gets %v; want its claimed 0 kept, 1 and 2 held back for the other claim, 3 for the recovery", got)
	}
}

func TestAckCeiling(t *testing.T) {
	group := fixture.Group(averagely, 2)
	group.Status.AssignmentGeneration = 7
	obs := world([]corev1.Pod{fixture.Pod("p0")}, fixture.Lease("p0", 7+2*RecoveryStep+1, fixture.Qs(0, 1), fixture.T0))
	d := Decide(group, obs, env(group, fixture.T0))
	if d.Report.Generation > 7+RecoveryStep || d.Report.SuspectLeases == nil || d.Report.SuspectLeases.Reason != v1alpha1.ReasonLeaseTampered {
		t.Fatalf("an acknowledgement above any published generation gave generation %d, finding %v", d.Report.Generation, d.Report.SuspectLeases)
	}
	if l := d.Report.MemberLeases["p0"]; l == nil || l.AckedGeneration != 0 {
		t.Fatalf("the acknowledgement was counted: %+v", l)
	}
}

func TestGenerationExhausted(t *testing.T) {
	group := fixture.Group(averagely, 2)
	group.Status.AssignmentGeneration = protocol.MaxGeneration
	d := Decide(group, world([]corev1.Pod{fixture.Pod("p0")}), env(group, fixture.T0))
	if d.Report.Problem == nil || d.Report.Problem.Reason != v1alpha1.ReasonGenerationExhausted || d.Report.Rebalance.Published || d.Report.Generation < 0 {
		t.Fatalf("problem %v, rebalanced %v, generation %d", d.Report.Problem, d.Report.Rebalance.Published, d.Report.Generation)
	}
}

// An operator that starts after a member's pod and Lease both vanished still holds back the queues its
// bookkeeping was revoking from that member, for one lease duration from its start: the member may be
// cut off and still reading them.
func TestRestartedOperatorHoldsBackRevokedQueuesOfAVanishedMember(t *testing.T) {
	group := fixture.Group(averagely, 4)
	p0, p1 := fixture.Pod("p0"), fixture.Pod("p1")
	both := world([]corev1.Pod{p0, p1}, fixture.Lease("p0", 0, nil, fixture.T0), fixture.Lease("p1", 0, nil, fixture.T0))
	first := Decide(group, both, env(group, fixture.T0))
	settled := applied(group, both, first)
	settled.Leases = []protocol.LeaseState{fixture.Lease("p0", first.Report.Generation, entryOf(first, "p0"), fixture.T0), fixture.Lease("p1", first.Report.Generation, entryOf(first, "p1"), fixture.T0)}
	held := entryOf(first, "p1")
	if len(held) == 0 {
		t.Fatal("p1 was given nothing")
	}

	// p1's pod is force-deleted while its Lease stands: its queues are revoked, not yet released.
	gone := *settled
	gone.Pods = []corev1.Pod{p0}
	gone.PodsByName = map[string]*corev1.Pod{"p0": &gone.Pods[0]}
	revoking := Decide(group, &gone, env(group, fixture.T0.Add(time.Second)))
	if !strings.Contains(applied(group, &gone, revoking).Published.Handoff, `"pod":"p1"`) {
		t.Fatalf("no revocation from p1: %s", applied(group, &gone, revoking).Published.Handoff)
	}

	// The operator restarts; p1's Lease was deleted meanwhile. Nothing but the bookkeeping names p1.
	restarted := applied(group, &gone, revoking)
	restarted.Leases = []protocol.LeaseState{fixture.Lease("p0", revoking.Report.Generation, entryOf(revoking, "p0"), fixture.T0.Add(2*time.Second))}
	now := fixture.T0.Add(3 * time.Second)
	restarted.SightedSince = now
	d := Decide(group, restarted, env(group, now))
	for _, q := range held {
		if slices.Contains(entryOf(d, "p0"), q) {
			t.Fatalf("queue %v of the vanished p1 went to p0 at once after the restart: %v", q, entryOf(d, "p0"))
		}
	}
	after := *restarted
	after.Leases = []protocol.LeaseState{fixture.Lease("p0", revoking.Report.Generation, entryOf(revoking, "p0"), now.Add(16*time.Second))}
	later := Decide(group, &after, env(group, now.Add(17*time.Second)))
	if len(entryOf(later, "p0")) != 4 {
		t.Fatalf("a lease duration after the restart p0 holds %v, want every queue", entryOf(later, "p0"))
	}
}

// An operator that starts and finds the assignment gone knows nothing of pods whose Lease vanished before
// it started: for one lease duration from its start, a queue nobody claims goes to nobody.
func TestRestartedOperatorWithoutBookkeepingWaitsALeaseDuration(t *testing.T) {
	group := fixture.Group(averagely, 4)
	group.Status.AssignmentGeneration = 5
	obs := world([]corev1.Pod{fixture.Pod("p0")}, fixture.Lease("p0", 5, fixture.Qs(0), fixture.T0))
	obs.SightedSince = fixture.T0
	first := Decide(group, obs, env(group, fixture.T0.Add(time.Second)))
	if !slices.Equal(entryOf(first, "p0"), fixture.Qs(0)) || first.RequeueAfter == 0 {
		t.Fatalf("right after the start p0 gets %v (look again in %v); want only what it claims", entryOf(first, "p0"), first.RequeueAfter)
	}
	// The next pass trusts what the first published, and p0 acknowledged it: the recovery is over, yet
	// the queues nobody claims wait for the lease duration the first pass recorded.
	next := applied(group, obs, first)
	next.Leases = []protocol.LeaseState{fixture.Lease("p0", first.Report.Generation, fixture.Qs(0), fixture.T0.Add(2*time.Second))}
	if d := Decide(group, next, env(group, fixture.T0.Add(3*time.Second))); !slices.Equal(entryOf(d, "p0"), fixture.Qs(0)) {
		t.Fatalf("before a lease duration from the start p0 gets %v", entryOf(d, "p0"))
	}
	next.Leases = []protocol.LeaseState{fixture.Lease("p0", first.Report.Generation, fixture.Qs(0), fixture.T0.Add(16*time.Second))}
	if d := Decide(group, next, env(group, fixture.T0.Add(17*time.Second))); len(entryOf(d, "p0")) != 4 {
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
			p := &decider{obs: &Observation{Published: tc.published}}
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
		t.Run(tc.name, func(t *testing.T) {
			group := fixture.Group(averagely, 4)
			group.Status.AssignmentGeneration = 5
			obs := world([]corev1.Pod{fixture.Pod("p0")}, promisingLease("p0", 5, fixture.Qs(0), fixture.T0, tc.promise))
			obs.SightedSince = fixture.T0
			first := Decide(group, obs, env(group, fixture.T0.Add(time.Second)))
			if !slices.Equal(entryOf(first, "p0"), fixture.Qs(0)) {
				t.Fatalf("%s: right after the start p0 gets %v, want only what it claims", tc.name, entryOf(first, "p0"))
			}
			written := fixture.T0.Add(time.Second)
			next := applied(group, obs, first)
			next.FirstWrittenAt = written
			at := func(d time.Duration) []allocate.Queue {
				next.Leases = []protocol.LeaseState{promisingLease("p0", first.Report.Generation, fixture.Qs(0), written.Add(d), tc.promise)}
				return entryOf(Decide(group, next, env(group, written.Add(d))), "p0")
			}
			if got := at(tc.wantAt - 100*time.Millisecond); !slices.Equal(got, fixture.Qs(0)) {
				t.Fatalf("%s: before %v from the first write p0 gets %v, want only what it claims", tc.name, tc.wantAt, got)
			}
			if got := at(tc.wantAt); len(got) != 4 {
				t.Fatalf("%s: %v after the first write p0 gets %v, want every queue", tc.name, tc.wantAt, got)
			}
		})
	}
}
