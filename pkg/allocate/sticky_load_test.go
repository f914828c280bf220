package allocate

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"
)

// loadGroup builds a random group: topics and brokers in zones, members with weights 1 to 3 in those
// zones, log-normal queue loads (some queues unreported), and optionally a Zipf hot spot.
func loadGroup(rng *rand.Rand, queues, members int, hot bool) Input {
	in := Input{BrokerZones: map[string]string{}, QueueLoad: map[Queue]float64{}}
	zones := []string{"z1", "z2", "z3"}
	for b := range 4 {
		in.BrokerZones[fmt.Sprintf("broker-%d", b)] = zones[b%len(zones)]
	}
	zipf := rand.NewZipf(rng, 1.5, 1, 1000)
	for i := range queues {
		q := Queue{Topic: "orders", Broker: fmt.Sprintf("broker-%d", i%4), ID: int32(i / 4)}
		in.Queues = append(in.Queues, q)
		if rng.IntN(10) == 0 {
			continue // unreported: counts at the mean
		}
		load := math.Exp(rng.NormFloat64())
		if hot {
			load = float64(zipf.Uint64() + 1)
		}
		in.QueueLoad[q] = load
	}
	for i := range members {
		in.Members = append(in.Members, Member{ID: fmt.Sprintf("m-%03d", i), Zone: zones[rng.IntN(len(zones))], Weight: int32(1 + rng.IntN(3))})
	}
	return in
}

// checkLoadBound fails unless every member carries at most its MemberLoad.Bound, which Sticky guarantees.
// It reports whether every member also carries at most max((1+t)F_i, h_i), the bound Sticky aims for,
// which indivisible queues do not always allow.
func checkLoadBound(t *testing.T, in Input, plan Plan, tol float64) (withinAim bool) {
	t.Helper()
	members := MemberLoads(in, plan, QueueLoads(in))
	if !WithinLoadBound(members, tol) {
		for id, ml := range members {
			if bound := ml.Bound(tol); ml.Load > bound*(1+1e-9) {
				t.Fatalf("member %s carries %.4g, above its bound %.4g (fair share %.4g, hottest queue %.4g)", id, ml.Load, bound, ml.Fair, ml.Hottest)
			}
		}
	}
	return WithinLoadAim(members, tol)
}

func TestStickyByLoadProperties(t *testing.T) {
	rng := rand.New(rand.NewPCG(13, 17))
	tol := 0.1
	s := mustNew(t, Sticky, Params{BalanceBy: BalanceByLoad, LoadTolerance: &tol})
	stayed, joined := 0, 0   // rounds that checked hysteresis, and a newcomer's share
	stayedHot := 0           // rounds that checked hysteresis on a Zipf hot spot
	plans, missedAim := 0, 0 // plans checked, and those with a member above max((1+t)F_i, h_i)
	check := func(in Input, plan Plan) {
		checkEveryQueueOwnedOnce(t, in, plan)
		plans++
		if !checkLoadBound(t, in, plan, tol) {
			missedAim++
			if id, ok := exchangeMeetsAim(in, plan, tol); ok {
				t.Fatalf("a plan misses the aim where one exchange of %s's would meet it", id)
			}
		}
	}
	for round := range 300 {
		queues, members := 1+rng.IntN(400), 1+rng.IntN(40)
		in := loadGroup(rng, queues, members, round%3 == 0)
		name := fmt.Sprintf("round %d: %d queues, %d members", round, queues, members)

		first, err := s.Allocate(in)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		check(in, first)
		again, err := s.Allocate(shuffled(in, rng))
		if err != nil {
			t.Fatal(err)
		}
		if d := planDiff(first, again); d != "" {
			t.Fatalf("%s: the same group in another order gives another plan: %s", name, d)
		}

		// Re-planning what it planned, for the same members and loads, moves nothing.
		in.Previous = first
		if same, _ := s.Allocate(in); Moved(first, same) != 0 {
			t.Fatalf("%s: re-planning its own plan moves %d queues", name, Moved(first, same))
		}

		// Loads drift by up to 5%: the plan stays as long as every member stays within the tolerance.
		drifted := in
		drifted.QueueLoad = map[Queue]float64{}
		for _, q := range in.Queues { // in queue order, not the map's, so that every run draws the same loads
			if v, ok := in.QueueLoad[q]; ok {
				drifted.QueueLoad[q] = v * (0.95 + 0.1*rng.Float64())
			}
		}
		next, err := s.Allocate(drifted)
		if err != nil {
			t.Fatal(err)
		}
		check(drifted, next)
		if withinTolerance(drifted, first, tol) {
			stayed++
			if round%3 == 0 {
				stayedHot++
			}
			if Moved(first, next) != 0 {
				t.Fatalf("%s: loads drifted within the tolerance, yet %d queues moved", name, Moved(first, next))
			}
		}

		// A member joins (and, every other round, one leaves): the bound holds, and the newcomer gets
		// work when there is enough to share.
		changed := drifted
		changed.Previous = next
		changed.Members = append(slices.Clone(changed.Members[round%2:]), Member{ID: "new", Zone: "z1", Weight: 1})
		after, err := s.Allocate(changed)
		if err != nil {
			t.Fatal(err)
		}
		check(changed, after)
		if queues >= 4*len(changed.Members) {
			joined++
			if len(after["new"]) == 0 {
				t.Fatalf("%s: a member joined %d members sharing %d queues and got nothing", name, len(changed.Members)-1, queues)
			}
		}
	}
	t.Logf("hysteresis checked in %d rounds (%d with a hot spot), a newcomer's share in %d; %d of %d plans above max((1+t)F, h) for some member, none of which one exchange would bring within", stayed, stayedHot, joined, missedAim, plans)
	// The aim cannot always be met (three equal queues over two members), but it is met nearly always (1
	// of these 900 plans misses it, and no single exchange or move would meet it there): a change that
	// misses it more often is a regression even while the guarantee holds.
	if missedAim*100 > plans {
		t.Errorf("%d of %d plans put a member above max((1+t)F, h): more than 1%%", missedAim, plans)
	}
	if stayed < 20 || joined < 20 || stayedHot < 10 {
		t.Errorf("too few rounds checked hysteresis (%d) or a newcomer's share (%d) to mean anything", stayed, joined)
	}
}

// exchangeMeetsAim reports whether exchanging one queue of a member for one of another member, or handing
// one queue to another member, would put every member within its aim, and names a member whose queue
// would go; brute force over every pair of members and queues.
func exchangeMeetsAim(in Input, plan Plan, tol float64) (string, bool) {
	loads := QueueLoads(in)
	members := MemberLoads(in, plan, loads)
	over := map[string]bool{}
	for id, ml := range members {
		if ml.Load > ml.Aim(tol)*(1+1e-9) {
			over[id] = true
		}
	}
	for _, d := range in.Members {
		for _, e := range in.Members {
			// Only d and e change: every member above its aim must be one of them.
			if d.ID == e.ID || len(over) > 2 || len(over) == 2 && !(over[d.ID] && over[e.ID]) || !over[d.ID] && !over[e.ID] {
				continue
			}
			if pairMeetsAim(plan[d.ID], plan[e.ID], loads, members[d.ID], members[e.ID], tol) {
				return d.ID, true
			}
		}
	}
	return "", false
}

// pairMeetsAim reports whether handing one of dq to e, with or without one of eq in exchange, puts both
// members within their aims.
func pairMeetsAim(dq, eq []Queue, loads map[Queue]float64, dm, em MemberLoad, tol float64) bool {
	within := func(ml MemberLoad, qs []Queue) bool {
		ml.Load, ml.Hottest = 0, 0
		for _, q := range qs {
			ml.Load += loads[q]
			ml.Hottest = max(ml.Hottest, loads[q])
		}
		return ml.Load <= ml.Aim(tol)*(1+1e-9)
	}
	for a, p := range dq {
		rest := slices.Delete(slices.Clone(dq), a, a+1)
		if within(dm, rest) && within(em, append(slices.Clone(eq), p)) {
			return true
		}
		for b, r := range eq {
			gets := append(slices.Delete(slices.Clone(eq), b, b+1), p)
			if within(dm, append(slices.Clone(rest), r)) && within(em, gets) {
				return true
			}
		}
	}
	return false
}

// TestExchangeMeetsAim checks the brute force the property test trusts on two hand-worked plans.
func TestExchangeMeetsAim(t *testing.T) {
	q := func(id int32) Queue { return Queue{Topic: "T", Broker: "b", ID: id} }
	in := Input{Queues: []Queue{q(0), q(1), q(2)}, Members: []Member{{ID: "a"}, {ID: "b"}},
		QueueLoad: map[Queue]float64{q(0): 1, q(1): 1, q(2): 1}}
	// Three equal queues over two members: one carries two, 1.33 times its share, whatever moves.
	if _, ok := exchangeMeetsAim(in, Plan{"a": {q(0), q(1)}, "b": {q(2)}}, 0.1); ok {
		t.Error("three equal queues: an exchange cannot meet the aim, yet one was found")
	}
	// Loads 6, 3, 3 held {6, 3} and {3}: 9 against a share of 6; handing the 3 over meets it.
	in.QueueLoad = map[Queue]float64{q(0): 6, q(1): 3, q(2): 3}
	if id, ok := exchangeMeetsAim(in, Plan{"a": {q(0), q(1)}, "b": {q(2)}}, 0.1); !ok || id != "a" {
		t.Errorf("loads 6,3,3: got %q, %v, want a's queue to go", id, ok)
	}
}

// withinTolerance reports whether every member carries at most (1+t) times its share, or no more than its
// hottest queue, and no member that holds nothing is below (1-t) times its achievable share (the share
// left once hot queues have a member each): then Sticky by load moves nothing.
func withinTolerance(in Input, plan Plan, tol float64) bool {
	for id, ml := range MemberLoads(in, plan, QueueLoads(in)) {
		if ml.Load > ml.Aim(tol) || len(plan[id]) == 0 && ml.Load < (1-tol)*ml.Achievable {
			return false
		}
	}
	return true
}

// On a skewed group Sticky by load keeps the busiest member near its share where balancing by count
// does not: the measure the issue starts from.
func TestStickyByLoadBeatsCountOnSkew(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 8))
	in := loadGroup(rng, 256, 12, false)
	for i := range in.Members {
		in.Members[i].Weight = 1
	}
	busiest := func(p Params) float64 {
		plan, err := mustNew(t, Sticky, p).Allocate(in)
		if err != nil {
			t.Fatal(err)
		}
		var worst float64
		for _, ml := range MemberLoads(in, plan, QueueLoads(in)) {
			worst = max(worst, ml.Load/ml.Fair)
		}
		return worst
	}
	byCount, byLoad := busiest(Params{}), busiest(Params{BalanceBy: BalanceByLoad})
	t.Logf("busiest member over its share: %.3f by count, %.3f by load", byCount, byLoad)
	if byLoad > 1+DefaultLoadTolerance || byLoad >= byCount {
		t.Errorf("by load the busiest member carries %.3f of its share (by count %.3f): want at most %.2f", byLoad, byCount, 1+DefaultLoadTolerance)
	}
}

func TestStickyByLoadParameters(t *testing.T) {
	bad := -0.5
	for _, c := range []struct {
		name string
		p    Params
	}{
		{"unknown balanceBy", Params{BalanceBy: "Bytes"}},
		{"negative load tolerance", Params{BalanceBy: BalanceByLoad, LoadTolerance: &bad}},
	} {
		t.Run(c.name, func(t *testing.T) {
			if _, err := New(Sticky, c.p); err == nil {
				t.Errorf("New(Sticky, %+v) accepted it", c.p)
			}
		})
	}
}

// TestStickyByLoadLowerTolerance pins the lower tolerance on hand-worked Zipf loads (40/r on six queues,
// ten queues of load 1): a member below (1-t) times its achievable share takes queues only when the
// plan would otherwise leave it idle. Loads that move within the upper tolerance, with a member short of
// its share but holding queues, move nothing.
func TestStickyByLoadLowerTolerance(t *testing.T) {
	hot := func(r int32) Queue { return Queue{Topic: "T", Broker: "hot", ID: r} }
	cool := func(id int32) Queue { return Queue{Topic: "T", Broker: "cool", ID: id} }
	var queues []Queue
	loads := map[Queue]float64{}
	for r := range int32(6) {
		queues = append(queues, hot(r))
		loads[hot(r)] = math.Round(400/float64(r+1)) / 10 // 40, 20, 13.3, 10, 8, 6.7
	}
	for id := range int32(10) {
		queues = append(queues, cool(id))
		loads[cool(id)] = 1
	}
	// Every load moved by up to ±3%, in queue order.
	noisy := map[Queue]float64{}
	for k, q := range queues {
		noisy[q] = loads[q] * []float64{1.03, 0.97, 1.01, 0.99, 1.02, 0.98}[k%6]
	}
	// 108 over four members, a share of 27 each: a carries the 40 alone; b, c and d share the rest at
	// 24, 25 and 19, within (1+t) of their share, d below (1-t) of its achievable share of 22.7.
	previous := Plan{
		"a": {hot(0)},
		"b": {hot(1), cool(0), cool(1), cool(2), cool(3)},
		"c": {hot(2), hot(5), cool(4), cool(5), cool(6), cool(7), cool(8)},
		"d": {hot(3), hot(4), cool(9)},
	}
	four := []Member{{ID: "a"}, {ID: "b"}, {ID: "c"}, {ID: "d"}}
	cases := []struct {
		name     string
		members  []Member
		previous Plan
		loads    map[Queue]float64
		tol      float64
		// moved is the queues that must move; gets, a member that must end with at least one queue.
		moved int
		gets  string
	}{
		{name: "noise within the upper tolerance", members: four, previous: previous, loads: noisy, tol: 0.1},
		{name: "the same loads again", members: four, previous: previous, loads: loads, tol: 0.1},
		{name: "noise within a wider tolerance", members: four, previous: previous, loads: noisy, tol: 0.3},
		// e had an entry but holds nothing: nobody is above (1+t) of a share of 21.6, yet e takes c's 13.3,
		// which leaves c within its share and brings e above (1-t) of its achievable share.
		{name: "an idle member takes a queue", members: append(slices.Clone(four), Member{ID: "e"}),
			previous: withEntry(previous, "e"), loads: noisy, tol: 0.3, moved: 1, gets: "e"},
		{name: "a member joins", members: append(slices.Clone(four), Member{ID: "e"}),
			previous: previous, loads: noisy, tol: 0.3, moved: 1, gets: "e"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			in := Input{Queues: queues, Members: c.members, Previous: c.previous, QueueLoad: c.loads}
			plan, err := mustNew(t, Sticky, Params{BalanceBy: BalanceByLoad, LoadTolerance: &c.tol}).Allocate(in)
			if err != nil {
				t.Fatal(err)
			}
			checkEveryQueueOwnedOnce(t, in, plan)
			checkLoadBound(t, in, plan, c.tol)
			if got := Moved(in.Previous, plan); got != c.moved {
				t.Errorf("moved %d queues, want %d: %v", got, c.moved, plan)
			}
			if c.gets != "" && len(plan[c.gets]) == 0 {
				t.Errorf("%s holds nothing", c.gets)
			}
		})
	}
}

// withEntry returns a copy of p with an empty entry for id.
func withEntry(p Plan, id string) Plan {
	out := clonePlan(p)
	out[id] = []Queue{}
	return out
}
