package controllers

import (
	"context"
	"fmt"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/workqueue"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"
)

// watchNodeLeases starts a cache of the Leases of namespace (kube-node-lease) with the manager, and
// records their renewals; a node that renews again after being late makes its groups look again.
func (r *ConsumerGroupReconciler) watchNodeLeases(mgr ctrl.Manager, namespace string) (source.TypedSource[reconcile.Request], error) {
	c, err := cache.New(mgr.GetConfig(), cache.Options{
		Scheme: mgr.GetScheme(), Mapper: mgr.GetRESTMapper(),
		DefaultNamespaces: map[string]cache.Config{namespace: {}},
		ByObject:          map[client.Object]cache.ByObject{&coordinationv1.Lease{}: {Transform: stripNodeLease}},
	})
	if err != nil {
		return nil, fmt.Errorf("building the cache of the node Leases in %s: %w", namespace, err)
	}
	if err := mgr.Add(c); err != nil {
		return nil, fmt.Errorf("adding the cache of the node Leases to the manager: %w", err)
	}
	seen := func(ctx context.Context, lease *coordinationv1.Lease, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
		wasLate := r.nodeLeases.Saw(lease, r.Clock.Now(), r.maxClockSkew())
		r.lateNodes.arm(lease.Name)
		if wasLate {
			for _, req := range r.groupsForNode(ctx, &corev1.Node{ObjectMeta: lease.ObjectMeta}) {
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
			r.nodeLeases.Forget(e.Object.Name)
		},
	}), nil
}

// stripNodeLease keeps of a node Lease what the operator reads: its name, renewTime and duration.
func stripNodeLease(obj any) (any, error) {
	lease, ok := obj.(*coordinationv1.Lease)
	if !ok {
		return obj, nil
	}
	return &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Name: lease.Name, Namespace: lease.Namespace, UID: lease.UID, ResourceVersion: lease.ResourceVersion},
		Spec:       coordinationv1.LeaseSpec{RenewTime: lease.Spec.RenewTime, AcquireTime: lease.Spec.AcquireTime, LeaseDurationSeconds: lease.Spec.LeaseDurationSeconds},
	}, nil
}
