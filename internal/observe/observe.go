package observe

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
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/consumergroup-operator/consumergroup-operator/api/v1alpha1"
	"github.com/consumergroup-operator/consumergroup-operator/internal/plan"
	"github.com/consumergroup-operator/consumergroup-operator/pkg/protocol"
)

// Observer reads what one pass of a group decides from. The operator's passes read through the cache and
// remember, between passes, when they saw the Leases renewed; a command line tool reads the API server and
// remembers nothing.
type Observer struct {
	// Cached is where a pass reads first (the manager's cache); Live is the API server, read when the cache
	// shows the operator's own objects deleted or edited.
	Cached, Live client.Reader
	// Clock dates what is read back of the operator's own writes; MaxSkew is how far the members' clocks may
	// differ from it.
	Clock   clock.PassiveClock
	MaxSkew time.Duration
	// Memory keeps what the operator saw of each group's Leases on earlier passes (Sightings); Nodes what
	// it saw of the nodes' Leases, and Agents of the node agents' heartbeats (nil without node views).
	Memory Memory
	Nodes  *NodeLeaseSightings
	Agents *NodeLeaseSightings
	// Pods reads the pods; nil reads them through Cached.
	Pods PodReader
}

// pods is where o reads pods.
func (o Observer) pods() PodReader {
	if o.Pods != nil {
		return o.Pods
	}
	return ReaderPods{Reader: o.Cached}
}

// Observe reads everything one pass of group needs. It reads through the cache, except that when the
// published objects look deleted or edited there, it reads them again from the API server (the cache may
// lag the operator's own writes) and, if they still do, reads the Leases from there too: a recovery
// rests on the members' claims alone, so they must be the newest.
func (o Observer) Observe(ctx context.Context, group *v1alpha1.ConsumerGroup, topo plan.Topology, now time.Time) (*plan.Observation, error) {
	obs := &plan.Observation{PodsByName: map[string]*corev1.Pod{}, Scope: topo.Scope()}
	if err := o.readPublished(ctx, o.Cached, group, obs); err != nil {
		return nil, fmt.Errorf("reading the published assignment: %w", err)
	}
	if len(obs.Published.Tampered) > 0 || !obs.Published.Exists && group.Status.AssignmentGeneration > 0 {
		obs.LiveRead = true
		if err := o.readPublished(ctx, o.Live, group, obs); err != nil {
			return nil, fmt.Errorf("reading the published assignment from the API server: %w", err)
		}
	}
	if err := o.observeLeases(ctx, group, obs, now); err != nil {
		return nil, err
	}

	selector, err := metav1.LabelSelectorAsSelector(&group.Spec.Selector)
	if err != nil {
		obs.SelectorProblem = &plan.Problem{Reason: v1alpha1.ReasonInvalidSelector, Message: fmt.Sprintf("spec.selector: %v", err)}
		return obs, nil
	}
	if obs.Pods, err = o.pods().ListPods(ctx, group.Namespace, selector); err != nil {
		return nil, fmt.Errorf("listing the pods spec.selector matches: %w", err)
	}
	for i := range obs.Pods {
		obs.PodsByName[obs.Pods[i].Name] = &obs.Pods[i]
	}
	// Pods that are not selected any more may still read what they were given.
	named := []string{}
	for _, l := range obs.Leases {
		named = append(named, l.Pod)
	}
	for pod := range obs.Published.Entries {
		named = append(named, pod)
	}
	if obs.BookkeepingErr == nil {
		for _, rv := range append(obs.Bookkeeping.Revocations, obs.Bookkeeping.Fenced...) {
			named = append(named, rv.Pod)
		}
	}
	for _, name := range named {
		if _, known := obs.PodsByName[name]; known || name == "" {
			continue
		}
		switch pod, err := o.pods().GetPod(ctx, types.NamespacedName{Namespace: group.Namespace, Name: name}); {
		case err == nil:
			obs.PodsByName[name] = pod
		case !apierrors.IsNotFound(err):
			return nil, fmt.Errorf("reading pod %s, which the published assignment names: %w", name, err)
		}
	}

	if obs.NodeZones, err = o.readNodeZones(ctx, obs.Pods); err != nil {
		return nil, err
	}
	obs.NodeLateAt = o.Nodes.lateAt(obs.NodeZones, now, o.MaxSkew)
	if o.Agents != nil {
		obs.AgentHeartbeats = o.Agents.heartbeats(obs.NodeZones, now, o.MaxSkew)
	}
	o.Memory.WithSightings(client.ObjectKeyFromObject(group), now, func(s *Sightings) {
		obs.RestartedAt = s.observeRestarts(obs.Pods, renewals(obs.Leases), now)
	})
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
// counts them as the operator's sightings do (Sightings), and records the publication read back.
func (o Observer) observeLeases(ctx context.Context, group *v1alpha1.ConsumerGroup, obs *plan.Observation, now time.Time) error {
	var leases coordinationv1.LeaseList
	reader := o.Cached
	if obs.LiveRead {
		reader = o.Live
	}
	// The Leases are only read, here and by the sightings, which keep each until the next pass: a copy
	// of each for every pass, kept that long, doubled what the cache's Leases cost. A reader that is not
	// a cache ignores the option.
	if err := reader.List(ctx, &leases, client.InNamespace(group.Namespace), client.MatchingLabels{protocol.GroupLabel: group.Name},
		client.UnsafeDisableDeepCopy); err != nil {
		return fmt.Errorf("listing the group's Leases: %w", err)
	}
	read := make([]*coordinationv1.Lease, len(leases.Items))
	for i := range leases.Items {
		read[i] = &leases.Items[i]
	}
	key := client.ObjectKeyFromObject(group)
	o.Memory.WithSightings(key, now, func(s *Sightings) {
		sighted := s.observe(read, obs.Scope, now, o.MaxSkew)
		obs.Leases, obs.Vanished, obs.Backwards, obs.SightedSince = sighted.leases, sighted.vanished, sighted.backwards, sighted.since
		obs.LeasesAsWritten = sighted.asWritten
		if obs.Published.Exists && len(obs.Published.Tampered) == 0 {
			// Read back as written: the API server held it before this moment.
			s.sawPublished(obs.Published.Generation, o.Clock.Now())
		}
		obs.Publications = slices.Clone(s.published)
		obs.FirstWrittenAt, obs.FirstWrittenGeneration = s.firstWritten, s.firstWrittenGeneration
	})
	return nil
}

// readNodeZones maps each node a Running and Ready pod of pods runs on to its zone label ("" for none, or
// for a node that is gone).
func (o Observer) readNodeZones(ctx context.Context, pods []corev1.Pod) (map[string]string, error) {
	zones := map[string]string{}
	for i := range pods {
		name := pods[i].Spec.NodeName
		if _, seen := zones[name]; seen || name == "" || !plan.IsRunningAndReady(&pods[i]) {
			continue
		}
		var node corev1.Node
		// Read only, for its zone label: a copy of each node for every pass was most of what the passes
		// allocated at 20,000 pods, and so of their collector's work.
		switch err := o.Cached.Get(ctx, types.NamespacedName{Name: name}, &node, client.UnsafeDisableDeepCopy); {
		case err == nil:
			zones[name] = node.Labels[plan.ZoneLabel]
		case apierrors.IsNotFound(err):
			zones[name] = ""
		default:
			return nil, fmt.Errorf("reading node %s for its zone: %w", name, err)
		}
	}
	return zones, nil
}

// readPublished reads group's assignment ConfigMaps through reader. The cache holds only ConfigMaps with
// the operator's label: an index missing there is looked for on the API server, where someone may have
// taken the label off.
func (o Observer) readPublished(ctx context.Context, reader client.Reader, group *v1alpha1.ConsumerGroup, obs *plan.Observation) error {
	obs.Index, obs.Shards = nil, map[string]*corev1.ConfigMap{}
	var owned corev1.ConfigMapList
	if err := reader.List(ctx, &owned, client.InNamespace(group.Namespace), client.MatchingLabels{protocol.GroupLabel: group.Name}); err != nil {
		return fmt.Errorf("listing the group's ConfigMaps: %w", err)
	}
	index := protocol.AssignmentName(group.Name)
	for i := range owned.Items {
		cm := &owned.Items[i]
		switch {
		case cm.Name == index:
			obs.Index = cm
		case strings.HasPrefix(cm.Name, index+"-"):
			obs.Shards[cm.Name] = cm
		}
	}
	if obs.Index == nil {
		var cm corev1.ConfigMap
		switch err := o.Live.Get(ctx, types.NamespacedName{Namespace: group.Namespace, Name: index}, &cm); {
		case err == nil:
			obs.Index = &cm
		case !apierrors.IsNotFound(err):
			return fmt.Errorf("reading ConfigMap %s: %w", index, err)
		}
	}
	// A shard the index names but the cache lacks may have lost its labels: it is looked for by name, so
	// that a pass does not try, again and again, to create what exists.
	if obs.Index != nil {
		n, _ := strconv.Atoi(obs.Index.Annotations[protocol.ShardsAnnotation])
		for k := range min(n, protocol.MaxShards) {
			name := protocol.ShardName(group.Name, k)
			if obs.Shards[name] != nil {
				continue
			}
			var cm corev1.ConfigMap
			switch err := o.Live.Get(ctx, types.NamespacedName{Namespace: group.Namespace, Name: name}, &cm); {
			case err == nil:
				obs.Shards[name] = &cm
			case !apierrors.IsNotFound(err):
				return fmt.Errorf("reading ConfigMap %s: %w", name, err)
			}
		}
	}
	obs.Foreign = nil
	if obs.Index != nil && !ControlledBy(obs.Index, group) {
		obs.Foreign = append(obs.Foreign, obs.Index.Name)
		obs.Index = nil
	}
	for _, name := range slices.Sorted(maps.Keys(obs.Shards)) {
		if !ControlledBy(obs.Shards[name], group) {
			obs.Foreign = append(obs.Foreign, name)
			delete(obs.Shards, name)
		}
	}
	budget := 0
	if group.Spec.MessageModel != v1alpha1.Broadcasting {
		budget = obs.Scope.Len()
	}
	obs.SetPublished(protocol.ReadPublishedIn(group.Name, obs.Index, obs.Shards, obs.Scope, budget))
	return nil
}

// controlledBy reports whether group is cm's controller: the operator created it for this group.
func ControlledBy(cm *corev1.ConfigMap, group *v1alpha1.ConsumerGroup) bool {
	owner := metav1.GetControllerOf(cm)
	return owner != nil && owner.UID == group.UID && owner.Kind == protocol.GroupKind && owner.APIVersion == protocol.GroupAPIVersion
}
