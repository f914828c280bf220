package allocate

import (
	"cmp"
	"slices"
)

// This file is Sticky's balancing by queue count, on the indexes of sticky_index.go: every member's
// quota (rule 2, with the fewest moves of rule 3), the excess of members over quota released, and the
// free queues placed, in their broker's zone first (rule 4). The locality repair of sticky_zones.go runs
// after it.

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
		need = st.spreadExtraToZones(rest, need, picked)
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

// spreadExtraToZones hands extra queues, one pick at a time, to the first member in rest of the zone
// with the largest surplus of queues over its members' quotas (ties to the zone whose member comes
// first in rest), while some zone has a surplus and a member left. It marks the members it picked and
// returns how many extra queues remain to hand out.
func (st *stickyState) spreadExtraToZones(rest []int32, need int, picked []bool) int {
	nz := len(st.zoneIDs)
	surplus := make([]int64, nz) // made here, not in zoneSurplus, so that a few stay on the stack
	st.zoneSurplus(surplus)
	// Per zone, the positions in rest of its members, in rest's order.
	inZone := make([][]int, nz)
	for j, i := range rest {
		if z := st.mzone[i]; z >= 0 {
			inZone[z] = append(inZone[z], j)
		}
	}
	cursor := make([]int, nz)
	for need > 0 {
		best := richestZone(surplus, inZone, cursor)
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
	return need
}

// zoneSurplus sets surplus[z], for every zone z, to the zone's queues minus the quotas of its members.
func (st *stickyState) zoneSurplus(surplus []int64) {
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
}

// richestZone is the zone with the largest surplus that has a member left to pick (inZone[z] past
// cursor[z]), ties to the zone whose next member comes first; -1 when no zone has both.
func richestZone(surplus []int64, inZone [][]int, cursor []int) int {
	best := -1
	for z := range surplus {
		if cursor[z] == len(inZone[z]) || surplus[z] <= 0 {
			continue
		}
		if best < 0 || surplus[z] > surplus[best] ||
			(surplus[z] == surplus[best] && inZone[z][cursor[z]] < inZone[best][cursor[best]]) {
			best = z
		}
	}
	return best
}

// stickyMaxZoneScan bounds the zones spreadExtra scans per pick, keeping it O(R) for realistic groups.
const stickyMaxZoneScan = 64

// releaseExcess makes every member over quota give up exactly its excess: cross-zone queues first, and
// within each kind the last in canonical order. Every other previous assignment stays.
func (st *stickyState) releaseExcess() {
	n := len(st.members)
	st.owner = reuse(&st.scratch.owner, len(st.prev))
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
	// The two arrays are made here, not in the functions that fill them, so that small ones stay on the
	// stack.
	zoneOff := make([]int32, len(st.zoneIDs)+1)
	st.countZoneMembers(zoneOff)
	byZone := make([]int32, zoneOff[len(zoneOff)-1])
	st.bucketZoneMembers(byZone, zoneOff)
	st.placeInZone(byZone, zoneOff)
	if st.skew > 0 {
		st.absorb(byZone, zoneOff)
	}
	st.placeAcrossZones()
	st.placeShortfall()
}

// assign gives the unowned queue p to member m.
func (st *stickyState) assign(p int, m int32) {
	st.owner[p] = m
	st.count[m]++
}

// countZoneMembers sets zoneOff, of one entry per zone and one more, to where each zone's members start in
// the members bucketed by zone (and zoneOff[nz] to how many members have a zone).
func (st *stickyState) countZoneMembers(zoneOff []int32) {
	nz := len(zoneOff) - 1
	for _, z := range st.mzone {
		if z >= 0 {
			zoneOff[z+1]++
		}
	}
	for z := range nz {
		zoneOff[z+1] += zoneOff[z]
	}
}

// bucketZoneMembers fills byZone with the members of a zone bucketed by zone, in id order inside each
// zone: byZone[zoneOff[z]:zoneOff[z+1]] are zone z's.
func (st *stickyState) bucketZoneMembers(byZone, zoneOff []int32) {
	fill := slices.Clone(zoneOff[:len(zoneOff)-1])
	for i, z := range st.mzone {
		if z >= 0 {
			byZone[fill[z]] = int32(i)
			fill[z]++
		}
	}
}

// placeInZone walks the unowned queues in canonical order; each goes to its broker zone's next member
// with room below quota, if any.
func (st *stickyState) placeInZone(byZone, zoneOff []int32) {
	cursor := slices.Clone(zoneOff[:len(zoneOff)-1])
	for p, o := range st.owner {
		z := st.qzone[p]
		if o >= 0 || z < 0 {
			continue
		}
		for cursor[z] < zoneOff[z+1] {
			m := byZone[cursor[z]]
			if st.count[m] < st.quota[m] {
				st.assign(p, m)
				break
			}
			cursor[z]++
		}
	}
}

// placeAcrossZones gives the unowned queues, in canonical order, to members still below quota, in id
// order. With MaxSkew a member may be left up to MaxSkew short: only the mandatory part of every deficit
// is filled here.
func (st *stickyState) placeAcrossZones() {
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
			st.assign(p, int32(m))
		}
	}
}

// placeShortfall gives what is left (only with MaxSkew) to the members furthest below quota first, so
// the shortfall spreads evenly instead of landing on the last members by id.
func (st *stickyState) placeShortfall() {
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
				st.assign(int(rest[0]), int32(i))
				rest = rest[1:]
			}
		}
	}
}

// absorb, with MaxSkew > 0, keeps unowned queues in their broker's zone by letting that zone's members
// go up to MaxSkew over quota, as long as the members left short stay within MaxSkew of theirs. A
// queue's previous owner takes it back first (no move), then the zone's least-loaded members do.
func (st *stickyState) absorb(byZone, zoneOff []int32) {
	budget := st.absorbBudget()
	if budget = st.absorbByPreviousOwners(budget); budget == 0 {
		return
	}
	nz := len(zoneOff) - 1
	pending := make([][]int32, nz)
	for p, o := range st.owner {
		if z := st.qzone[p]; o < 0 && z >= 0 {
			pending[z] = append(pending[z], int32(p))
		}
	}
	for z := range nz {
		budget = st.absorbInZone(byZone[zoneOff[z]:zoneOff[z+1]], pending[z], budget)
	}
}

// absorbBudget is how many queues members may take beyond quota: the deficits the members below quota
// may be left with, each at most MaxSkew.
func (st *stickyState) absorbBudget() int64 {
	var budget int64
	for i := range st.members {
		budget += int64(min(max(st.quota[i]-st.count[i], 0), int32(st.skew)))
	}
	return budget
}

// absorbByPreviousOwners gives each unowned queue back to its previous owner when that member is in the
// broker's zone and below quota+MaxSkew, while the budget lasts; it returns the budget left.
func (st *stickyState) absorbByPreviousOwners(budget int64) int64 {
	skew := int32(st.skew)
	for p, o := range st.owner {
		if budget == 0 {
			return 0
		}
		if pr := st.prev[p]; o < 0 && pr >= 0 && st.inZone(int32(p), pr) && st.count[pr] < st.quota[pr]+skew {
			st.assign(p, pr)
			budget--
		}
	}
	return budget
}

// absorbInZone hands the zone's unowned queues to its members zm by level filling: round L gives one
// queue to every member below quota+L, so the extra load spreads evenly and each round places at least
// one queue or ends the zone. It returns the budget left.
func (st *stickyState) absorbInZone(zm, queue []int32, budget int64) int64 {
	skew := int32(st.skew)
	if len(zm) == 0 || len(queue) == 0 {
		return budget
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
				st.assign(int(queue[0]), m)
				budget--
				queue = queue[1:]
			}
		}
	}
	return budget
}
