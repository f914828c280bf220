package controllers

import (
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/types"

	"github.com/consumergroup-operator/consumergroup-operator/internal/observe"
	"github.com/consumergroup-operator/consumergroup-operator/pkg/allocate"
)

// memory is everything the reconciler keeps of its groups between passes: one entry per group, under one
// lock. Passes of different groups and the Lease watch use it at once; the work queue never runs two
// passes of one group at once. None of it holds a plan the API server does not: an operator that starts,
// or a new leader, begins with none and publishes the same assignments (the sightings begin cautiously,
// observe.Sightings).
type memory struct {
	mu     sync.Mutex
	groups map[types.NamespacedName]*groupMemory
}

// groupMemory is what the reconciler keeps of one group. Each part has one owner, the only code that
// writes it.
type groupMemory struct {
	// strategy is the group's strategy, kept while the spec's is unchanged so that it can reuse work:
	// written by strategyFor.
	strategy cachedStrategy
	// sightings time the group's Leases on the operator's clock: written through observe.Memory, by the
	// pass's observation, the Lease watch (renewalSeen) and the pass's record of what it wrote (Wrote).
	sightings *observe.Sightings
	// revoked is when each queue revoked and not yet granted was revoked, for the handoff metric: written
	// by recordHandoffs.
	revoked map[allocate.Queue]time.Time
	// quickRetries counts the passes in a row whose write met a newer object: written by retry and by a
	// pass that gets through.
	quickRetries int
	// statusWrittenAt is when a pass last wrote the group's status: written by writeStatus.
	statusWrittenAt time.Time
	// deadlinesFrom is when the pass that last set the group's member timer ran (lateMembers.arm): the
	// members' deadlines up to then were its to act on. Written by arm.
	deadlinesFrom time.Time
}

// with runs f on group's memory, made empty if there is none, under the lock.
func (m *memory) with(group types.NamespacedName, f func(*groupMemory)) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.groups == nil {
		m.groups = map[types.NamespacedName]*groupMemory{}
	}
	g := m.groups[group]
	if g == nil {
		g = &groupMemory{}
		m.groups[group] = g
	}
	f(g)
}

// WithSightings makes the memory the observe.Memory of the reconciler's observations.
func (m *memory) WithSightings(group types.NamespacedName, now time.Time, f func(*observe.Sightings)) {
	m.with(group, func(g *groupMemory) {
		if g.sightings == nil {
			g.sightings = observe.NewSightings(now)
		}
		f(g.sightings)
	})
}

// nextMemberDeadline is the earliest of group's members' deadlines after those its last pass that set the
// member timer acted on (observe.Sightings.NextMemberDeadline); false when the group is forgotten or no
// pass set the timer.
func (m *memory) nextMemberDeadline(group types.NamespacedName, maxSkew time.Duration) (next time.Time, known bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	g := m.groups[group]
	if g == nil || g.sightings == nil || g.deadlinesFrom.IsZero() {
		return time.Time{}, false
	}
	return g.sightings.NextMemberDeadline(g.deadlinesFrom, maxSkew), true
}

// addRetry counts one more pass of group in a row that met a newer object, and returns the count.
func (m *memory) addRetry(group types.NamespacedName) (n int) {
	m.with(group, func(g *groupMemory) {
		g.quickRetries++
		n = g.quickRetries
	})
	return n
}

// resetRetries starts group's count of passes that met a newer object again.
func (m *memory) resetRetries(group types.NamespacedName) {
	m.with(group, func(g *groupMemory) { g.quickRetries = 0 })
}

// statusWritten records that a pass wrote group's status at now.
func (m *memory) statusWritten(group types.NamespacedName, now time.Time) {
	m.with(group, func(g *groupMemory) { g.statusWrittenAt = now })
}

// statusWrittenAt is when a pass last wrote group's status; zero when none has since the operator started.
func (m *memory) statusWrittenAt(group types.NamespacedName) (at time.Time) {
	m.with(group, func(g *groupMemory) { at = g.statusWrittenAt })
	return at
}

// forget drops what is kept of a group that is gone.
func (m *memory) forget(group types.NamespacedName) {
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.groups, group)
}
