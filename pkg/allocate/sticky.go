package allocate

import (
	"slices"
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
//     quotas (LowerBound): these are the balance moves. The locality repair (sticky_zones.go) may add up to
//     repairMoves locality moves, each in a chain that lowers the cross-zone count; with no zones it adds
//     none (CountMoves splits a plan's moves the same way);
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

// stickyScratch holds the reusable Q-sized arrays of one call, each named for what it ends up holding.
// Indexing uses two of them for something else first, see indexQueues.
type stickyScratch struct {
	order []int32 // stickyState.order; while indexing, each input queue's (topic, broker) group
	prev  []int32 // stickyState.prev; while indexing, the input queues bucketed by group
	table []int32 // stickyState.table
	qzone []int32 // stickyState.qzone
	owner []int32 // stickyState.owner
	// held backs loadState.held, balancing by load's per-member lists.
	held []int32
	// byClass backs zoneRepair.byClass, the locality phase's positions by broker class.
	byClass []int32
	// qload is loadState.qload, balancing by load's per-queue load.
	qload []float64
}

// reuse returns *buf with length n, growing it when it is too short; its contents are arbitrary.
func reuse[T int32 | float64](buf *[]T, n int) []T {
	if cap(*buf) < n {
		*buf = make([]T, n)
	}
	return (*buf)[:n]
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

// stickyState is the dense working set of one Allocate call. Members and queues are integers: a member
// is its position in id order, a queue its position in canonical order. Indexing (sticky_index.go) fills
// the members, groups and canonical order and reads the previous plan; balancing by count
// (sticky_balance.go, then sticky_zones.go) or by load (sticky_load.go, sticky_swap.go) fills owner and
// count; plan lays owner out as the result.
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

	spare   []int32 // the Q-sized buffer indexQueues bucketed the input in; readPrevious makes it prev
	scratch *stickyScratch

	lastKey stickyGroupKey // the (topic, broker) of the last lookup: inputs come in runs of one broker
	lastG   int32
}

// Allocate implements Strategy: it indexes the members, the queues and the previous plan, balances, and
// lays the owners out as the plan.
func (s *sticky) Allocate(in Input) (Plan, error) {
	plan, _, err := s.allocate(in)
	return plan, err
}

// allocate is Allocate, and also returns the chains the locality phase applied, for the tests that hold
// every locality move to its rule.
func (s *sticky) allocate(in Input) (Plan, []zoneRepairStep, error) {
	sc, _ := s.scratch.Get().(*stickyScratch)
	if sc == nil {
		sc = &stickyScratch{}
	}
	defer s.scratch.Put(sc)
	st := &stickyState{in: in, skew: s.maxSkew, scratch: sc}
	if err := st.indexMembers(); err != nil {
		return nil, nil, err
	}
	plan := make(Plan, len(st.members))
	if len(st.members) == 0 {
		return plan, nil, nil
	}
	st.indexQueues()
	if len(st.order) == 0 {
		for _, m := range st.members {
			plan[m.ID] = []Queue{}
		}
		return plan, nil, nil
	}
	st.readPrevious()
	var repairs []zoneRepairStep
	if s.byLoad {
		st.allocateByLoad(s.tol)
	} else {
		repairs = st.balanceCounts(s.repairMoves)
	}
	return st.plan(plan), repairs, nil
}

// balanceCounts is balancing by queue count: quotas, the excess released, the free queues placed, and,
// with MaxSkew 0, the locality repair within repairMoves moves. Up to the repair, the plan moves exactly
// LowerBound queues; it returns what each chain of the repair did.
func (st *stickyState) balanceCounts(repairMoves int) []zoneRepairStep {
	st.computeQuotas()
	st.releaseExcess()
	st.place()
	if st.skew == 0 {
		return st.repairZones(repairMoves)
	}
	return nil
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
