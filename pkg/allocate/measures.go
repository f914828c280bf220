package allocate

import (
	"cmp"
	"fmt"
	"math"
	"slices"
)

// This file holds the one definition of each measure of a plan that the operator, hack/simulate and the
// tests share: how many queues moved and how much load, each member's fair share of queues and of load,
// the fewest moves a balanced plan needs, and whether a plan can be published at all. None of them is used
// by a strategy.

// Moved counts the queues whose owner changed from before to after, as the operator reports a rebalance.
// A queue listed under member id in before counts once when id is still a member in after (after has an
// entry for id, even an empty one) and after lists the queue under another member but not under id.
// Queues that appear, disappear or lose their owner (no member lists them in after) do not count, nor do
// the queues of members that left.
//
// It costs one map entry per queue of after.
func Moved(before, after Plan) int {
	moved := 0
	eachMoved(before, after, func(Queue) { moved++ })
	return moved
}

// MovedLoad is the load of the queues Moved counts, each at its load in loads (QueueLoads). It sums them
// in ascending order, not the plans' map order, so that the same plans give the same total to the last bit.
func MovedLoad(before, after Plan, loads map[Queue]float64) float64 {
	var each []float64
	eachMoved(before, after, func(q Queue) { each = append(each, loads[q]) })
	slices.Sort(each)
	var moved float64
	for _, v := range each {
		moved += v
	}
	return moved
}

// eachMoved calls f for every queue Moved counts.
func eachMoved(before, after Plan, f func(Queue)) {
	n := 0
	for _, qs := range after {
		n += len(qs)
	}
	owner := make(map[Queue]string, n)
	var shared map[Queue]bool // queues after lists more than once: rare, and only in a plan CheckPartition refuses
	for id, qs := range after {
		for _, q := range qs {
			if o, ok := owner[q]; ok && o != id {
				if shared == nil {
					shared = map[Queue]bool{}
				}
				shared[q] = true
			}
			owner[q] = id
		}
	}
	for id, qs := range before {
		kept, stillMember := after[id]
		if !stillMember {
			continue
		}
		for _, q := range qs {
			o, owned := owner[q]
			if !owned || o == id || (shared[q] && slices.Contains(kept, q)) {
				continue
			}
			f(q)
		}
	}
}

// QueueLoads gives every queue of in its load as Sticky balancing by load counts it: the member's report
// in in.QueueLoad when it is a finite number of 0 or more, else the mean of those reports for in's queues
// (1 when there are none, which is balancing by count). Reports of queues in does not list are ignored.
func QueueLoads(in Input) map[Queue]float64 {
	loads := make(map[Queue]float64, len(in.Queues))
	var unreported []Queue
	var reported, sum float64
	for _, q := range in.Queues {
		if _, seen := loads[q]; seen {
			continue
		}
		if v, ok := in.QueueLoad[q]; ok && validLoad(v) {
			loads[q] = v
			reported++
			sum += v
		} else {
			loads[q] = -1
			unreported = append(unreported, q)
		}
	}
	mean := 1.0
	if reported > 0 {
		mean = sum / reported
	}
	for _, q := range unreported {
		loads[q] = mean
	}
	return loads
}

// TotalLoad is the load of in's queues, each counted once at its load in loads (QueueLoads(in)). It sums
// in the order of in.Queues, so that the same input gives the same total to the last bit.
func TotalLoad(in Input, loads map[Queue]float64) float64 {
	var total float64
	seen := make(map[Queue]bool, len(in.Queues))
	for _, q := range in.Queues {
		if !seen[q] {
			seen[q] = true
			total += loads[q]
		}
	}
	return total
}

// validLoad reports whether v is a load a strategy counts: finite and not negative (NaN is neither).
func validLoad(v float64) bool { return v >= 0 && !math.IsInf(v, 1) }

// MemberLoad is one member's share of the load under a plan.
type MemberLoad struct {
	// Load is the sum of its queues' loads; Hottest the load of the hottest of them.
	Load, Hottest float64
	// Queues is how many queues it holds.
	Queues int
	// Fair is its weighted fair share: the total load times its weight over the members' total weight
	// (weights below 1 count as 1).
	Fair float64
	// Achievable is its share once every queue hotter than a share has a member to itself (AchievableLevel
	// times its weight): at most Fair, and what the members without a hot queue can all reach. Sticky by
	// load measures its lower tolerance against it.
	Achievable float64
}

// Bound is the most the member may carry when Sticky balances by load with tolerance tol:
// max((1+tol)·Fair, Fair+Hottest). Queues are indivisible, so a bound below Fair+Hottest cannot always be
// kept (three equal queues over two members: one carries two, 1.33 times its share).
func (m MemberLoad) Bound(tol float64) float64 { return max((1+tol)*m.Fair, m.Fair+m.Hottest) }

// Aim is what Sticky balancing by load aims for each member to carry at most, with tolerance tol:
// max((1+tol)·Fair, Hottest), within the tolerance of its share or no more than its hottest queue alone.
// Indivisible queues do not always allow it; Bound is what is guaranteed.
func (m MemberLoad) Aim(tol float64) float64 { return max((1+tol)*m.Fair, m.Hottest) }

// MemberLoads gives every member of in its load under plan, each queue at its load in loads
// (QueueLoads(in)).
func MemberLoads(in Input, plan Plan, loads map[Queue]float64) map[string]MemberLoad {
	total, weights := TotalLoad(in, loads), 0.0
	for _, m := range in.Members {
		weights += float64(max(m.Weight, 1))
	}
	each := make([]float64, 0, len(loads))
	for _, q := range in.Queues {
		each = append(each, loads[q])
	}
	level := AchievableLevel(each, total, weights, len(in.Members))
	out := make(map[string]MemberLoad, len(in.Members))
	for _, m := range in.Members {
		w := float64(max(m.Weight, 1))
		ml := MemberLoad{Fair: total * w / weights, Achievable: level * w}
		for _, q := range plan[m.ID] {
			ml.Load += loads[q]
			ml.Hottest = max(ml.Hottest, loads[q])
			ml.Queues++
		}
		out[m.ID] = ml
	}
	return out
}

// AchievableLevel is the load per unit of weight that members can all carry once every queue hotter than
// its share has a member to itself, by water-filling: while the hottest remaining queue carries more than
// the remaining load's share of a member of mean weight, it takes such a member alone, and the rest is
// shared by the others (at most members-1 queues are set aside). With no hot queue it is the total over
// the weights. loads are the queues' loads (a queue listed twice counts twice), total their sum and
// weights the members' total weight.
//
// Cost: O(Q) per pass over the loads, usually one or two passes, plus sorting the hot queues.
func AchievableLevel(loads []float64, total, weights float64, members int) float64 {
	if members == 0 || weights <= 0 {
		return 0
	}
	mean := weights / float64(members)
	level := total / weights
	threshold := level * mean
	var hot []float64
	for range 64 {
		hot = hot[:0]
		for _, l := range loads {
			if l > threshold {
				hot = append(hot, l)
			}
		}
		slices.SortFunc(hot, func(a, b float64) int { return cmp.Compare(b, a) })
		level = waterLevel(hot, total, weights, mean, members)
		// Every queue above level*mean was among the candidates: level is final.
		if level*mean >= threshold {
			break
		}
		threshold = level * mean
	}
	return level
}

// waterLevel sets aside, hottest first, the queues of hot (sorted, hottest first) that carry more than the
// remaining share of a member of mean weight, each with one such member, and returns the remaining load
// per unit of weight.
func waterLevel(hot []float64, total, weights, mean float64, members int) float64 {
	level := total / weights
	for k, l := range hot {
		if k == members-1 || l <= level*mean {
			break
		}
		total -= l
		weights -= mean
		level = total / weights
	}
	return level
}

// WithinLoadBound reports whether every member carries at most its Bound(tol), up to rounding; loads are
// the members' loads under a plan (MemberLoads).
func WithinLoadBound(loads map[string]MemberLoad, tol float64) bool {
	return everyMember(loads, func(ml MemberLoad) float64 { return ml.Bound(tol) })
}

// WithinLoadAim reports whether every member carries at most its Aim(tol), up to rounding; loads are the
// members' loads under a plan (MemberLoads).
func WithinLoadAim(loads map[string]MemberLoad, tol float64) bool {
	return everyMember(loads, func(ml MemberLoad) float64 { return ml.Aim(tol) })
}

// WithinLoadTolerance reports whether a plan leaves Sticky balancing by load with tolerance tol no reason
// to move a queue: every member carries at most its Aim(tol), and no member holds nothing while
// (1-tol) times its Achievable share is above 0. A member that holds queues is never pulled up to the
// lower tolerance; only an idle one is. loads are the members' loads under the plan (MemberLoads).
func WithinLoadTolerance(loads map[string]MemberLoad, tol float64) bool {
	for _, ml := range loads {
		if ml.Queues == 0 && (1-tol)*ml.Achievable > 0 {
			return false
		}
	}
	return WithinLoadAim(loads, tol)
}

// everyMember reports whether every member carries at most limit of its MemberLoad, up to rounding.
func everyMember(loads map[string]MemberLoad, limit func(MemberLoad) float64) bool {
	for _, ml := range loads {
		if ml.Load > limit(ml)*(1+1e-9) {
			return false
		}
	}
	return true
}

// FairShares returns, for each of members in order, the floor and the ceiling of its weighted fair share
// of queues: floor[i] = ⌊queues·wᵢ/W⌋ and ceil[i] = ⌈queues·wᵢ/W⌉, where wᵢ is members[i].Weight (values
// below 1 count as 1) and W the sum of all wᵢ. The floors sum to at most queues, and exactly
// queues − Σfloor of the members with a fractional share get their ceiling in a balanced plan.
// With no members both slices are empty.
func FairShares(queues int, members []Member) (floor, ceil []int) {
	var total int64
	for _, m := range members {
		total += int64(max(m.Weight, 1))
	}
	floor, ceil = make([]int, len(members)), make([]int, len(members))
	for i, m := range members {
		num := int64(queues) * int64(max(m.Weight, 1))
		floor[i] = int(num / total)
		ceil[i] = floor[i]
		if num%total != 0 {
			ceil[i]++
		}
	}
	return floor, ceil
}

// Balanced reports whether plan gives every queue of in.Queues to exactly one member of in.Members, hands
// out nothing else (CheckPartition accepts it), and gives each member i between floor[i] and ceil[i]
// queues of FairShares(number of distinct queues, in.Members).
func Balanced(in Input, plan Plan) bool {
	if CheckPartition(in.Queues, in.Members, plan) != nil {
		return false
	}
	distinct := make(map[Queue]struct{}, len(in.Queues))
	for _, q := range in.Queues {
		distinct[q] = struct{}{}
	}
	owned := 0
	for _, qs := range plan {
		owned += len(qs) // CheckPartition: only members hold queues, each queue at most once
	}
	if owned != len(distinct) {
		return false
	}
	floor, ceil := FairShares(len(distinct), in.Members)
	for i, m := range in.Members {
		if n := len(plan[m.ID]); n < floor[i] || n > ceil[i] {
			return false
		}
	}
	return true
}

// LowerBound is the fewest queues any balanced plan (see Balanced) for in must take from members that
// stay: Moved(in.Previous, plan) ≥ LowerBound(in) for every balanced plan, and some balanced plan
// reaches it.
//
// Member i held prevᵢ of the queues of in.Queues in in.Previous and ends with cᵢ queues, so it loses at
// least max(0, prevᵢ − cᵢ) of them to other members, and a plan losing exactly that exists. cᵢ is floorᵢ
// or, for R = Q − Σfloor of the members with a fractional share, ceilᵢ = floorᵢ+1 (FairShares). Raising a
// member to its ceiling saves one move exactly when prevᵢ > floorᵢ, so the fewest moves raise
// min(R, number of such members) of them.
func LowerBound(in Input) int {
	exists := make(map[Queue]bool, len(in.Queues))
	for _, q := range in.Queues {
		exists[q] = true
	}
	floor, ceil := FairShares(len(exists), in.Members)
	extra := len(exists)
	bound, savable := 0, 0
	for i, m := range in.Members {
		extra -= floor[i]
		held := 0
		for _, q := range in.Previous[m.ID] {
			if exists[q] {
				held++
			}
		}
		bound += max(0, held-floor[i])
		if ceil[i] > floor[i] && held > floor[i] {
			savable++
		}
	}
	return bound - min(extra, savable)
}

// MoveCounts splits the moves of a rebalance (Moved) by why they were made.
type MoveCounts struct {
	// Balance is the moves balance forces: LowerBound, or Moved when a plan that is not balanced moved
	// fewer.
	Balance int
	// Locality is the moves beyond the lower bound. Sticky balancing by queue count makes them only in
	// its locality repair (sticky_zones.go), at most Params.ZoneRepairMoves per rebalance, each as part of
	// a chain that lowers CrossZone; with no zones it makes none. For a strategy that does not keep queues
	// where they were, this is simply the moves beyond the bound.
	Locality int
}

// CountMoves splits Moved(in.Previous, plan) into the balance moves and the locality moves beyond them
// (MoveCounts), as hack/simulate and `kubectl cg plan` report them.
func CountMoves(in Input, plan Plan) MoveCounts {
	moved := Moved(in.Previous, plan)
	balance := min(moved, LowerBound(in))
	return MoveCounts{Balance: balance, Locality: moved - balance}
}

// CrossZone counts the queues plan gives to a member outside their broker's zone: a queue counts when
// in.BrokerZones has no zone for its broker, or the zone differs from its owner's Member.Zone (a member of
// unknown zone, or a plan entry that is no member of in, has zone "").
func CrossZone(in Input, plan Plan) int {
	zoneOf := make(map[string]string, len(in.Members))
	for _, m := range in.Members {
		zoneOf[m.ID] = m.Zone
	}
	n := 0
	for id, qs := range plan {
		for _, q := range qs {
			if z := in.BrokerZones[q.Broker]; z == "" || z != zoneOf[id] {
				n++
			}
		}
	}
	return n
}

// CheckPartition returns an error unless plan is a partition of a subset of queues over members: every
// plan entry that holds queues belongs to a member, every queue it holds is one of queues, and no queue
// is held twice (by two members, or twice by one). It does not ask that every queue have an owner or that
// every member have an entry. Entries are checked in UTF-16 order of member id, so the error, which names
// the queue and the member or members involved, is the same for the same plan.
func CheckPartition(queues []Queue, members []Member, plan Plan) error {
	isMember := make(map[string]bool, len(members))
	for _, m := range members {
		isMember[m.ID] = true
	}
	ids := make([]string, 0, len(plan))
	for id := range plan {
		ids = append(ids, id)
	}
	slices.SortFunc(ids, func(a, b string) int { return cmp.Or(CompareUTF16(a, b), cmp.Compare(a, b)) })
	// owner[q] is 0 while q has no owner, else 1 + the owner's index in ids; a queue not in queues is absent.
	owner := make(map[Queue]int, len(queues))
	for _, q := range queues {
		owner[q] = 0
	}
	for i, id := range ids {
		qs := plan[id]
		if !isMember[id] && len(qs) > 0 {
			return fmt.Errorf("the strategy gave queues to %q, which is not a member", id)
		}
		for _, q := range qs {
			first, isQueue := owner[q]
			switch {
			case !isQueue:
				return fmt.Errorf("the strategy gave %s to %q, which is not one of the queues", q, id)
			case first == i+1:
				return fmt.Errorf("the strategy gave %s to %q twice", q, id)
			case first > 0:
				return fmt.Errorf("the strategy gave %s to more than one member: %q and %q", q, ids[first-1], id)
			}
			owner[q] = i + 1
		}
	}
	return nil
}
