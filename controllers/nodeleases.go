package controllers

import (
	"context"
	"fmt"
	"sync"
	"time"

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

	"github.com/consumergroup-operator/consumergroup-operator/internal/plan"
	"github.com/consumergroup-operator/consumergroup-operator/pkg/protocol"
)

// The kubelet renews its node's Lease (namespace kube-node-lease, named after the node) every quarter of
// its duration: 10 s of 40 s by default. That is a heartbeat per node the cluster pays for anyway, and
// the first sign that a node is lost or cut off, with no kubelet left to report its pods: Kubernetes
// marks the node NotReady only 40 s or more later. A member on a node whose Lease the operator has not
// seen renewed for a renewal interval and a fifth stops being a member, if its own Lease promises contact
// fencing (protocol.StopsWithinAnnotation): its queues are revoked then and move on when its promise runs
// out, about 19 s after the node's last renewal with the defaults. A false alarm (a kubelet that cannot
// reach the API server while its pods can) moves queues; it never lets two pods read one.

// kubeletRenewFraction is the share of a node Lease's duration after which the kubelet renews it.
const kubeletRenewFraction = 4

// nodeLeaseSightings times node Lease renewals on the operator's clock, as leaseSightings does for the
// members' Leases: a renewal counts when the operator sees spec.renewTime change. A renewal it saw only
// after the fact, as it started, counts from the time it states plus the clock skew bound, when that is
// earlier: a restarted operator resumes the wait for a lost node rather than starting it again. Lateness
// only decides which queues are revoked, never when another may read them.
type nodeLeaseSightings struct {
	mu    sync.Mutex
	nodes map[string]nodeSighting
}

type nodeSighting struct {
	renewTime, seenAt time.Time
	interval          time.Duration
	// afterTheFact is set while renewTime is the one the operator first read the Lease with.
	afterTheFact bool
}

// saw records a node Lease as seen at now. It reports whether the node had been silent past its
// deadline: its groups should then look again, as their members on it may be members again.
func (s *nodeLeaseSightings) saw(lease *coordinationv1.Lease, now time.Time, maxSkew time.Duration) (wasLate bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.nodes == nil {
		s.nodes = map[string]nodeSighting{}
	}
	duration := 40 * time.Second
	if d := lease.Spec.LeaseDurationSeconds; d != nil && *d > 0 {
		duration = min(time.Duration(*d)*time.Second, protocol.MaxLeaseDuration)
	}
	renewTime := protocol.RenewTimeOf(lease)
	prev, known := s.nodes[lease.Name]
	next := nodeSighting{renewTime: renewTime, seenAt: now, interval: duration / kubeletRenewFraction, afterTheFact: !known}
	if known && renewTime.Equal(prev.renewTime) {
		next.seenAt, next.afterTheFact = prev.seenAt, prev.afterTheFact
	}
	s.nodes[lease.Name] = next
	return known && !now.Before(prev.lateAt(maxSkew)) && next.seenAt.Equal(now)
}

// forget drops a node whose Lease is gone: nothing is known of it any more, which suspects nothing.
func (s *nodeLeaseSightings) forget(node string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.nodes, node)
}

// lateAt is when a node's next renewal is overdue: one renewal interval and a fifth after the last, counted
// from when it was seen or, seen after the fact, from the time it states plus maxSkew when earlier.
func (n nodeSighting) lateAt(maxSkew time.Duration) time.Time {
	return plan.RenewedBy(n.renewTime, n.seenAt, n.afterTheFact, maxSkew).Add(n.interval + n.interval/5)
}

// lateAt says, for each of nodes whose Lease the operator has seen, when it is overdue.
func (s *nodeLeaseSightings) lateAt(nodes map[string]string, maxSkew time.Duration) map[string]time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make(map[string]time.Time, len(nodes))
	for node := range nodes {
		if n, ok := s.nodes[node]; ok {
			out[node] = n.lateAt(maxSkew)
		}
	}
	return out
}

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
		if r.nodeLeases.saw(lease, r.Clock.Now(), r.maxClockSkew()) {
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
			r.nodeLeases.forget(e.Object.Name)
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
