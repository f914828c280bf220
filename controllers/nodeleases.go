package controllers

import (
	"context"
	"fmt"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/util/workqueue"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"

	"github.com/consumergroup-operator/consumergroup-operator/internal/observe"
	"github.com/consumergroup-operator/consumergroup-operator/pkg/protocol"
)

// timeNodeLeases times the kubelets' renewals of the Leases of NodeLeaseNamespace (kube-node-lease),
// and wakes a node's groups when it is overdue, or renews again after being late.
func (r *ConsumerGroupReconciler) timeNodeLeases(mgr ctrl.Manager, b *builder.Builder) (*lateNodes, error) {
	return r.timeHeartbeats(mgr, b, cache.Config{}, r.NodeLeaseNamespace, &r.nodeLeases)
}

// timeAgentHeartbeats does for the node agents' heartbeats, in the node views' namespace, what
// timeNodeLeases does for the kubelets' Leases: its cache holds those Leases only (by their label), whose
// renewals are timed by observe.NodeLeaseSightings with Heartbeats.
func (r *ConsumerGroupReconciler) timeAgentHeartbeats(mgr ctrl.Manager, b *builder.Builder) (*lateNodes, error) {
	heartbeats := labels.SelectorFromSet(labels.Set{protocol.NodeAgentHeartbeatLabel: "true"})
	return r.timeHeartbeats(mgr, b, cache.Config{LabelSelector: heartbeats}, r.NodeViewsNamespace, &r.agentHeartbeats)
}

// timeHeartbeats records in sightings the renewals of the Leases of namespace that config selects, and
// adds to b a timer per node (lateNodes) that wakes its groups, first in the work queue, once it is
// overdue.
func (r *ConsumerGroupReconciler) timeHeartbeats(mgr ctrl.Manager, b *builder.Builder, config cache.Config, namespace string, sightings *observe.NodeLeaseSightings) (*lateNodes, error) {
	late := newLateNodes(sightings, r.Clock, r.maxClockSkew(), r.groupsOnNode)
	if err := mgr.Add(late); err != nil {
		return nil, err
	}
	renewals, err := r.watchHeartbeats(mgr, config, namespace, sightings, late)
	if err != nil {
		return nil, err
	}
	b.WatchesRawSource(renewals).WatchesRawSource(source.Channel(late.woken, enqueueUrgently()))
	return late, nil
}

// watchHeartbeats starts a cache of the Leases of namespace that config selects, records their renewals
// in sightings, and sets late's timer of their node at each.
func (r *ConsumerGroupReconciler) watchHeartbeats(mgr ctrl.Manager, config cache.Config, namespace string, sightings *observe.NodeLeaseSightings, late *lateNodes) (source.TypedSource[reconcile.Request], error) {
	c, err := cache.New(mgr.GetConfig(), cache.Options{
		Scheme: mgr.GetScheme(), Mapper: mgr.GetRESTMapper(),
		DefaultNamespaces: map[string]cache.Config{namespace: config},
		ByObject:          map[client.Object]cache.ByObject{&coordinationv1.Lease{}: {Transform: stripNodeLease}},
	})
	if err != nil {
		return nil, fmt.Errorf("building the cache of the Leases in %s: %w", namespace, err)
	}
	if err := mgr.Add(c); err != nil {
		return nil, fmt.Errorf("adding the cache of the Leases in %s to the manager: %w", namespace, err)
	}
	seen := func(ctx context.Context, lease *coordinationv1.Lease, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
		wasLate := sightings.Saw(lease, r.Clock.Now(), r.maxClockSkew())
		node, ok := late.arm(lease)
		if wasLate && ok {
			for _, req := range r.groupsOnNode(ctx, node) {
				q.Add(req)
			}
		}
	}
	return source.Kind(c, &coordinationv1.Lease{}, handler.TypedFuncs[*coordinationv1.Lease, reconcile.Request]{
		CreateFunc: func(ctx context.Context, e event.TypedCreateEvent[*coordinationv1.Lease], q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			seen(ctx, e.Object, q)
		},
		UpdateFunc: func(ctx context.Context, e event.TypedUpdateEvent[*coordinationv1.Lease], q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			seen(ctx, e.ObjectNew, q)
		},
		DeleteFunc: func(_ context.Context, e event.TypedDeleteEvent[*coordinationv1.Lease], _ workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			sightings.Forget(e.Object)
		},
	}), nil
}

// stripNodeLease keeps of a node Lease or a heartbeat what the operator reads: its name, renewTime and
// duration, and a heartbeat's label and node (protocol.HeartbeatNode).
func stripNodeLease(obj any) (any, error) {
	lease, ok := obj.(*coordinationv1.Lease)
	if !ok {
		return obj, nil
	}
	var labels, annotations map[string]string
	if v, ok := lease.Labels[protocol.NodeAgentHeartbeatLabel]; ok {
		labels = map[string]string{protocol.NodeAgentHeartbeatLabel: v}
	}
	if v, ok := lease.Annotations[protocol.NodeViewNodeAnnotation]; ok {
		annotations = map[string]string{protocol.NodeViewNodeAnnotation: v}
	}
	return &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Name: lease.Name, Namespace: lease.Namespace, UID: lease.UID, ResourceVersion: lease.ResourceVersion,
			Labels: labels, Annotations: annotations},
		Spec: coordinationv1.LeaseSpec{RenewTime: lease.Spec.RenewTime, AcquireTime: lease.Spec.AcquireTime, LeaseDurationSeconds: lease.Spec.LeaseDurationSeconds},
	}, nil
}
