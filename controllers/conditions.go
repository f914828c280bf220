package controllers

import (
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/consumergroup-operator/consumergroup-operator/api/v1alpha1"
)

// lostPublished reports whether the finding is that what the operator published was deleted or edited,
// after which it publishes recoveryStep generations above what it knows. Findings about Leases are not.
func (p *problem) lostPublished() bool {
	return p != nil && (p.Reason == v1alpha1.ReasonAssignmentDeleted || p.Reason == v1alpha1.ReasonAssignmentEdited)
}

// Event reasons that are not condition reasons.
const (
	EventRebalanced   = "Rebalanced"
	EventMemberFenced = "MemberFenced"
	EventRestored     = "AssignmentRestored"
)

// problem is a reason the operator cannot publish a new assignment. Reason is one CamelCase word for
// conditions and events; Message says what to fix.
type problem struct {
	Reason  string
	Message string
}

func (p *problem) Error() string { return p.Reason + ": " + p.Message }

// maxStatusMembers is how many member lines the status holds at most (the CRD's MaxItems): past it the
// status of a very large group would not fit the object.
const maxStatusMembers = 4096

// statusFor computes the group's status from the decision of this pass. It starts from the current status
// so that condition transition times move only when a condition flips. Each condition is set by a function
// of its own, in the order below: Reconciling reads Progressing and Tampered as just set.
func statusFor(group *v1alpha1.ConsumerGroup, d *decision, now metav1.Time) v1alpha1.ConsumerGroupStatus {
	status := *group.Status.DeepCopy()
	status.ObservedGeneration = group.Generation
	// Never back: a ConfigMap deleted later comes back above anything a member may have seen.
	status.AssignmentGeneration = max(d.generation, group.Status.AssignmentGeneration)
	status.AssignmentConfigMap = ""
	status.LastRebalanceTime = nil
	if d.generation > 0 && d.published {
		status.AssignmentConfigMap = assignmentName(group)
		if !d.rebalancedAt.IsZero() {
			t := metav1.NewTime(d.rebalancedAt)
			status.LastRebalanceTime = &t
		}
	}
	setMemberLines(&status, group, d)

	c := conditionSetter{status: &status, generation: group.Generation, now: now}
	setReady(c, d)
	setProgressing(c, d.handoff)
	setFenced(c, d.handoff)
	setTampered(c, group, d)
	setStalled(c, d)
	setReconciling(c, d)
	return status
}

// setMemberLines writes the member lines and the counts. They describe what is published, which is what
// the pods act on.
func setMemberLines(status *v1alpha1.ConsumerGroupStatus, group *v1alpha1.ConsumerGroup, d *decision) {
	status.Members = nil
	queues := 0
	for _, pod := range slices.Sorted(maps.Keys(d.entries)) {
		e := d.entries[pod]
		line := v1alpha1.MemberStatus{ID: e.Member, Pod: pod, Queues: int32(len(e.Queues))}
		if lease, ok := d.memberLeases[pod]; ok {
			acked := lease.AckedGeneration
			line.AckedGeneration = &acked
		}
		status.Members = append(status.Members, line)
		queues += len(e.Queues)
	}
	slices.SortFunc(status.Members, func(a, b v1alpha1.MemberStatus) int { return strings.Compare(a.ID, b.ID) })
	status.MemberCount = int32(len(status.Members))
	if len(status.Members) > maxStatusMembers {
		status.Members = status.Members[:maxStatusMembers]
	}
	status.QueueCount = int32(d.queueCount)
	if d.problem != nil || d.paused {
		// The spec was not planned: count the queues the published assignment holds.
		status.QueueCount = int32(queues)
	}
	status.UnownedQueues = max(status.QueueCount-int32(queues), 0)
	status.RecommendedMembers = nil
	if group.Spec.Autoscaling != nil {
		status.RecommendedMembers = d.recommended
	}
	status.TotalLoad = ""
	if d.totalLoad != nil {
		status.TotalLoad = strconv.FormatFloat(*d.totalLoad, 'g', 4, 64)
	}
}

// conditionSetter sets a status's conditions for one generation of the spec at one time.
type conditionSetter struct {
	status     *v1alpha1.ConsumerGroupStatus
	generation int64
	now        metav1.Time
}

func (c conditionSetter) set(typ string, s metav1.ConditionStatus, reason, message string) {
	meta.SetStatusCondition(&c.status.Conditions, metav1.Condition{Type: typ, Status: s, Reason: reason, Message: message,
		ObservedGeneration: c.generation, LastTransitionTime: c.now})
}

func (c conditionSetter) find(typ string) *metav1.Condition {
	return meta.FindStatusCondition(c.status.Conditions, typ)
}

const healthyMessage = "The assignment follows the spec and the members"

// setReady sets Ready, Degraded and Paused: whether the assignment follows the spec, and why not.
func setReady(c conditionSetter, d *decision) {
	switch {
	case d.paused:
		msg := fmt.Sprintf("spec.paused is true: assignment generation %d stays published; a new member gets no queue and a departed member's queues wait until spec.paused is false", d.generation)
		c.set(v1alpha1.ConditionReady, metav1.ConditionFalse, v1alpha1.ReasonPaused, msg)
		c.set(v1alpha1.ConditionDegraded, metav1.ConditionFalse, v1alpha1.ReasonHealthy, "Nothing is wrong: the group is paused")
		c.set(v1alpha1.ConditionPaused, metav1.ConditionTrue, v1alpha1.ReasonPaused, msg)
		return
	case d.problem != nil:
		msg := d.problem.Message
		if d.generation > 0 {
			msg += fmt.Sprintf("; assignment generation %d stays published", d.generation)
		}
		c.set(v1alpha1.ConditionReady, metav1.ConditionFalse, d.problem.Reason, msg)
		c.set(v1alpha1.ConditionDegraded, metav1.ConditionTrue, d.problem.Reason, msg)
	case len(d.members) == 0:
		c.set(v1alpha1.ConditionReady, metav1.ConditionFalse, v1alpha1.ReasonNoMembers, "No Running and Ready pod matches spec.selector")
		c.set(v1alpha1.ConditionDegraded, metav1.ConditionFalse, v1alpha1.ReasonHealthy, healthyMessage)
	default:
		c.set(v1alpha1.ConditionReady, metav1.ConditionTrue, v1alpha1.ReasonAssigned,
			fmt.Sprintf("Assignment generation %d gives %d queues to %d members", d.generation, d.queueCount, len(d.members)))
		c.set(v1alpha1.ConditionDegraded, metav1.ConditionFalse, v1alpha1.ReasonHealthy, healthyMessage)
	}
	c.set(v1alpha1.ConditionPaused, metav1.ConditionFalse, v1alpha1.ReasonActive, "The operator publishes what the spec and the members ask")
}

// setProgressing says which queues wait for a handoff, and for whose acknowledgement.
func setProgressing(c conditionSetter, h handoffResult) {
	if len(h.state.Revocations) == 0 && h.withheld == 0 {
		c.set(v1alpha1.ConditionProgressing, metav1.ConditionFalse, v1alpha1.ReasonStable, "No queue is waiting for a handoff")
		return
	}
	var pods []string
	for _, r := range h.state.Revocations {
		pods = append(pods, fmt.Sprintf("%s (generation %d)", r.Pod, r.Generation))
	}
	msg := fmt.Sprintf("%d queues wait for their previous reader to let go", h.withheld)
	if len(pods) > 0 {
		msg += "; waiting for the acknowledgement of " + strings.Join(pods, ", ")
	}
	c.set(v1alpha1.ConditionProgressing, metav1.ConditionTrue, v1alpha1.ReasonHandoffInProgress, msg)
}

// setFenced names the pods whose revocations timed out while they kept renewing their Lease.
func setFenced(c conditionSetter, h handoffResult) {
	if len(h.state.Fenced) == 0 {
		c.set(v1alpha1.ConditionFenced, metav1.ConditionFalse, v1alpha1.ReasonNoneFenced, "Every member acknowledged its revocations in time")
		return
	}
	var pods []string
	for _, f := range h.state.Fenced {
		pods = append(pods, f.Pod)
	}
	c.set(v1alpha1.ConditionFenced, metav1.ConditionTrue, v1alpha1.ReasonRevokeTimeout, fmt.Sprintf(
		"Pods %s did not acknowledge a revocation within spec.handoff.revokeTimeoutSeconds while they kept renewing their Lease; their queues were handed on. Such a pod must stop reading the queues its entry no longer lists",
		strings.Join(slices.Compact(pods), ", ")))
}

// setTampered reports what someone else changed in what the operator wrote or the members claim, and
// keeps reporting it while the members catch up with the generation that repaired it.
func setTampered(c conditionSetter, group *v1alpha1.ConsumerGroup, d *decision) {
	switch {
	case d.tampered != nil:
		c.set(v1alpha1.ConditionTampered, metav1.ConditionTrue, d.tampered.Reason, d.tampered.Message)
	case d.handoff.recovering > 0:
		// Keep the reason of the finding while members catch up with the generation that repaired it.
		old := meta.FindStatusCondition(group.Status.Conditions, v1alpha1.ConditionTampered)
		reason, msg := v1alpha1.ReasonAssignmentEdited, ""
		if old != nil && old.Status == metav1.ConditionTrue {
			reason, msg = old.Reason, old.Message+"; "
		}
		c.set(v1alpha1.ConditionTampered, metav1.ConditionTrue, reason, msg+fmt.Sprintf(
			"%d members have not yet acknowledged the generation published after it, so every queue they do not claim is held back", d.handoff.recovering))
	default:
		c.set(v1alpha1.ConditionTampered, metav1.ConditionFalse, v1alpha1.ReasonIntact, "The objects the operator wrote and the members' claims are as written")
	}
}

// setStalled is kstatus's: the input problems need someone to act; handoffs and recoveries finish on
// their own.
func setStalled(c conditionSetter, d *decision) {
	if d.problem != nil {
		c.set(v1alpha1.ConditionStalled, metav1.ConditionTrue, d.problem.Reason, d.problem.Message)
		return
	}
	c.set(v1alpha1.ConditionStalled, metav1.ConditionFalse, v1alpha1.ReasonHealthy, healthyMessage)
}

// setReconciling is kstatus's: true while a handoff or a recovery is under way, from Progressing and
// Tampered as this pass set them.
func setReconciling(c conditionSetter, d *decision) {
	progressing, tampered := c.find(v1alpha1.ConditionProgressing), c.find(v1alpha1.ConditionTampered)
	switch {
	case d.paused:
		// Nothing moves until someone resumes the group: a handoff in flight does not finish by itself.
		c.set(v1alpha1.ConditionReconciling, metav1.ConditionFalse, v1alpha1.ReasonPaused, "spec.paused is true: nothing new is published")
	case progressing.Status == metav1.ConditionTrue:
		c.set(v1alpha1.ConditionReconciling, metav1.ConditionTrue, v1alpha1.ReasonHandoffInProgress, progressing.Message)
	case tampered.Status == metav1.ConditionTrue:
		c.set(v1alpha1.ConditionReconciling, metav1.ConditionTrue, v1alpha1.ReasonRecovering, tampered.Message)
	default:
		c.set(v1alpha1.ConditionReconciling, metav1.ConditionFalse, v1alpha1.ReasonSettled, "No queue waits for a handoff and nothing is being recovered")
	}
}
