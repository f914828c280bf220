package controllers

import (
	"context"

	"k8s.io/client-go/util/workqueue"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/priorityqueue"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/consumergroup-operator/consumergroup-operator/internal/plan"
)

// Work queue priorities of a group's pass. The queue hands out the ready passes of a higher priority
// first, and keeps the highest it was given for a group until the pass runs.
const (
	// routinePriority is the priority of every other pass (controller-runtime's default).
	routinePriority = 0
	// urgentPriority is the priority of a pass that may give a queue nobody reads its reader: the groups
	// of a node that went late, and the passes that follow one that left queues withheld. On a busy
	// operator every group may be waiting for a pass that a claim, an acknowledgement or a pod queued; a
	// lost node's queues then wait behind all of them twice (the pass that revokes, the pass that grants
	// once the revocation lapsed), where they are promised a reader within 20 s (docs/protocol.md).
	urgentPriority = 100
)

// passPriority is the priority of the pass that a pass with this report asks for next: urgent while it
// leaves queues withheld, routine once it does not. A pass sets the priority of the next one either way:
// one left unset keeps the priority of the pass that ran, and an urgent group would stay urgent for good.
func passPriority(r *plan.Report) *int {
	if r.Handoff.Withheld > 0 {
		return ptr.To(urgentPriority)
	}
	return ptr.To(routinePriority)
}

// enqueueUrgently queues the group each generic event names for an urgent pass.
func enqueueUrgently() handler.EventHandler {
	return handler.Funcs{GenericFunc: func(_ context.Context, e event.GenericEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
		addUrgently(q, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(e.Object)})
	}}
}

// addUrgently queues req at urgentPriority, or plainly on a queue without priorities.
func addUrgently(q workqueue.TypedRateLimitingInterface[reconcile.Request], req reconcile.Request) {
	if pq, ok := q.(priorityqueue.PriorityQueue[reconcile.Request]); ok {
		pq.AddWithOpts(priorityqueue.AddOpts{Priority: ptr.To(urgentPriority)}, req)
		return
	}
	q.Add(req)
}
