package plan

import (
	"errors"
	"slices"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	"github.com/consumergroup-operator/consumergroup-operator/internal/fixture"
	"github.com/consumergroup-operator/consumergroup-operator/pkg/allocate"
	"github.com/consumergroup-operator/consumergroup-operator/pkg/protocol"
)

func stepScope() *protocol.Scope {
	s := protocol.NewScope()
	s.Add("t", "b", 8)
	return s
}

// leased is an incarnation of pod p with a 10 s Lease renewed at renewed, acknowledging acked, claiming
// claim, and promising to stop within promise (0: no promise).
func leased(p string, renewed time.Time, acked int64, claim []allocate.Queue, promise time.Duration) *incarnation {
	return &incarnation{pod: p, uid: types.UID(p + "-uid"), exists: true, lease: &protocol.LeaseState{
		Name: p, Pod: p, PodUID: types.UID(p + "-uid"), RenewTime: renewed, Duration: 10 * time.Second,
		AckedGeneration: acked, HasClaim: true, Claim: claim, StopsWithin: promise,
	}}
}

func TestSettleRevocation(t *testing.T) {
	now := goldenNow
	in := handoffInput{now: now, revokeTimeout: 30 * time.Second, maxSkew: time.Second}
	in.publications = in.publications.Add(4, now.Add(-5*time.Second))
	r := func(generation int64, ago time.Duration) Revocation {
		return Revocation{Pod: "a", UID: "a-uid", Generation: generation, At: now.Add(-ago), Queues: protocol.Compact(fixture.Qs(1))}
	}
	for _, tc := range []struct {
		name     string
		inc      *incarnation
		r        Revocation
		want     revocationOutcome
		wantWake []time.Time
	}{
		{"within the timeout it waits for the timeout and the Lease's expiry",
			leased("a", now.Add(-time.Second), 3, fixture.Qs(1), 0), r(4, 10*time.Second),
			revocationPending, []time.Time{now.Add(20 * time.Second), now.Add(10 * time.Second)}},
		{"past the timeout, renewed since: fenced",
			leased("a", now.Add(-time.Second), 3, fixture.Qs(1), 0), r(4, 40*time.Second),
			revocationFenced, nil},
		{"past the timeout, not renewed since: polled until its Lease expires",
			leased("a", now.Add(-15*time.Second), 3, fixture.Qs(1), 0), r(4, 40*time.Second),
			revocationPending, []time.Time{now.Add(fencePoll), now.Add(-4 * time.Second)}},
		{"a promise not yet kept is one more deadline",
			leased("a", now.Add(-time.Second), 3, fixture.Qs(1), 5*time.Second), r(4, 10*time.Second),
			revocationPending, []time.Time{now.Add(time.Second), now.Add(20 * time.Second), now.Add(10 * time.Second)}},
		{"a promise kept: lapsed",
			leased("a", now.Add(-time.Second), 3, fixture.Qs(1), time.Second), r(4, 10*time.Second),
			revocationLapsed, nil},
		{"a promise of a generation not known to be published counts for nothing",
			leased("a", now.Add(-time.Second), 3, fixture.Qs(1), time.Second), r(5, 10*time.Second),
			revocationPending, []time.Time{now.Add(20 * time.Second), now.Add(10 * time.Second)}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, wake := settleRevocation(tc.inc, tc.r, &in)
			if got != tc.want || !slices.EqualFunc(wake, tc.wantWake, time.Time.Equal) {
				t.Errorf("%s: got %v waking at %v, want %v waking at %v", tc.name, got, wake, tc.want, tc.wantWake)
			}
		})
	}
}

func TestLostQueues(t *testing.T) {
	pending, fenced := &queueSet{}, &queueSet{}
	pending.add(fixture.Qs(2))
	fenced.add(fixture.Qs(3))
	for _, tc := range []struct {
		name            string
		held, kept      []allocate.Queue
		pending, fenced *queueSet
		want            []allocate.Queue
	}{
		{"what is held and not kept", fixture.Qs(1, 2, 3, 4), fixture.Qs(4), nil, nil, fixture.Qs(1, 2, 3)},
		{"less what is revoked already", fixture.Qs(1, 2, 3, 4), fixture.Qs(4), pending, nil, fixture.Qs(1, 3)},
		{"less what is fenced", fixture.Qs(1, 2, 3, 4), fixture.Qs(4), pending, fenced, fixture.Qs(1)},
		{"nothing lost", fixture.Qs(1), fixture.Qs(1, 2), nil, nil, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := lostQueues(tc.held, tc.kept, tc.pending, tc.fenced); !slices.Equal(got, tc.want) {
				t.Errorf("%s: lostQueues = %v, want %v", tc.name, got, tc.want)
			}
		})
	}
}

// TestHoldingsBlocked counts readers as countHoldings does and asks, queue by queue, whether a member may
// be given it, and, when it may not, who holds it back (holdsBack, for the log).
func TestHoldingsBlocked(t *testing.T) {
	now := goldenNow
	scope := stepScope()
	pendingAll := Revocation{Pod: "c", UID: "c-uid", Generation: 9, At: now, All: true}
	fenceB := Revocation{Pod: "b", UID: "b-uid", Generation: 9, At: now, Queues: protocol.Compact(fixture.Qs(2))}
	unreadable := leased("d", now, 0, nil, 0)
	unreadable.lease.ClaimErr = errors.New("unreadable")
	for _, tc := range []struct {
		name         string
		incarnations []*incarnation
		state        HandoffState
		self         string
		q            int32
		want         bool
		// why is what holdsBack says when the queue is blocked.
		why string
	}{
		{"nobody holds it", []*incarnation{leased("a", now, 0, nil, 0)}, HandoffState{}, "a", 1, false, ""},
		{"another claims it", []*incarnation{leased("a", now, 0, nil, 0), leased("b", now, 0, fixture.Qs(1), 0)}, HandoffState{}, "a", 1, true,
			"b claims or was given it (1 readers)"},
		{"another has not acknowledged its revocation", []*incarnation{leased("a", now, 0, nil, 0), leased("b", now, 0, nil, 0)},
			HandoffState{Revocations: []Revocation{{Pod: "b", UID: "b-uid", Generation: 9, At: now, Queues: protocol.Compact(fixture.Qs(1))}}}, "a", 1, true,
			"b has not acknowledged its revocation (1 readers)"},
		{"both claim it: the member keeps its own", []*incarnation{leased("a", now, 0, fixture.Qs(1), 0), leased("b", now, 0, fixture.Qs(1), 0)}, HandoffState{}, "a", 1, false, ""},
		{"both claim it, but its own revocation lapsed, as an earlier operator recorded: it waits", []*incarnation{leased("a", now, 0, fixture.Qs(1), 0), leased("b", now, 0, fixture.Qs(1), 0)},
			HandoffState{Revocations: []Revocation{{Pod: "a", UID: "a-uid", Generation: 9, At: now, Queues: protocol.Compact(fixture.Qs(1)), Lapsed: true}}}, "a", 1, true,
			"b claims or was given it (1 readers)"},
		{"fenced from its other holder", []*incarnation{leased("a", now, 0, nil, 0), leased("b", now, 0, fixture.Qs(2), 0)}, HandoffState{Fenced: []Revocation{fenceB}}, "a", 2, false, ""},
		{"another may hold anything (a recovery)", []*incarnation{leased("a", now, 0, nil, 0), leased("c", now, 0, nil, 0)}, HandoffState{Revocations: []Revocation{pendingAll}}, "a", 5, true,
			"c may hold any queue: it has not acknowledged a recovery (1 unknown readers)"},
		{"the one in a recovery keeps what it claims", []*incarnation{leased("a", now, 0, nil, 0), leased("c", now, 0, fixture.Qs(5), 0)}, HandoffState{Revocations: []Revocation{pendingAll}}, "c", 5, false, ""},
		{"an unreadable claim may hold anything", []*incarnation{leased("a", now, 0, nil, 0), unreadable}, HandoffState{}, "a", 3, true,
			"d may hold any queue: its claim cannot be read (1 unknown readers)"},
		{"a member without a reader waits for any holder", []*incarnation{leased("b", now, 0, fixture.Qs(1), 0)}, HandoffState{}, "", 1, true,
			"b claims or was given it (1 readers)"},
		{"a reader nobody can name", []*incarnation{leased("a", now, 0, nil, 0)}, HandoffState{HoldUnclaimedUntil: ptr.To(now.Add(time.Second))}, "a", 1, true,
			"a reader nobody can name may hold any queue"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := newHandoffPass(handoffInput{now: now, maxSkew: time.Second, revokeTimeout: 30 * time.Second,
				trusted: true, state: tc.state, incarnations: tc.incarnations, scope: scope})
			h := p.countHoldings(p.settleRevocations())
			self := int32(-1)
			if tc.self != "" {
				self = h.indexOf(tc.self, types.UID(tc.self+"-uid"))
			}
			if got := h.blocked(fixture.Qs(tc.q)[0], self); got != tc.want {
				t.Errorf("%s: blocked = %v, want %v", tc.name, got, tc.want)
			}
			if tc.want {
				if why := h.holdsBack(fixture.Qs(tc.q)[0], self); why != tc.why {
					t.Errorf("%s: held back because %q, want %q", tc.name, why, tc.why)
				}
			}
		})
	}
}

// TestHoldingsBlockedWithoutTrustedBookkeeping: with the bookkeeping edited or lost, no lapse is known,
// so a claim shows only that its incarnation read the queue once. A member keeps a queue only it claims;
// one another incarnation claims too goes to neither: the other may be reading it while this one's claim
// is one it stopped reading after a lapse (the explorer's counterexample: a's revocation lapses, q goes
// to b, the bookkeeping is edited, and q would go back to a beside b).
func TestHoldingsBlockedWithoutTrustedBookkeeping(t *testing.T) {
	now := goldenNow
	for _, tc := range []struct {
		name         string
		incarnations []*incarnation
		want         bool
		why          string
	}{
		{"only it claims the queue: it keeps it", []*incarnation{leased("a", now, 1, fixture.Qs(1), 6*time.Second), leased("b", now, 1, fixture.Qs(2), 0)}, false, ""},
		{"another claims it too: it waits", []*incarnation{leased("a", now, 1, fixture.Qs(1), 6*time.Second), leased("b", now, 1, fixture.Qs(1), 0)}, true,
			"2 readers may hold it"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := newHandoffPass(handoffInput{now: now, maxSkew: time.Second, revokeTimeout: 30 * time.Second,
				trusted: false, incarnations: tc.incarnations, scope: stepScope()})
			h := p.countHoldings(p.settleRevocations())
			self := h.indexOf("a", "a-uid")
			if got := h.blocked(fixture.Qs(1)[0], self); got != tc.want {
				t.Fatalf("blocked = %v, want %v", got, tc.want)
			}
			if tc.want {
				if why := h.holdsBack(fixture.Qs(1)[0], self); why != tc.why {
					t.Errorf("held back because %q, want %q", why, tc.why)
				}
			}
		})
	}
}

func TestUnclaimedHeldUntil(t *testing.T) {
	now := goldenNow
	later, earlier, much := now.Add(5*time.Second), now.Add(-time.Second), now.Add(60*time.Second)
	for _, tc := range []struct {
		name        string
		trusted     bool
		stateHold   *time.Time
		unseenUntil time.Time
		want        *time.Time
	}{
		{"nothing held", true, nil, time.Time{}, nil},
		{"the bookkeeping's hold", true, &later, time.Time{}, &later},
		{"a hold that ended", true, &earlier, time.Time{}, nil},
		{"untrusted: pods never seen may read until unseenUntil", false, nil, later, &later},
		{"trusted bookkeeping names every pod: unseenUntil does not count", true, nil, later, nil},
		{"a recorded hold ends by this operator's own bound", true, &much, later, &later},
		{"a recorded hold ends once this operator's own bound passed", true, &much, earlier, nil},
		{"a recorded hold sooner than the bound stays", true, &later, much, &later},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := newHandoffPass(handoffInput{now: now, trusted: tc.trusted, state: HandoffState{HoldUnclaimedUntil: tc.stateHold}, unseenUntil: tc.unseenUntil})
			got := p.unclaimedHeldUntil()
			if (got == nil) != (tc.want == nil) || got != nil && !got.Equal(*tc.want) {
				t.Errorf("%s: unclaimedHeldUntil = %v, want %v", tc.name, got, tc.want)
			}
		})
	}
}

func TestKeepReservations(t *testing.T) {
	now := goldenNow
	published := map[string]protocol.PublishedEntry{
		"a": {Entry: protocol.Entry{Member: "ma"}, Queues: fixture.Qs(1, 2)},
		"b": {Entry: protocol.Entry{Member: "mb"}, Queues: fixture.Qs(3)},
	}
	old := reservation{Member: "mc", DepartedAt: now.Add(-30 * time.Second), Queues: protocol.Compact(fixture.Qs(4))}
	recent := reservation{Member: "md", DepartedAt: now.Add(-5 * time.Second), Queues: protocol.Compact(fixture.Qs(5))}
	for _, tc := range []struct {
		name    string
		grace   time.Duration
		trusted bool
		members []string
		want    map[int32]string
	}{
		{"no grace keeps nothing", 0, true, nil, nil},
		{"untrusted bookkeeping keeps nothing", 20 * time.Second, false, nil, nil},
		{"departed members' queues and reservations in their grace", 20 * time.Second, true, []string{"ma"},
			map[int32]string{3: "mb", 5: "md"}},
		{"a member that returned has nothing kept", 20 * time.Second, true, []string{"ma", "mb", "md"}, map[int32]string{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var members []Member
			for _, m := range tc.members {
				members = append(members, Member{Member: allocate.Member{ID: m}})
			}
			p := newHandoffPass(handoffInput{now: now, restartGrace: tc.grace, trusted: tc.trusted, members: members,
				published: published, scope: stepScope(), state: HandoffState{Reserved: []reservation{old, recent}}})
			got := p.keepReservations()
			if len(got) != len(tc.want) {
				t.Errorf("%s: keeps %v, want %v", tc.name, got, tc.want)
				return
			}
			for id, m := range tc.want {
				if got[fixture.Qs(id)[0]] != m {
					t.Errorf("%s: keeps %v, want %v", tc.name, got, tc.want)
				}
			}
		})
	}
}

// TestWithheldSaysWhy checks that a pass counts what it withholds and describes the first queue it
// withholds: the one its target gives to a and that b still claims.
func TestWithheldSaysWhy(t *testing.T) {
	now := goldenNow
	res := handoff(handoffInput{now: now, maxSkew: time.Second, revokeTimeout: 30 * time.Second, cooperative: true, trusted: true,
		members: []Member{{Member: allocate.Member{ID: "a"}, Pod: "a", UID: "a-uid"}}, target: allocate.Plan{"a": fixture.Qs(0, 1, 2)},
		incarnations: []*incarnation{leased("a", now, 0, nil, 0), leased("b", now, 0, fixture.Qs(1, 2), 0)}, scope: stepScope()})
	if res.withheld != 2 || res.firstWithheld != "t/b/1 for a: b claims or was given it (1 readers)" {
		t.Fatalf("withheld %d, first %q; want 2, the first t/b/1 for a, held by b", res.withheld, res.firstWithheld)
	}
	if !slices.Equal(res.entries["a"], fixture.Qs(0)) {
		t.Fatalf("a is given %v, want %v", res.entries["a"], fixture.Qs(0))
	}
}

// TestQueueGivenBackEndsItsRevocation replays a timeline in which a queue was handed on early. Member X
// claims q and promises to stop within 6 s; its Lease writes fail from then on, so it acknowledges
// nothing. At 3.4 s generation 2 takes q from X (revocation r1); at 6.4 s generation 3 gives it back; at
// 9.5 s generation 4 takes it again. X saw generation 3, so it may read q until generation 4's
// publication plus its promise: the loss at 9.5 s must be a revocation of its own, and q must not reach
// Y at 10.4 s, when r1's promise, counted from generation 2, runs out.
func TestQueueGivenBackEndsItsRevocation(t *testing.T) {
	t0 := goldenNow
	q := fixture.Qs(0)
	x := leased("x", t0, 1, q, 6*time.Second) // its last renewal: nothing it writes lands after it
	members := []Member{{Member: allocate.Member{ID: "x"}, Pod: "x", UID: "x-uid"}, {Member: allocate.Member{ID: "y"}, Pod: "y", UID: "y-uid"}}
	y := leased("y", t0, 1, nil, 6*time.Second)
	in := handoffInput{cooperative: true, revokeTimeout: 30 * time.Second, maxSkew: time.Second, members: members,
		trusted: true, scope: stepScope(), incarnations: []*incarnation{x, y},
		published: map[string]protocol.PublishedEntry{"x": {Entry: protocol.Entry{Member: "x", PodUID: "x-uid"}, Queues: q}, "y": {Entry: protocol.Entry{Member: "y", PodUID: "y-uid"}}}}
	in.publications = in.publications.Add(1, t0)
	generation := int64(1)
	// pass runs the handoff at t with target giving q to holder, publishes its result as the next
	// generation and returns it.
	pass := func(at time.Duration, holder string) handoffResult {
		t.Helper()
		in.now = t0.Add(at)
		in.target = allocate.Plan{"x": nil, "y": nil}
		in.target[holder] = q
		res := handoff(in)
		generation++
		for i := range res.state.Revocations {
			if res.state.Revocations[i].Generation == 0 {
				res.state.Revocations[i].Generation = generation
			}
		}
		in.state = res.state
		in.published = map[string]protocol.PublishedEntry{}
		for _, m := range members {
			in.published[m.Pod] = protocol.PublishedEntry{Entry: protocol.Entry{Member: m.ID, PodUID: string(m.UID)}, Queues: res.entries[m.Pod]}
		}
		in.publications = in.publications.Add(generation, in.now)
		return res
	}
	revokedAt := func(res handoffResult) []int64 {
		var gens []int64
		for _, r := range res.state.Revocations {
			if r.Pod == "x" && !r.All {
				if qs, _ := stepScope().Expand(r.Queues); slices.Contains(qs.Queues, q[0]) {
					gens = append(gens, r.Generation)
				}
			}
		}
		return gens
	}
	if res := pass(3400*time.Millisecond, "y"); len(res.entries["x"]) != 0 || len(res.entries["y"]) != 0 || !slices.Equal(revokedAt(res), []int64{2}) {
		t.Fatalf("3.4 s: x gets %v, y %v, q revoked from x at generations %v; want nothing for either and r1 at 2", res.entries["x"], res.entries["y"], revokedAt(res))
	}
	if res := pass(6400*time.Millisecond, "x"); !slices.Equal(res.entries["x"], q) || len(revokedAt(res)) != 0 {
		t.Errorf("6.4 s: x gets %v, q revoked from x at generations %v; want q given back and r1 ended", res.entries["x"], revokedAt(res))
	}
	if res := pass(9500*time.Millisecond, "y"); len(res.entries["y"]) != 0 || !slices.Equal(revokedAt(res), []int64{4}) {
		t.Errorf("9.5 s: y gets %v, q revoked from x at generations %v; want a revocation of its own at 4", res.entries["y"], revokedAt(res))
	}
	if res := pass(10400*time.Millisecond, "y"); len(res.entries["y"]) != 0 {
		t.Fatalf("10.4 s: y gets %v while x may read q until %v", res.entries["y"], t0.Add(9500*time.Millisecond+6*time.Second))
	}
	// Once generation 4's promise has run out, q goes on: 9.5 s + 6 s + the margin.
	if res := pass(16600*time.Millisecond, "y"); !slices.Equal(res.entries["y"], q) {
		t.Fatalf("16.6 s: y gets %v, want q", res.entries["y"])
	}
}

// TestRecoveryDoesNotWaitForAStoppedMember: with the bookkeeping lost (the assignment deleted), a queue
// nobody claims goes to a member only once every other incarnation whose claim stands has acknowledged
// the recovery. A member that drained and says so in its Lease (stopped, claiming nothing) takes no
// assignment again and acknowledges nothing more: it is not waited for. The same member without the word
// (a drained member of an older version, or one killed) is waited for: its promise, or its Lease.
func TestRecoveryDoesNotWaitForAStoppedMember(t *testing.T) {
	now := goldenNow
	members := []Member{{Member: allocate.Member{ID: "y"}, Pod: "y", UID: "y-uid"}}
	for _, tc := range []struct {
		name    string
		stopped bool
		want    []allocate.Queue
	}{
		{"the drained member says it stopped", true, fixture.Qs(0)},
		{"the drained member says nothing", false, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			x := leased("x", now, 3, nil, 6*time.Second)
			x.lease.Stopped = tc.stopped
			y := leased("y", now, 3, nil, 6*time.Second)
			in := handoffInput{cooperative: true, revokeTimeout: 30 * time.Second, maxSkew: time.Second, members: members,
				trusted: false, scope: stepScope(), incarnations: []*incarnation{x, y}, now: now,
				target: allocate.Plan{"y": fixture.Qs(0)}}
			// The recovery generation: y has acknowledged it, x has not.
			first := handoff(in)
			y.lease.AckedGeneration = 4
			for i := range first.state.Revocations {
				first.state.Revocations[i].Generation = 4
			}
			in.trusted, in.state, in.now = true, first.state, now.Add(time.Second)
			in.published = map[string]protocol.PublishedEntry{"y": {Entry: protocol.Entry{Member: "y", PodUID: "y-uid"}, Queues: first.entries["y"]}}
			in.publications = in.publications.Add(4, now)
			if res := handoff(in); !slices.Equal(res.entries["y"], tc.want) {
				t.Errorf("y gets %v, want %v (recovering: %d)", res.entries["y"], tc.want, res.recovering)
			}
		})
	}
}
