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

	// maxAssignmentBytes keeps the ConfigMap's data under the API server's 1 MiB limit with room for
	// metadata. A larger assignment is refused with a condition, never truncated.
	maxAssignmentBytes = 900 * 1024
)

// AssignmentName is the name of the ConfigMap that publishes group's assignment.
func AssignmentName(groupName string) string { return groupName + "-assignment" }

// publishedAssignment is what an assignment ConfigMap holds, decoded.
type publishedAssignment struct {
	generation   int64
	rebalancedAt time.Time
	// entries maps a pod name (the ConfigMap key) to its entry.
	entries map[string]assignment.Entry
	// data is the ConfigMap's data as read, to compare with what the operator would write.
	data map[string]string
	// handoff is the state of queues in flight, and handoffRaw its annotation as read.
	handoff    handoffState
	handoffRaw string
}

// readAssignment decodes an assignment ConfigMap; cm may be nil (nothing published yet). Entries that
// cannot be decoded are left out: the ConfigMap no longer matches what the operator would write, so the
// next pass rewrites it.
func readAssignment(cm *corev1.ConfigMap) publishedAssignment {
	p := publishedAssignment{entries: map[string]assignment.Entry{}, data: map[string]string{}}
	if cm == nil {
		return p
	}
	p.generation, _ = strconv.ParseInt(cm.Annotations[v1alpha1.GenerationAnnotation], 10, 64)
	p.rebalancedAt, _ = time.Parse(time.RFC3339, cm.Annotations[RebalancedAtAnnotation])
	maps.Copy(p.data, cm.Data)
	p.handoffRaw = cm.Annotations[HandoffAnnotation]
	p.handoff = decodeHandoff(p.handoffRaw)
	for key, value := range cm.Data {
		if e, _, err := assignment.Decode([]byte(value)); err == nil {
			p.entries[key] = e
		}
	}
	return p
}

// plan is the published plan by member id, as strategies that keep queues in place read it.
func (p publishedAssignment) plan() allocate.Plan {
	plan := make(allocate.Plan, len(p.entries))
	for _, e := range p.entries {
		if queues, err := e.Expand(); err == nil {
			plan[e.Member] = queues
		}
	}
	return plan
}

// byPod is the published plan by pod name.
func (p publishedAssignment) byPod() map[string]podPlan {
	out := make(map[string]podPlan, len(p.entries))
	for pod, e := range p.entries {
		if queues, err := e.Expand(); err == nil {
			out[pod] = podPlan{member: e.Member, queues: queues}
		}
	}
	return out
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

// assignmentData renders the ConfigMap data for plan at generation: one key per member pod.
func assignmentData(members []member, plan allocate.Plan, generation int64) (map[string]string, *problem) {
	data := make(map[string]string, len(members))
	size := 0
	for _, m := range members {
		value, err := assignment.Encode(m.ID, generation, plan[m.ID])
		if err != nil {
			return nil, &problem{ReasonAllocationFailed, fmt.Sprintf("encoding the assignment of %s: %v", m.ID, err)}
		}
		data[m.Pod] = string(value)
		size += len(m.Pod) + len(value)
	}
	if size > maxAssignmentBytes {
		return nil, &problem{ReasonAssignmentTooLarge,
			fmt.Sprintf("the assignment takes %d bytes, more than the %d a ConfigMap can safely hold; the last assignment stays published", size, maxAssignmentBytes)}
	}
	return data, nil
}

// assignmentConfigMap is the apply configuration of group's assignment ConfigMap.
func assignmentConfigMap(group *v1alpha1.ConsumerGroup, data map[string]string, generation int64, rebalancedAt time.Time, handoffRaw string) *corev1ac.ConfigMapApplyConfiguration {
	annotations := map[string]string{
		v1alpha1.GenerationAnnotation: strconv.FormatInt(generation, 10),
		RebalancedAtAnnotation:        rebalancedAt.UTC().Format(time.RFC3339),
	}
	if handoffRaw != "" {
		annotations[HandoffAnnotation] = handoffRaw
	}
	return corev1ac.ConfigMap(AssignmentName(group.Name), group.Namespace).
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

// metadataIntact reports whether cm still carries the labels, annotations and owner the operator wrote.
func metadataIntact(group *v1alpha1.ConsumerGroup, cm *corev1.ConfigMap, generation int64, rebalancedAt time.Time) bool {
	if cm.Labels[v1alpha1.GroupLabel] != group.Name || cm.Labels[ManagedByLabel] != ManagedByValue {
		return false
	}
	if cm.Annotations[v1alpha1.GenerationAnnotation] != strconv.FormatInt(generation, 10) ||
		cm.Annotations[RebalancedAtAnnotation] != rebalancedAt.UTC().Format(time.RFC3339) {
		return false
	}
	owner := metav1.GetControllerOf(cm)
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
