package controllers

import (
	"context"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/consumergroup-operator/consumergroup-operator/api/v1alpha1"
	"github.com/consumergroup-operator/consumergroup-operator/internal/observe"
)

// lateNodes wakes the groups with pods on a node when its kubelet becomes overdue (observe.
// NodeLeaseSightings): one timer per node, set again at each of its renewals. The groups' passes do not
// wait for each of their nodes' deadlines themselves (plan.membersFor): a kubelet renews every 10 s, and a
// pass of every group at every node's deadline was the most of the operator's work, a pass of each group
// every 12 s or so, however still the cluster. A node that is overdue at its timer has its groups woken
// once; a renewal after that wakes them again (watchNodeLeases) and sets the timer anew.
type lateNodes struct {
	sightings *observe.NodeLeaseSightings
	clock     clock.PassiveClock
	maxSkew   time.Duration
	// groupsOn maps a node to the groups that have pods on it.
	groupsOn func(ctx context.Context, node string) []reconcile.Request
	queue    workqueue.TypedDelayingInterface[string]
	woken    chan event.GenericEvent
}

func newLateNodes(sightings *observe.NodeLeaseSightings, clk clock.PassiveClock, maxSkew time.Duration, groupsOn func(context.Context, string) []reconcile.Request) *lateNodes {
	return &lateNodes{sightings: sightings, clock: clk, maxSkew: maxSkew, groupsOn: groupsOn,
		queue: newDeadlineQueue[string]("latenodes", clk), woken: make(chan event.GenericEvent, 1024)}
}

// arm sets the timer of the node lease renews (the kubelet's Lease, or the agent's heartbeat) to its
// deadline as last seen, and says which node that is. A timer already set sooner stays: it finds the
// node renewed since, and sets itself again (check).
func (l *lateNodes) arm(lease *coordinationv1.Lease) (string, bool) {
	node, ok := l.sightings.NodeOf(lease)
	if !ok {
		return "", false
	}
	if at, ok := l.sightings.LateAt(node, l.maxSkew); ok {
		l.queue.AddAfter(node, at.Sub(l.clock.Now()))
	}
	return node, true
}

// Start runs the timers until ctx ends.
func (l *lateNodes) Start(ctx context.Context) error { return runDeadlines(ctx, l.queue, l.check) }

// disruptedRecheck is how often an overdue node's timer looks again while too many nodes are overdue to
// believe any (observe.NodeLeaseSightings.Disrupted): the passes would not count it late, and once the
// others renew, a node still silent is lost, and its groups are woken within this.
const disruptedRecheck = time.Second

// check wakes node's groups when it is overdue now, and sets its timer again when it is not yet, or while
// the nodes' Leases are disrupted: a pass then would not count the node late, and waking the groups of
// every overdue node of a slow API server is work for nothing when it can least be spared.
func (l *lateNodes) check(ctx context.Context, node string) {
	now := l.clock.Now()
	due, wait := nodeOverdue(l.sightings, node, now, l.maxSkew)
	switch {
	case wait > 0:
		l.queue.AddAfter(node, wait)
	case due && l.sightings.Disrupted(now, l.maxSkew):
		l.queue.AddAfter(node, disruptedRecheck)
	case due:
		for _, req := range l.groupsOn(ctx, node) {
			group := &v1alpha1.ConsumerGroup{}
			group.Namespace, group.Name = req.Namespace, req.Name
			select {
			case l.woken <- event.GenericEvent{Object: group}:
			case <-ctx.Done():
				return
			}
		}
	}
}

// nodeOverdue says whether node's kubelet is overdue at now, or else how long until it is; neither for a
// node whose Lease is not known (never seen, or deleted).
func nodeOverdue(s *observe.NodeLeaseSightings, node string, now time.Time, maxSkew time.Duration) (due bool, wait time.Duration) {
	at, ok := s.LateAt(node, maxSkew)
	switch {
	case !ok:
		return false, 0
	case now.Before(at):
		return false, at.Sub(now)
	}
	return true, 0
}
