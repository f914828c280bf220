package allocate

import (
	"cmp"
	"fmt"
	"slices"
	"strings"
	"sync"
)

// sticky is the Sticky strategy: a balanced plan that moves as few queues as balance forces and keeps
// queues in their broker's zone where it can. The rules, in priority order:
//
//  1. every queue has exactly one owner;
//  2. balance: member i holds floor(s_i) or ceil(s_i) queues, where s_i = Q*w_i/W is its weighted fair
//     share (Q queues, w_i its weight, W the total weight). The quotas sum to Q; for equal weights this
//     is max-min <= 1;
//  3. minimal movement: a member keeps min(previous, quota) of the queues it held; only the excess moves.
//     Among the quota choices rule 2 allows (who gets the ceil), the one that moves least is taken, so the
//     number of moved queues equals the lower bound sum_i max(0, previous_i - quota_i) minimised over
//     quotas;
//  4. locality: an over-quota member gives up cross-zone queues first, and freed or new queues go to
//     members below quota in the broker's zone first. With MaxSkew > 0 a member may hold up to MaxSkew
//     queues more than its quota to avoid a cross-zone placement, and no member falls more than MaxSkew
//     below its quota in exchange;
//  5. determinism: every tie is broken by a total order (member id; queue topic, broker, id), never by
//     input order or map iteration.
//
// Cost: O(Q + C log C + G log G) for Q queues, C members and G (topic, broker) pairs, plus hashing each
// previous-plan entry once. Queue ids within a (topic, broker) pair are ordered by a counting sort when
// they are dense (the RocketMQ case, ids 0..n-1) and by a comparison sort otherwise.
type sticky struct {
	maxSkew int
	// repairMoves is the most queues a rebalance moves beyond those balance forces to bring cross-zone
	// reads down to the minimum (sticky_zones.go); with MaxSkew 0 only.
	repairMoves int
	// byLoad selects the load balance of sticky_load.go, with tolerance tol.
	byLoad bool
	tol    float64
	// scratch recycles the Q-sized index arrays between calls: a controller replans the same group
	// again and again, and not reallocating them halves the garbage a replan leaves behind.
	scratch sync.Pool
}

// stickyScratch holds the reusable Q-sized arrays of one call.
type stickyScratch struct {
	bufs [7][]int32
	// qload is balancing by load's per-queue load.
	qload []float64
}

// getFloats returns the float buffer with length n; its contents are arbitrary.
func (s *stickyScratch) getFloats(n int) []float64 {
	if cap(s.qload) < n {
		s.qload = make([]float64, n)
	}
	return s.qload[:n]
}

// get returns buffer i with length n; its contents are arbitrary.
func (s *stickyScratch) get(i, n int) []int32 {
	if cap(s.bufs[i]) < n {
		s.bufs[i] = make([]int32, n)
	}
	return s.bufs[i][:n]
}

func newSticky(p Params) (Strategy, error) {
	if p.MaxSkew < 0 {
		return nil, paramErrorf("maxSkew", "must be 0 or more, got %d", p.MaxSkew)
	}
	s := &sticky{maxSkew: int(p.MaxSkew), tol: DefaultLoadTolerance, repairMoves: DefaultZoneRepairMoves}
	if p.ZoneRepairMoves != nil {
		if r := *p.ZoneRepairMoves; r < 0 {
			return nil, paramErrorf("zoneRepairMoves", "must be 0 or more, got %d", r)
		}
		s.repairMoves = int(*p.ZoneRepairMoves)
	}
	switch p.BalanceBy {
	case "", BalanceByQueues:
	case BalanceByLoad:
		s.byLoad = true
	default:
		return nil, paramErrorf("balanceBy", "must be %s or %s, got %q", BalanceByQueues, BalanceByLoad, p.BalanceBy)
	}
	if p.LoadTolerance != nil {
		if t := *p.LoadTolerance; !(t >= 0 && t <= 10) {
			return nil, paramErrorf("loadTolerance", "must be from 0 to 10 (0%% to 1000%%), got %v", t)
		}
		s.tol = *p.LoadTolerance
	}
	return s, nil
}

// stickyGroupKey identifies the queues of one broker of one topic.
type stickyGroupKey struct{ topic, broker string }

// stickyGroup records where the queues of one (topic, broker) pair sit in the canonical order.
type stickyGroup struct {
	key        stickyGroupKey
	lo, hi     int64 // smallest and largest queue id seen
	n          int32 // queues seen, duplicates included
	dense      bool  // ids are looked up through table rather than by binary search
	tableOff   int32 // dense: table[tableOff+id-lo] is the canonical position, or -1
	base       int32 // first canonical position of the group
	unique     int32 // distinct ids in the group
	sortedOff  int32 // sparse: sortedIDs[sortedOff:sortedOff+unique] are the group's ids, ascending
	zone       int32 // zone id of the broker, -1 when unknown
	byGroupOff int32 // start of the group's input indices in byGroup
}

// stickyState is the dense working set of one Allocate call. Members and queues are integers: a member
// is its position in id order, a queue its position in canonical order.
type stickyState struct {
	in      Input
	skew    int
	members []Member
	zoneIDs map[string]int32
	mzone   []int32 // member zone id, -1 when unknown

	groups    []stickyGroup
	groupIdx  map[stickyGroupKey]int32
	table     []int32
	sortedIDs []int32
	order     []int32 // canonical position -> index in in.Queues
	qzone     []int32 // canonical position -> broker zone id, -1 when unknown

	prev   []int32 // canonical position -> surviving previous owner, -1 when none
	owner  []int32 // canonical position -> new owner, -1 while unplaced
	quota  []int32
	floor  []int32 // floor(Q*w_i/W); quota is floor or floor+1
	ceil   []int32 // ceil(Q*w_i/W)
	count  []int32 // queues currently held in owner
	weight []int64

	spare   []int32 // a Q-sized buffer indexQueues is done with
	scratch *stickyScratch

	lastKey stickyGroupKey // the (topic, broker) of the last lookup: inputs come in runs of one broker
	lastG   int32
}

// Allocate implements Strategy.
func (s *sticky) Allocate(in Input) (Plan, error) {
	sc, _ := s.scratch.Get().(*stickyScratch)
	if sc == nil {
		sc = &stickyScratch{}
	}
	defer s.scratch.Put(sc)
	st := &stickyState{in: in, skew: s.maxSkew, scratch: sc}
	if err := st.indexMembers(); err != nil {
		return nil, err
	}
	plan := make(Plan, len(st.members))
	if len(st.members) == 0 {
		return plan, nil
	}
	st.indexQueues()
	if len(st.order) == 0 {
		for _, m := range st.members {
			plan[m.ID] = []Queue{}
		}
		return plan, nil
	}
	st.readPrevious()
	if s.byLoad {
		st.allocateByLoad(s.tol)
		return st.plan(plan), nil
	}
	st.computeQuotas()
	st.releaseExcess()
	st.place()
	if s.maxSkew == 0 {
		st.repairZones(s.repairMoves)
	}
	return st.plan(plan), nil
}

// indexMembers sorts the members by id and interns their zones.
func (st *stickyState) indexMembers() error {
	st.members = slices.Clone(st.in.Members)
	slices.SortFunc(st.members, func(a, b Member) int { return strings.Compare(a.ID, b.ID) })
	st.zoneIDs = make(map[string]int32)
	st.mzone = make([]int32, len(st.members))
	st.weight = make([]int64, len(st.members))
	for i, m := range st.members {
		if i > 0 && st.members[i-1].ID == m.ID {
			return fmt.Errorf("member id %q appears twice", m.ID)
		}
		st.mzone[i] = st.zoneID(m.Zone)
		st.weight[i] = max(int64(m.Weight), 1)
	}
	return nil
}

func (st *stickyState) zoneID(z string) int32 {
	if z == "" {
		return -1
	}
	id, ok := st.zoneIDs[z]
	if !ok {
		id = int32(len(st.zoneIDs))
		st.zoneIDs[z] = id
	}
	return id
}

// smallGroupScan is the most (topic, broker) pairs group compares one by one before it hashes.
const smallGroupScan = 8

// group returns the index of q's (topic, broker) pair; with create it adds a missing pair, otherwise it
// returns -1 for one it has not seen.
func (st *stickyState) group(q Queue, create bool) int32 {
	k := stickyGroupKey{q.Topic, q.Broker}
	if len(st.groups) > 0 && k == st.lastKey {
		return st.lastG
	}
	// A group has few (topic, broker) pairs, and comparing their strings, which usually share memory with
	// q's, costs less than hashing them.
	if len(st.groups) <= smallGroupScan {
		for g := range st.groups {
			if st.groups[g].key == k {
				st.lastKey, st.lastG = k, int32(g)
				return int32(g)
			}
		}
		if !create {
			return -1
		}
	}
	g, ok := st.groupIdx[k]
	if !ok {
		if !create {
			return -1
		}
		g = int32(len(st.groups))
		st.groups = append(st.groups, stickyGroup{key: k, lo: int64(q.ID), hi: int64(q.ID)})
		st.groupIdx[k] = g
	}
	st.lastKey, st.lastG = k, g
	return g
}

// indexQueues puts the distinct queues in canonical order (topic, broker, id) without comparing
// strings per queue: queues are bucketed by (topic, broker), the buckets sorted, and ids ordered
// inside each bucket.
func (st *stickyState) indexQueues() {
	qs := st.in.Queues
	st.groupIdx = make(map[stickyGroupKey]int32)
	qg := st.scratch.get(0, len(qs))
	for k, q := range qs {
		g := st.group(q, true)
		qg[k] = g
		gr := &st.groups[g]
		gr.lo, gr.hi = min(gr.lo, int64(q.ID)), max(gr.hi, int64(q.ID))
		gr.n++
	}

	// Input indices bucketed by group, and each group's lookup table or sorted id list.
	byGroup := st.scratch.get(1, len(qs))
	var off, tableLen int32
	for g := range st.groups {
		gr := &st.groups[g]
		gr.byGroupOff = off
		off += gr.n
		// Dense ids get a direct table; the slack bounds the table to about twice the queue count.
		if gr.hi-gr.lo+1 <= 2*int64(gr.n)+64 {
			gr.dense = true
			gr.tableOff = tableLen
			tableLen += int32(gr.hi - gr.lo + 1)
		}
		gr.zone = st.zoneID(st.in.BrokerZones[gr.key.broker])
	}
	fill := make([]int32, len(st.groups))
	for k := range qs {
		g := qg[k]
		byGroup[st.groups[g].byGroupOff+fill[g]] = int32(k)
		fill[g]++
	}
	st.table = st.scratch.get(2, int(tableLen))
	for i := range st.table {
		st.table[i] = -1
	}

	gorder := make([]int32, len(st.groups))
	for g := range gorder {
		gorder[g] = int32(g)
	}
	slices.SortFunc(gorder, func(a, b int32) int {
		ka, kb := st.groups[a].key, st.groups[b].key
		if c := strings.Compare(ka.topic, kb.topic); c != 0 {
			return c
		}
		return strings.Compare(ka.broker, kb.broker)
	})

	// qg is not read again: its memory becomes the canonical order, and byGroup's becomes prev (see
	// readPrevious), which saves two Q-sized allocations per call on the hot path.
	st.order = qg[:0]
	st.spare = byGroup
	for _, g := range gorder {
		gr := &st.groups[g]
		gr.base = int32(len(st.order))
		members := byGroup[gr.byGroupOff : gr.byGroupOff+gr.n]
		if gr.dense {
			t := st.table[gr.tableOff : gr.tableOff+int32(gr.hi-gr.lo+1)]
			for _, k := range members {
				if slot := int64(qs[k].ID) - gr.lo; t[slot] < 0 {
					t[slot] = k // duplicates of a queue keep one entry
				}
			}
			for i, k := range t {
				if k >= 0 {
					t[i] = int32(len(st.order))
					st.order = append(st.order, k)
				}
			}
		} else {
			slices.SortFunc(members, func(a, b int32) int { return cmp.Compare(qs[a].ID, qs[b].ID) })
			gr.sortedOff = int32(len(st.sortedIDs))
			for i, k := range members {
				if i > 0 && qs[members[i-1]].ID == qs[k].ID {
					continue
				}
				st.sortedIDs = append(st.sortedIDs, qs[k].ID)
				st.order = append(st.order, k)
			}
		}
		gr.unique = int32(len(st.order)) - gr.base
	}
	st.qzone = st.scratch.get(3, len(st.order))
	for _, g := range gorder {
		gr := &st.groups[g]
		for p := gr.base; p < gr.base+gr.unique; p++ {
			st.qzone[p] = gr.zone
		}
	}
}

// position returns q's canonical position, or -1 when q is not among the queues.
func (st *stickyState) position(q Queue) int32 {
	g := st.group(q, false)
	if g < 0 {
		return -1
	}
	gr := &st.groups[g]
	id := int64(q.ID)
	if id < gr.lo || id > gr.hi {
		return -1
	}
	if gr.dense {
		return st.table[gr.tableOff+int32(id-gr.lo)]
	}
	ids := st.sortedIDs[gr.sortedOff : gr.sortedOff+gr.unique]
	if j, ok := slices.BinarySearch(ids, q.ID); ok {
		return gr.base + int32(j)
	}
	return -1
}

// readPrevious records, for every current queue, which current member held it. A queue listed under two
// members goes to the one with the smaller id, so the outcome does not depend on map iteration order.
func (st *stickyState) readPrevious() {
	st.prev = st.spare[:len(st.order)]
	for p := range st.prev {
		st.prev[p] = -1
	}
	if len(st.in.Previous) == 0 {
		return
	}
	memberIdx := make(map[string]int32, len(st.members))
	for i, m := range st.members {
		memberIdx[m.ID] = int32(i)
	}
	for id, queues := range st.in.Previous {
		mi, ok := memberIdx[id]
		if !ok {
			continue
		}
		for _, qu := range queues {
			if p := st.position(qu); p >= 0 && (st.prev[p] < 0 || mi < st.prev[p]) {
				st.prev[p] = mi
			}
		}
	}
}

// computeQuotas gives member i floor(Q*w_i/W) queues and hands the remaining R = Q - sum(floor) queues,
// one each, to members whose share is fractional. The extra queue goes first to members that already
// hold more than their floor (each such choice saves exactly one move), then by largest remainder, then
// by member id.
func (st *stickyState) computeQuotas() {
	n := len(st.members)
	q := int64(len(st.order))
	st.count = make([]int32, n)
	for _, o := range st.prev {
		if o >= 0 {
			st.count[o]++
		}
	}
	var total int64
	for _, w := range st.weight {
		total += w
	}
	st.quota = make([]int32, n)
	st.ceil = make([]int32, n)
	rem := make([]int64, n)
	var assigned int64
	candidates := make([]int32, 0, n)
	for i, w := range st.weight {
		share := q * w // Q and weights are int32-sized, so the product fits
		st.quota[i] = int32(share / total)
		rem[i] = share % total
		st.ceil[i] = st.quota[i]
		if rem[i] > 0 {
			st.ceil[i]++
		}
		assigned += int64(st.quota[i])
		if rem[i] > 0 {
			candidates = append(candidates, int32(i))
		}
	}
	st.floor = slices.Clone(st.quota)
	extra := int(q - assigned)
	if extra == 0 {
		return
	}
	slices.SortFunc(candidates, func(a, b int32) int {
		ha, hb := st.count[a] > st.quota[a], st.count[b] > st.quota[b]
		if ha != hb {
			if ha {
				return -1
			}
			return 1
		}
		if c := cmp.Compare(rem[b], rem[a]); c != 0 {
			return c
		}
		return cmp.Compare(a, b)
	})
	saving := 0
	for saving < len(candidates) && saving < extra && st.count[candidates[saving]] > st.quota[candidates[saving]] {
		st.quota[candidates[saving]]++
		saving++
	}
	st.spreadExtra(candidates[saving:], extra-saving)
}

// spreadExtra hands need extra queues to the first members of rest, which are ordered by largest
// remainder then id, except that members in zones with more queues than their members' quotas go first:
// the choice costs no move, and there the extra queue can be an in-zone one. Zones are scanned per
// pick, so with more than stickyMaxZoneScan zones the plain order is used.
func (st *stickyState) spreadExtra(rest []int32, need int) {
	nz := len(st.zoneIDs)
	picked := make([]bool, len(rest))
	if need > 0 && nz > 0 && nz <= stickyMaxZoneScan {
		surplus := make([]int64, nz)
		for _, z := range st.qzone {
			if z >= 0 {
				surplus[z]++
			}
		}
		for i, z := range st.mzone {
			if z >= 0 {
				surplus[z] -= int64(st.quota[i])
			}
		}
		// Per zone, the positions in rest of its members, in rest's order.
		inZone := make([][]int, nz)
		for j, i := range rest {
			if z := st.mzone[i]; z >= 0 {
				inZone[z] = append(inZone[z], j)
			}
		}
		cursor := make([]int, nz)
		for need > 0 {
			best := -1
			for z := range nz {
				if cursor[z] == len(inZone[z]) || surplus[z] <= 0 {
					continue
				}
				if best < 0 || surplus[z] > surplus[best] ||
					(surplus[z] == surplus[best] && inZone[z][cursor[z]] < inZone[best][cursor[best]]) {
					best = z
				}
			}
			if best < 0 {
				break
			}
			j := inZone[best][cursor[best]]
			cursor[best]++
			surplus[best]--
			picked[j] = true
			st.quota[rest[j]]++
			need--
		}
	}
	for j, i := range rest {
		if need == 0 {
			break
		}
		if !picked[j] {
			st.quota[i]++
			need--
		}
	}
}

// stickyMaxZoneScan bounds the zones spreadExtra scans per pick, keeping it O(R) for realistic groups.
const stickyMaxZoneScan = 64

// releaseExcess makes every member over quota give up exactly its excess: cross-zone queues first, and
// within each kind the last in canonical order. Every other previous assignment stays.
func (st *stickyState) releaseExcess() {
	n := len(st.members)
	st.owner = st.scratch.get(4, len(st.prev))
	copy(st.owner, st.prev)
	crossLeft := make([]int32, n)
	inLeft := make([]int32, n)
	over := false
	for i := range n {
		if st.count[i] > st.quota[i] {
			over = true
		}
	}
	if !over {
		return
	}
	for p, o := range st.prev {
		if o >= 0 && st.count[o] > st.quota[o] && !st.inZone(int32(p), o) {
			crossLeft[o]++
		}
	}
	for i := range n {
		excess := max(st.count[i]-st.quota[i], 0)
		crossLeft[i] = min(crossLeft[i], excess)
		inLeft[i] = excess - crossLeft[i]
	}
	for p := len(st.prev) - 1; p >= 0; p-- {
		o := st.prev[p]
		if o < 0 {
			continue
		}
		if st.inZone(int32(p), o) {
			if inLeft[o] == 0 {
				continue
			}
			inLeft[o]--
		} else {
			if crossLeft[o] == 0 {
				continue
			}
			crossLeft[o]--
		}
		st.owner[p] = -1
		st.count[o]--
	}
}

func (st *stickyState) inZone(p, member int32) bool {
	z := st.qzone[p]
	return z >= 0 && z == st.mzone[member]
}

// place hands the unowned queues to members below quota: first each zone's queues to that zone's
// members, then, with MaxSkew, lets in-zone members absorb what would otherwise cross zones, and
// finally fills the remaining deficits with the remaining queues.
func (st *stickyState) place() {
	nz := len(st.zoneIDs)
	// Members bucketed by zone, in id order inside each zone.
	zoneOff := make([]int32, nz+1)
	for _, z := range st.mzone {
		if z >= 0 {
			zoneOff[z+1]++
		}
	}
	for z := range nz {
		zoneOff[z+1] += zoneOff[z]
	}
	byZone := make([]int32, zoneOff[nz])
	fill := slices.Clone(zoneOff[:nz])
	for i, z := range st.mzone {
		if z >= 0 {
			byZone[fill[z]] = int32(i)
			fill[z]++
		}
	}

	// In-zone: walk the unowned queues in canonical order; each goes to the zone's next member with room.
	cursor := slices.Clone(zoneOff[:nz])
	for p, o := range st.owner {
		z := st.qzone[p]
		if o >= 0 || z < 0 {
			continue
		}
		for cursor[z] < zoneOff[z+1] {
			m := byZone[cursor[z]]
			if st.count[m] < st.quota[m] {
				st.owner[p] = m
				st.count[m]++
				break
			}
			cursor[z]++
		}
	}

	if st.skew > 0 {
		st.absorb(byZone, zoneOff)
	}

	// Cross-zone: the rest go to members still below quota, in id order. With MaxSkew a member may be
	// left up to MaxSkew short; the mandatory part of every deficit is filled first.
	mandatory := make([]int32, len(st.members))
	for i := range st.members {
		mandatory[i] = max(st.quota[i]-st.count[i]-int32(st.skew), 0)
	}
	m := 0
	for p, o := range st.owner {
		if o >= 0 {
			continue
		}
		for mandatory[m] == 0 && m < len(st.members)-1 {
			m++
		}
		if mandatory[m] > 0 {
			mandatory[m]--
			st.owner[p] = int32(m)
			st.count[m]++
		}
	}
	// What is left (only with MaxSkew) goes to the members furthest below quota first, so the shortfall
	// spreads evenly instead of landing on the last members by id.
	var rest []int32
	for p, o := range st.owner {
		if o < 0 {
			rest = append(rest, int32(p))
		}
	}
	for level := int32(st.skew); level > 0 && len(rest) > 0; level-- {
		for i := range st.members {
			if len(rest) == 0 {
				break
			}
			if st.quota[i]-st.count[i] >= level {
				st.owner[rest[0]] = int32(i)
				st.count[i]++
				rest = rest[1:]
			}
		}
	}
}

// absorb, with MaxSkew > 0, keeps unowned queues in their broker's zone by letting that zone's members
// go up to MaxSkew over quota, as long as the members left short stay within MaxSkew of theirs. A
// queue's previous owner takes it back first (no move), then the zone's least-loaded members do.
func (st *stickyState) absorb(byZone, zoneOff []int32) {
	skew := int32(st.skew)
	var budget int64
	for i := range st.members {
		budget += int64(min(max(st.quota[i]-st.count[i], 0), skew))
	}
	take := func(p int, m int32) {
		st.owner[p] = m
		st.count[m]++
		budget--
	}
	for p, o := range st.owner {
		if budget == 0 {
			return
		}
		if pr := st.prev[p]; o < 0 && pr >= 0 && st.inZone(int32(p), pr) && st.count[pr] < st.quota[pr]+skew {
			take(p, pr)
		}
	}
	// Level filling per zone: round L gives one queue to every member below quota+L, so the extra load
	// spreads evenly and each round places at least one queue or ends the zone.
	nz := len(zoneOff) - 1
	pending := make([][]int32, nz)
	for p, o := range st.owner {
		if z := st.qzone[p]; o < 0 && z >= 0 {
			pending[z] = append(pending[z], int32(p))
		}
	}
	for z := range nz {
		zm := byZone[zoneOff[z]:zoneOff[z+1]]
		queue := pending[z]
		if len(zm) == 0 || len(queue) == 0 {
			continue
		}
		level := st.count[zm[0]] - st.quota[zm[0]]
		for _, m := range zm {
			level = min(level, st.count[m]-st.quota[m])
		}
		for level++; level <= skew && len(queue) > 0 && budget > 0; level++ {
			for _, m := range zm {
				if len(queue) == 0 || budget == 0 {
					break
				}
				if st.count[m]-st.quota[m] < level {
					take(int(queue[0]), m)
					queue = queue[1:]
				}
			}
		}
	}
}

// plan lays the assignment out as one backing array, each member's queues in canonical order.
func (st *stickyState) plan(plan Plan) Plan {
	off := make([]int32, len(st.members)+1)
	for i, c := range st.count {
		off[i+1] = off[i] + c
	}
	out := make([]Queue, len(st.order))
	next := slices.Clone(off[:len(st.members)])
	for p, o := range st.owner {
		out[next[o]] = st.in.Queues[st.order[p]]
		next[o]++
	}
	for i, m := range st.members {
		plan[m.ID] = out[off[i]:off[i+1]:off[i+1]]
	}
	return plan
}
