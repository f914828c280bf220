// Package controllers holds the operator's two controllers. The ConsumerGroup reconciler publishes who reads
// which queue: a pass reads the world (internal/observe), decides without I/O what to write and what to
// report (internal/plan: plan.Decide, plan.StatusFor), writes the assignment and the Lease clean-up
// (publish.go), the status, its events and its metrics (publish.go, metrics.go); strategy.go keeps each
// group's strategy between passes. The route discovery (route_discovery.go) reads the routes of the groups'
// discovered topics from their name servers (routes*.go, routereads.go, routesources.go) and records them
// in status.routes, which the group's passes plan with. setup.go registers the watches and cache.go says
// what the manager's cache keeps.
package controllers

import (
	"context"
	"fmt"
	"net"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/consumergroup-operator/consumergroup-operator/api/v1alpha1"
	"github.com/consumergroup-operator/consumergroup-operator/internal/observe"
	"github.com/consumergroup-operator/consumergroup-operator/internal/plan"
	"github.com/consumergroup-operator/consumergroup-operator/pkg/protocol"
)

// ConsumerGroupReconciler publishes, for every ConsumerGroup, which member pod reads which queue.
type ConsumerGroupReconciler struct {
	client.Client
	// APIReader reads from the API server, bypassing the cache, when the cache shows the operator's own
	// objects deleted or edited.
	APIReader client.Reader
	Recorder  events.EventRecorder
	Clock     clock.PassiveClock
	// MaxClockSkew is how far the clocks of member pods and of the operator may differ;
	// protocol.DefaultMaxClockSkew when zero.
	MaxClockSkew time.Duration
	// NameServers is what the operator's administrator lets groups read routes from.
	NameServers NameServerPolicy
	// NameServerDial opens connections to name servers in place of a net.Dialer, for tests; only
	// addresses given as IPs are then checked against the allowed destinations.
	NameServerDial func(ctx context.Context, network, addr string) (net.Conn, error)
	// NameServerTimeout bounds each request to a name server; nameserver.DefaultTimeout when zero.
	NameServerTimeout time.Duration
	// NodeLeaseNamespace is where the kubelets renew their nodes' Leases (corev1.NamespaceNodeLease); the
	// operator watches them to find members on lost nodes (nodeleases.go). Empty turns that off.
	NodeLeaseNamespace string
	// NodeViewsNamespace is where the operator keeps the node views that node agents confirm members'
	// views from (nodeviews.go, docs/protocol.md node mode): the operator's own namespace. Empty turns
	// node views off; members then confirm their views themselves.
	NodeViewsNamespace string
	// JoinWindow is how long after a generation the pods that only joined wait, to join together in one
	// rebalance (plan.Env.JoinWindow); 0 publishes each join at once.
	JoinWindow time.Duration
	// AckStatusInterval is the least time between two status writes of a group that change only its
	// members' acknowledged generations (plan.StatusWriteWait); 0 writes each at once.
	AckStatusInterval time.Duration
	// ConcurrentPasses is how many groups' passes run at once (DefaultConcurrentPasses when zero).
	ConcurrentPasses int

	// memory is what the reconciler keeps of each group between passes: its strategy, the sightings of
	// its Leases, the handoffs its metrics time, its quick retries.
	memory memory
	// nodeLeases times the kubelets' node Lease renewals on the operator's clock.
	nodeLeases observe.NodeLeaseSightings
	// lateNodes wakes a node's groups when its kubelet becomes overdue; nil without NodeLeaseNamespace.
	lateNodes *lateNodes
	// agentHeartbeats times the node agents' heartbeats, and lateAgents wakes a node's groups when its
	// agent's is overdue; nil without NodeViewsNamespace.
	agentHeartbeats observe.NodeLeaseSightings
	lateAgents      *lateNodes
	// lateMembers wakes a group when one of its members' own deadlines falls.
	lateMembers *lateMembers
	// nodeViews keeps the node views; nil without NodeViewsNamespace.
	nodeViews *nodeViews
	// pods reads the pods of the manager's cache, kept by podSource.
	pods observe.CachedPods
}

// agents is what the reconciler saw of the node agents' heartbeats; nil when it keeps no node views,
// which no agent confirms against.
func (r *ConsumerGroupReconciler) agents() *observe.NodeLeaseSightings {
	if r.NodeViewsNamespace == "" {
		return nil
	}
	return &r.agentHeartbeats
}

// observer reads a pass's world through the cache, with the operator's sightings of the Leases.
func (r *ConsumerGroupReconciler) observer() observe.Observer {
	return observe.Observer{Cached: r.Client, Live: r.APIReader, Clock: r.Clock, MaxSkew: r.maxClockSkew(), Memory: &r.memory, Nodes: &r.nodeLeases, Agents: r.agents(), Pods: r.pods}
}

// conflictRetry is how soon a pass whose write met a newer object runs again: the cache is a moment
// behind, which is normal, not an error.
const conflictRetry = 20 * time.Millisecond

// +kubebuilder:rbac:groups=messaging.consumergroup.io,resources=consumergroups,verbs=get;list;watch
// +kubebuilder:rbac:groups=messaging.consumergroup.io,resources=consumergroups/status,verbs=update
// +kubebuilder:rbac:groups="",resources=configmaps,verbs=get;list;watch;create;update;delete
// +kubebuilder:rbac:groups="",resources=pods,verbs=get;list;watch
// +kubebuilder:rbac:groups="",resources=nodes,verbs=get;list;watch
// +kubebuilder:rbac:groups=coordination.k8s.io,resources=leases,verbs=get;list;watch;delete
// +kubebuilder:rbac:groups=events.k8s.io,resources=events,verbs=create;patch

// Reconcile recomputes one group's assignment from the world, publishes it when it changed, records it in
// the status, and reports what happened in events.
func (r *ConsumerGroupReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	// The assignment ConfigMaps and the Leases are owned by the group and go with it.
	group, err := liveGroup(ctx, r.Client, req.NamespacedName, r.forget)
	if group == nil || err != nil {
		if err == nil && r.nodeViews != nil {
			// A group that is gone confirms nobody: its lines leave the node views.
			if err := r.nodeViews.removeGroup(ctx, req.NamespacedName); err != nil {
				return r.retry(ctx, req.NamespacedName, "node views", err)
			}
		}
		return ctrl.Result{}, err
	}

	now := r.Clock.Now()
	// What the pass plans with: the spec's topics, the discovered ones with the routes the route discovery
	// recorded in the status (routeDiscovery).
	topo := plan.TopologyOf(group, group.Status.Routes)
	obs, err := r.observer().Observe(ctx, group, topo, now)
	var lines map[string]protocol.NodeViewLine // the group's lines in the node views, by node
	if err == nil && r.nodeViews != nil {
		obs.NodeViews, lines, err = r.nodeViews.seen(ctx, req.NamespacedName, group.UID)
	}
	if err != nil {
		return r.retry(ctx, req.NamespacedName, "observation", err)
	}
	strategy, prob := r.memory.strategyFor(group)
	env := plan.Env{Now: now, MaxSkew: r.maxClockSkew(), Topology: topo, Strategy: strategy, StrategyProblem: prob, JoinWindow: r.JoinWindow}
	d := plan.Decide(group, obs, env)
	r.lateMembers.arm(req.NamespacedName, now, d.MemberDeadline)
	oldStatus := group.Status.DeepCopy()
	// The status is written after the assignment, and reports it. The group's first generation is the
	// exception: until the status holds a generation, nothing would tell a deleted ConfigMap from one never
	// written, so the status records it first.
	if first := group.Status.AssignmentGeneration == 0 && d.Report.Rebalance.Published; first {
		if res, _, err := r.recordStatus(ctx, group, &d.Report, now); err != nil || res.RequeueAfter > 0 {
			return res, err
		}
	}
	if err := r.publish(ctx, group, obs, d.Write); err != nil {
		return r.retry(ctx, req.NamespacedName, "assignment", err)
	}
	if len(d.Write.ConfigMaps) > 0 {
		// Every object of generation d.report.generation is written: members' promises run from now.
		r.memory.WithSightings(req.NamespacedName, now, func(s *observe.Sightings) { s.Wrote(d.Report.Generation, r.Clock.Now()) })
	}
	// The node views' lines are asked for as soon as the generation is published, before the status
	// write: their writes, which a revocation's promise waits on, then go on beside it rather than after
	// it, and a status write that fails does not hold them back.
	linesAsked := r.syncNodeViews(group, obs, lines, d)
	res, statusWait, err := r.recordStatus(ctx, group, &d.Report, now)
	if err != nil || res.RequeueAfter > 0 {
		return res, err
	}
	if d.Report.Rebalance.Published {
		log.FromContext(ctx).Info("Published assignment", "generation", d.Report.Generation,
			"members", len(d.Report.Members), "queues", d.Report.QueueCount, "moved", d.Report.Rebalance.Moved, "objects", len(d.Write.ConfigMaps))
	}
	if len(d.Report.HeldJoins) > 0 {
		log.FromContext(ctx).V(1).Info("Members wait for the join window", "generation", d.Report.Generation, "pods", d.Report.HeldJoins, "for", d.RequeueAfter)
	}
	if h := d.Report.Handoff; h.Withheld > 0 {
		log.FromContext(ctx).V(1).Info("Queues wait for a reader", "generation", d.Report.Generation, "withheld", h.Withheld, "first", h.FirstWithheld)
	}
	r.memory.resetRetries(req.NamespacedName)
	r.emitEvents(group, oldStatus, d)
	recordMetrics(&r.memory, group, topo, oldStatus, &group.Status, obs, d, now)
	// Handoffs wait on acknowledgements, which arrive as Lease events, and on deadlines, which do not.
	// Promises wait on the node views too: the writes the pass asked for wake the group when they
	// return; a node view that cannot be written is tried again, and the pass looks again meanwhile.
	requeue := d.RequeueAfter
	if linesAsked && (requeue <= 0 || requeue > nodeViewPoll) {
		requeue = nodeViewPoll
	}
	if statusWait > 0 && (requeue <= 0 || requeue > statusWait) {
		requeue = statusWait // the acknowledgements the status has yet to show
	}
	return ctrl.Result{RequeueAfter: requeue, Priority: passPriority(&d.Report)}, nil
}

// nodeViewPoll is how soon a pass that asked for node view writes, with a promise waiting on them, runs
// again if no write has woken it.
const nodeViewPoll = 5 * time.Second

// syncNodeViews asks for the group's lines in the node views after its assignment: each node its pods run
// on gets one, raised to the generation in force before the promises the bookkeeping waits on count.
// It reports whether it asked for writes while a promise waits on them.
func (r *ConsumerGroupReconciler) syncNodeViews(group *v1alpha1.ConsumerGroup, obs *plan.Observation, lines map[string]protocol.NodeViewLine, d *plan.Decision) bool {
	if r.nodeViews == nil {
		return false
	}
	var firstWritten int64
	r.memory.WithSightings(client.ObjectKeyFromObject(group), r.Clock.Now(), func(s *observe.Sightings) { firstWritten = s.FirstWrittenGeneration() })
	need := plan.NodeLinesMustSee(d.Report.Assignment.Bookkeeping, firstWritten, obs.NodeOf)
	changed := r.nodeViews.sync(&group.ObjectMeta, obs.Pods, lines, d.Report.Generation, need)
	return changed && (need.Everywhere > 0 || len(need.ByNode) > 0)
}

// liveGroup reads the group key names. When it is gone or being deleted, forget drops what a controller
// keeps of it and the group is nil: there is nothing more to do for it.
func liveGroup(ctx context.Context, c client.Reader, key types.NamespacedName, forget func(types.NamespacedName)) (*v1alpha1.ConsumerGroup, error) {
	var group v1alpha1.ConsumerGroup
	if err := c.Get(ctx, key, &group); err != nil {
		if apierrors.IsNotFound(err) {
			forget(key)
		}
		return nil, client.IgnoreNotFound(err)
	}
	if !group.DeletionTimestamp.IsZero() {
		forget(key)
		return nil, nil
	}
	return &group, nil
}

// recordStatus writes the status that a pass's report rep gives, or says how long a status of
// acknowledgements alone waits (writeStatus). A conflict is most often the cache not yet holding the
// status this operator wrote a moment ago: the status is computed once more from the group as the API
// server has it, rather than waiting for the cache. If the spec changed meanwhile, rep is not its status:
// the next pass decides anew.
func (r *ConsumerGroupReconciler) recordStatus(ctx context.Context, group *v1alpha1.ConsumerGroup, rep *plan.Report, now time.Time) (ctrl.Result, time.Duration, error) {
	decidedFor := group.Generation
	wait, err := r.writeStatus(ctx, group, rep, now)
	if apierrors.IsConflict(err) {
		if err = r.APIReader.Get(ctx, client.ObjectKeyFromObject(group), group); err == nil {
			if group.Generation != decidedFor {
				return ctrl.Result{RequeueAfter: conflictRetry}, 0, nil
			}
			wait, err = r.writeStatus(ctx, group, rep, now)
		}
	}
	if err != nil {
		res, err := r.retry(ctx, client.ObjectKeyFromObject(group), "status", err)
		return res, 0, err
	}
	return ctrl.Result{}, wait, nil
}

// retry turns a write that met a newer object (or found it gone) into a quick, quiet retry, ends quietly
// when the operator is stopping, and returns other errors for the controller to log and retry with
// backoff: an error in the log means something is wrong. A write that meets a newer object again and
// again is not the cache lagging but something in the way (an object someone else holds under the name):
// after maxQuickRetries in a row it too is returned, and retried with the controller's exponential backoff.
func (r *ConsumerGroupReconciler) retry(ctx context.Context, group types.NamespacedName, what string, err error) (ctrl.Result, error) {
	return retryAfter(ctx, r.memory.addRetry, group, what, err)
}

// retryAfter is retry for any controller: addRetry counts the group's quick retries in a row.
func retryAfter(ctx context.Context, addRetry func(types.NamespacedName) int, group types.NamespacedName, what string, err error) (ctrl.Result, error) {
	switch {
	case ctx.Err() != nil:
		return ctrl.Result{}, nil //nolint:nilerr // a pass cut short by the operator stopping is not an error

	case apierrors.IsConflict(err) || apierrors.IsAlreadyExists(err) || apierrors.IsNotFound(err):
		if n := addRetry(group); n > maxQuickRetries {
			return ctrl.Result{}, fmt.Errorf("%s: %d writes in a row met a newer object: %w", what, n, err)
		}
		log.FromContext(ctx).V(1).Info("Write met a newer object; looking again", "object", what, "reason", err.Error())
		return ctrl.Result{RequeueAfter: conflictRetry}, nil

	case apierrors.HasStatusCause(err, corev1.NamespaceTerminatingCause):
		// The namespace is being deleted, and the group with it: nothing is left to publish to. The
		// group's deletion ends its passes.
		log.FromContext(ctx).V(1).Info("The namespace is being deleted; not writing", "object", what)
		return ctrl.Result{}, nil
	}
	return ctrl.Result{}, err
}

// maxQuickRetries is how many passes in a row may end in a quick retry (conflictRetry) before the next
// goes through the controller's exponential backoff.
const maxQuickRetries = 5

// retryCounts counts, per group, the passes in a row that ended in a quick retry.
type retryCounts struct {
	mu sync.Mutex
	n  map[types.NamespacedName]int
}

func (c *retryCounts) add(group types.NamespacedName) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.n == nil {
		c.n = map[types.NamespacedName]int{}
	}
	c.n[group]++
	return c.n[group]
}

func (c *retryCounts) reset(group types.NamespacedName) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.n, group)
}

// forget drops what the reconciler keeps in memory of a group that is gone.
func (r *ConsumerGroupReconciler) forget(group types.NamespacedName) {
	r.memory.forget(group)
	if r.nodeViews != nil {
		r.nodeViews.forget(group)
	}
	forgetMetrics(group)
}

func (r *ConsumerGroupReconciler) maxClockSkew() time.Duration {
	if r.MaxClockSkew > 0 {
		return r.MaxClockSkew
	}
	return protocol.DefaultMaxClockSkew
}
