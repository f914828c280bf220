package controllers

import (
	"cmp"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/types"

	"github.com/consumergroup-operator/consumergroup-operator/pkg/protocol"
)

// leaseSightings times the members' renewals on the operator's own clock, as Kubernetes' node lifecycle
// controller times node Leases: a Lease counts as renewed when the operator sees its spec.renewTime
// change, at the operator's time of seeing it, never at the time the Lease states. A renewTime written in
// the future, in the past or going backwards then neither shortens nor stretches a claim beyond one lease
// duration from the moment the operator saw it. It also remembers each Lease as last read, so that a Lease
// that vanishes keeps its claim standing for the rest of that duration: a Lease that is gone proves no more
// than a pod that is gone.
//
// It lives in memory only. An operator that starts (or a new leader) has seen nothing: every Lease counts
// as renewed when it is first read, which can only make claims stand longer. A Lease that vanished before
// the start is not remembered; what the operator published for its pod still stands for one lease duration
// from the start (see stillPublished).
type leaseSightings struct {
	mu sync.Mutex
	// groups holds, per group, each Lease's sighting by the Lease's UID, and when the operator first
	// looked at the group.
	groups map[types.NamespacedName]*groupSightings
}

type groupSightings struct {
	since  time.Time
	leases map[types.UID]sighting
}

// sighting is what the operator saw of one Lease.
type sighting struct {
	// renewTime is spec.renewTime as last read; seenAt when the operator first read that value.
	renewTime, seenAt time.Time
	// last is the Lease as last read, its RenewTime replaced by seenAt.
	last protocol.LeaseState
}

// sightedLeases is what one pass counts of a group's Leases.
type sightedLeases struct {
	// leases are the Leases read and the vanished ones whose claims may still stand, each with RenewTime
	// the operator's time of its latest renewal.
	leases []protocol.LeaseState
	// vanished holds the UIDs of the Leases among them that no longer exist.
	vanished map[types.UID]bool
	// backwards names the Leases whose renewTime went backwards since the operator last read them.
	backwards []string
	// since is when the operator first looked at the group.
	since time.Time
}

// observe records the group's Leases as read at now and returns them as the operator counts them.
func (s *leaseSightings) observe(group types.NamespacedName, read []protocol.LeaseState, now time.Time, maxSkew time.Duration) sightedLeases {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.groups == nil {
		s.groups = map[types.NamespacedName]*groupSightings{}
	}
	g := s.groups[group]
	if g == nil {
		g = &groupSightings{since: now, leases: map[types.UID]sighting{}}
		s.groups[group] = g
	}
	var out sightedLeases
	g.leases, out = sight(g.leases, read, now, maxSkew)
	out.since = g.since
	return out
}

// forget drops what was seen of a group that is gone.
func (s *leaseSightings) forget(group types.NamespacedName) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.groups, group)
}

// sight is observe's rule, without the memory: from the previous sightings and the Leases read at now,
// the next sightings and what the pass counts.
func sight(prev map[types.UID]sighting, read []protocol.LeaseState, now time.Time, maxSkew time.Duration) (map[types.UID]sighting, sightedLeases) {
	next := make(map[types.UID]sighting, len(read))
	out := sightedLeases{vanished: map[types.UID]bool{}}
	for _, l := range read {
		seen := sighting{renewTime: l.RenewTime, seenAt: now}
		if p, ok := prev[l.UID]; ok {
			switch {
			case l.RenewTime.Equal(p.renewTime):
				seen.seenAt = p.seenAt
			case l.RenewTime.Before(p.renewTime):
				out.backwards = append(out.backwards, l.Name)
			}
		}
		l.RenewTime = seen.seenAt
		seen.last = l
		next[l.UID] = seen
		out.leases = append(out.leases, l)
	}
	readBy := make(map[string]bool, len(read))
	for _, l := range read {
		readBy[l.Pod+"\x00"+string(l.PodUID)] = true
	}
	for _, uid := range slices.Sorted(maps.Keys(prev)) {
		p := prev[uid]
		// A Lease the same incarnation wrote again under a new UID says what it reads now; one of another
		// incarnation does not speak for this one.
		if _, still := next[uid]; still || readBy[p.last.Pod+"\x00"+string(p.last.PodUID)] || !p.last.Stands(now, maxSkew) {
			continue
		}
		next[uid] = p
		out.leases = append(out.leases, p.last)
		out.vanished[uid] = true
	}
	slices.Sort(out.backwards)
	// By name, a vanished Lease before the one that replaced it: whoever indexes them by pod keeps the one
	// that exists.
	slices.SortFunc(out.leases, func(a, b protocol.LeaseState) int {
		return cmp.Or(strings.Compare(a.Name, b.Name), cmp.Compare(b2i(!out.vanished[a.UID]), b2i(!out.vanished[b.UID])))
	})
	return next, out
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}
