package allocate

import (
	"cmp"
	"container/heap"
	"math"
	"slices"
)

// Sticky balances by queue count unless Params.BalanceBy is BalanceByLoad; then it balances the load the
// members report per queue (Input.QueueLoad). The rules, in priority order:
//
//  1. every queue has exactly one owner;
//  2. load bound: with L the total load, W the total weight and F_i = L*w_i/W member i's fair share, and
//     h_i the load of the hottest queue it holds, member i carries at most
//     max((1+t)*F_i, F_i + h_i), t the tolerance. Queues are indivisible: with three equal queues and
//     two members one member must carry two, 1.33 times its share, so a bound below F_i + h_i cannot
//     always hold; where it can, (1+t)*F_i is what the rebalance aims for;
//  3. hysteresis and few moves: a member keeps what it held as long as it stays within (1+t)*F_i (or
//     holds one queue); an over-loaded member sheds as few queues as it can; a member that kept nothing
//     of the previous plan (it joined, or its queues are gone) and is below (1-t)*A_i, A_i its achievable
//     share (AchievableLevel), takes queues from the most loaded members while that brings both closer to
//     their shares. A member that holds queues is never pulled up to the lower tolerance: below its share
//     but with nobody above the upper tolerance, it is no reason to move a queue. So when every member of
//     the previous plan is within (1+t)*F_i (or carries only its hottest queue) for the new loads, and none
//     is idle, nothing moves;
//  4. locality: a freed or new queue goes to the least loaded member in its broker's zone when that member
//     stays within (1+t)*F_i, otherwise to the least loaded member anywhere;
//  5. determinism: queues are taken hottest first, ties by canonical order; members by load over weight,
//     ties by member id.
//
// A queue with no reported load counts at the mean of the reported ones (1 when none is reported, which
// is balancing by count). Cost: O(Q log C) for Q queues and C members, beyond Sticky's indexing.
const (
	// BalanceByQueues balances queue counts (Sticky's default).
	BalanceByQueues = "Queues"
	// BalanceByLoad balances reported load.
	BalanceByLoad = "Load"
	// DefaultLoadTolerance is t when Params.LoadTolerance is nil.
	DefaultLoadTolerance = 0.10
)

// loadState is the working set of a load-balanced Sticky call, over stickyState's indexing.
type loadState struct {
	*stickyState
	tol   float64
	qload []float64 // canonical position -> load
	load  []float64 // member -> load held
	fair  []float64 // member -> fair share
	// achievable is member -> its share once the hot queues have a member each (AchievableLevel): what
	// the lower tolerance is measured against, since no member can take a hot queue's load off its owner.
	achievable []float64
	// idle is member -> it kept nothing of the previous plan (it joined, or its queues are gone): the
	// only members the lower tolerance fills.
	idle []bool
	held [][]int32 // member -> canonical positions held
	// givers is pair's buffer, reused from one move to the next.
	givers []int32
}

// allocateByLoad places every queue after st has indexed members and queues and read the previous plan.
func (st *stickyState) allocateByLoad(tol float64) {
	ls := &loadState{stickyState: st, tol: tol}
	ls.measure()
	ls.keep()
	if !ls.settled() {
		ls.shed()
		ls.place()
		ls.rebalance()
		ls.swap()
	}
	st.count = make([]int32, len(st.members))
	for i, qs := range ls.held {
		st.count[i] = int32(len(qs))
		for _, p := range qs {
			st.owner[p] = int32(i)
		}
	}
}

// measure gives every queue its load and every member its fair share.
func (ls *loadState) measure() {
	q := len(ls.order)
	ls.qload = reuse(&ls.scratch.qload, q)
	for p := range ls.qload {
		ls.qload[p] = -1
	}
	// One pass over the reports, each placed by Sticky's index of the queues: cheaper than a lookup per
	// queue, and a report of a queue the group does not have is ignored.
	for qu, v := range ls.in.QueueLoad {
		if !validLoad(v) {
			continue
		}
		if p := ls.position(qu); p >= 0 {
			ls.qload[p] = v
		}
	}
	// Summed in canonical order, not the map's: the mean, and every tie it breaks, is the same each call.
	var reported, sum float64
	for _, v := range ls.qload {
		if v >= 0 {
			reported++
			sum += v
		}
	}
	mean := 1.0
	if reported > 0 {
		mean = sum / reported
	}
	var total float64
	for p, v := range ls.qload {
		if v < 0 {
			ls.qload[p] = mean
		}
		total += ls.qload[p]
	}
	var weights int64
	for _, w := range ls.weight {
		weights += w
	}
	n := len(ls.members)
	ls.fair, ls.load, ls.held = make([]float64, n), make([]float64, n), make([][]int32, n)
	level := AchievableLevel(ls.qload, total, float64(weights), n)
	ls.achievable = make([]float64, n)
	for i, w := range ls.weight {
		ls.fair[i] = total * float64(w) / float64(weights)
		ls.achievable[i] = level * float64(w)
	}
	ls.owner = reuse(&ls.scratch.owner, q) // keep writes every entry
}

// keep gives every surviving member the queues it held.
func (ls *loadState) keep() {
	// One backing array, each member's slice with room for what it held and a few more.
	counts := make([]int, len(ls.members))
	for _, m := range ls.prev {
		if m >= 0 {
			counts[m]++
		}
	}
	const room = 4
	backing := reuse(&ls.scratch.held, len(ls.prev)+room*len(ls.members))[:0]
	for i, c := range counts {
		ls.held[i] = backing[len(backing) : len(backing) : len(backing)+c+room]
		backing = backing[:len(backing)+c+room]
	}
	for p, m := range ls.prev {
		ls.owner[p] = m
		if m >= 0 {
			ls.held[m] = append(ls.held[m], int32(p))
			ls.load[m] += ls.qload[p]
		}
	}
	ls.idle = make([]bool, len(ls.members))
	for i, c := range counts {
		ls.idle[i] = c == 0
	}
}

func (ls *loadState) ceiling(i int) float64 { return (1 + ls.tol) * ls.fair[i] }

// bound is rule 2's bound on what member i carries.
func (ls *loadState) bound(i int) float64 { return max(ls.ceiling(i), ls.fair[i]+ls.hottest(i)) }

// settled reports whether the previous plan stands as it is (hysteresis): every queue has an owner that
// is still a member, every member had an entry in it and is within its bound, and no move of rebalance
// remains. A plan this strategy made for the same members and loads always is, so re-planning moves
// nothing.
func (ls *loadState) settled() bool {
	if slices.Contains(ls.owner, -1) {
		return false
	}
	for i, m := range ls.members {
		if _, ok := ls.in.Previous[m.ID]; !ok || ls.load[i] > ls.bound(i)*(1+1e-9) {
			return false
		}
	}
	_, ok := ls.nextMove()
	return !ok && !ls.canSwap()
}

func (ls *loadState) hottest(i int) float64 {
	var h float64
	for _, p := range ls.held[i] {
		h = max(h, ls.qload[p])
	}
	return h
}

// shed makes every member that carries more than (1+t) times its share, and more than its hottest queue,
// give up queues: each time the coolest queue that alone brings it within its ceiling, else its hottest,
// so that few queues move. Cross-zone queues go first among equals.
func (ls *loadState) shed() {
	for i := range ls.members {
		for len(ls.held[i]) > 1 && ls.overloaded(i) {
			excess := ls.load[i] - ls.ceiling(i)
			best := -1
			for k, p := range ls.held[i] {
				if best < 0 {
					best = k
					continue
				}
				b := ls.held[i][best]
				bFits, pFits := ls.qload[b] >= excess, ls.qload[p] >= excess
				switch {
				case pFits && !bFits:
					best = k
				case pFits && bFits && (ls.qload[p] < ls.qload[b] || ls.qload[p] == ls.qload[b] && ls.crossZone(p, i) && !ls.crossZone(b, i)):
					best = k
				case !pFits && !bFits && ls.qload[p] > ls.qload[b]:
					best = k
				}
			}
			p := ls.held[i][best]
			ls.held[i] = slices.Delete(ls.held[i], best, best+1)
			ls.load[i] -= ls.qload[p]
			ls.owner[p] = -1
		}
	}
}

// overloaded reports whether member i carries more than (1+t) times its share and more than its hottest
// queue: more than it should when it could give a queue away.
func (ls *loadState) overloaded(i int) bool {
	return ls.load[i] > ls.ceiling(i) && ls.load[i] > ls.hottest(i)
}

func (ls *loadState) crossZone(p int32, member int) bool {
	return ls.qzone[p] >= 0 && ls.mzone[member] >= 0 && ls.qzone[p] != ls.mzone[member]
}

// place hands every queue without an owner, hottest first, to the least loaded member (by load over
// weight) of its broker's zone if that member stays within its ceiling, else to the least loaded member.
func (ls *loadState) place() {
	var free []int32
	for p, o := range ls.owner {
		if o < 0 {
			free = append(free, int32(p))
		}
	}
	if len(free) == 0 {
		return
	}
	slices.SortStableFunc(free, func(a, b int32) int {
		switch {
		case ls.qload[a] > ls.qload[b]:
			return -1
		case ls.qload[a] < ls.qload[b]:
			return 1
		}
		return 0
	})
	// Every member's position in each heap, one slice for all of them: a member is in the heap of all
	// members and in its zone's.
	at := make([]int, 2*len(ls.members))
	all := &memberHeap{ls: ls, at: at[:len(ls.members)]}
	zones := map[int32]*memberHeap{}
	for i := range ls.members {
		all.add(int32(i))
		if z := ls.mzone[i]; z >= 0 {
			if zones[z] == nil {
				zones[z] = &memberHeap{ls: ls, at: at[len(ls.members):]}
			}
			zones[z].add(int32(i))
		}
	}
	heap.Init(all)
	for _, zh := range zones {
		heap.Init(zh)
	}
	for _, p := range free {
		to := all.min()
		if zh := zones[ls.qzone[p]]; ls.qzone[p] >= 0 && zh != nil {
			if m := zh.min(); ls.load[m]+ls.qload[p] <= ls.ceiling(int(m)) {
				to = m
			}
		}
		ls.held[to] = append(ls.held[to], p)
		ls.load[to] += ls.qload[p]
		all.fix(to)
		if zh := zones[ls.mzone[to]]; zh != nil {
			zh.fix(to)
		}
	}
}

// rebalance moves one queue at a time, while a move helps, until neither of two kinds of move remains:
//   - fill: of the members that kept nothing of the previous plan, the one furthest below (1-t) times
//     its achievable share takes the hottest queue it can from the members most loaded relative to their
//     shares, staying within its ceiling and below the donor's ratio (a member that joins gets its share);
//   - relieve: a member above its ceiling and carrying more than its hottest queue gives the least loaded
//     member (relative to its share) the hottest queue that leaves that member below the giver's ratio.
//
// Each move lowers the higher ratio of the two members, so the loop ends; it is also capped at one move
// per queue. A plan from which neither kind of move remains is settled: re-planning it moves nothing.
func (ls *loadState) rebalance() {
	for moves := 0; moves < len(ls.order); moves++ {
		m, ok := ls.nextMove()
		if !ok {
			return
		}
		ls.makeMove(m)
	}
}

// loadMove is one move of rebalance: the queue held[from][at] goes to member to.
type loadMove struct {
	from, to int32
	at       int
}

// nextMove finds the move rebalance makes next, a fill if there is one, else a relieve, without making
// it; it reports whether there is one.
func (ls *loadState) nextMove() (loadMove, bool) {
	if m, ok := ls.findFill(); ok {
		return m, true
	}
	return ls.findRelieve()
}

// makeMove makes move m.
func (ls *loadState) makeMove(m loadMove) {
	p := ls.held[m.from][m.at]
	ls.held[m.from] = slices.Delete(ls.held[m.from], m.at, m.at+1)
	ls.load[m.from] -= ls.qload[p]
	ls.held[m.to] = append(ls.held[m.to], p)
	ls.load[m.to] += ls.qload[p]
}

func (ls *loadState) ratio(i int32) float64 { return ls.load[i] / ls.fair[i] }

// pair looks over the members with a share for a move's two sides: the least loaded (by ratio) of those
// that may take, and every member holding more than one queue that may give.
func (ls *loadState) pair(mayTake, mayGive func(i int32) bool) (taker int32, givers []int32) {
	taker, givers = -1, ls.givers[:0]
	for i := range int32(len(ls.members)) {
		if ls.fair[i] == 0 {
			continue
		}
		if mayTake(i) && (taker < 0 || ls.ratio(i) < ls.ratio(taker)) {
			taker = i
		}
		if len(ls.held[i]) > 1 && mayGive(i) {
			givers = append(givers, i)
		}
	}
	ls.givers = givers
	return taker, givers
}

// findFill finds a fill move: of the members that kept nothing of the previous plan, the one furthest
// below (1-t) times its achievable share takes from the most loaded donor that has a queue for it. It
// reports whether there is one. A member that kept queues is never filled: below its share but with
// nobody above the upper tolerance, it is no reason to move a queue.
func (ls *loadState) findFill() (loadMove, bool) {
	r, donors := ls.pair(func(i int32) bool { return ls.idle[i] && ls.load[i] < (1-ls.tol)*ls.achievable[i] }, func(int32) bool { return true })
	if r < 0 {
		return loadMove{}, false
	}
	// Donors most loaded first (ties by member order); the first usually gives, so they are picked by a
	// scan, not sorted.
	for len(donors) > 0 {
		k := 0
		for j, d := range donors {
			if ls.ratio(d) > ls.ratio(donors[k]) || ls.ratio(d) == ls.ratio(donors[k]) && d < donors[k] {
				k = j
			}
		}
		d := donors[k]
		donors[k] = donors[len(donors)-1]
		donors = donors[:len(donors)-1]
		if ls.ratio(d) <= ls.ratio(r) {
			return loadMove{}, false // every donor left is at most as loaded as r
		}
		if d == r {
			continue
		}
		if m, ok := ls.findGift(d, r, ls.ceiling(int(r))); ok {
			return m, true
		}
	}
	return loadMove{}, false
}

// findRelieve finds a relieve move: the most loaded overloaded member that has a queue for the least
// loaded member gives it one. It reports whether there is one.
func (ls *loadState) findRelieve() (loadMove, bool) {
	r, givers := ls.pair(func(int32) bool { return true }, func(i int32) bool { return ls.overloaded(int(i)) })
	// The most loaded giver first, ties by member order.
	slices.SortFunc(givers, func(a, b int32) int {
		if c := cmp.Compare(ls.ratio(b), ls.ratio(a)); c != 0 {
			return c
		}
		return cmp.Compare(a, b)
	})
	for _, d := range givers {
		if d == r {
			continue
		}
		if m, ok := ls.findGift(d, r, math.Inf(1)); ok {
			return m, true
		}
	}
	return loadMove{}, false
}

// findGift finds the move from d to r of the hottest of d's queues that keeps r within limit and below
// d's ratio; it reports whether d has one.
func (ls *loadState) findGift(d, r int32, limit float64) (loadMove, bool) {
	best := -1
	for k, p := range ls.held[d] {
		l := ls.qload[p]
		if ls.load[r]+l > limit || (ls.load[r]+l)/ls.fair[r] >= ls.ratio(d) {
			continue
		}
		if best < 0 || l > ls.qload[ls.held[d][best]] {
			best = k
		}
	}
	return loadMove{from: d, to: r, at: best}, best >= 0
}

// memberHeap orders members by load over weight, then by index (member id order).
type memberHeap struct {
	ls      *loadState
	members []int32
	at      []int // member -> its index in members; a zone's heap shares one slice with the others
}

// add appends m; heap.Init orders the heap once every member is added.
func (h *memberHeap) add(m int32) {
	h.at[m] = len(h.members)
	h.members = append(h.members, m)
}

// min is the least loaded member.
func (h *memberHeap) min() int32 { return h.members[0] }

// fix restores the order after m's load changed.
func (h *memberHeap) fix(m int32) { heap.Fix(h, h.at[m]) }

// Len, Less and Swap implement heap.Interface; the heap never grows or shrinks after heap.Init, so Push
// and Pop are never called.
func (h *memberHeap) Len() int { return len(h.members) }

func (h *memberHeap) Less(a, b int) bool {
	ma, mb := h.members[a], h.members[b]
	ra := h.ls.load[ma] / float64(h.ls.weight[ma])
	rb := h.ls.load[mb] / float64(h.ls.weight[mb])
	return ra < rb || ra == rb && ma < mb
}

func (h *memberHeap) Swap(a, b int) {
	h.members[a], h.members[b] = h.members[b], h.members[a]
	h.at[h.members[a]], h.at[h.members[b]] = a, b
}

func (h *memberHeap) Push(any) { panic("memberHeap does not grow") }

func (h *memberHeap) Pop() any { panic("memberHeap does not shrink") }
