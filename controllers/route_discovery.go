package controllers

import (
	"context"
	"net"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/source"

	"github.com/consumergroup-operator/consumergroup-operator/api/v1alpha1"
	"github.com/consumergroup-operator/consumergroup-operator/internal/plan"
)

// routeDiscovery is the controller that keeps each group's status.routes: for a group with
// spec.nameServer it registers the topics to read with the reads shared per source (routeReads), and
// records each read that finishes in the status, with the TopologyStale condition, events and metrics. The
// group's passes plan with the routes recorded there and start no read; a change of status.routes starts
// a pass (routesChanged). Recorded before any pass plans with them, the routes survive a restart of the
// operator that follows the publication of an assignment made from them.
type routeDiscovery struct {
	client.Client
	// APIReader reads the Secrets of the credentials namespace, which the operator does not cache.
	APIReader client.Reader
	Recorder  events.EventRecorder
	Clock     clock.PassiveClock
	// NameServers, NameServerDial and NameServerTimeout are the ConsumerGroupReconciler's fields of those
	// names.
	NameServers       NameServerPolicy
	NameServerDial    func(ctx context.Context, network, addr string) (net.Conn, error)
	NameServerTimeout time.Duration

	// routes reads the routes of the groups' discovered topics from their name servers, shared per
	// source (routereads.go).
	routes routeReads
	// quickRetries counts the status writes in a row that met a newer object.
	quickRetries retryCounts
}

// newRouteDiscovery is the route discovery of the operator r configures.
func newRouteDiscovery(r *ConsumerGroupReconciler) *routeDiscovery {
	return &routeDiscovery{Client: r.Client, APIReader: r.APIReader, Recorder: r.Recorder, Clock: r.Clock,
		NameServers: r.NameServers, NameServerDial: r.NameServerDial, NameServerTimeout: r.NameServerTimeout}
}

// setupWithManager registers the route discovery and its watches: groups (spec changes), the finished
// reads of their routes, ClusterNameServers, and namespaces whose labels changed, which may let them use
// a ClusterNameServer or no longer.
func (r *routeDiscovery) setupWithManager(ctx context.Context, mgr ctrl.Manager) error {
	r.routes.init(ctx, r.NameServers, r.readSource, r.recordClusterNameServer)
	return ctrl.NewControllerManagedBy(mgr).
		Named("routediscovery").
		For(&v1alpha1.ConsumerGroup{}, builder.WithPredicates(predicate.GenerationChangedPredicate{})).
		WatchesRawSource(source.Channel(r.routes.events, &handler.EnqueueRequestForObject{})).
		Watches(&v1alpha1.ClusterNameServer{}, handler.EnqueueRequestsFromMapFunc(r.groupsForClusterNameServer),
			builder.WithPredicates(predicate.GenerationChangedPredicate{})).
		Watches(&corev1.Namespace{}, handler.EnqueueRequestsFromMapFunc(r.groupsForNamespace),
			builder.WithPredicates(predicate.LabelChangedPredicate{})).
		Complete(r)
}

// Reconcile registers where one group reads its routes and records the read that finished since its last
// pass, or the problem that keeps it from reading; it comes back when the next read is due.
func (r *routeDiscovery) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	group, err := liveGroup(ctx, r.Client, req.NamespacedName, r.forget)
	if group == nil || err != nil {
		return ctrl.Result{}, err
	}
	now := r.Clock.Now()
	routes, err := r.routePass(ctx, group, now)
	if err != nil {
		return retryAfter(ctx, r.quickRetries.add, req.NamespacedName, "route source", err)
	}
	if err := r.recordRoutes(ctx, group, routes, now); err != nil {
		return retryAfter(ctx, r.quickRetries.add, req.NamespacedName, "routes", err)
	}
	r.quickRetries.reset(req.NamespacedName)
	return ctrl.Result{RequeueAfter: routes.requeueAfter}, nil
}

// forget drops what the route discovery keeps of a group that is gone.
func (r *routeDiscovery) forget(group types.NamespacedName) {
	r.routes.forget(group)
	r.quickRetries.reset(group)
	forgetMetrics(group)
}

// routePass registers where group reads its routes and returns what its pass records: the read it has
// not recorded, or the problem that keeps it from reading.
func (r *routeDiscovery) routePass(ctx context.Context, group *v1alpha1.ConsumerGroup, now time.Time) (routePass, error) {
	key := client.ObjectKeyFromObject(group)
	if group.Spec.NameServer == nil {
		r.routes.forget(key)
		return routePass{}, nil
	}
	src, problem, err := r.routeSourceOf(ctx, group)
	if err != nil {
		return routePass{}, err
	}
	if problem != nil {
		r.routes.forget(key)
		return routePass{pending: problem}, nil
	}
	return r.routes.pass(key, src, sortedUnion(plan.DiscoveredTopics(group)), now), nil
}

// routesChanged passes the group updates that change status.routes: the route discovery recorded a read
// that the group's passes plan with.
func routesChanged() predicate.Predicate {
	return predicate.Funcs{
		UpdateFunc: func(e event.UpdateEvent) bool {
			before, okBefore := e.ObjectOld.(*v1alpha1.ConsumerGroup)
			after, okAfter := e.ObjectNew.(*v1alpha1.ConsumerGroup)
			return okBefore && okAfter && !equality.Semantic.DeepEqual(before.Status.Routes, after.Status.Routes)
		},
	}
}
