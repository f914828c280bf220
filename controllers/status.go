package controllers

import (
	"fmt"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/consumergroup-operator/consumergroup-operator/api/v1alpha1"
	podmember "github.com/consumergroup-operator/consumergroup-operator/pkg/member"
)

// Condition types and the reasons of healthy states.
const (
	ConditionReady    = "Ready"
	ConditionDegraded = "Degraded"

	ReasonAssigned  = "Assigned"
	ReasonNoMembers = "NoMembers"
	ReasonHealthy   = "Healthy"
)

// maxStatusMembers is how many member lines the status holds at most (the CRD's MaxItems): past it the
// status of a very large group would not fit the object.
const maxStatusMembers = 4096

// statusFor computes the group's status from what is published after this pass and the problem, if
// any, that kept the operator from publishing a new plan. It starts from the current status so that
// condition transition times move only when a condition flips.
func statusFor(group *v1alpha1.ConsumerGroup, current publishedAssignment, memberCount int, queueCount int, prob *problem, now metav1.Time) v1alpha1.ConsumerGroupStatus {
	status := *group.Status.DeepCopy()
	status.ObservedGeneration = group.Generation
	status.AssignmentConfigMap = ""
	// Never back: with the ConfigMap deleted while the group cannot be planned, nothing is published, yet
	// members' Leases still acknowledge the last generation, and the next one must be above it.
	status.AssignmentGeneration = max(current.generation, group.Status.AssignmentGeneration)
	status.Members = nil
	status.LastRebalanceTime = nil
	if current.generation > 0 {
		status.AssignmentConfigMap = AssignmentName(group.Name)
		if !current.rebalancedAt.IsZero() {
			t := metav1.NewTime(current.rebalancedAt)
			status.LastRebalanceTime = &t
		}
	}

	// Member lines and counts describe what is published, which is what the pods act on.
	queues := map[string]bool{}
	for pod, e := range current.entries {
		n, _ := e.Count()
		status.Members = append(status.Members, v1alpha1.MemberStatus{ID: e.Member, Pod: pod, Queues: int32(n)})
		if prob == nil {
			continue
		}
		if qs, err := e.Expand(); err == nil {
			for _, q := range qs {
				queues[q.String()] = true
			}
		}
	}
	slices.SortFunc(status.Members, func(a, b v1alpha1.MemberStatus) int { return strings.Compare(a.ID, b.ID) })
	status.MemberCount = int32(len(status.Members))
	if len(status.Members) > maxStatusMembers {
		status.Members = status.Members[:maxStatusMembers]
	}
	status.QueueCount = int32(queueCount)
	if prob != nil {
		// The spec could not be planned, so count the queues the published plan holds.
		status.QueueCount = int32(len(queues))
	}

	ready := metav1.Condition{Type: ConditionReady, ObservedGeneration: group.Generation, LastTransitionTime: now}
	degraded := metav1.Condition{Type: ConditionDegraded, ObservedGeneration: group.Generation, LastTransitionTime: now}
	switch {
	case prob != nil:
		ready.Status, ready.Reason = metav1.ConditionFalse, prob.Reason
		ready.Message = prob.Message
		if current.generation > 0 {
			ready.Message += fmt.Sprintf("; assignment generation %d stays published", current.generation)
		}
		degraded.Status, degraded.Reason, degraded.Message = metav1.ConditionTrue, prob.Reason, ready.Message
	case memberCount == 0:
		ready.Status, ready.Reason = metav1.ConditionFalse, ReasonNoMembers
		ready.Message = "No Running and Ready pod matches spec.selector"
		degraded.Status, degraded.Reason, degraded.Message = metav1.ConditionFalse, ReasonHealthy, "The assignment follows the spec and the members"
	default:
		ready.Status, ready.Reason = metav1.ConditionTrue, ReasonAssigned
		ready.Message = fmt.Sprintf("Assignment generation %d gives %d queues to %d members", current.generation, queueCount, memberCount)
		degraded.Status, degraded.Reason, degraded.Message = metav1.ConditionFalse, ReasonHealthy, "The assignment follows the spec and the members"
	}
	meta.SetStatusCondition(&status.Conditions, ready)
	meta.SetStatusCondition(&status.Conditions, degraded)
	return status
}

// Handoff condition types and reasons.
const (
	ConditionProgressing = "Progressing"
	ConditionFenced      = "Fenced"

	ReasonHandoffInProgress = "HandoffInProgress"
	ReasonStable            = "Stable"
	ReasonRevokeTimeout     = "RevokeTimeout"
	ReasonNoneFenced        = "NoneFenced"
)

// withHandoff adds to status what the handoff shows: each member's acknowledged generation, Progressing
// while queues wait for their old owner, and Fenced while a pod that missed its revoke timeout runs on.
func withHandoff(group *v1alpha1.ConsumerGroup, status *v1alpha1.ConsumerGroupStatus, current publishedAssignment, withheld int, leases map[string]podmember.LeaseState, now metav1.Time) {
	for i := range status.Members {
		if l, ok := leases[status.Members[i].Pod]; ok {
			acked := l.AckedGeneration
			status.Members[i].AckedGeneration = &acked
		}
	}

	progressing := metav1.Condition{Type: ConditionProgressing, ObservedGeneration: group.Generation, LastTransitionTime: now,
		Status: metav1.ConditionFalse, Reason: ReasonStable, Message: "No queue is waiting for a handoff"}
	if n := len(current.handoff.Revocations); n > 0 || withheld > 0 {
		var pods []string
		for _, r := range current.handoff.Revocations {
			pods = append(pods, fmt.Sprintf("%s (generation %d)", r.Pod, r.Generation))
		}
		progressing.Status, progressing.Reason = metav1.ConditionTrue, ReasonHandoffInProgress
		progressing.Message = fmt.Sprintf("%d queues wait for their previous owner to let go", withheld)
		if len(pods) > 0 {
			progressing.Message += "; waiting for the acknowledgement of " + strings.Join(pods, ", ")
		}
	}
	meta.SetStatusCondition(&status.Conditions, progressing)

	fenced := metav1.Condition{Type: ConditionFenced, ObservedGeneration: group.Generation, LastTransitionTime: now,
		Status: metav1.ConditionFalse, Reason: ReasonNoneFenced, Message: "Every member acknowledged its revocations in time"}
	if len(current.handoff.Fenced) > 0 {
		var pods []string
		for _, f := range current.handoff.Fenced {
			pods = append(pods, f.Pod)
		}
		fenced.Status, fenced.Reason = metav1.ConditionTrue, ReasonRevokeTimeout
		fenced.Message = fmt.Sprintf("Pods %s did not acknowledge a revocation within spec.handoff.revokeTimeoutSeconds; their queues were handed on. Such a pod must stop reading the queues its entry no longer lists", strings.Join(pods, ", "))
	}
	meta.SetStatusCondition(&status.Conditions, fenced)
}
