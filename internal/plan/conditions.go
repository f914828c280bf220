package plan

import (
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/consumergroup-operator/consumergroup-operator/api/v1alpha1"
	"github.com/consumergroup-operator/consumergroup-operator/pkg/protocol"
)

// LostPublished reports whether the finding is that what the operator published was deleted or edited,
// after which it publishes recoveryStep generations above what it knows. Findings about Leases are not.
func (p *Problem) LostPublished() bool {
	return p != nil && (p.Reason == v1alpha1.ReasonAssignmentDeleted || p.Reason == v1alpha1.ReasonAssignmentEdited)
}

// Problem is a reason the operator cannot publish a new assignment. Reason is one CamelCase word for
// conditions and events; Message says what to fix.
type Problem struct {
	Reason  string
	Message string
}

func (p *Problem) Error() string { return p.Reason + ": " + p.Message }

// maxStatusMembers is how many member lines the status holds at most (the CRD's MaxItems): past it the
// status of a very large group would not fit the object.
const maxStatusMembers = 4096

// StatusFor computes the group's status from the report of this pass. It starts from the current status
// so that condition transition times move only when a condition flips. Each condition is set by a function
// of its own, in the order below: Reconciling reads Progressing and Tampered as just set.
func StatusFor(group *v1alpha1.ConsumerGroup, r *Report, now metav1.Time) v1alpha1.ConsumerGroupStatus {
	status := *group.Status.DeepCopy()
	status.ObservedGeneration = group.Generation
	// Never back: a ConfigMap deleted later comes back above anything a member may have seen.
	status.AssignmentGeneration = max(r.Generation, group.Status.AssignmentGeneration)
	status.AssignmentConfigMap = ""
	status.LastRebalanceTime = nil
	if r.Generation > 0 && r.Exists {
		status.AssignmentConfigMap = protocol.AssignmentName(group.Name)
		if !r.RebalancedAt.IsZero() {
			t := metav1.NewTime(r.RebalancedAt)
			status.LastRebalanceTime = &t
		}
	}
	setMemberLines(&status, group, r)

	c := conditionSetter{status: &status, generation: group.Generation, now: now}
	setReady(c, r)
	setDegraded(c, r)
	setPaused(c, r)
	setProgressing(c, r)
	setFenced(c, r)
	setTampered(c, group, r)
	setStalled(c, r)
	setReconciling(c, r)
	return status
}

// setMemberLines writes the member lines and the counts. They describe what is published, which is what
// the pods act on.
func setMemberLines(status *v1alpha1.ConsumerGroupStatus, group *v1alpha1.ConsumerGroup, r *Report) {
	status.Members = nil
	queues := 0
	for _, pod := range slices.Sorted(maps.Keys(r.Entries)) {
		e := r.Entries[pod]
		line := v1alpha1.MemberStatus{ID: e.Member, Pod: pod, Queues: int32(len(e.Queues))}
		if lease, ok := r.MemberLeases[pod]; ok {
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
	status.QueueCount = int32(r.QueueCount)
	if r.Problem != nil || r.Paused {
		// The spec was not planned: count the queues the published assignment holds.
		status.QueueCount = int32(queues)
	}
	status.UnownedQueues = max(status.QueueCount-int32(queues), 0)
	status.RecommendedMembers = nil
	if group.Spec.Autoscaling != nil {
		status.RecommendedMembers = r.Recommended
	}
	status.TotalLoad = ""
	if r.TotalLoad != nil {
		status.TotalLoad = strconv.FormatFloat(*r.TotalLoad, 'g', 4, 64)
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

// setReady says whether the assignment follows the spec and the members, and why not.
func setReady(c conditionSetter, r *Report) {
	switch {
	case r.Paused:
		c.set(v1alpha1.ConditionReady, metav1.ConditionFalse, v1alpha1.ReasonPaused, pausedMessage(r))
	case r.Problem != nil:
		c.set(v1alpha1.ConditionReady, metav1.ConditionFalse, r.Problem.Reason, problemMessage(r))
	case len(r.Members) == 0:
		c.set(v1alpha1.ConditionReady, metav1.ConditionFalse, v1alpha1.ReasonNoMembers, "No Running and Ready pod matches spec.selector")
	default:
		c.set(v1alpha1.ConditionReady, metav1.ConditionTrue, v1alpha1.ReasonAssigned,
			fmt.Sprintf("Assignment generation %d gives %d queues to %d members", r.Generation, r.QueueCount, len(r.Members)))
	}
}

// setDegraded says whether a problem keeps the published assignment in place. A paused group, or one
// without members, is not degraded: nothing is wrong.
func setDegraded(c conditionSetter, r *Report) {
	switch {
	case r.Paused:
		c.set(v1alpha1.ConditionDegraded, metav1.ConditionFalse, v1alpha1.ReasonHealthy, "Nothing is wrong: the group is paused")
	case r.Problem != nil:
		c.set(v1alpha1.ConditionDegraded, metav1.ConditionTrue, r.Problem.Reason, problemMessage(r))
	default:
		c.set(v1alpha1.ConditionDegraded, metav1.ConditionFalse, v1alpha1.ReasonHealthy, healthyMessage)
	}
}

// setPaused says whether spec.paused keeps the published assignment in place.
func setPaused(c conditionSetter, r *Report) {
	if r.Paused {
		c.set(v1alpha1.ConditionPaused, metav1.ConditionTrue, v1alpha1.ReasonPaused, pausedMessage(r))
		return
	}
	c.set(v1alpha1.ConditionPaused, metav1.ConditionFalse, v1alpha1.ReasonActive, "The operator publishes what the spec and the members ask")
}

func pausedMessage(r *Report) string {
	return fmt.Sprintf("spec.paused is true: assignment generation %d stays published; a new member gets no queue and a departed member's queues wait until spec.paused is false", r.Generation)
}

// problemMessage is the problem's message, and which generation stays published because of it.
func problemMessage(r *Report) string {
	if r.Generation > 0 {
		return r.Problem.Message + fmt.Sprintf("; assignment generation %d stays published", r.Generation)
	}
	return r.Problem.Message
}

// setProgressing says which queues wait for a handoff, and for whose acknowledgement.
func setProgressing(c conditionSetter, r *Report) {
	revocations := r.Bookkeeping.Revocations
	if len(revocations) == 0 && r.Handoff.Withheld == 0 {
		c.set(v1alpha1.ConditionProgressing, metav1.ConditionFalse, v1alpha1.ReasonStable, "No queue is waiting for a handoff")
		return
	}
	var pods []string
	for _, rv := range revocations {
		pods = append(pods, fmt.Sprintf("%s (generation %d)", rv.Pod, rv.Generation))
	}
	msg := fmt.Sprintf("%d queues wait for their previous reader to let go", r.Handoff.Withheld)
	if len(pods) > 0 {
		msg += "; waiting for the acknowledgement of " + strings.Join(pods, ", ")
	}
	c.set(v1alpha1.ConditionProgressing, metav1.ConditionTrue, v1alpha1.ReasonHandoffInProgress, msg)
}

// setFenced names the pods whose revocations timed out while they kept renewing their Lease.
func setFenced(c conditionSetter, r *Report) {
	if len(r.Bookkeeping.Fenced) == 0 {
		c.set(v1alpha1.ConditionFenced, metav1.ConditionFalse, v1alpha1.ReasonNoneFenced, "Every member acknowledged its revocations in time")
		return
	}
	var pods []string
	for _, f := range r.Bookkeeping.Fenced {
		pods = append(pods, f.Pod)
	}
	c.set(v1alpha1.ConditionFenced, metav1.ConditionTrue, v1alpha1.ReasonRevokeTimeout, fmt.Sprintf(
		"Pods %s did not acknowledge a revocation within spec.handoff.revokeTimeoutSeconds while they kept renewing their Lease; their queues were handed on. Such a pod must stop reading the queues its entry no longer lists",
		strings.Join(slices.Compact(pods), ", ")))
}

// setTampered reports what someone else changed in what the operator wrote or the members claim, and
// keeps reporting it while the members catch up with the generation that repaired it.
func setTampered(c conditionSetter, group *v1alpha1.ConsumerGroup, r *Report) {
	switch {
	case r.Tampered != nil:
		c.set(v1alpha1.ConditionTampered, metav1.ConditionTrue, r.Tampered.Reason, r.Tampered.Message)
	case r.Handoff.Recovering > 0:
		// Keep the reason of the finding while members catch up with the generation that repaired it.
		old := meta.FindStatusCondition(group.Status.Conditions, v1alpha1.ConditionTampered)
		reason, msg := v1alpha1.ReasonAssignmentEdited, ""
		if old != nil && old.Status == metav1.ConditionTrue {
			reason, msg = old.Reason, old.Message+"; "
		}
		c.set(v1alpha1.ConditionTampered, metav1.ConditionTrue, reason, msg+fmt.Sprintf(
			"%d members have not yet acknowledged the generation published after it, so every queue they do not claim is held back", r.Handoff.Recovering))
	default:
		c.set(v1alpha1.ConditionTampered, metav1.ConditionFalse, v1alpha1.ReasonIntact, "The objects the operator wrote and the members' claims are as written")
	}
}

// setStalled is kstatus's: the input problems need someone to act; handoffs and recoveries finish on
// their own.
func setStalled(c conditionSetter, r *Report) {
	if r.Problem != nil {
		c.set(v1alpha1.ConditionStalled, metav1.ConditionTrue, r.Problem.Reason, r.Problem.Message)
		return
	}
	c.set(v1alpha1.ConditionStalled, metav1.ConditionFalse, v1alpha1.ReasonHealthy, healthyMessage)
}

// setReconciling is kstatus's: true while a handoff or a recovery is under way, from Progressing and
// Tampered as this pass set them.
func setReconciling(c conditionSetter, r *Report) {
	progressing, tampered := c.find(v1alpha1.ConditionProgressing), c.find(v1alpha1.ConditionTampered)
	switch {
	case r.Paused:
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
