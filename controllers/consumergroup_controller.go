// Package controllers holds the ConsumerGroup reconciler.
package controllers

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	corev1ac "k8s.io/client-go/applyconfigurations/core/v1"
	"k8s.io/client-go/tools/events"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/consumergroup-operator/consumergroup-operator/api/v1alpha1"
	"github.com/consumergroup-operator/consumergroup-operator/pkg/allocate"
	podmember "github.com/consumergroup-operator/consumergroup-operator/pkg/member"
)

// Event reasons.
const (
	EventRebalanced   = "Rebalanced"
	EventMemberFenced = "MemberFenced"
)

// ConsumerGroupReconciler publishes, for every ConsumerGroup, which member pod reads which queue.
type ConsumerGroupReconciler struct {
	client.Client
	Recorder events.EventRecorder
	Clock    clock.PassiveClock

	// strategies keeps each group's strategy between passes so that it can reuse work.
	strategies strategyCache
}

// +kubebuilder:rbac:groups=messaging.consumergroup.io,resources=consumergroups,verbs=get;list;watch
// +kubebuilder:rbac:groups=messaging.consumergroup.io,resources=consumergroups/status,verbs=update
// +kubebuilder:rbac:groups="",resources=configmaps,verbs=get;list;watch;create;patch;delete
// +kubebuilder:rbac:groups="",resources=pods,verbs=get;list;watch
// +kubebuilder:rbac:groups="",resources=nodes,verbs=get;list;watch
// +kubebuilder:rbac:groups=coordination.k8s.io,resources=leases,verbs=get;list;watch
// +kubebuilder:rbac:groups=events.k8s.io,resources=events,verbs=create;patch

// Reconcile recomputes one group's assignment from the world and publishes it when it changed.
func (r *ConsumerGroupReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	var group v1alpha1.ConsumerGroup
	if err := r.Get(ctx, req.NamespacedName, &group); err != nil {
		if apierrors.IsNotFound(err) {
			r.strategies.forget(req.NamespacedName)
		}
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if !group.DeletionTimestamp.IsZero() {
		// The assignment ConfigMap is owned by the group and goes with it.
		r.strategies.forget(req.NamespacedName)
		return ctrl.Result{}, nil
	}

	obs, err := r.observe(ctx, &group)
	if err != nil {
		return ctrl.Result{}, err
	}
	obs.strategies = &r.strategies
	now := metav1.NewTime(r.Clock.Now())
	d := decide(&group, obs, now)
	if len(d.writes) > 0 || len(d.deletes) > 0 {
		if err := r.publish(ctx, obs, d); err != nil {
			return ctrl.Result{}, fmt.Errorf("publishing assignment: %w", err)
		}
		if d.rebalanced {
			log.FromContext(ctx).Info("Published assignment", "generation", d.current.generation,
				"members", len(d.members), "queues", d.queueCount, "moved", d.moved, "objects", len(d.writes))
		}
	}

	status := statusFor(&group, d.current, len(d.members), d.queueCount, d.problem, now)
	withHandoff(&group, &status, d.current, d.withheld, obs.leases, now)
	oldDegraded := meta.FindStatusCondition(group.Status.Conditions, ConditionDegraded)
	if !equality.Semantic.DeepEqual(group.Status, status) {
		updated := group.DeepCopy()
		updated.Status = status
		if err := r.Status().Update(ctx, updated); err != nil {
			return ctrl.Result{}, fmt.Errorf("updating status: %w", err)
		}
	}

	if d.rebalanced {
		r.Recorder.Eventf(&group, nil, corev1.EventTypeNormal, EventRebalanced, "Publish",
			"Published assignment generation %d: %s over %s, %s moved",
			d.current.generation, count(d.queueCount, "queue"), count(len(d.members), "member"), count(d.moved, "queue"))
	}
	// One warning per distinct problem, not one per pass.
	if d.problem != nil && (oldDegraded == nil || oldDegraded.Status != metav1.ConditionTrue ||
		oldDegraded.Reason != d.problem.Reason || oldDegraded.Message != meta.FindStatusCondition(status.Conditions, ConditionDegraded).Message) {
		r.Recorder.Eventf(&group, nil, corev1.EventTypeWarning, d.problem.Reason, "Plan", "%s", d.problem.Message)
	}
	for _, f := range d.fenced {
		r.Recorder.Eventf(&group, nil, corev1.EventTypeWarning, EventMemberFenced, "Handoff",
			"Pod %s did not acknowledge generation %d within %ds; its revoked queues were handed on",
			f.Pod, f.Generation, durationOr(group.Spec.Handoff.RevokeTimeoutSeconds, defaultRevokeTimeout)/time.Second)
	}
	// Handoffs wait on acknowledgements, which arrive as Lease events, and on deadlines, which do not.
	return ctrl.Result{RequeueAfter: d.requeueAfter}, nil
}

// count writes n and noun, plural unless n is 1: "1 queue", "3 queues".
func count(n int, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	return strconv.Itoa(n) + " " + noun + "s"
}

// observation is the part of the world one group's assignment depends on.
type observation struct {
	// pods match the group's selector, in its namespace.
	pods []corev1.Pod
	// nodeZones maps the name of each node the pods run on to its zone label.
	nodeZones map[string]string
	// configMap is the group's assignment ConfigMap, nil when there is none.
	configMap *corev1.ConfigMap
	// shards are the group's other ConfigMaps (shards of a large assignment), by name.
	shards map[string]*corev1.ConfigMap
	// podUIDs maps the name of every pod the handoff must know about (members, pods in the published plan
	// or in a pending revocation) that still exists to its UID.
	podUIDs map[string]types.UID
	// leases are the members' Leases, by pod name.
	leases map[string]podmember.LeaseState
	// selectorProblem is set when the selector cannot be read.
	selectorProblem *problem
	// strategies are the strategies the reconciler keeps between passes; nil builds one for the pass.
	strategies *strategyCache
}

func (r *ConsumerGroupReconciler) observe(ctx context.Context, group *v1alpha1.ConsumerGroup) (observation, error) {
	obs := observation{shards: map[string]*corev1.ConfigMap{}}
	var owned corev1.ConfigMapList
	if err := r.List(ctx, &owned, client.InNamespace(group.Namespace), client.MatchingLabels{v1alpha1.GroupLabel: group.Name}); err != nil {
		return obs, err
	}
	for i := range owned.Items {
		cm := &owned.Items[i]
		if owner := metav1.GetControllerOf(cm); owner == nil || owner.UID != group.UID {
			continue
		}
		if cm.Name == AssignmentName(group.Name) {
			obs.configMap = cm
		} else {
			obs.shards[cm.Name] = cm
		}
	}
	// A ConfigMap whose labels someone edited away drops out of the cache and reads as missing: the next
	// apply, under the same name, restores its labels and content at a higher generation.

	selector, err := metav1.LabelSelectorAsSelector(&group.Spec.Selector)
	if err != nil {
		obs.selectorProblem = &problem{ReasonInvalidSelector, fmt.Sprintf("spec.selector: %v", err)}
		return obs, nil
	}
	var pods corev1.PodList
	if err := r.List(ctx, &pods, client.InNamespace(group.Namespace), client.MatchingLabelsSelector{Selector: selector}); err != nil {
		return obs, err
	}
	obs.pods = pods.Items
	if err := r.observeHandoff(ctx, group, &obs); err != nil {
		return obs, err
	}
	obs.nodeZones = map[string]string{}
	for i := range pods.Items {
		name := pods.Items[i].Spec.NodeName
		if _, seen := obs.nodeZones[name]; seen || name == "" || !isMember(&pods.Items[i]) {
			continue
		}
		var node corev1.Node
		switch err := r.Get(ctx, types.NamespacedName{Name: name}, &node); {
		case err == nil:
			obs.nodeZones[name] = node.Labels[ZoneLabel]
		case apierrors.IsNotFound(err):
			obs.nodeZones[name] = ""
		default:
			return obs, err
		}
	}
	return obs, nil
}

// observeHandoff reads the Leases of the group's members and which of the pods the published plan and its
// pending revocations name still exist.
func (r *ConsumerGroupReconciler) observeHandoff(ctx context.Context, group *v1alpha1.ConsumerGroup, obs *observation) error {
	obs.podUIDs = map[string]types.UID{}
	for i := range obs.pods {
		obs.podUIDs[obs.pods[i].Name] = obs.pods[i].UID
	}
	// The pods the published objects name are their data keys; decide decodes the entries themselves,
	// which this needs no more than the keys of.
	var named []string
	if obs.configMap != nil {
		for _, cm := range append([]*corev1.ConfigMap{obs.configMap}, slices.Collect(maps.Values(obs.shards))...) {
			for pod := range cm.Data {
				named = append(named, pod)
			}
		}
		state := decodeHandoff(obs.configMap.Annotations[HandoffAnnotation])
		for _, rv := range state.Revocations {
			named = append(named, rv.Pod)
		}
		for _, f := range state.Fenced {
			named = append(named, f.Pod)
		}
	}
	for _, name := range named {
		if _, known := obs.podUIDs[name]; known {
			continue
		}
		var pod corev1.Pod
		switch err := r.Get(ctx, types.NamespacedName{Namespace: group.Namespace, Name: name}, &pod); {
		case err == nil:
			obs.podUIDs[name] = pod.UID
		case !apierrors.IsNotFound(err):
			return err
		}
	}
	var leases coordinationv1.LeaseList
	if err := r.List(ctx, &leases, client.InNamespace(group.Namespace), client.MatchingLabels{v1alpha1.GroupLabel: group.Name}); err != nil {
		return err
	}
	obs.leases = map[string]podmember.LeaseState{}
	for i := range leases.Items {
		for _, ref := range leases.Items[i].OwnerReferences {
			if ref.Kind == "Pod" && obs.podUIDs[ref.Name] == ref.UID {
				obs.leases[ref.Name] = podmember.ReadLease(&leases.Items[i])
			}
		}
	}
	return nil
}

// decision is what one pass does: what to publish, if anything, and what is in force afterwards.
type decision struct {
	members []member
	// writes are the ConfigMaps to apply, in order; empty when what is published is already right.
	writes []*corev1ac.ConfigMapApplyConfiguration
	// deletes are shard ConfigMaps the new assignment no longer uses, deleted after the writes.
	deletes []string
	// current is what is published once this pass is done.
	current    publishedAssignment
	queueCount int
	moved      int
	rebalanced bool
	problem    *problem
	// fenced are revocations that timed out in this pass; withheld counts queues waiting for a handoff.
	fenced       []revocation
	withheld     int
	requeueAfter time.Duration
}

// decide is the reconciler's whole judgement, free of I/O: from the group and what was observed, the
// assignment to publish. Any problem keeps the published assignment in place.
func decide(group *v1alpha1.ConsumerGroup, obs observation, now metav1.Time) decision {
	old := readAssignment(obs.configMap, obs.shards)
	d := decision{current: old}
	if obs.selectorProblem != nil {
		d.problem = obs.selectorProblem
		return d
	}
	members, prob := membersFor(group, obs.pods, obs.nodeZones)
	if prob != nil {
		d.problem = prob
		return d
	}
	members, nextExpiry := liveMembers(members, obs.leases, now.Time)
	target, queueCount, prob := planFor(group, members, old.previousPlan(), obs.strategies)
	if prob != nil {
		d.problem = prob
		return d
	}
	// The status keeps the generation when someone deleted the ConfigMap, so pods never see it go back.
	generation := max(old.generation, group.Status.AssignmentGeneration)
	handoffSpec := group.Spec.Handoff
	if group.Spec.MessageModel == v1alpha1.Broadcasting {
		// Every member reads every queue: there is no single owner to hand a queue over from.
		handoffSpec.Mode = v1alpha1.Immediate
	}
	h := handoff(handoffInput{
		spec:           handoffSpec,
		now:            now.Time,
		nextGeneration: generation + 1,
		published:      old.pods,
		target:         target,
		members:        members,
		state:          old.handoff,
		pods:           obs.podUIDs,
		leases:         obs.leases,
	})
	plan := make(allocate.Plan, len(members))
	for _, m := range members {
		plan[m.ID] = h.plan[m.Pod]
	}
	data, prob := assignmentData(members, plan, generation)
	if prob != nil {
		d.problem = prob
		return d
	}
	d.members, d.queueCount = members, queueCount
	d.fenced, d.withheld, d.requeueAfter = h.fenced, h.withheld, h.requeueAfter
	if !nextExpiry.IsZero() {
		untilExpiry := max(nextExpiry.Sub(now.Time), 100*time.Millisecond)
		if d.requeueAfter == 0 || untilExpiry < d.requeueAfter {
			d.requeueAfter = untilExpiry
		}
	}
	handoffRaw := h.state.encode()
	shards, prob := shardCount(data)
	if prob != nil {
		d.problem = prob
		return d
	}
	if obs.configMap != nil && maps.Equal(data, old.data) && old.generation == generation {
		// The plan is as published; only the handoff state may have moved on (an acknowledgement, a
		// timeout), or someone edited an object's metadata: no member's queues change, so no new generation.
		d.plan(group, obs, assignmentObjects(group, data, shards, old.generation, old.rebalancedAt, handoffRaw))
		if len(d.writes) > 0 {
			d.current.handoff, d.current.handoffRaw = h.state, handoffRaw
		}
		return d
	}

	generation++
	data, _ = assignmentData(members, plan, generation)
	objects := assignmentObjects(group, data, shards, generation, now.Time, handoffRaw)
	d.plan(group, obs, objects)
	// In Cooperative mode a move spans two generations: it is counted when the queue is revoked from its
	// owner, since the grant that follows gives it to a member that had none of it.
	d.moved = movedQueues(old.plan(), plan) + h.revokedFromMembers
	d.rebalanced = true
	d.current = readAssignment(&corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Annotations: objects[len(objects)-1].Annotations},
		Data:       data,
	}, nil)
	d.current.shards = shards
	return d
}

// plan sets the writes that bring the published objects to objects, and the shards to delete.
func (d *decision) plan(group *v1alpha1.ConsumerGroup, obs observation, objects []*corev1ac.ConfigMapApplyConfiguration) {
	wanted := map[string]bool{}
	for _, o := range objects {
		wanted[*o.Name] = true
		observed := obs.shards[*o.Name]
		if *o.Name == AssignmentName(group.Name) {
			observed = obs.configMap
		}
		if !upToDate(group, observed, o) {
			d.writes = append(d.writes, o)
		}
	}
	for _, name := range slices.Sorted(mapKeys(obs.shards)) {
		if !wanted[name] {
			d.deletes = append(d.deletes, name)
		}
	}
}

// publish applies the decided ConfigMaps, each in one write, then deletes unused shards. Keys that another
// field manager added stay after an apply; they are removed with a second patch so that each ConfigMap
// holds exactly what the operator published.
func (r *ConsumerGroupReconciler) publish(ctx context.Context, obs observation, d decision) error {
	for _, cm := range d.writes {
		// Apply decodes the server's answer into cm: remember what was meant first.
		wanted := maps.Clone(cm.Data)
		if err := r.Apply(ctx, cm, client.FieldOwner(FieldOwner), client.ForceOwnership); err != nil {
			return err
		}
		remove := map[string]any{}
		for key := range cm.Data {
			if _, ok := wanted[key]; !ok {
				remove[key] = nil
			}
		}
		if len(remove) == 0 {
			continue
		}
		patch, err := json.Marshal(map[string]any{"data": remove})
		if err != nil {
			return err
		}
		obj := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: *cm.Namespace, Name: *cm.Name}}
		if err := r.Patch(ctx, obj, client.RawPatch(types.MergePatchType, patch), client.FieldOwner(FieldOwner)); err != nil {
			return err
		}
	}
	for _, name := range d.deletes {
		if err := client.IgnoreNotFound(r.Delete(ctx, obs.shards[name], client.Preconditions{UID: &obs.shards[name].UID})); err != nil {
			return err
		}
	}
	return nil
}

// groupsSelecting lists the groups in pod's namespace whose selector matches pod's labels.
func groupsSelecting(groups []v1alpha1.ConsumerGroup, podLabels map[string]string) []types.NamespacedName {
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
