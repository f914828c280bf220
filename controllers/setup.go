package controllers

import (
	"cmp"
	"context"
	"time"

	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/util/workqueue"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"

	"github.com/consumergroup-operator/consumergroup-operator/api/v1alpha1"
	"github.com/consumergroup-operator/consumergroup-operator/internal/observe"
	"github.com/consumergroup-operator/consumergroup-operator/internal/plan"
	"github.com/consumergroup-operator/consumergroup-operator/pkg/protocol"
)

// groupSelectorIndex indexes groups by each "key=value" of their selector's matchLabels, and by "*" when
// it has none, so that a pod event looks up the few groups that may select it instead of matching every
// group of the namespace.
const groupSelectorIndex = "spec.selector.matchLabels"

const anyLabels = "*"

func selectorIndexValues(o client.Object) []string {
	labels := o.(*v1alpha1.ConsumerGroup).Spec.Selector.MatchLabels
	if len(labels) == 0 {
		return []string{anyLabels}
	}
	out := make([]string, 0, len(labels))
	for k, v := range labels {
		out = append(out, k+"="+v)
	}
	return out
}

// SetupWithManager registers the reconciler and its watches: groups (spec changes), the ConfigMaps they
// own (restored when edited or deleted), pods (mapped to the groups whose selector matches them), member
// Leases (acknowledgements, claims, takeovers) and nodes (a zone label change re-plans the groups with
// members on that node); and the route discovery (routeDiscovery), with its own watches.
func (r *ConsumerGroupReconciler) SetupWithManager(ctx context.Context, mgr ctrl.Manager) error {
	pods, err := newPodSource(ctx, mgr.GetCache(), r.groupsForPod)
	if err != nil {
		return err
	}
	r.pods = pods.store
	if err := mgr.GetFieldIndexer().IndexField(ctx, &v1alpha1.ConsumerGroup{}, groupSelectorIndex, selectorIndexValues); err != nil {
		return err
	}
	if err := mgr.GetFieldIndexer().IndexField(ctx, &v1alpha1.ConsumerGroup{}, clusterNameServerIndex, clusterNameServerOf); err != nil {
		return err
	}
	if err := newRouteDiscovery(r).setupWithManager(ctx, mgr); err != nil {
		return err
	}
	r.lateMembers = newLateMembers(&r.memory, r.Clock, r.maxClockSkew())
	if err := mgr.Add(r.lateMembers); err != nil {
		return err
	}
	b := ctrl.NewControllerManagedBy(mgr).WatchesRawSource(source.Channel(r.lateMembers.woken, enqueueUrgently()))
	if r.NodeViewsNamespace != "" {
		r.nodeViews = newNodeViews(r.Client, r.APIReader, r.NodeViewsNamespace, r.Clock)
		if err := mgr.Add(r.nodeViews); err != nil {
			return err
		}
		b = b.WatchesRawSource(source.Channel(r.nodeViews.woken, &handler.EnqueueRequestForObject{}))
		r.agentHeartbeats.Heartbeats = true
		if r.lateAgents, err = r.timeAgentHeartbeats(mgr, b); err != nil {
			return err
		}
		b = b.Watches(&corev1.ConfigMap{}, r.nodeViews.viewEvents(), builder.WithPredicates(predicate.NewPredicateFuncs(func(o client.Object) bool {
			return o.GetNamespace() == r.NodeViewsNamespace && o.GetLabels()[protocol.NodeViewLabel] == "true"
		})))
	}
	if r.NodeLeaseNamespace != "" {
		if r.lateNodes, err = r.timeNodeLeases(mgr, b); err != nil {
			return err
		}
	}
	return b.
		Named("consumergroup").
		// A spec change, or routes the route discovery recorded (routesChanged).
		For(&v1alpha1.ConsumerGroup{}, builder.WithPredicates(predicate.Or(predicate.GenerationChangedPredicate{}, routesChanged()))).
		Owns(&corev1.ConfigMap{}).
		// Groups are independent and a pass mostly waits on the API server. The work queue never runs
		// one group twice at once.
		WithOptions(controller.Options{MaxConcurrentReconciles: cmp.Or(r.ConcurrentPasses, DefaultConcurrentPasses)}).
		WatchesRawSource(pods).
		Watches(&coordinationv1.Lease{}, handler.EnqueueRequestsFromMapFunc(groupOfLease),
			builder.WithPredicates(claimChanged())).
		Watches(&coordinationv1.Lease{}, loadChanged()).
		Watches(&coordinationv1.Lease{}, r.renewalSeen()).
		Watches(&corev1.Node{}, handler.EnqueueRequestsFromMapFunc(r.groupsForNode),
			builder.WithPredicates(zoneChanged())).
		Complete(r)
}

// DefaultConcurrentPasses is how many groups' passes run at once by default. A pass mostly waits on
// the API server, and a few workers keep a large group's pass from holding up the others. More do not
// make a recovery faster where the API server is what is slow: in the recovery of a lost node at 1,000
// pods, all 16 workers were waiting on its writes (docs/performance.md), and a 20,000-pod run on two
// cores with 16 never settled, its API server turning members' Lease writes away.
const DefaultConcurrentPasses = 4

// clusterNameServerIndex indexes groups by the ClusterNameServer they read their routes from.
const clusterNameServerIndex = "spec.nameServer.clusterNameServer"

func clusterNameServerOf(o client.Object) []string {
	if ns := o.(*v1alpha1.ConsumerGroup).Spec.NameServer; ns != nil && ns.ClusterNameServer != "" {
		return []string{ns.ClusterNameServer}
	}
	return nil
}

// groupsForClusterNameServer maps a ClusterNameServer to the groups that name it.
func (r *routeDiscovery) groupsForClusterNameServer(ctx context.Context, o client.Object) []reconcile.Request {
	var groups v1alpha1.ConsumerGroupList
	if err := r.List(ctx, &groups, client.MatchingFields{clusterNameServerIndex: o.GetName()}, client.UnsafeDisableDeepCopy); err != nil {
		log.FromContext(ctx).Error(err, "Failed to list groups for a ClusterNameServer", "clusterNameServer", o.GetName())
		return nil
	}
	out := make([]types.NamespacedName, 0, len(groups.Items))
	for _, g := range groups.Items {
		out = append(out, types.NamespacedName{Namespace: g.Namespace, Name: g.Name})
	}
	return requests(out)
}

// groupsForNamespace maps a namespace to its groups that name a ClusterNameServer.
func (r *routeDiscovery) groupsForNamespace(ctx context.Context, o client.Object) []reconcile.Request {
	var groups v1alpha1.ConsumerGroupList
	if err := r.List(ctx, &groups, client.InNamespace(o.GetName()), client.UnsafeDisableDeepCopy); err != nil {
		log.FromContext(ctx).Error(err, "Failed to list groups for a namespace", "namespace", o.GetName())
		return nil
	}
	var out []types.NamespacedName
	for _, g := range groups.Items {
		if len(clusterNameServerOf(&g)) > 0 {
			out = append(out, types.NamespacedName{Namespace: g.Namespace, Name: g.Name})
		}
	}
	return requests(out)
}

// groupsForPod maps a pod to the groups whose selector matches it. On an update controller-runtime calls
// it for the old and the new pod, so a pod whose labels no longer match still reaches its old group.
func (r *ConsumerGroupReconciler) groupsForPod(ctx context.Context, o client.Object) []reconcile.Request {
	groups, err := r.groupsSelecting(ctx, o.GetNamespace(), o.GetLabels())
	if err != nil {
		log.FromContext(ctx).Error(err, "Failed to list groups for a pod", "pod", client.ObjectKeyFromObject(o))
		return nil
	}
	return requests(groups)
}

// groupsSelecting is the groups of namespace whose selector matches podLabels.
func (r *ConsumerGroupReconciler) groupsSelecting(ctx context.Context, namespace string, podLabels map[string]string) ([]types.NamespacedName, error) {
	keys := []string{anyLabels}
	for k, v := range podLabels {
		keys = append(keys, k+"="+v)
	}
	seen := map[types.UID]bool{}
	var candidates []v1alpha1.ConsumerGroup
	for _, key := range keys {
		var groups v1alpha1.ConsumerGroupList
		if err := r.List(ctx, &groups, client.InNamespace(namespace), client.MatchingFields{groupSelectorIndex: key},
			// Read-only use: skip copying each group out of the cache, on every pod event.
			client.UnsafeDisableDeepCopy); err != nil {
			return nil, err
		}
		for _, g := range groups.Items {
			if !seen[g.UID] {
				seen[g.UID] = true
				candidates = append(candidates, g)
			}
		}
	}
	return groupsMatching(candidates, podLabels), nil
}

// groupsForNode maps a node to the groups that have pods on it.
func (r *ConsumerGroupReconciler) groupsForNode(ctx context.Context, o client.Object) []reconcile.Request {
	return r.groupsOnNode(ctx, o.GetName())
}

// groupsOnNode is groupsForNode by the node's name: the groups selecting any of its pods, looked up once
// for each set of labels its pods have (observe.CachedPods.LabelsOnNode).
func (r *ConsumerGroupReconciler) groupsOnNode(ctx context.Context, node string) []reconcile.Request {
	pods, err := r.pods.LabelsOnNode(node)
	if err != nil {
		log.FromContext(ctx).Error(err, "Failed to list pods for a node", "node", node)
		return nil
	}
	seen := map[types.NamespacedName]bool{}
	var out []types.NamespacedName
	for _, pod := range pods {
		groups, err := r.groupsSelecting(ctx, pod.Namespace, pod.Labels)
		if err != nil {
			log.FromContext(ctx).Error(err, "Failed to list groups for a node's pods", "node", node, "namespace", pod.Namespace)
			return nil
		}
		for _, g := range groups {
			if !seen[g] {
				seen[g] = true
				out = append(out, g)
			}
		}
	}
	return requests(out)
}

// loadPassDelay is how long after a member's load report changes its group's pass runs. Reports change
// with renewals, every few seconds per member; the work queue keeps one delayed request per group, so a
// group's loads cost it at most one pass per delay, however many members report.
const loadPassDelay = 5 * time.Second

// loadChanged queues a pass of the group of a Lease whose load report changed, loadPassDelay later.
func loadChanged() handler.TypedEventHandler[client.Object, reconcile.Request] {
	return handler.Funcs{
		UpdateFunc: func(ctx context.Context, e event.UpdateEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			if e.ObjectOld.GetAnnotations()[protocol.LoadAnnotation] == e.ObjectNew.GetAnnotations()[protocol.LoadAnnotation] {
				return
			}
			for _, r := range groupOfLease(ctx, e.ObjectNew) {
				q.AddAfter(r, loadPassDelay)
			}
		},
	}
}

// renewalSeen records, on the operator's clock, each renewal of a member Lease as its event arrives
// (observe.Sightings), without starting a pass: renewals start none, and a pass that reads a renewal only
// when it next runs would count it as made then, long after.
func (r *ConsumerGroupReconciler) renewalSeen() handler.TypedEventHandler[client.Object, reconcile.Request] {
	see := func(o client.Object) {
		lease, ok := o.(*coordinationv1.Lease)
		if !ok {
			return
		}
		for _, req := range groupOfLease(context.Background(), lease) {
			now := r.Clock.Now()
			r.memory.WithSightings(req.NamespacedName, now, func(s *observe.Sightings) { s.Saw(lease, now) })
		}
	}
	return handler.Funcs{
		CreateFunc: func(_ context.Context, e event.CreateEvent, _ workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			see(e.Object)
		},
		UpdateFunc: func(_ context.Context, e event.UpdateEvent, _ workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			see(e.ObjectNew)
		},
	}
}

// groupOfLease maps a member's Lease to its group, named by the Lease's group label.
func groupOfLease(_ context.Context, o client.Object) []reconcile.Request {
	group := o.GetLabels()[protocol.GroupLabel]
	if group == "" {
		return nil
	}
	return []reconcile.Request{{NamespacedName: types.NamespacedName{Namespace: o.GetNamespace(), Name: group}}}
}

func requests(names []types.NamespacedName) []reconcile.Request {
	out := make([]reconcile.Request, len(names))
	for i, n := range names {
		out[i] = reconcile.Request{NamespacedName: n}
	}
	return out
}

// zoneChanged passes node updates that change the zone label, and nothing else: a node's status changes
// every few seconds and none of it matters to an assignment.
func zoneChanged() predicate.Predicate {
	return predicate.Funcs{
		CreateFunc:  func(event.CreateEvent) bool { return false },
		DeleteFunc:  func(event.DeleteEvent) bool { return false },
		GenericFunc: func(event.GenericEvent) bool { return false },
		UpdateFunc: func(e event.UpdateEvent) bool {
			return e.ObjectOld.GetLabels()[plan.ZoneLabel] != e.ObjectNew.GetLabels()[plan.ZoneLabel]
		},
	}
}

// claimChanged passes Lease events that can settle a handoff: a Lease created or deleted, or its
// acknowledged generation, its claim or its holder changed. Renewals, every few seconds per member, are
// not passed; expiry is a deadline the reconciler requeues for.
func claimChanged() predicate.Predicate {
	return predicate.Funcs{
		UpdateFunc: func(e event.UpdateEvent) bool {
			before, after := e.ObjectOld.GetAnnotations(), e.ObjectNew.GetAnnotations()
			return before[protocol.AckedGenerationAnnotation] != after[protocol.AckedGenerationAnnotation] ||
				before[protocol.ClaimAnnotation] != after[protocol.ClaimAnnotation] ||
				!equality.Semantic.DeepEqual(e.ObjectOld.GetOwnerReferences(), e.ObjectNew.GetOwnerReferences())
		},
	}
}

// groupsMatching names those of groups whose selector matches podLabels.
func groupsMatching(groups []v1alpha1.ConsumerGroup, podLabels map[string]string) []types.NamespacedName {
	var out []types.NamespacedName
	for i := range groups {
		selector, err := metav1.LabelSelectorAsSelector(&groups[i].Spec.Selector)
		if err != nil || !selector.Matches(labels.Set(podLabels)) {
			continue
		}
		out = append(out, types.NamespacedName{Namespace: groups[i].Namespace, Name: groups[i].Name})
	}
	return out
}
