package controllers

import (
	"context"
	"time"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/event"

	"github.com/consumergroup-operator/consumergroup-operator/api/v1alpha1"
)

// lateMembers wakes a group when one of its members' own deadlines falls: a renewal overdue, or a restart
// no renewal answered (plan.Decision.MemberDeadline). One timer per group, set by each pass to the earliest
// of them; when it falls due, the group's sightings say whether renewals seen since moved that deadline
// (observe.Sightings.NextMemberDeadline), and the timer is set again to the new one instead of waking the
// group. Each renewal moves its member's deadline on, and a pass that looked again at every deadline it
// computed ran once for every renewal, long after it: about 30 passes a second at 20,000 members with
// nothing changing, each reading the group's pods and Leases.
type lateMembers struct {
	memory  *memory
	clock   clock.PassiveClock
	maxSkew time.Duration
	queue   workqueue.TypedDelayingInterface[types.NamespacedName]
	woken   chan event.GenericEvent
}

func newLateMembers(m *memory, clk clock.PassiveClock, maxSkew time.Duration) *lateMembers {
	return &lateMembers{memory: m, clock: clk, maxSkew: maxSkew,
		queue: newDeadlineQueue[types.NamespacedName]("latemembers", clk), woken: make(chan event.GenericEvent, 1024)}
}

// arm records that a pass of group ran at passedAt and found its members' earliest deadline at deadline
// (zero for none), and sets the group's timer to it. A timer already set sooner stays: it finds the
// deadline moved, and sets itself again (check).
func (l *lateMembers) arm(group types.NamespacedName, passedAt, deadline time.Time) {
	l.memory.with(group, func(g *groupMemory) { g.deadlinesFrom = passedAt })
	if !deadline.IsZero() {
		l.queue.AddAfter(group, deadline.Sub(l.clock.Now()))
	}
}

// Start runs the timers until ctx ends.
func (l *lateMembers) Start(ctx context.Context) error { return runDeadlines(ctx, l.queue, l.check) }

// check wakes group when one of its members' deadlines has fallen, and sets its timer again when the
// earliest is still to come. A group forgotten, or with no deadline left, is left alone: its next pass
// sets the timer again.
func (l *lateMembers) check(ctx context.Context, group types.NamespacedName) {
	next, known := l.memory.nextMemberDeadline(group, l.maxSkew)
	now := l.clock.Now()
	switch {
	case !known || next.IsZero():
	case now.Before(next):
		l.queue.AddAfter(group, next.Sub(now))
	default:
		g := &v1alpha1.ConsumerGroup{}
		g.Namespace, g.Name = group.Namespace, group.Name
		select {
		case l.woken <- event.GenericEvent{Object: g}:
		case <-ctx.Done():
		}
	}
}
