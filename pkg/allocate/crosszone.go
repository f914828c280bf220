package allocate

// This file holds the exact minimum of cross-zone reads a balanced plan allows: the oracle the tests,
// hack/simulate, the kubectl plugin and the metrics hold Sticky's CrossZone against.

// MinCrossZone is the fewest queues any balanced plan (see Balanced) for in reads outside their broker's
// zone, counted as CrossZone counts them: a queue whose broker has no zone, and every queue of a member
// with no zone, always counts.
//
// It solves the assignment over zones exactly. A balanced plan gives member i c_i = floor_i or
// floor_i+1 queues (FairShares), with exactly R = Q − Σfloor raised. Once the counts are fixed, the zones'
// capacities C_z = Σ_{i in z} c_i are all that matters: zone z reads at most min(Q_z, C_z) of its Q_z queues
// at home, and a plan reaching that for every zone at once exists (the rest fill the remaining room, which
// sums to what is left). So the minimum is Q − max over the choice of raised members of Σ_z min(Q_z, C_z).
// Raising a member of zone z gains one exactly while C_z < Q_z, whoever else is raised, so the best
// choice raises min(E_z, max(0, Q_z − F_z)) members in each zone (E_z its members with a fractional
// share, F_z the sum of its floors) as far as R allows. TestMinCrossZoneBruteForce checks this against
// every plan of small groups.
//
// Cost: O(Q + C) for Q queues and C members.
func MinCrossZone(in Input) int {
	zc := countZones(in)
	home, gain := 0, 0
	for z, q := range zc.queues {
		home += min(q, zc.floor[z])
		gain += min(zc.fractional[z], max(0, q-zc.floor[z]))
	}
	return zc.total - home - min(zc.extra, gain)
}

// MinCrossZoneKnown is MinCrossZone for the count that leaves unknown zones out, as the operator's metric
// consumergroup_cross_zone_queues does: a queue counts only when its broker's zone and its owner's zone
// are both known and differ. A queue of a broker with no zone is free anywhere, and a member with no zone
// may read anything for free.
//
// With the counts fixed, zone z's overflow max(0, Q_z − C_z) must go to members of other zones or of no
// zone (C_u queues, free); the rest costs one each. Raising a member of zone z while C_z < Q_z, or a
// member with no zone, saves one while anything still costs, so the minimum is
// max(0, Σ_z max(0, Q_z − F_z) − F_u − min(R, Σ_z min(E_z, max(0, Q_z − F_z)) + E_u)).
func MinCrossZoneKnown(in Input) int {
	zc := countZones(in)
	overflow, gain := 0, zc.fractionalUnknown
	for z, q := range zc.queues {
		overflow += max(0, q-zc.floor[z])
		gain += min(zc.fractional[z], max(0, q-zc.floor[z]))
	}
	return max(0, overflow-zc.floorUnknown-min(zc.extra, gain))
}

// zoneCounts is a balanced plan's structure per zone: the distinct queues of each known broker zone, and
// the floors and fractional members of each zone with members (known zones only in the maps; members with
// no zone in the Unknown fields).
type zoneCounts struct {
	total, extra                    int
	queues, floor, fractional       map[string]int
	floorUnknown, fractionalUnknown int
}

// countZones counts in's distinct queues per broker zone and its members' floors and fractional shares
// per member zone. Queues of brokers with no zone are only in total.
func countZones(in Input) zoneCounts {
	zc := zoneCounts{queues: map[string]int{}, floor: map[string]int{}, fractional: map[string]int{}}
	seen := make(map[Queue]struct{}, len(in.Queues))
	for _, q := range in.Queues {
		if _, dup := seen[q]; dup {
			continue
		}
		seen[q] = struct{}{}
		if z := in.BrokerZones[q.Broker]; z != "" {
			zc.queues[z]++
		}
	}
	zc.total = len(seen)
	if len(in.Members) == 0 {
		// No plan reads anything: every queue stays unowned, and none is read from anywhere.
		return zoneCounts{}
	}
	floor, ceil := FairShares(zc.total, in.Members)
	zc.extra = zc.total
	for i, m := range in.Members {
		zc.extra -= floor[i]
		frac := ceil[i] - floor[i]
		if m.Zone == "" {
			zc.floorUnknown += floor[i]
			zc.fractionalUnknown += frac
			continue
		}
		zc.floor[m.Zone] += floor[i]
		zc.fractional[m.Zone] += frac
	}
	return zc
}
