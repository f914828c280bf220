package controllers

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/consumergroup-operator/consumergroup-operator/api/v1alpha1"
	"github.com/consumergroup-operator/consumergroup-operator/pkg/protocol"
)

// observation is the part of the world one group's assignment depends on: every read of a pass.
type observation struct {
	// pods match the group's selector, in its namespace; podsByName holds them and every other pod the
	// handoff must know about (named by a Lease, an entry or the handoff state), by name.
	pods       []corev1.Pod
	podsByName map[string]*corev1.Pod
	// nodeZones maps the name of each node a member pod runs on to its zone label.
	nodeZones map[string]string
	// nodeLateAt says, for those of the nodes whose Lease the operator has seen, when its kubelet's next
	// renewal is overdue.
	nodeLateAt map[string]time.Time
	// restartedAt says, by pod UID, when the operator first saw the kubelet restart a pod's containers
	// with no renewal of its Lease since (restarts.go).
	restartedAt map[types.UID]time.Time
	// index is the group's assignment ConfigMap, nil when there is none; shards its shard ConfigMaps.
	index  *corev1.ConfigMap
	shards map[string]*corev1.ConfigMap
	// published is what index and shards hold, checked against their digests; bookkeeping the handoff
	// state beside it, decoded once per pass (setPublished), and bookkeepingErr why it cannot be read.
	published      protocol.Published
	bookkeeping    handoffState
	bookkeepingErr error
	// leases are the group's member Leases as the operator counts them (leaseSightings): each renewed at the
	// operator's time of seeing it, and those that vanished while their claims may still stand. vanished
	// holds the UIDs of the latter, backwards names the Leases whose renewTime went backwards, and
	// sightedSince is when this operator first looked at the group.
	leases       []protocol.LeaseState
	vanished     map[types.UID]bool
	backwards    []string
	sightedSince time.Time
	// publications are the generations this operator knows were published, and since when.
	publications publications
	// firstWrittenAt is when this operator's own first write of the assignment returned; zero before.
	firstWrittenAt time.Time
	// leasesAsWritten are the Leases as read, with the renewTimes their writers wrote.
	leasesAsWritten []protocol.LeaseState
	// scope is the spec's queues: what the operator reads of claims, entries and load reports.
	scope *protocol.Scope
	// foreign names the ConfigMaps under the names of the group's assignment that the group does not
	// control: the operator did not create them, and neither reads, writes nor deletes them.
	foreign []string
	// liveRead is set when the published objects and the Leases were read from the API server rather
	// than the cache, because the cache showed them deleted or edited.
	liveRead bool
	// selectorProblem is set when the selector cannot be read.
	selectorProblem *problem
}

// observe reads everything one pass of group needs. It reads through the cache, except that when the
// published objects look deleted or edited there, it reads them again from the API server (the cache may
// lag the operator's own writes) and, if they still do, reads the Leases from there too: a recovery
// rests on the members' claims alone, so they must be the newest.
func (r *ConsumerGroupReconciler) observe(ctx context.Context, group *v1alpha1.ConsumerGroup, topo topology, now time.Time) (*observation, error) {
	obs := &observation{podsByName: map[string]*corev1.Pod{}, scope: topo.scope()}
	if err := r.readPublished(ctx, r.Client, group, obs); err != nil {
		return nil, fmt.Errorf("reading the published assignment: %w", err)
	}
	if len(obs.published.Tampered) > 0 || !obs.published.Exists && group.Status.AssignmentGeneration > 0 {
		obs.liveRead = true
		if err := r.readPublished(ctx, r.APIReader, group, obs); err != nil {
			return nil, fmt.Errorf("reading the published assignment from the API server: %w", err)
		}
	}
	if err := r.observeLeases(ctx, group, obs, now); err != nil {
		return nil, err
	}

	selector, err := metav1.LabelSelectorAsSelector(&group.Spec.Selector)
	if err != nil {
		obs.selectorProblem = &problem{v1alpha1.ReasonInvalidSelector, fmt.Sprintf("spec.selector: %v", err)}
		return obs, nil
	}
	var pods corev1.PodList
	if err := r.List(ctx, &pods, client.InNamespace(group.Namespace), client.MatchingLabelsSelector{Selector: selector}); err != nil {
		return nil, fmt.Errorf("listing the pods spec.selector matches: %w", err)
	}
	obs.pods = pods.Items
	for i := range obs.pods {
		obs.podsByName[obs.pods[i].Name] = &obs.pods[i]
	}
	// Pods that are not selected any more may still read what they were given.
	named := []string{}
	for _, l := range obs.leases {
		named = append(named, l.Pod)
	}
	for pod := range obs.published.Entries {
		named = append(named, pod)
	}
	if obs.bookkeepingErr == nil {
		for _, rv := range append(obs.bookkeeping.Revocations, obs.bookkeeping.Fenced...) {
			named = append(named, rv.Pod)
		}
	}
	for _, name := range named {
		if _, known := obs.podsByName[name]; known || name == "" {
			continue
		}
		var pod corev1.Pod
		switch err := r.Get(ctx, types.NamespacedName{Namespace: group.Namespace, Name: name}, &pod); {
		case err == nil:
			obs.podsByName[name] = &pod
		case !apierrors.IsNotFound(err):
			return nil, fmt.Errorf("reading pod %s, which the published assignment names: %w", name, err)
		}
	}

	if obs.nodeZones, err = r.readNodeZones(ctx, obs.pods); err != nil {
		return nil, err
	}
	obs.nodeLateAt = r.nodeLeases.lateAt(obs.nodeZones, r.maxClockSkew())
	obs.restartedAt = r.sightings.observeRestarts(client.ObjectKeyFromObject(group), obs.pods, renewals(obs.leases), now)
	return obs, nil
}

// renewals is when each pod's Lease was last renewed, on the operator's clock, by pod UID.
func renewals(leases []protocol.LeaseState) map[types.UID]time.Time {
	out := make(map[types.UID]time.Time, len(leases))
	for _, l := range leases {
		if l.RenewTime.After(out[l.PodUID]) {
			out[l.PodUID] = l.RenewTime
		}
	}
	return out
}

// observeLeases reads the group's Leases (from the API server when the published objects were) and
// counts them as the operator's sightings do (leaseSightings), and records the publication read back.
func (r *ConsumerGroupReconciler) observeLeases(ctx context.Context, group *v1alpha1.ConsumerGroup, obs *observation, now time.Time) error {
	var leases coordinationv1.LeaseList
	reader := client.Reader(r.Client)
	if obs.liveRead {
		reader = r.APIReader
	}
	if err := reader.List(ctx, &leases, client.InNamespace(group.Namespace), client.MatchingLabels{protocol.GroupLabel: group.Name}); err != nil {
		return fmt.Errorf("listing the group's Leases: %w", err)
	}
	read := make([]*coordinationv1.Lease, len(leases.Items))
	for i := range leases.Items {
		read[i] = &leases.Items[i]
	}
	key := client.ObjectKeyFromObject(group)
	sighted := r.sightings.observe(key, read, obs.scope, now, r.maxClockSkew())
	obs.leases, obs.vanished, obs.backwards, obs.sightedSince = sighted.leases, sighted.vanished, sighted.backwards, sighted.since
	obs.leasesAsWritten = sighted.asWritten
	if obs.published.Exists && len(obs.published.Tampered) == 0 {
		// Read back as written: the API server held it before this moment.
		r.sightings.sawPublished(key, obs.published.Generation, r.Clock.Now())
	}
	obs.publications = r.sightings.publications(key)
	obs.firstWrittenAt = r.sightings.firstWritten(key)
	return nil
}

// readNodeZones maps each node a Running and Ready pod of pods runs on to its zone label ("" for none, or
// for a node that is gone).
func (r *ConsumerGroupReconciler) readNodeZones(ctx context.Context, pods []corev1.Pod) (map[string]string, error) {
	zones := map[string]string{}
	for i := range pods {
		name := pods[i].Spec.NodeName
		if _, seen := zones[name]; seen || name == "" || !isRunningAndReady(&pods[i]) {
			continue
		}
		var node corev1.Node
		switch err := r.Get(ctx, types.NamespacedName{Name: name}, &node); {
		case err == nil:
			zones[name] = node.Labels[ZoneLabel]
		case apierrors.IsNotFound(err):
			zones[name] = ""
		default:
			return nil, fmt.Errorf("reading node %s for its zone: %w", name, err)
		}
	}
	return zones, nil
}

// setPublished records what the published objects hold, and decodes the handoff bookkeeping beside them,
// once for the whole pass.
func (obs *observation) setPublished(published protocol.Published) {
	obs.published = published
	obs.bookkeeping, obs.bookkeepingErr = decodeHandoff(published.Handoff, obs.scope)
}

// readPublished reads group's assignment ConfigMaps through reader. The cache holds only ConfigMaps with
// the operator's label: an index missing there is looked for on the API server, where someone may have
// taken the label off.
func (r *ConsumerGroupReconciler) readPublished(ctx context.Context, reader client.Reader, group *v1alpha1.ConsumerGroup, obs *observation) error {
	obs.index, obs.shards = nil, map[string]*corev1.ConfigMap{}
	var owned corev1.ConfigMapList
	if err := reader.List(ctx, &owned, client.InNamespace(group.Namespace), client.MatchingLabels{protocol.GroupLabel: group.Name}); err != nil {
		return fmt.Errorf("listing the group's ConfigMaps: %w", err)
	}
	index := assignmentName(group)
	for i := range owned.Items {
		cm := &owned.Items[i]
		switch {
		case cm.Name == index:
			obs.index = cm
		case strings.HasPrefix(cm.Name, index+"-"):
			obs.shards[cm.Name] = cm
		}
	}
	if obs.index == nil {
		var cm corev1.ConfigMap
		switch err := r.APIReader.Get(ctx, types.NamespacedName{Namespace: group.Namespace, Name: index}, &cm); {
		case err == nil:
			obs.index = &cm
		case !apierrors.IsNotFound(err):
			return fmt.Errorf("reading ConfigMap %s: %w", index, err)
		}
	}
	// A shard the index names but the cache lacks may have lost its labels: it is looked for by name, so
	// that a pass does not try, again and again, to create what exists.
	if obs.index != nil {
		n, _ := strconv.Atoi(obs.index.Annotations[protocol.ShardsAnnotation])
		for k := range min(n, protocol.MaxShards) {
			name := protocol.ShardName(group.Name, k)
			if obs.shards[name] != nil {
				continue
			}
			var cm corev1.ConfigMap
			switch err := r.APIReader.Get(ctx, types.NamespacedName{Namespace: group.Namespace, Name: name}, &cm); {
			case err == nil:
				obs.shards[name] = &cm
			case !apierrors.IsNotFound(err):
				return fmt.Errorf("reading ConfigMap %s: %w", name, err)
			}
		}
	}
	obs.foreign = nil
	if obs.index != nil && !controlledBy(obs.index, group) {
		obs.foreign = append(obs.foreign, obs.index.Name)
		obs.index = nil
	}
	for _, name := range slices.Sorted(maps.Keys(obs.shards)) {
		if !controlledBy(obs.shards[name], group) {
			obs.foreign = append(obs.foreign, name)
			delete(obs.shards, name)
		}
	}
	budget := 0
	if group.Spec.MessageModel != v1alpha1.Broadcasting {
		budget = obs.scope.Len()
	}
	obs.setPublished(protocol.ReadPublishedIn(group.Name, obs.index, obs.shards, obs.scope, budget))
	return nil
}

// controlledBy reports whether group is cm's controller: the operator created it for this group.
func controlledBy(cm *corev1.ConfigMap, group *v1alpha1.ConsumerGroup) bool {
	owner := metav1.GetControllerOf(cm)
	return owner != nil && owner.UID == group.UID && owner.Kind == protocol.GroupKind && owner.APIVersion == protocol.GroupAPIVersion
}

// assignmentName is the name of group's assignment ConfigMap.
func assignmentName(group *v1alpha1.ConsumerGroup) string { return protocol.AssignmentName(group.Name) }
