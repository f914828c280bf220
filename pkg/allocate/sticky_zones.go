package allocate

import (
	"slices"
	"strings"
)

// This file is Sticky's locality phase, run after the balanced placement of sticky.go (queue counts,
// MaxSkew 0). It brings the queues read outside their broker's zone down towards MinCrossZone by chains
// of single moves that keep every member between the floor and the ceiling of its share:
//
//   - a cycle of zones: a member of zone x hands a queue to a member of zone y, who hands one to a member
//     of zone z, ..., who hands one back to the member of x. Every member keeps its count. A swap of two
//     queues between two zones is the shortest;
//   - a path: the same, but starting at a member at its ceiling and ending at a member of another zone
//     at its floor whose share is fractional: the extra queue changes hands, still balanced.
//
// Members are grouped by zone ("classes", members of no zone in one more class) and queues by their
// broker's zone, so the search is over a graph of a few nodes, not of members: a chain improves locality
// exactly when its cycle in that graph has negative cost, and a balanced plan with no negative cycle reads
// as few queues across zones as any balanced plan (the optimality condition of a min-cost flow; the node
// "S" stands for the choice of who holds the extra queues).
//
// Moves are counted against the plan before this rebalance. A queue that moves anyway (its owner left,
// or balance took it from its owner) may move again for free; moving a queue its owner kept costs one
// repair move. Chains that cost nothing run first, so queues that move anyway go home; then chains that
// cost repair moves, most cross-zone reads saved per move first, while the budget lasts.
//
// Cost per chain: O(C·Z) to count, C members and Z zone classes, plus the search over at most
// zoneRepairMaxClasses classes, plus finding the queues to move.

// zoneRepairMaxClasses bounds the zone classes (zones with members or brokers, and "no zone") the search
// handles; a group spread over more zones keeps the balanced placement as it is.
const zoneRepairMaxClasses = 8

// zoneRepairMaxHops bounds a chain's length, which bounds the search.
const zoneRepairMaxHops = 6

// zoneRepair is the working set of the locality phase.
type zoneRepair struct {
	st     *stickyState
	nc     int     // classes: zone ids 0..nc-2, and nc-1 for "no zone"
	order  []int32 // classes by zone name, "no zone" last: the search's tie-break order
	budget int     // repair moves left

	// Per member, per broker class, per kind (0: kept from the previous plan, 1: moving anyway), the
	// queues held; and the same summed per member class, over all members (hold) and over the members
	// that may give up a queue (above their floor: lose).
	mh, hold, lose []int32
	gain           []int32 // per class, members that may take one more queue (below their ceiling)
	movable        []int32 // positions whose owner is not their previous owner (kind 1), maybe stale
	byClass        [][]int32
	applied        []zoneRepairStep // what each chain applied so far did
}

// zoneRepairStep is what one chain of the locality phase did: the moves it added to the rebalance
// (Moved against the plan before it; below 0 when more queues went home than moved) and the cross-zone
// reads (CrossZone) it saved, at least one.
type zoneRepairStep struct{ moves, saved int }

// repairZones runs the locality phase with budget repair moves and returns what each chain it applied
// did; none without zones.
func (st *stickyState) repairZones(budget int) []zoneRepairStep {
	nz := len(st.zoneIDs)
	if nz == 0 || nz+1 > zoneRepairMaxClasses {
		return nil
	}
	zr := &zoneRepair{st: st, nc: nz + 1, budget: budget}
	zr.index()
	for range len(st.order) {
		c, ok := zr.best()
		if !ok || !zr.apply(c) {
			break
		}
	}
	return zr.applied
}

func (zr *zoneRepair) memberClass(i int32) int32 { return zr.st.memberClassOf(i, zr.nc) }

// memberClassOf is member i's zone id, or nc-1 when it has none.
func (st *stickyState) memberClassOf(i int32, nc int) int32 {
	if z := st.mzone[i]; z >= 0 {
		return z
	}
	return int32(nc - 1)
}

func (zr *zoneRepair) queueClass(p int32) int32 {
	if z := zr.st.qzone[p]; z >= 0 {
		return z
	}
	return int32(zr.nc - 1)
}

// cost is 1 when a queue of broker class b read by a member of class m is read across zones.
func (zr *zoneRepair) cost(b, m int32) int {
	if b == m && int(b) < zr.nc-1 {
		return 0
	}
	return 1
}

// kind is 1 for a queue that moves in this rebalance anyway (or has no previous owner), else 0.
func (zr *zoneRepair) kind(p int32) int32 {
	if zr.st.owner[p] != zr.st.prev[p] || zr.st.prev[p] < 0 {
		return 1
	}
	return 0
}

func (zr *zoneRepair) slot(member, b, kind int32) int32 { return (member*int32(zr.nc)+b)*2 + kind }

// index counts every member's queues by broker class and kind, and orders the classes by zone name.
func (zr *zoneRepair) index() {
	st := zr.st
	zr.mh = make([]int32, len(st.members)*zr.nc*2)
	for p, o := range st.owner {
		k := zr.kind(int32(p))
		zr.mh[zr.slot(o, zr.queueClass(int32(p)), k)]++
		if k == 1 {
			zr.movable = append(zr.movable, int32(p))
		}
	}
	names := make([]string, zr.nc-1)
	for z, id := range st.zoneIDs {
		names[id] = z
	}
	zr.order = make([]int32, zr.nc)
	for c := range zr.order {
		zr.order[c] = int32(c)
	}
	slices.SortFunc(zr.order[:zr.nc-1], func(a, b int32) int { return strings.Compare(names[a], names[b]) })
}

// aggregate sums the members' counts per class.
func (zr *zoneRepair) aggregate() {
	st := zr.st
	n := zr.nc * zr.nc * 2
	zr.hold, zr.lose, zr.gain = resize(zr.hold, n), resize(zr.lose, n), resize(zr.gain, zr.nc)
	for i := range int32(len(st.members)) {
		c := zr.memberClass(i)
		canLose, canGain := st.count[i] > st.floor[i], st.count[i] < st.ceil[i]
		if canGain {
			zr.gain[c]++
		}
		for b := range int32(zr.nc) {
			for k := range int32(2) {
				if h := zr.mh[zr.slot(i, b, k)]; h > 0 {
					zr.hold[zr.slot(c, b, k)] += h
					if canLose {
						zr.lose[zr.slot(c, b, k)]++
					}
				}
			}
		}
	}
}

// resize returns s with length n, zeroed.
func resize(s []int32, n int) []int32 {
	if cap(s) < n {
		return make([]int32, n)
	}
	s = s[:n]
	clear(s)
	return s
}

// zoneEdge is the cheapest way of one kind to hand a queue along an edge of the class graph: a queue of
// broker class b leaving a member of class from (for an edge out of S, a member of class from above its
// floor) changes the cross-zone count by delta.
type zoneEdge struct {
	ok      bool
	delta   int
	b, from int32
}

// zoneChain is a cycle of the class graph with the kind chosen for each edge: node 0 is S (the extra
// queues) when the chain is a path, and kinds[j] is the kind of the queue handed from nodes[j] to
// nodes[j+1].
type zoneChain struct {
	nodes, kinds []int32
	cost, moves  int
}

// better reports whether chain a is preferred to b: cheaper chains (no repair move) first, by the most
// cross-zone reads saved; then by the most saved per repair move; then the shorter.
func (a zoneChain) better(b zoneChain) bool {
	if (a.moves == 0) != (b.moves == 0) {
		return a.moves == 0
	}
	if a.moves > 0 && a.cost*b.moves != b.cost*a.moves {
		return a.cost*b.moves < b.cost*a.moves
	}
	if a.cost != b.cost {
		return a.cost < b.cost
	}
	return len(a.nodes) < len(b.nodes)
}

// class is node's class: node 0 is S, node j > 0 is class order[j-1].
func (zr *zoneRepair) class(node int32) int32 { return zr.order[node-1] }

// edges returns the cheapest edge of each kind from node u to node v.
func (zr *zoneRepair) edges(u, v int32) (e [2]zoneEdge) {
	if v == 0 {
		if u != 0 && zr.gain[zr.class(u)] > 0 {
			e[1] = zoneEdge{ok: true}
		}
		return e
	}
	y := zr.class(v)
	from, counts := zr.order, zr.lose // out of S: a member above its floor, of any other class, gives
	if u != 0 {
		from, counts = []int32{zr.class(u)}, zr.hold
	}
	for _, x := range from {
		// Out of S, x may be y: the member above its floor hands any queue to the member of its zone
		// that hands the right one on.
		for _, b := range zr.order {
			for k := range int32(2) {
				if counts[zr.slot(x, b, k)] == 0 {
					continue
				}
				if d := zr.cost(b, y) - zr.cost(b, x); !e[k].ok || d < e[k].delta {
					e[k] = zoneEdge{ok: true, delta: d, b: b, from: x}
				}
			}
		}
	}
	return e
}

// best finds the preferred chain that lowers the cross-zone count within the budget, if any: every
// simple cycle of the class graph up to zoneRepairMaxHops nodes, each counted once from its first node.
func (zr *zoneRepair) best() (zoneChain, bool) {
	zr.aggregate()
	n := int32(zr.nc + 1)
	graph := make([][2]zoneEdge, n*n)
	for u := range n {
		for v := range n {
			if u != v {
				graph[u*n+v] = zr.edges(u, v)
			}
		}
	}
	var found zoneChain
	have := false
	path := make([]int32, 0, zoneRepairMaxHops)
	var walk func(start, u int32)
	walk = func(start, u int32) {
		path = append(path, u)
		defer func() { path = path[:len(path)-1] }()
		if len(path) > 1 && (graph[u*n+start][0].ok || graph[u*n+start][1].ok) {
			if c, ok := zr.price(path, graph, n); ok && (!have || c.better(found)) {
				found, have = c, true
			}
		}
		if len(path) == zoneRepairMaxHops {
			return
		}
		for v := start + 1; v < n; v++ {
			if !slices.Contains(path, v) && (graph[u*n+v][0].ok || graph[u*n+v][1].ok) {
				walk(start, v)
			}
		}
	}
	for s := range n {
		walk(s, s)
	}
	return found, have
}

// price chooses the kind of each edge of the cycle path (closed back to its first node) for the
// preferred chain within the budget: a free edge where there is one, a repair move where it saves more.
// It reports false when no choice lowers the cross-zone count.
func (zr *zoneRepair) price(path []int32, graph [][2]zoneEdge, n int32) (zoneChain, bool) {
	edges := make([][2]zoneEdge, len(path))
	var c zoneChain
	var gains []int // what a repair move saves over the free edge, per edge that has both
	for j, u := range path {
		e := graph[u*n+path[(j+1)%len(path)]]
		edges[j] = e
		if !e[1].ok {
			c.moves++
			c.cost += e[0].delta
			continue
		}
		c.cost += e[1].delta
		if e[0].ok && e[0].delta < e[1].delta {
			gains = append(gains, e[0].delta-e[1].delta)
		}
	}
	if c.moves > zr.budget {
		return zoneChain{}, false
	}
	best, ok := c, c.cost < 0
	slices.Sort(gains)
	for _, g := range gains {
		if c.moves == zr.budget {
			break
		}
		c.moves++
		c.cost += g
		if c.cost < 0 && (!ok || c.better(best)) {
			best, ok = c, true
		}
	}
	if !ok {
		return zoneChain{}, false
	}
	best.nodes, best.kinds = slices.Clone(path), kindsFor(edges, best.moves)
	return best, true
}

// kindsFor picks each edge's kind for a chain with the given repair moves: the edges with only a kept
// queue to hand on take one each, the rest go to the edges where a kept queue saves the most.
func kindsFor(edges [][2]zoneEdge, moves int) []int32 {
	kinds := make([]int32, len(edges))
	var optional []int
	for j, e := range edges {
		if !e[1].ok {
			moves--
			continue
		}
		kinds[j] = 1
		if e[0].ok && e[0].delta < e[1].delta {
			optional = append(optional, j)
		}
	}
	gain := func(j int) int { return edges[j][0].delta - edges[j][1].delta }
	slices.SortStableFunc(optional, func(a, b int) int { return gain(a) - gain(b) })
	for _, j := range optional[:moves] {
		kinds[j] = 0
	}
	return kinds
}

// apply finds the members and queues for chain c and makes its moves, when they lower the cross-zone
// count within the budget; it reports whether it did.
func (zr *zoneRepair) apply(c zoneChain) bool {
	st := zr.st
	l := len(c.nodes)
	who := make([]int32, l)   // the member at each node: it takes the queue handed in and hands one on
	queue := make([]int32, l) // the queue handed from node j to node j+1; -1 into S
	for j := range queue {
		queue[j] = -1
	}
	for j, u := range c.nodes {
		v := c.nodes[(j+1)%l]
		if u == 0 || v == 0 {
			continue // S's queue is picked after the others, the member that takes one more last
		}
		e := zr.edges(u, v)[c.kinds[j]]
		if queue[j] = zr.pick(zr.class(u), e.b, c.kinds[j], false, queue); queue[j] < 0 {
			return false
		}
		who[j] = st.owner[queue[j]]
	}
	if c.nodes[0] == 0 {
		e := zr.edges(0, c.nodes[1])[c.kinds[0]]
		if first := who[1]; l > 2 && e.from == st.memberClassOf(first, zr.nc) && st.count[first] > st.floor[first] {
			who[0] = first // the member that hands the queue on may give up one itself
		} else if queue[0] = zr.pick(e.from, e.b, c.kinds[0], true, queue); queue[0] < 0 {
			return false
		} else {
			who[0] = st.owner[queue[0]]
		}
	}
	if c.nodes[0] == 0 {
		// The member that takes one more: the previous owner of the queue it takes, when it can, so that
		// the queue goes home and the move is undone.
		last := int32(l - 1)
		if who[last] = zr.gainer(zr.class(c.nodes[last]), queue[last-1]); who[last] < 0 {
			return false
		}
	}
	cross, moves := 0, 0
	for j, p := range queue {
		if p >= 0 {
			to, from := who[(j+1)%l], st.owner[p]
			cross += zr.cost(zr.queueClass(p), zr.memberClass(to)) - zr.cost(zr.queueClass(p), zr.memberClass(from))
			moves += zr.moved(p, to) - zr.moved(p, from)
		}
	}
	if cross >= 0 || moves > zr.budget {
		return false
	}
	for j, p := range queue {
		if p >= 0 {
			zr.move(p, who[(j+1)%l])
		}
	}
	zr.budget -= max(moves, 0)
	zr.applied = append(zr.applied, zoneRepairStep{moves: moves, saved: -cross})
	return true
}

// moved is 1 when queue p held by member m counts as moved: its previous owner is another member.
func (zr *zoneRepair) moved(p, m int32) int {
	if pr := zr.st.prev[p]; pr >= 0 && pr != m {
		return 1
	}
	return 0
}

// gainer is a member of class c below its ceiling: the previous owner of queue p if it is one, else the
// first in member order; -1 when there is none.
func (zr *zoneRepair) gainer(c, p int32) int32 {
	if p >= 0 {
		if pr := zr.st.prev[p]; pr >= 0 && zr.memberClass(pr) == c && zr.st.count[pr] < zr.st.ceil[pr] {
			return pr
		}
	}
	for i := range int32(len(zr.st.members)) {
		if zr.memberClass(i) == c && zr.st.count[i] < zr.st.ceil[i] {
			return i
		}
	}
	return -1
}

// pick returns the last queue in canonical order of broker class b and the given kind held by a member
// of class c (above its floor, with needLose) that is not in exclude, or -1.
func (zr *zoneRepair) pick(c, b, kind int32, needLose bool, exclude []int32) int32 {
	st := zr.st
	candidates := zr.movable
	if kind == 0 {
		candidates = zr.classPositions(b)
	}
	for k := len(candidates) - 1; k >= 0; k-- {
		p := candidates[k]
		o := st.owner[p]
		if zr.kind(p) != kind || zr.queueClass(p) != b || zr.memberClass(o) != c ||
			needLose && st.count[o] <= st.floor[o] || slices.Contains(exclude, p) {
			continue
		}
		return p
	}
	return -1
}

// classPositions lists the positions of broker class b's queues in canonical order. On first use it
// buckets every position by class into one scratch array (a counting sort), so a replan allocates
// nothing for it.
func (zr *zoneRepair) classPositions(b int32) []int32 {
	if zr.byClass == nil {
		off := make([]int32, zr.nc+1)
		for p := range int32(len(zr.st.order)) {
			off[zr.queueClass(p)+1]++
		}
		for c := range zr.nc {
			off[c+1] += off[c]
		}
		all := reuse(&zr.st.scratch.byClass, len(zr.st.order))
		fill := slices.Clone(off[:zr.nc])
		for p := range int32(len(zr.st.order)) {
			c := zr.queueClass(p)
			all[fill[c]] = p
			fill[c]++
		}
		zr.byClass = make([][]int32, zr.nc)
		for c := range zr.nc {
			zr.byClass[c] = all[off[c]:off[c+1]]
		}
	}
	return zr.byClass[b]
}

// move hands queue p to member to, keeping the counts current.
func (zr *zoneRepair) move(p, to int32) {
	st := zr.st
	from, b, was := st.owner[p], zr.queueClass(p), zr.kind(p)
	zr.mh[zr.slot(from, b, was)]--
	st.count[from]--
	st.owner[p] = to
	st.count[to]++
	now := zr.kind(p)
	zr.mh[zr.slot(to, b, now)]++
	if now == 1 && was == 0 {
		zr.movable = append(zr.movable, p)
	}
}
