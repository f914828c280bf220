package observe

import (
	"cmp"
	"maps"
	"slices"
	"strings"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/consumergroup-operator/consumergroup-operator/internal/plan"
	"github.com/consumergroup-operator/consumergroup-operator/pkg/protocol"
)

// Sightings time the members' renewals on the operator's own clock, as Kubernetes' node lifecycle
// controller times node Leases: a Lease counts as renewed when the operator sees its spec.renewTime
// change, at the operator's time of seeing it, never at the time the Lease states. A renewTime written in
// the future, in the past or going backwards then neither shortens nor stretches a claim beyond one lease
// duration from the moment the operator saw it. It also remembers each Lease as last read, so that a Lease
// that vanishes keeps its claim standing for the rest of that duration: a Lease that is gone proves no more
// than a pod that is gone.
//
// Renewals are recorded as their watch events arrive (saw), between passes, and by each pass (observe)
// for what the events have not shown yet. It lives in memory only. An operator that starts (or a new
// leader) has seen nothing: every Lease counts as renewed when it is first read, which can only make claims
// stand longer. A Lease that vanished before the start is not remembered; what the operator published for
// its pod still stands for one lease duration from the start (plan's unseenDeadline).
//
// Whether a member is late (membershipEnds) is the one judgement that a restart does not start again:
// for a renewal first seen after the fact, it counts from the renewal time the Lease states plus the clock
// skew bound, when that is earlier than the sighting (renewedBy). A late member only has its queues
// revoked; they are read by another only after its acknowledgement or its promise, which no clock
// decides. A clock that is wrong makes the operator revoke early once, and the next renewal, seen as it
// happens, makes the member one again.
//
// Sightings are one group's; a Memory keeps them between passes and orders their uses.
type Sightings struct {
	// since is when the operator first looked at the group; leases hold each Lease's sighting by the
	// Lease's UID.
	since  time.Time
	leases map[types.UID]sighting
	// published are the generations this operator knows were published, each with the time it first
	// knew (publications).
	published plan.Publications
	// firstWritten is when this operator's own first write of a generation returned, zero before, and
	// firstWrittenGeneration that generation: what it wrote gave nothing to a pod it never saw.
	firstWritten           time.Time
	firstWrittenGeneration int64
	// restarts are the container restarts of the group's pods, by pod UID (restarts.go).
	restarts map[types.UID]restartSighting
}

// Memory keeps each group's Sightings between passes. WithSightings runs f on the group's, begun at now
// when there are none, under a lock that orders every use: passes and watch events write them at once.
type Memory interface {
	WithSightings(group types.NamespacedName, now time.Time, f func(*Sightings))
}

// NewSightings are the sightings of a group the operator first looks at now.
func NewSightings(now time.Time) *Sightings {
	return &Sightings{since: now, leases: map[types.UID]sighting{}}
}

// SingleLook is the Memory of one group for as long as it lives: kubectl cg keeps one for its single look,
// which then counts the Leases as an operator that has just started would.
type SingleLook struct{ sightings *Sightings }

// WithSightings runs f on the look's sightings.
func (l *SingleLook) WithSightings(_ types.NamespacedName, now time.Time, f func(*Sightings)) {
	if l.sightings == nil {
		l.sightings = NewSightings(now)
	}
	f(l.sightings)
}

// sawPublished records that the group's assignment at generation was known to be published whole at now.
func (g *Sightings) sawPublished(generation int64, now time.Time) {
	g.published = g.published.Add(generation, now)
}

// Wrote records that this operator's own write of the group's assignment at generation returned at now,
// as sawPublished does, and the first such moment (firstWritten).
func (g *Sightings) Wrote(generation int64, now time.Time) {
	g.sawPublished(generation, now)
	if g.firstWritten.IsZero() {
		g.firstWritten, g.firstWrittenGeneration = now, generation
	}
}

// FirstWrittenGeneration is the generation of this operator's own first write of the group's
// assignment; 0 before it returned.
func (g *Sightings) FirstWrittenGeneration() int64 { return g.firstWrittenGeneration }

// sighting is what the operator saw of one Lease.
type sighting struct {
	// renewTime is spec.renewTime as last read; seenAt when the operator first read that value.
	renewTime, seenAt time.Time
	// afterTheFact is set while renewTime is the one the operator first read the Lease with: it saw
	// that renewal only after it had happened, at some time it cannot tell.
	afterTheFact bool
	// lease is the Lease as last seen, by a pass or its watch events.
	lease *coordinationv1.Lease
	// wentBack is set when a watch event showed renewTime going backwards, until a pass reports it.
	wentBack bool
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
	// asWritten are the Leases read, with the renewTimes their writers wrote.
	asWritten []protocol.LeaseState
}

// observe records the group's Leases as read at now and returns them as the operator counts them, each
// read through scope (protocol.ReadLeaseIn).
func (g *Sightings) observe(read []*coordinationv1.Lease, scope *protocol.Scope, now time.Time, maxSkew time.Duration) sightedLeases {
	var out sightedLeases
	g.leases, out = sight(g.leases, read, scope, now, maxSkew)
	out.since = g.since
	return out
}

// Saw records that the operator saw lease at now, as its watch event arrived, between passes.
func (g *Sightings) Saw(lease *coordinationv1.Lease, now time.Time) {
	renewTime := protocol.RenewTimeOf(lease)
	p, known := g.leases[lease.UID]
	switch {
	case !known:
		p = sighting{renewTime: renewTime, seenAt: now, afterTheFact: true}
	case !renewTime.Equal(p.renewTime):
		p.wentBack = p.wentBack || renewTime.Before(p.renewTime)
		p.renewTime, p.seenAt, p.afterTheFact = renewTime, now, false
	}
	p.lease = lease
	g.leases[lease.UID] = p
}

// NextMemberDeadline is the earliest deadline after after by which one of the group's Leases, as last
// seen, stops its member being one unless it renews (plan.OwnMembershipEnd, with its pod's restart as last
// observed); zero for none. A pass at after acted on every deadline up to it: the ones after it are those
// the pass's plan.Decision.MemberDeadline was the first of, each moved later by the renewals seen since.
// It reads only the Leases' terms (protocol.ReadLeaseTerms), never their claims.
func (g *Sightings) NextMemberDeadline(after time.Time, maxSkew time.Duration) time.Time {
	var next time.Time
	for _, p := range g.leases {
		if p.lease == nil {
			continue
		}
		l := protocol.ReadLeaseTerms(p.lease)
		l.RenewTime, l.RenewedBy = p.seenAt, p.renewedBy(maxSkew)
		end := plan.OwnMembershipEnd(&l, g.restarts[l.PodUID].seenAt)
		if end.After(after) && (next.IsZero() || end.Before(next)) {
			next = end
		}
	}
	return next
}

// sight is observe's rule, without the memory: from the previous sightings and the Leases read at now,
// the next sightings and what the pass counts.
func sight(prev map[types.UID]sighting, read []*coordinationv1.Lease, scope *protocol.Scope, now time.Time, maxSkew time.Duration) (map[types.UID]sighting, sightedLeases) {
	next := make(map[types.UID]sighting, len(read))
	out := sightedLeases{vanished: map[types.UID]bool{}}
	readBy := make(map[string]bool, len(read))
	for _, lease := range read {
		l := protocol.ReadLeaseIn(lease, scope)
		out.asWritten = append(out.asWritten, l)
		readBy[plan.IncarnationKey(l.Pod, l.PodUID)] = true
		p, known := prev[l.UID]
		seen := sighting{renewTime: l.RenewTime, seenAt: now, lease: retained(p, known, lease), afterTheFact: !known}
		if known {
			if l.RenewTime.Equal(p.renewTime) {
				seen.seenAt, seen.afterTheFact = p.seenAt, p.afterTheFact
			}
			if p.wentBack || l.RenewTime.Before(p.renewTime) {
				out.backwards = append(out.backwards, l.Name)
			}
		}
		l.RenewTime, l.RenewedBy = seen.seenAt, seen.renewedBy(maxSkew)
		next[l.UID] = seen
		out.leases = append(out.leases, l)
	}
	for _, uid := range slices.Sorted(maps.Keys(prev)) {
		if _, still := next[uid]; still {
			continue
		}
		p := prev[uid]
		ghost := protocol.ReadLeaseIn(p.lease, scope)
		ghost.RenewTime, ghost.RenewedBy = p.seenAt, p.renewedBy(maxSkew)
		// A Lease the same incarnation wrote again under a new UID says what it reads now; one of another
		// incarnation does not speak for this one.
		if readBy[plan.IncarnationKey(ghost.Pod, ghost.PodUID)] || !ghost.Stands(now, maxSkew) {
			continue
		}
		p.wentBack = false
		next[uid] = p
		out.leases = append(out.leases, ghost)
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

// retained is the Lease a sighting keeps of read: the one it kept already when that is the same version
// (most often the informer's own object, which Saw keeps as each event arrives), else a copy. The pass's
// list, which read points into, is then garbage once the pass ends: kept by a sighting until the next
// pass, every group's list held a second copy of each of its Leases.
func retained(p sighting, known bool, read *coordinationv1.Lease) *coordinationv1.Lease {
	if known && p.lease != nil && p.lease.UID == read.UID && p.lease.ResourceVersion == read.ResourceVersion {
		return p.lease
	}
	kept := *read
	return &kept
}

// renewedBy is the latest time the Lease's holder can have renewed, for telling whether it is late: when
// the operator saw the renewal, or, for one it saw only after the fact, the time the Lease states plus the
// clock skew bound, when that is earlier. A stated time in the future gains nothing.
func (p sighting) renewedBy(maxSkew time.Duration) time.Time {
	return plan.RenewedBy(p.renewTime, p.seenAt, p.afterTheFact, maxSkew)
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}
