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
	plans, missedAim := 0, 0 // plans checked, and those with a member above max((1+t)F_i, h_i)
	check := func(in Input, plan Plan) {
		checkEveryQueueOwnedOnce(t, in, plan)
		plans++
		if !checkLoadBound(t, in, plan, tol) {
			missedAim++
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
	t.Logf("hysteresis checked in %d rounds, a newcomer's share in %d; %d of %d plans above max((1+t)F, h) for some member", stayed, joined, missedAim, plans)
	// The aim cannot always be met (three equal queues over two members), but it is met nearly always (9
	// of these 900 plans miss it): a change that misses it more often is a regression even while the
	// guarantee holds.
	if missedAim*50 > plans {
		t.Errorf("%d of %d plans put a member above max((1+t)F, h): more than 2%%", missedAim, plans)
	}
	if stayed < 20 || joined < 20 {
		t.Errorf("too few rounds checked hysteresis (%d) or a newcomer's share (%d) to mean anything", stayed, joined)
	}
}

// withinTolerance reports whether every member carries from (1-t) times its share up to (1+t) times it,
// or no more than its hottest queue.
func withinTolerance(in Input, plan Plan, tol float64) bool {
	for _, ml := range MemberLoads(in, plan, QueueLoads(in)) {
		if ml.Load < (1-tol)*ml.Fair || ml.Load > ml.Aim(tol) {
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
	for _, p := range []Params{{BalanceBy: "Bytes"}, {BalanceBy: BalanceByLoad, LoadTolerance: &bad}} {
		if _, err := New(Sticky, p); err == nil {
			t.Errorf("New(Sticky, %+v) accepted it", p)
		}
	}
}
