package allocate

import (
	"maps"
	"math"
	"math/rand/v2"
	"slices"
	"testing"
)

// mq is queue id of broker "b" of topic "T", the queue every hand-worked case below uses.
func mq(id int32) Queue { return Queue{Topic: "T", Broker: "b", ID: id} }

func mqs(ids ...int32) []Queue {
	qs := make([]Queue, len(ids))
	for i, id := range ids {
		qs[i] = mq(id)
	}
	return qs
}

func members(ids ...string) []Member {
	ms := make([]Member, len(ids))
	for i, id := range ids {
		ms[i] = Member{ID: id}
	}
	return ms
}

func TestMoved(t *testing.T) {
	cases := []struct {
		name          string
		before, after Plan
		want          int
	}{
		{"same plan", Plan{"a": mqs(0, 1), "b": mqs(2)}, Plan{"a": mqs(0, 1), "b": mqs(2)}, 0},
		{"same owners, other order", Plan{"a": mqs(0, 1)}, Plan{"a": mqs(1, 0)}, 0},
		{"c joins: a gives 2 to b, b gives 2 to c",
			Plan{"a": mqs(0, 1, 2, 3), "b": mqs(4, 5)}, Plan{"a": mqs(0, 1), "b": mqs(2, 3), "c": mqs(4, 5)}, 4},
		{"b leaves: its queues do not count", Plan{"a": mqs(0, 1), "b": mqs(2, 3)}, Plan{"a": mqs(0, 1, 2, 3)}, 0},
		{"b stays with an empty entry: its queue counts", Plan{"a": mqs(0), "b": mqs(1)}, Plan{"a": mqs(0, 1), "b": {}}, 1},
		{"a queue disappears", Plan{"a": mqs(0, 1)}, Plan{"a": mqs(0), "b": {}}, 0},
		{"a queue appears", Plan{"a": mqs(0)}, Plan{"a": mqs(0), "b": mqs(1)}, 0},
		{"a queue loses its owner", Plan{"a": mqs(0), "b": mqs(1)}, Plan{"a": mqs(0), "b": {}}, 0},
		{"nothing before", nil, Plan{"a": mqs(0)}, 0},
		{"nothing after", Plan{"a": mqs(0)}, nil, 0},
		{"after lists the queue under its owner and another", Plan{"a": mqs(0)}, Plan{"a": mqs(0), "b": mqs(0)}, 0},
		{"after lists the queue under two others", Plan{"a": mqs(0)}, Plan{"a": {}, "b": mqs(0), "c": mqs(0)}, 1},
		{"before lists the queue twice: each listing counts", Plan{"a": mqs(0), "b": mqs(0)}, Plan{"a": {}, "b": {}, "c": mqs(0)}, 2},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			// Map order varies between runs; the count must not.
			for range 20 {
				if got := Moved(c.before, c.after); got != c.want {
					t.Errorf("Moved = %d, want %d", got, c.want)
					break
				}
			}
		})
	}
}

func TestFairShares(t *testing.T) {
	weighted := func(ws ...int32) []Member {
		ms := make([]Member, len(ws))
		for i, w := range ws {
			ms[i] = Member{ID: string(rune('a' + i)), Weight: w}
		}
		return ms
	}
	cases := []struct {
		name        string
		queues      int
		members     []Member
		floor, ceil []int
	}{
		{"even", 6, weighted(1, 1, 1), []int{2, 2, 2}, []int{2, 2, 2}},
		{"weights below 1 count as 1", 6, weighted(0, -5, 1), []int{2, 2, 2}, []int{2, 2, 2}},
		{"one over", 7, weighted(1, 1, 1), []int{2, 2, 2}, []int{3, 3, 3}},
		// W = 6: 10/6 = 1.67, 20/6 = 3.33, 30/6 = 5.
		{"weighted", 10, weighted(1, 2, 3), []int{1, 3, 5}, []int{2, 4, 5}},
		{"fewer queues than members", 2, weighted(1, 1, 1, 1), []int{0, 0, 0, 0}, []int{1, 1, 1, 1}},
		{"no queues", 0, weighted(1, 4), []int{0, 0}, []int{0, 0}},
		{"no members", 5, nil, []int{}, []int{}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			floor, ceil := FairShares(c.queues, c.members)
			if !slices.Equal(floor, c.floor) || !slices.Equal(ceil, c.ceil) {
				t.Errorf("FairShares = %v, %v, want %v, %v", floor, ceil, c.floor, c.ceil)
			}
		})
	}
}

// TestFairSharesMatchesExactRationals checks FairShares' integer arithmetic against stickyShares, which
// computes the shares as exact rationals.
func TestFairSharesMatchesExactRationals(t *testing.T) {
	rng := rand.New(rand.NewPCG(8, 13))
	for range 2000 {
		ms := make([]Member, 1+rng.IntN(20))
		for i := range ms {
			ms[i].Weight = rng.Int32N(1000) - 2
		}
		q := rng.IntN(100000)
		floor, ceil := FairShares(q, ms)
		wantFloor, fractional := stickyShares(q, ms)
		for i := range ms {
			wantCeil := wantFloor[i]
			if fractional[i] {
				wantCeil++
			}
			if floor[i] != wantFloor[i] || ceil[i] != wantCeil {
				t.Fatalf("FairShares(%d, weights ...)[%d] = %d, %d, want %d, %d", q, i, floor[i], ceil[i], wantFloor[i], wantCeil)
			}
		}
	}
}

func TestLowerBound(t *testing.T) {
	withWeights := func(ms []Member, ws ...int32) []Member {
		for i := range ms {
			ms[i].Weight = ws[i]
		}
		return ms
	}
	cases := []struct {
		name     string
		queues   []Queue
		members  []Member
		previous Plan
		want     int
	}{
		// Shares 2/2/2: a must give up 2, b none.
		{"c joins a 4/2 group", mqs(0, 1, 2, 3, 4, 5), members("a", "b", "c"), Plan{"a": mqs(0, 1, 2, 3), "b": mqs(4, 5)}, 2},
		// Shares [1,2], [3,4], 5 with one ceiling to give: a loses 3 or b loses 1 more; the best is 3.
		{"weighted, one ceiling for two fractional members", mqs(0, 1, 2, 3, 4, 5, 6, 7, 8, 9),
			withWeights(members("a", "b", "c"), 1, 2, 3), Plan{"a": mqs(0, 1, 2, 3), "b": mqs(4, 5, 6, 7), "c": mqs(8, 9)}, 3},
		// Shares 2/2: of a's 3 current queues one must go; q9 no longer exists.
		{"a previous queue that no longer exists does not count", mqs(0, 1, 2, 3), members("a", "b"),
			Plan{"a": mqs(0, 1, 2, 9), "b": mqs(3)}, 1},
		{"the queues of a member that left do not count", mqs(0, 1, 2, 3), members("a", "b"),
			Plan{"a": mqs(0, 1), "gone": mqs(2, 3)}, 0},
		// Shares [0,1] for 4 members, 3 ceilings: a keeps one of its three.
		{"fewer queues than members", mqs(0, 1, 2), members("a", "b", "c", "d"), Plan{"a": mqs(0, 1, 2)}, 2},
		{"no previous plan", mqs(0, 1, 2), members("a", "b"), nil, 0},
		{"no members", mqs(0, 1, 2), nil, Plan{"a": mqs(0, 1, 2)}, 0},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if got := LowerBound(Input{Queues: c.queues, Members: c.members, Previous: c.previous}); got != c.want {
				t.Errorf("LowerBound = %d, want %d", got, c.want)
			}
		})
	}
}

// TestCountMoves splits hand-worked rebalances: c joins a 4/2 group (shares 2/2/2, so a must give up 2).
func TestCountMoves(t *testing.T) {
	in := Input{Queues: mqs(0, 1, 2, 3, 4, 5), Members: members("a", "b", "c"), Previous: Plan{"a": mqs(0, 1, 2, 3), "b": mqs(4, 5)}}
	cases := []struct {
		name string
		plan Plan
		want MoveCounts
	}{
		{"the bound", Plan{"a": mqs(0, 1), "b": mqs(4, 5), "c": mqs(2, 3)}, MoveCounts{Balance: 2}},
		// a's 3 goes to b rather than c, and b hands its 5 to c instead: one move beyond the bound.
		{"one beyond the bound", Plan{"a": mqs(0, 1), "b": mqs(3, 4), "c": mqs(2, 5)}, MoveCounts{Balance: 2, Locality: 1}},
		// Not balanced, and fewer moves than any balanced plan needs: all of them count as balance.
		{"fewer than the bound", Plan{"a": mqs(0, 1, 2), "b": mqs(4, 5), "c": mqs(3)}, MoveCounts{Balance: 1}},
		{"nothing moved", Plan{"a": mqs(0, 1, 2, 3), "b": mqs(4, 5), "c": {}}, MoveCounts{}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if got := CountMoves(in, c.plan); got != c.want {
				t.Errorf("CountMoves = %+v, want %+v", got, c.want)
			}
		})
	}
}

func TestBalanced(t *testing.T) {
	weighted := []Member{{ID: "a", Weight: 1}, {ID: "b", Weight: 2}, {ID: "c", Weight: 3}}
	cases := []struct {
		name    string
		queues  []Queue
		members []Member
		plan    Plan
		want    bool
	}{
		{"2/2/2", mqs(0, 1, 2, 3, 4, 5), members("a", "b", "c"), Plan{"a": mqs(0, 1), "b": mqs(2, 3), "c": mqs(4, 5)}, true},
		{"3/2/1", mqs(0, 1, 2, 3, 4, 5), members("a", "b", "c"), Plan{"a": mqs(0, 1, 2), "b": mqs(3, 4), "c": mqs(5)}, false},
		{"a queue without owner", mqs(0, 1, 2, 3, 4, 5), members("a", "b", "c"), Plan{"a": mqs(0, 1), "b": mqs(2, 3), "c": mqs(4)}, false},
		{"a queue with two owners, counts in range", mqs(0, 1, 2), members("a", "b"), Plan{"a": mqs(0, 1), "b": mqs(1, 2)}, false},
		{"a foreign queue, counts in range", mqs(0, 1), members("a", "b"), Plan{"a": mqs(0), "b": mqs(9)}, false},
		{"queues to a non-member", mqs(0, 1), members("a"), Plan{"a": mqs(0), "x": mqs(1)}, false},
		{"duplicates in the queue list count once", []Queue{mq(0), mq(1), mq(0)}, members("a", "b"), Plan{"a": mqs(0), "b": mqs(1)}, true},
		{"weighted 2/3/5", mqs(0, 1, 2, 3, 4, 5, 6, 7, 8, 9), weighted, Plan{"a": mqs(0, 1), "b": mqs(2, 3, 4), "c": mqs(5, 6, 7, 8, 9)}, true},
		{"weighted 1/4/5", mqs(0, 1, 2, 3, 4, 5, 6, 7, 8, 9), weighted, Plan{"a": mqs(0), "b": mqs(1, 2, 3, 4), "c": mqs(5, 6, 7, 8, 9)}, true},
		{"weighted 2/4/4", mqs(0, 1, 2, 3, 4, 5, 6, 7, 8, 9), weighted, Plan{"a": mqs(0, 1), "b": mqs(2, 3, 4, 5), "c": mqs(6, 7, 8, 9)}, false},
		{"nothing to share", nil, nil, Plan{}, true},
		{"queues but no members", mqs(0), nil, Plan{}, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if got := Balanced(Input{Queues: c.queues, Members: c.members}, c.plan); got != c.want {
				t.Errorf("Balanced = %v, want %v", got, c.want)
			}
		})
	}
}

func TestCrossZone(t *testing.T) {
	in := Input{
		Members:     []Member{{ID: "a", Zone: "z1"}, {ID: "b", Zone: "z2"}, {ID: "c"}},
		BrokerZones: map[string]string{"b1": "z1", "b2": "z2"},
	}
	q := func(broker string, id int32) Queue { return Queue{Topic: "T", Broker: broker, ID: id} }
	cases := []struct {
		name string
		plan Plan
		want int
	}{
		{"every queue in its zone", Plan{"a": {q("b1", 0), q("b1", 1)}, "b": {q("b2", 0)}}, 0},
		{"a queue of the other zone", Plan{"a": {q("b1", 0), q("b2", 0)}, "b": {}}, 1},
		{"a broker of unknown zone", Plan{"a": {q("b3", 0)}, "b": {q("b3", 1)}}, 2},
		{"a member of unknown zone", Plan{"c": {q("b1", 0), q("b2", 0)}}, 2},
		{"an entry that is no member", Plan{"x": {q("b1", 0)}}, 1},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if got := CrossZone(in, c.plan); got != c.want {
				t.Errorf("CrossZone = %d, want %d", got, c.want)
			}
		})
	}
}

func TestCheckPartition(t *testing.T) {
	queues := mqs(0, 1, 2)
	ms := members("a", "b")
	cases := []struct {
		name    string
		members []Member
		plan    Plan
		want    string // "" for no error
	}{
		{"a partition", ms, Plan{"a": mqs(2, 0), "b": mqs(1)}, ""},
		{"a partition of a subset, an entry missing", ms, Plan{"a": mqs(1)}, ""},
		{"an empty entry of a non-member", ms, Plan{"a": mqs(0), "x": {}}, ""},
		{"queues to a non-member", ms, Plan{"a": mqs(0), "x": mqs(1)}, `the strategy gave queues to "x", which is not a member`},
		{"a queue that is not one of the queues", ms, Plan{"a": mqs(0), "b": mqs(1, 9)}, `the strategy gave T/b/9 to "b", which is not one of the queues`},
		{"a queue to two members", ms, Plan{"b": mqs(1, 0), "a": mqs(0)}, `the strategy gave T/b/0 to more than one member: "a" and "b"`},
		{"a queue twice to one member", ms, Plan{"a": mqs(0, 2, 0)}, `the strategy gave T/b/0 to "a" twice`},
		// UTF-16 order puts U+1F600 (D83D DE00) before U+FF21; UTF-8 byte order would not.
		{"members in UTF-16 order", members("\uFF21", "\U0001F600"), Plan{"\uFF21": mqs(0), "\U0001F600": mqs(0)},
			`the strategy gave T/b/0 to more than one member: "` + "\U0001F600" + `" and "` + "\uFF21" + `"`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			err := CheckPartition(queues, c.members, c.plan)
			switch {
			case c.want == "" && err != nil:
				t.Errorf("CheckPartition: %v, want no error", err)
			case c.want != "" && (err == nil || err.Error() != c.want):
				t.Errorf("error = %v, want %s", err, c.want)
			}
		})
	}
}

func TestQueueLoads(t *testing.T) {
	inf, nan := math.Inf(1), math.NaN()
	cases := []struct {
		name    string
		queues  []Queue
		reports map[Queue]float64
		want    map[Queue]float64
	}{
		{"none reported: each counts 1", mqs(0, 1), nil, map[Queue]float64{mq(0): 1, mq(1): 1}},
		{"unreported at the mean of the reported", mqs(0, 1, 2), map[Queue]float64{mq(0): 2, mq(1): 4},
			map[Queue]float64{mq(0): 2, mq(1): 4, mq(2): 3}},
		{"negative, NaN and infinite reports count as unreported", mqs(0, 1, 2, 3), map[Queue]float64{mq(0): 6, mq(1): -1, mq(2): nan, mq(3): inf},
			map[Queue]float64{mq(0): 6, mq(1): 6, mq(2): 6, mq(3): 6}},
		{"a report of a queue the group lacks is ignored, in the mean too", mqs(0, 1), map[Queue]float64{mq(0): 2, mq(9): 100},
			map[Queue]float64{mq(0): 2, mq(1): 2}},
		{"zero is a load", mqs(0, 1), map[Queue]float64{mq(0): 0}, map[Queue]float64{mq(0): 0, mq(1): 0}},
		{"a queue listed twice counts once", []Queue{mq(0), mq(0), mq(1)}, map[Queue]float64{mq(0): 3},
			map[Queue]float64{mq(0): 3, mq(1): 3}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got := QueueLoads(Input{Queues: c.queues, QueueLoad: c.reports})
			if !maps.Equal(got, c.want) {
				t.Errorf("QueueLoads = %v, want %v", got, c.want)
			}
		})
	}
}

func TestMemberLoadsAndBound(t *testing.T) {
	in := Input{
		Queues:  mqs(0, 1, 2, 3),
		Members: []Member{{ID: "a", Weight: 2}, {ID: "b"}, {ID: "c", Weight: -1}}, // c's weight counts as 1
	}
	loads := map[Queue]float64{mq(0): 8, mq(1): 4, mq(2): 2, mq(3): 2} // 16 in all, weights 2+1+1
	plan := Plan{"a": mqs(1, 2, 3), "b": mqs(0), "c": {}}
	got := MemberLoads(in, plan, loads)
	// The queue of 8 is hotter than a member of mean weight's share (16/3): set aside with one, the other
	// 8 over the remaining weight 8/3 is 3 per unit of weight, so a can reach 6 and b and c 3.
	want := map[string]MemberLoad{"a": {Load: 8, Hottest: 4, Fair: 8, Achievable: 6}, "b": {Load: 8, Hottest: 8, Fair: 4, Achievable: 3}, "c": {Fair: 4, Achievable: 3}}
	for id, w := range want {
		g := got[id]
		if g.Load != w.Load || g.Hottest != w.Hottest || g.Fair != w.Fair || math.Abs(g.Achievable-w.Achievable) > 1e-9 {
			t.Fatalf("MemberLoads = %v, want %v", got, want)
		}
	}
	// b carries twice its share, but only the one queue: max(1.1·4, 4+8) = 12.
	if b := got["b"].Bound(0.1); b != 12 {
		t.Errorf("b's bound = %v, want 12", b)
	}
	if !WithinLoadBound(got, 0.1) {
		t.Error("WithinLoadBound: want true, every member is within its bound")
	}
	// b's aim is max(1.1·4, 8) = 8: it carries its hottest queue alone. a's is 8.8.
	if b, a := got["b"].Aim(0.1), got["a"].Aim(0.1); b != 8 || math.Abs(a-8.8) > 1e-12 || !WithinLoadAim(got, 0.1) {
		t.Errorf("aims: b %v, a %v, within %v; want 8, 8.8 and within", b, a, WithinLoadAim(got, 0.1))
	}
	// c holds nothing with an achievable share of 3: within every member's aim, yet not within the
	// tolerance. Once c holds a queue of 2, it is, though 2 is below (1-t) times 3.
	if WithinLoadTolerance(got, 0.1) {
		t.Error("WithinLoadTolerance: want false, c is idle")
	}
	spread := MemberLoads(in, Plan{"a": mqs(1, 3), "b": mqs(0), "c": mqs(2)}, loads)
	if !WithinLoadTolerance(spread, 0.1) || spread["a"].Queues != 2 || spread["c"].Queues != 1 {
		t.Errorf("WithinLoadTolerance: want true for %v, every member within its aim and none idle", spread)
	}
	// a holding b's queue too is within its bound (16 ≤ max(8.8, 8+8)) but not its aim (16 > max(8.8, 8)).
	if merged := MemberLoads(in, Plan{"a": mqs(0, 1, 2, 3), "b": {}, "c": {}}, loads); !WithinLoadBound(merged, 0.1) || WithinLoadAim(merged, 0.1) {
		t.Error("a holding every queue: want within its bound and above its aim")
	}
	// With a fifth queue of load 1 the total is 17 and a's share 8.5: a holding every queue carries 17,
	// above max(1.1·8.5, 8.5+8) = 16.5.
	in.Queues = append(in.Queues, mq(4))
	loads[mq(4)] = 1
	if WithinLoadBound(MemberLoads(in, Plan{"a": mqs(0, 1, 2, 3, 4), "b": {}, "c": {}}, loads), 0.1) {
		t.Error("WithinLoadBound: want false, a carries 17 against a bound of max(1.1·8.5, 8.5+8) = 16.5")
	}
}

func TestAchievableLevel(t *testing.T) {
	cases := []struct {
		name    string
		loads   []float64
		members int
		want    float64
	}{
		{"no hot queue", []float64{1, 2, 3, 2}, 2, 4},
		{"one hot queue", []float64{10, 1, 1, 1, 1}, 3, 2},
		// 40 and 20 are each above the remaining share in turn: 40 > 75/4, then 20 > 35/3.
		{"two hot queues", []float64{40, 20, 5, 5, 5}, 4, 7.5},
		// With two members at most one queue is set aside: the other member carries the rest.
		{"no more than members-1", []float64{40, 20, 10}, 2, 30},
		{"no members", []float64{1}, 0, 0},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			total := 0.0
			for _, l := range c.loads {
				total += l
			}
			if got := AchievableLevel(c.loads, total, float64(c.members), c.members); math.Abs(got-c.want) > 1e-12 {
				t.Errorf("AchievableLevel = %v, want %v", got, c.want)
			}
		})
	}
}

func TestMovedLoad(t *testing.T) {
	loads := map[Queue]float64{mq(0): 1, mq(1): 2, mq(2): 4, mq(3): 8, mq(4): 16}
	before := Plan{"a": mqs(0, 1, 2), "b": mqs(3), "gone": mqs(4)}
	after := Plan{"a": mqs(0), "b": mqs(1, 3), "c": mqs(2, 4)}
	// 1 and 2 move from a, which stays; 4 was held by a member that left and does not count (as in Moved).
	if got, n := MovedLoad(before, after, loads), Moved(before, after); got != 6 || n != 2 {
		t.Errorf("MovedLoad = %v over %d queues, want 6 over 2", got, n)
	}
}
