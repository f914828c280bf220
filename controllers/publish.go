package controllers

import (
	"fmt"
	"maps"
	"strconv"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	corev1ac "k8s.io/client-go/applyconfigurations/core/v1"
	metav1ac "k8s.io/client-go/applyconfigurations/meta/v1"

	"github.com/consumergroup-operator/consumergroup-operator/api/v1alpha1"
	"github.com/consumergroup-operator/consumergroup-operator/pkg/allocate"
	"github.com/consumergroup-operator/consumergroup-operator/pkg/assignment"
)

const (
	// FieldOwner is the field manager of everything the operator applies.
	FieldOwner = "consumergroup-operator"
	// ManagedByLabel marks the objects the operator owns; its cache holds only ConfigMaps with it.
	ManagedByLabel = "app.kubernetes.io/managed-by"
	// ManagedByValue is ManagedByLabel's value.
	ManagedByValue = "consumergroup-operator"
	// RebalancedAtAnnotation on the assignment ConfigMap holds when its plan last changed (RFC 3339).
	RebalancedAtAnnotation = "messaging.consumergroup.io/rebalanced-at"

	// maxAssignmentBytes keeps a ConfigMap's data under the API server's 1 MiB limit, with room for
	// metadata; larger assignments are spread over shard ConfigMaps.
	maxAssignmentBytes = 900 * 1024
	// maxShards bounds the shard ConfigMaps of one group (about 56 MiB of entries). A larger assignment is
	// refused with a condition, never truncated.
	maxShards = 64
)

// AssignmentName is the name of the ConfigMap that publishes group's assignment.
func AssignmentName(groupName string) string { return groupName + "-assignment" }

// publishedAssignment is what an assignment ConfigMap holds, decoded.
type publishedAssignment struct {
	generation   int64
	rebalancedAt time.Time
	// entries maps a pod name (the ConfigMap key) to its entry, and pods to its member and queues, decoded
	// once per pass.
	entries map[string]assignment.Entry
	pods    map[string]podPlan
	// data is the ConfigMap's data as read, to compare with what the operator would write.
	data map[string]string
	// handoff is the state of queues in flight, and handoffRaw its annotation as read.
	handoff    handoffState
	handoffRaw string
	// shards is how many shard ConfigMaps hold the entries; 1 when the assignment ConfigMap holds them.
	shards int
}

// readAssignment decodes a published assignment: the group's assignment ConfigMap (nil when nothing is
// published yet) and, when it says the entries are sharded, the shard ConfigMaps (by name). Entries that
// cannot be decoded are left out: the published objects no longer match what the operator would write,
// so the next pass rewrites them.
func readAssignment(cm *corev1.ConfigMap, shards map[string]*corev1.ConfigMap) publishedAssignment {
	p := publishedAssignment{entries: map[string]assignment.Entry{}, pods: map[string]podPlan{}, data: map[string]string{}, shards: 1}
	if cm == nil {
		return p
	}
	p.generation, _ = strconv.ParseInt(cm.Annotations[v1alpha1.GenerationAnnotation], 10, 64)
	p.rebalancedAt, _ = time.Parse(time.RFC3339, cm.Annotations[RebalancedAtAnnotation])
	p.handoffRaw = cm.Annotations[HandoffAnnotation]
	p.handoff = decodeHandoff(p.handoffRaw)
	if n, err := strconv.Atoi(cm.Annotations[assignment.ShardsAnnotation]); err == nil && n > 1 {
		p.shards = n
	}
	sources := []*corev1.ConfigMap{cm}
	if p.shards > 1 {
		sources = sources[:0]
		for k := range p.shards {
			if shard := shards[assignment.ShardName(cm.Labels[v1alpha1.GroupLabel], k)]; shard != nil {
				sources = append(sources, shard)
			}
		}
	}
	for _, src := range sources {
		for key, value := range src.Data {
			p.data[key] = value
			if e, queues, err := assignment.Decode([]byte(value)); err == nil {
				p.entries[key] = e
				p.pods[key] = podPlan{member: e.Member, queues: queues}
			}
		}
	}
	return p
}

// plan is the published plan by member id, as strategies that keep queues in place read it.
func (p publishedAssignment) plan() allocate.Plan {
	plan := make(allocate.Plan, len(p.pods))
	for _, pp := range p.pods {
		plan[pp.member] = pp.queues
	}
	return plan
}

// previousPlan is what strategies that keep queues in place start from: the published plan, plus the
// queues reserved for departed members, so that a member returning within its grace gets them back.
func (p publishedAssignment) previousPlan() allocate.Plan {
	plan := p.plan()
	for _, r := range p.handoff.Reserved {
		if _, ok := plan[r.Member]; ok {
			continue
		}
		if queues, err := assignment.ExpandAll(r.Queues); err == nil {
			plan[r.Member] = queues
		}
	}
	return plan
}

// assignmentData renders the entries of plan at generation: one key per member pod.
func assignmentData(members []member, plan allocate.Plan, generation int64) (map[string]string, *problem) {
	data := make(map[string]string, len(members))
	for _, m := range members {
		value, err := assignment.Encode(m.ID, generation, plan[m.ID])
		if err != nil {
			return nil, &problem{ReasonAllocationFailed, fmt.Sprintf("encoding the assignment of %s: %v", m.ID, err)}
		}
		data[m.Pod] = string(value)
	}
	return data, nil
}

// shardCount is how many ConfigMaps data needs: 1 when it fits the assignment ConfigMap, otherwise the
// smallest power of two for which every shard fits. Powers of two keep most entries in place when the
// count changes by one step. Past maxShards the assignment is refused, never truncated.
func shardCount(data map[string]string) (int, *problem) {
	total := 0
	for key, value := range data {
		total += len(key) + len(value)
	}
	if total <= maxAssignmentBytes {
		return 1, nil
	}
	for shards := 2; shards <= maxShards; shards *= 2 {
		sizes := make([]int, shards)
		fits := true
		for key, value := range data {
			k := assignment.ShardOf(key, shards)
			if sizes[k] += len(key) + len(value); sizes[k] > maxAssignmentBytes {
				fits = false
				break
			}
		}
		if fits {
			return shards, nil
		}
	}
	return 0, &problem{ReasonAssignmentTooLarge, fmt.Sprintf(
		"the assignment takes %d bytes, more than %d ConfigMaps of %d bytes can hold; reduce the queues or members of the group",
		total, maxShards, maxAssignmentBytes)}
}

// assignmentObjects are the apply configurations that publish data at generation: the assignment
// ConfigMap, and the shard ConfigMaps when the entries do not fit it. Shards come first: the assignment
// ConfigMap, which says how many shards to read, is written last.
func assignmentObjects(group *v1alpha1.ConsumerGroup, data map[string]string, shards int, generation int64, rebalancedAt time.Time, handoffRaw string) []*corev1ac.ConfigMapApplyConfiguration {
	annotations := map[string]string{
		v1alpha1.GenerationAnnotation: strconv.FormatInt(generation, 10),
		RebalancedAtAnnotation:        rebalancedAt.UTC().Format(time.RFC3339),
	}
	if shards == 1 {
		if handoffRaw != "" {
			annotations[HandoffAnnotation] = handoffRaw
		}
		return []*corev1ac.ConfigMapApplyConfiguration{assignmentConfigMap(group, AssignmentName(group.Name), data, annotations)}
	}
	parts := make([]map[string]string, shards)
	for k := range parts {
		parts[k] = map[string]string{}
	}
	for key, value := range data {
		parts[assignment.ShardOf(key, shards)][key] = value
	}
	objects := make([]*corev1ac.ConfigMapApplyConfiguration, 0, shards+1)
	for k, part := range parts {
		objects = append(objects, assignmentConfigMap(group, assignment.ShardName(group.Name, k), part, maps.Clone(annotations)))
	}
	annotations[assignment.ShardsAnnotation] = strconv.Itoa(shards)
	if handoffRaw != "" {
		annotations[HandoffAnnotation] = handoffRaw
	}
	return append(objects, assignmentConfigMap(group, AssignmentName(group.Name), map[string]string{}, annotations))
}

// assignmentConfigMap is the apply configuration of one ConfigMap that publishes group's assignment.
func assignmentConfigMap(group *v1alpha1.ConsumerGroup, name string, data, annotations map[string]string) *corev1ac.ConfigMapApplyConfiguration {
	return corev1ac.ConfigMap(name, group.Namespace).
		WithLabels(map[string]string{
			v1alpha1.GroupLabel: group.Name,
			ManagedByLabel:      ManagedByValue,
		}).
		WithAnnotations(annotations).
		WithOwnerReferences(metav1ac.OwnerReference().
			WithAPIVersion(v1alpha1.GroupVersion.String()).
			WithKind("ConsumerGroup").
			WithName(group.Name).
			WithUID(group.UID).
			WithController(true).
			WithBlockOwnerDeletion(true)).
		WithData(data)
}

// ownAnnotations are the annotations the operator writes on the objects that publish an assignment.
var ownAnnotations = []string{v1alpha1.GenerationAnnotation, RebalancedAtAnnotation, HandoffAnnotation, assignment.ShardsAnnotation}

// upToDate reports whether observed already holds what desired would write: the same data, the
// operator's labels and annotations, and the group as controller.
func upToDate(group *v1alpha1.ConsumerGroup, observed *corev1.ConfigMap, desired *corev1ac.ConfigMapApplyConfiguration) bool {
	if observed == nil || !maps.Equal(observed.Data, desired.Data) && !(len(observed.Data) == 0 && len(desired.Data) == 0) {
		return false
	}
	for k, v := range desired.Labels {
		if observed.Labels[k] != v {
			return false
		}
	}
	for _, k := range ownAnnotations {
		if observed.Annotations[k] != desired.Annotations[k] {
			return false
		}
	}
	owner := metav1.GetControllerOf(observed)
	return owner != nil && owner.UID == group.UID
}

// movedQueues counts the queues whose owner changed between two plans, among queues that had an owner
// in before that is still a member in after.
func movedQueues(before, after allocate.Plan) int {
	owner := map[allocate.Queue]string{}
	for id, qs := range after {
		for _, q := range qs {
			owner[q] = id
		}
	}
	moved := 0
	for id, qs := range before {
		if _, stillMember := after[id]; !stillMember {
			continue
		}
		for _, q := range qs {
			if o, ok := owner[q]; ok && o != id {
				moved++
			}
		}
	}
	return moved
}
