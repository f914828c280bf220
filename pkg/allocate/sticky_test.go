package allocate

import (
	"fmt"
	"math/big"
	"math/rand/v2"
	"reflect"
	"slices"
	"strings"
	"testing"
)

// stickyWorld is a random group that the property tests mutate step by step.
type stickyWorld struct {
	seed    uint64
	rng     *rand.Rand
	brokers map[string]int // "topic/broker" -> queue count
	zones   map[string]string
	members map[string]Member
	nextID  int
}

var stickyZones = []string{"zone-a", "zone-b", "zone-c"}

func newStickyWorld(seed uint64) *stickyWorld {
	w := &stickyWorld{
		seed:    seed,
		rng:     rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)),
		brokers: map[string]int{},
		zones:   map[string]string{},
		members: map[string]Member{},
	}
	for range 1 + w.rng.IntN(4) {
		w.addBroker()
	}
	for range 1 + w.rng.IntN(8) {
		w.join()
	}
	return w
}

func (w *stickyWorld) addBroker() {
	topic := fmt.Sprintf("t%d", w.rng.IntN(3))
	broker := fmt.Sprintf("b%d", w.rng.IntN(6))
	w.brokers[topic+"/"+broker] = 1 + w.rng.IntN(24)
	// A broker sometimes has no known zone, so unknown zones are exercised.
	if w.rng.IntN(8) == 0 {
		w.zones[broker] = ""
	} else if _, ok := w.zones[broker]; !ok {
		w.zones[broker] = stickyZones[w.rng.IntN(len(stickyZones))]
	}
}

func (w *stickyWorld) join() {
	w.nextID++
	m := Member{ID: fmt.Sprintf("pod-%d", w.nextID), Weight: 1}
	if w.rng.IntN(6) > 0 {
		m.Zone = stickyZones[w.rng.IntN(len(stickyZones))]
	}
	if w.rng.IntN(3) == 0 {
		m.Weight = int32(w.rng.IntN(5)) // 0 counts as 1
	}
	w.members[m.ID] = m
}

// step applies one random change: a join, a leave, a weight change, a broker growing or shrinking, a
// broker appearing or disappearing, or nothing (a plain replan).
func (w *stickyWorld) step() {
	keys := func(m map[string]int) []string {
		ks := make([]string, 0, len(m))
		for k := range m {
			ks = append(ks, k)
		}
		slices.Sort(ks)
		return ks
	}
	ids := make([]string, 0, len(w.members))
	for id := range w.members {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	switch w.rng.IntN(9) {
	case 0, 1:
		if len(w.members) < 30 {
			w.join()
		}
	case 2, 3:
		if len(ids) > 0 {
			delete(w.members, ids[w.rng.IntN(len(ids))])
		}
	case 4:
		if len(ids) > 0 {
			m := w.members[ids[w.rng.IntN(len(ids))]]
			m.Weight = int32(1 + w.rng.IntN(6))
			w.members[m.ID] = m
		}
	case 5:
		if bs := keys(w.brokers); len(bs) > 0 {
			b := bs[w.rng.IntN(len(bs))]
			w.brokers[b] = max(1, w.brokers[b]+w.rng.IntN(17)-8)
		}
	case 6:
		w.addBroker()
	case 7:
		if bs := keys(w.brokers); len(bs) > 1 {
			delete(w.brokers, bs[w.rng.IntN(len(bs))])
		}
	case 8:
	}
	if len(w.members) == 0 {
		w.join()
	}
}

func (w *stickyWorld) input(prev Plan) Input {
	in := Input{BrokerZones: map[string]string{}, Previous: prev}
	for tb, n := range w.brokers {
		topic, broker, _ := strings.Cut(tb, "/")
		in.BrokerZones[broker] = w.zones[broker]
		for id := range n {
			in.Queues = append(in.Queues, Queue{Topic: topic, Broker: broker, ID: int32(id)})
		}
	}
	for _, m := range w.members {
		in.Members = append(in.Members, m)
	}
	return in
}

// stickyShares returns each member's floor(Q*w/W) and whether its share Q*w/W is fractional, computed
// with exact rationals, independently of the strategy's integer arithmetic.
func stickyShares(q int, members []Member) (floor []int, fractional []bool) {
	total := new(big.Int)
	for _, m := range members {
		total.Add(total, big.NewInt(int64(max(m.Weight, 1))))
	}
	for _, m := range members {
		share := new(big.Rat).SetFrac(big.NewInt(int64(q)*int64(max(m.Weight, 1))), total)
		f := new(big.Int).Quo(share.Num(), share.Denom())
		floor = append(floor, int(f.Int64()))
		fractional = append(fractional, !share.IsInt())
	}
	return floor, fractional
}

// stickyPrevCounts returns, per member of in, how many of the current queues it held in in.Previous.
func stickyPrevCounts(in Input) []int {
	exists := map[Queue]bool{}
	for _, q := range in.Queues {
		exists[q] = true
	}
	counts := make([]int, len(in.Members))
	for i, m := range in.Members {
		for _, q := range in.Previous[m.ID] {
			if exists[q] {
				counts[i]++
			}
		}
	}
	return counts
}

// stickyBruteLowerBound computes LowerBound by trying every way of choosing which fractional members get
// the extra queue, with stickyShares' exact rationals. Small inputs only.
func stickyBruteLowerBound(in Input) int {
	floor, fractional := stickyShares(len(in.Queues), in.Members)
	prev := stickyPrevCounts(in)
	var cands []int
	r := len(in.Queues)
	for i, f := range floor {
		r -= f
		if fractional[i] {
			cands = append(cands, i)
		}
	}
	best := -1
	for mask := 0; mask < 1<<len(cands); mask++ {
		if popcount(mask) != r {
			continue
		}
		moves := 0
		for i := range in.Members {
			c := floor[i]
			if j := slices.Index(cands, i); j >= 0 && mask&(1<<j) != 0 {
				c++
			}
			moves += max(0, prev[i]-c)
		}
		if best < 0 || moves < best {
			best = moves
		}
	}
	return best
}

func popcount(x int) int {
	n := 0
	for ; x != 0; x &= x - 1 {
		n++
	}
	return n
}

// stickyCheckBalance fails unless every member holds floor or ceil of its share, give or take skew.
func stickyCheckBalance(t *testing.T, in Input, plan Plan, skew int) {
	t.Helper()
	floor, fractional := stickyShares(len(in.Queues), in.Members)
	for i, m := range in.Members {
		ceil := floor[i]
		if fractional[i] {
			ceil++
		}
		if n := len(plan[m.ID]); n < floor[i]-skew || n > ceil+skew {
			t.Fatalf("member %s (weight %d) holds %d queues, share is [%d,%d], skew %d", m.ID, m.Weight, n, floor[i], ceil, skew)
		}
	}
}

// stickyCheckLocality fails when exchanging two newly placed queues would put both in their broker's
// zone, or when a member gave up an in-zone queue while keeping a cross-zone one.
func stickyCheckLocality(t *testing.T, in Input, plan Plan) {
	t.Helper()
	zoneOf := map[string]string{}
	for _, m := range in.Members {
		zoneOf[m.ID] = m.Zone
	}
	prevOwner := map[Queue]string{}
	for _, m := range in.Members {
		for _, q := range in.Previous[m.ID] {
			prevOwner[q] = m.ID
		}
	}
	inZone := func(q Queue, id string) bool {
		z := in.BrokerZones[q.Broker]
		return z != "" && z == zoneOf[id]
	}
	// crossTo[z] holds zones whose members received a newly placed queue of zone z cross-zone.
	crossTo := map[string]map[string]bool{}
	keptCross := map[string]bool{}
	for id, qs := range plan {
		for _, q := range qs {
			p, had := prevOwner[q]
			if had && p == id {
				if !inZone(q, id) {
					keptCross[id] = true
				}
				continue
			}
			if z := in.BrokerZones[q.Broker]; z != "" && !inZone(q, id) && zoneOf[id] != "" {
				if crossTo[z] == nil {
					crossTo[z] = map[string]bool{}
				}
				crossTo[z][zoneOf[id]] = true
			}
		}
	}
	for za, to := range crossTo {
		for zb := range to {
			if crossTo[zb][za] {
				t.Fatalf("queues of %s went to %s and queues of %s went to %s: a swap keeps both in zone", za, zb, zb, za)
			}
		}
	}
	owner := map[Queue]string{}
	for id, qs := range plan {
		for _, q := range qs {
			owner[q] = id
		}
	}
	for q, p := range prevOwner {
		if o, ok := owner[q]; ok && o != p && inZone(q, p) && keptCross[p] {
			t.Fatalf("member %s gave up in-zone %v but kept a cross-zone queue", p, q)
		}
	}
}

// stickyShuffled returns in with queues, members and every previous list in a random order.
func stickyShuffled(rng *rand.Rand, in Input) Input {
	out := in
	out.Queues = slices.Clone(in.Queues)
	out.Members = slices.Clone(in.Members)
	rng.Shuffle(len(out.Queues), func(i, j int) { out.Queues[i], out.Queues[j] = out.Queues[j], out.Queues[i] })
	rng.Shuffle(len(out.Members), func(i, j int) { out.Members[i], out.Members[j] = out.Members[j], out.Members[i] })
	out.Previous = Plan{}
	for id, qs := range in.Previous {
		qs = slices.Clone(qs)
		rng.Shuffle(len(qs), func(i, j int) { qs[i], qs[j] = qs[j], qs[i] })
		out.Previous[id] = qs
	}
	return out
}

// stickyStep moves w one step on, plans it from prev with s, and checks rules 1-3: one owner per queue,
// balance within skew, and with no skew exactly the moves the lower bound forces plus at most repair
// moves for locality.
func stickyStep(t *testing.T, s Strategy, w *stickyWorld, prev Plan, skew, repair int32) (Input, Plan) {
	t.Helper()
	w.step()
	in := w.input(prev)
	plan, err := s.Allocate(in)
	if err != nil {
		t.Fatal(err)
	}
	checkEveryQueueOwnedOnce(t, in, plan)
	stickyCheckBalance(t, in, plan, int(skew))
	if skew == 0 {
		if got, want := Moved(in.Previous, plan), LowerBound(in); got < want || got > want+int(repair) {
			t.Fatalf("seed %d: moved %d queues, lower bound %d, repair budget %d", w.seed, got, want, repair)
		}
	}
	return in, plan
}

// stickySettle replans in from plan with s until nothing moves, as the operator's passes do once the
// group stops changing, and returns the settled plan and the moves it took. Each replan checks rules 1
// and 2 and moves at most repair queues.
func stickySettle(t *testing.T, s Strategy, in Input, plan Plan, repair int) (Plan, int) {
	t.Helper()
	total := 0
	for range 50 {
		in.Previous = plan
		next, err := s.Allocate(in)
		if err != nil {
			t.Fatal(err)
		}
		checkEveryQueueOwnedOnce(t, in, next)
		stickyCheckBalance(t, in, next, 0)
		moved := Moved(plan, next)
		if moved > repair {
			t.Fatalf("a replan of an unchanged group moved %d queues, repair budget %d", moved, repair)
		}
		if moved == 0 {
			return next, total
		}
		total += moved
		plan = next
	}
	t.Fatalf("the plan did not settle in 50 replans")
	return nil, 0
}

func mustSticky(t testing.TB, skew int32) Strategy {
	t.Helper()
	s, err := New(Sticky, Params{MaxSkew: skew})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func mustStickyRepair(t testing.TB, repair int32) Strategy {
	t.Helper()
	s, err := New(Sticky, Params{ZoneRepairMoves: &repair})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// TestStickyProperties replays random sequences of joins, leaves, weight changes and queue changes,
// feeding each plan back as the previous one, and checks rules 1-5 at every step: without repair moves
// exactly the lower bound; with the default budget at most that many more, and once the group settles as
// few cross-zone reads as any balanced plan allows (MinCrossZone, the oracle).
func TestStickyProperties(t *testing.T) {
	for _, repair := range []int32{0, DefaultZoneRepairMoves} {
		t.Run(fmt.Sprintf("repair=%d", repair), func(t *testing.T) {
			s := mustStickyRepair(t, repair)
			var tally stickyTally
			for seed := range uint64(100) {
				w := newStickyWorld(seed)
				var prev Plan
				for range 100 {
					prev = stickyPropertyStep(t, s, w, prev, repair, &tally)
				}
			}
			t.Logf("%d steps checked; %d plans above the cross-zone minimum before settling, %d moves to settle",
				tally.steps, tally.above, tally.settleMoves)
		})
	}
}

// stickyTally counts what TestStickyProperties saw.
type stickyTally struct{ steps, above, settleMoves int }

// stickyPropertyStep is one step of TestStickyProperties; it returns the plan the next step starts from.
func stickyPropertyStep(t *testing.T, s Strategy, w *stickyWorld, prev Plan, repair int32, tally *stickyTally) Plan {
	t.Helper()
	in, plan := stickyStep(t, s, w, prev, 0, repair)
	if repair == 0 {
		stickyCheckLocality(t, in, plan)
	}
	again, err := s.Allocate(stickyShuffled(w.rng, in))
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(plan, again) {
		t.Fatalf("seed %d: plan depends on input order", w.seed)
	}
	tally.steps++
	if CrossZone(in, plan) > MinCrossZone(in) {
		tally.above++
	}
	if repair == 0 {
		return plan
	}
	plan, moved := stickySettle(t, s, in, plan, int(repair))
	tally.settleMoves += moved
	if got, want := CrossZone(in, plan), MinCrossZone(in); got != want {
		t.Fatalf("seed %d: settled with %d cross-zone queues, the fewest a balanced plan allows is %d", w.seed, got, want)
	}
	return plan
}

// TestStickyLowerBoundFormula checks LowerBound's closed form against brute force, so the bound the
// property test (and hack/simulate) trusts is itself tested.
func TestStickyLowerBoundFormula(t *testing.T) {
	s := mustSticky(t, 0)
	for seed := range uint64(200) {
		w := newStickyWorld(1000 + seed)
		var prev Plan
		for range 5 {
			w.step()
			in := w.input(prev)
			if len(in.Members) <= 14 {
				if got, want := LowerBound(in), stickyBruteLowerBound(in); got != want {
					t.Fatalf("seed %d: closed form %d, brute force %d", seed, got, want)
				}
			}
			plan, err := s.Allocate(in)
			if err != nil {
				t.Fatal(err)
			}
			prev = plan
		}
	}
}

// TestStickySkew checks that MaxSkew keeps every member within the skew of its share and never costs
// locality compared with the strict plan.
func TestStickySkew(t *testing.T) {
	for _, skew := range []int32{1, 3} {
		s := mustSticky(t, skew)
		strict := mustStickyRepair(t, 0)
		for seed := range uint64(20) {
			w := newStickyWorld(500 + seed)
			var prev Plan
			for range 60 {
				w.step()
				in := w.input(prev)
				plan, err := s.Allocate(in)
				if err != nil {
					t.Fatal(err)
				}
				checkEveryQueueOwnedOnce(t, in, plan)
				stickyCheckBalance(t, in, plan, int(skew))
				again, _ := s.Allocate(stickyShuffled(w.rng, in))
				if !reflect.DeepEqual(plan, again) {
					t.Fatalf("skew %d seed %d: plan depends on input order", skew, seed)
				}
				strictPlan, _ := strict.Allocate(in)
				if a, b := CrossZone(in, plan), CrossZone(in, strictPlan); a > b {
					t.Fatalf("skew %d seed %d: %d cross-zone queues, strict plan has %d", skew, seed, a, b)
				}
				prev = plan
			}
		}
	}
}

func TestStickyCases(t *testing.T) {
	q := func(broker string, n int) []Queue {
		var qs []Queue
		for i := range n {
			qs = append(qs, Queue{Topic: "orders", Broker: broker, ID: int32(i)})
		}
		return qs
	}
	zones := map[string]string{"broker-a": "zone-a", "broker-b": "zone-b"}
	cases := []struct {
		name    string
		in      Input
		want    map[string]int // queue count per member
		moved   int
		cross   int
		wantErr bool
	}{
		{
			name: "no members",
			in:   Input{Queues: q("broker-a", 4)},
			want: map[string]int{},
		},
		{
			name: "no queues",
			in:   Input{Members: []Member{{ID: "a"}, {ID: "b"}}},
			want: map[string]int{"a": 0, "b": 0},
		},
		{
			name: "more members than queues",
			in:   Input{Queues: q("broker-a", 2), Members: []Member{{ID: "a"}, {ID: "b"}, {ID: "c"}}},
			want: map[string]int{"a": 1, "b": 1, "c": 0},
		},
		{
			name: "weights split 3:1",
			in:   Input{Queues: q("broker-a", 8), Members: []Member{{ID: "a", Weight: 3}, {ID: "b", Weight: 1}}},
			want: map[string]int{"a": 6, "b": 2},
		},
		{
			name: "zones keep queues local",
			in: Input{
				Queues:      append(q("broker-a", 4), q("broker-b", 4)...),
				Members:     []Member{{ID: "a", Zone: "zone-a"}, {ID: "b", Zone: "zone-b"}},
				BrokerZones: zones,
			},
			want:  map[string]int{"a": 4, "b": 4},
			cross: 0,
		},
		{
			name: "the member that held more keeps the extra queue",
			in: Input{
				Queues:   q("broker-a", 5),
				Members:  []Member{{ID: "a"}, {ID: "b"}},
				Previous: Plan{"b": q("broker-a", 5)},
			},
			want:  map[string]int{"a": 2, "b": 3},
			moved: 2,
		},
		{
			name: "over-quota member gives up its cross-zone queues first",
			in: Input{
				Queues:      append(q("broker-a", 2), q("broker-b", 2)...),
				Members:     []Member{{ID: "a", Zone: "zone-a"}, {ID: "b", Zone: "zone-b"}},
				BrokerZones: zones,
				Previous:    Plan{"a": append(q("broker-a", 2), q("broker-b", 2)...)},
			},
			want:  map[string]int{"a": 2, "b": 2},
			moved: 2,
			cross: 0,
		},
		{
			name: "the extra queue goes to the zone with queues to spare",
			in: Input{
				Queues:      append(q("broker-a", 4), q("broker-b", 4)...),
				Members:     []Member{{ID: "a1", Zone: "zone-a"}, {ID: "a2", Zone: "zone-a"}, {ID: "b1", Zone: "zone-b"}},
				BrokerZones: zones,
			},
			want:  map[string]int{"a1": 3, "a2": 2, "b1": 3},
			cross: 1,
		},
		{
			name:    "duplicate member",
			in:      Input{Queues: q("broker-a", 2), Members: []Member{{ID: "a"}, {ID: "a"}}},
			wantErr: true,
		},
	}
	s := mustSticky(t, 0)
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			plan, err := s.Allocate(tc.in)
			if tc.wantErr {
				if err == nil {
					t.Fatal("want an error")
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			got := map[string]int{}
			for id, qs := range plan {
				got[id] = len(qs)
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("counts %v, want %v", got, tc.want)
			}
			if m := Moved(tc.in.Previous, plan); m != tc.moved {
				t.Errorf("moved %d, want %d", m, tc.moved)
			}
			if tc.in.BrokerZones != nil {
				if c := CrossZone(tc.in, plan); c != tc.cross {
					t.Errorf("cross-zone %d, want %d", c, tc.cross)
				}
			}
		})
	}
}

func TestStickySkewKeepsQueuesInZone(t *testing.T) {
	var queues []Queue
	for i := range 12 {
		queues = append(queues, Queue{Topic: "orders", Broker: "broker-a", ID: int32(i)})
	}
	in := Input{
		Queues:      queues,
		Members:     []Member{{ID: "a", Zone: "zone-a"}, {ID: "b", Zone: "zone-b"}, {ID: "c", Zone: "zone-b"}},
		BrokerZones: map[string]string{"broker-a": "zone-a"},
	}
	plan, err := mustSticky(t, 2).Allocate(in)
	if err != nil {
		t.Fatal(err)
	}
	// Strict balance is 4/4/4; a skew of 2 lets zone-a's only member hold 6, leaving b and c 3 each.
	if got := []int{len(plan["a"]), len(plan["b"]), len(plan["c"])}; !slices.Equal(got, []int{6, 3, 3}) {
		t.Fatalf("counts %v, want [6 3 3]", got)
	}
	if _, err := New(Sticky, Params{MaxSkew: -1}); err == nil {
		t.Fatal("negative MaxSkew accepted")
	}
}

func FuzzSticky(f *testing.F) {
	for _, seed := range []uint64{1, 2, 3, 42} {
		f.Add(seed, int32(0))
	}
	f.Fuzz(func(t *testing.T, seed uint64, skew int32) {
		skew = max(skew, 0) % 4
		s := mustSticky(t, skew)
		w := newStickyWorld(seed)
		var prev Plan
		for range 20 {
			_, prev = stickyStep(t, s, w, prev, skew, DefaultZoneRepairMoves)
		}
	})
}

// stickyDPLowerBound is the fewest moves of any balanced plan from in.Previous, computed apart from
// LowerBound's closed form: shares from stickyShares' exact rationals, and a dynamic programme over the
// members for which R of the fractional ones get the extra queue, so it needs neither LowerBound's greedy
// argument nor stickyBruteLowerBound's enumeration, and is fast at any size.
func stickyDPLowerBound(in Input) int {
	distinct := map[Queue]bool{}
	for _, q := range in.Queues {
		distinct[q] = true
	}
	floor, fractional := stickyShares(len(distinct), in.Members)
	prev := stickyPrevCounts(Input{Queues: in.Queues, Members: in.Members, Previous: in.Previous})
	extra := len(distinct)
	for _, f := range floor {
		extra -= f
	}
	const inf = 1 << 30
	// best[k] is the fewest moves of the members seen so far with k of them raised to their ceiling.
	best := make([]int, extra+1)
	for k := range best {
		best[k] = inf
	}
	best[0] = 0
	for i := range in.Members {
		next := make([]int, extra+1)
		for k := range next {
			next[k] = inf
		}
		for k, b := range best {
			if b == inf {
				continue
			}
			next[k] = min(next[k], b+max(0, prev[i]-floor[i]))
			if fractional[i] && k < extra {
				next[k+1] = min(next[k+1], b+max(0, prev[i]-floor[i]-1))
			}
		}
		best = next
	}
	return best[extra]
}

// stickyWithoutZones returns in with the zones named on one side or both removed: "members", "brokers"
// or "both".
func stickyWithoutZones(in Input, side string, equalWeights bool) Input {
	out := in
	out.Members = slices.Clone(in.Members)
	for i := range out.Members {
		if side != "brokers" {
			out.Members[i].Zone = ""
		}
		if equalWeights {
			out.Members[i].Weight = 1
		}
	}
	if side != "members" {
		out.BrokerZones = nil
	}
	return out
}

// TestStickyMovesTheLowerBoundWithoutZones replays random sequences of joins, leaves, weight and queue
// changes with zones on neither side (or on one side only, where no placement reads fewer queues across
// zones than another), with Sticky's default repair budget, and checks at every step that exactly the
// lower bound moved, computed apart from LowerBound (stickyDPLowerBound), and no locality move.
func TestStickyMovesTheLowerBoundWithoutZones(t *testing.T) {
	s := mustSticky(t, 0)
	for _, side := range []string{"both", "members", "brokers"} {
		for _, equal := range []bool{true, false} {
			t.Run(fmt.Sprintf("without %s zones, equal weights %v", side, equal), func(t *testing.T) {
				steps, moved := 0, 0
				for seed := range uint64(100) {
					w := newStickyWorld(3000 + seed)
					var prev Plan
					for range 60 {
						w.step()
						in := stickyWithoutZones(w.input(prev), side, equal)
						plan, err := s.Allocate(in)
						if err != nil {
							t.Fatal(err)
						}
						checkEveryQueueOwnedOnce(t, in, plan)
						stickyCheckBalance(t, in, plan, 0)
						bound := stickyDPLowerBound(in)
						if got := Moved(in.Previous, plan); got != bound {
							t.Fatalf("seed %d: moved %d queues, the lower bound is %d", w.seed, got, bound)
						}
						if c := CountMoves(in, plan); c != (MoveCounts{Balance: bound}) {
							t.Fatalf("seed %d: moves counted %+v, want %d balance moves and no locality move", w.seed, c, bound)
						}
						steps++
						moved += bound
						prev = plan
					}
				}
				t.Logf("%d steps, %d queues moved, each step exactly its lower bound", steps, moved)
			})
		}
	}
}

// TestStickyLocalityMoves replays random sequences with zones and the default repair budget, and checks
// at every step that the moves split as the docs say: the balance moves are the lower bound (computed
// apart, stickyDPLowerBound), and the locality moves beyond it are at most the budget, are what the
// locality phase's chains added, and each chain lowered the cross-zone count. The group then settles as
// the operator's passes settle it, so each step starts from a plan at the cross-zone minimum, as after a
// rollout.
func TestStickyLocalityMoves(t *testing.T) {
	st := mustSticky(t, 0).(*sticky)
	var steps, withLocality, locality, saved int
	var chains, paidChains, dearChains int // chains applied; those with moves; those with more moves than reads saved
	for seed := range uint64(100) {
		w := newStickyWorld(4000 + seed)
		var prev Plan
		for range 60 {
			w.step()
			in := w.input(prev)
			plan, applied, err := st.allocate(in)
			if err != nil {
				t.Fatal(err)
			}
			stickyCheckBalance(t, in, plan, 0)
			c := CountMoves(in, plan)
			if bound := stickyDPLowerBound(in); c.Balance != bound {
				t.Fatalf("seed %d: %d balance moves, the lower bound is %d", w.seed, c.Balance, bound)
			}
			if c.Locality > DefaultZoneRepairMoves {
				t.Fatalf("seed %d: %d locality moves, above the budget of %d", w.seed, c.Locality, DefaultZoneRepairMoves)
			}
			chainMoves, chainSaved := 0, 0
			for _, ch := range applied {
				if ch.saved < 1 {
					t.Fatalf("seed %d: a chain of %d moves saved %d cross-zone reads", w.seed, ch.moves, ch.saved)
				}
				chainMoves += ch.moves
				chainSaved += ch.saved
				chains++
				if ch.moves > 0 {
					paidChains++
				}
				if ch.moves > ch.saved {
					dearChains++
				}
			}
			if chainMoves != c.Locality {
				t.Fatalf("seed %d: %d locality moves, but the chains applied add %d", w.seed, c.Locality, chainMoves)
			}
			steps++
			saved += chainSaved
			if c.Locality > 0 {
				withLocality++
				locality += c.Locality
			}
			prev, _ = stickySettle(t, st, in, plan, DefaultZoneRepairMoves)
			if got, want := CrossZone(in, prev), MinCrossZone(in); got != want {
				t.Fatalf("seed %d: settled at %d cross-zone reads, minimum %d", w.seed, got, want)
			}
		}
	}
	t.Logf("%d steps, %d with locality moves, %d of them in all; %d chains (%d with moves, %d with more moves than reads saved) saved %d cross-zone reads",
		steps, withLocality, locality, chains, paidChains, dearChains, saved)
}
