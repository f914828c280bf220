package controllers

import (
	"fmt"
	"slices"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"

	"github.com/consumergroup-operator/consumergroup-operator/api/v1alpha1"
	"github.com/consumergroup-operator/consumergroup-operator/pkg/allocate"
)

// ZoneLabel is the well-known node label that gives a member's zone.
const ZoneLabel = corev1.LabelTopologyZone

// maxWeight bounds the weight annotation so a typo cannot give one pod the whole group.
const maxWeight = 1000

// member is one pod that takes part in the group.
type member struct {
	allocate.Member
	// Pod is the member's pod name; it is also the member's key in the assignment ConfigMap.
	Pod string
}

// problem is a reason the operator cannot publish a new assignment. Reason is one CamelCase word for
// conditions and events; Message says what to fix.
type problem struct {
	Reason  string
	Message string
}

func (p *problem) Error() string { return p.Reason + ": " + p.Message }

// Condition reasons for problems with the group's input.
const (
	ReasonInvalidMemberAnnotation   = "InvalidMemberAnnotation"
	ReasonDuplicateMemberID         = "DuplicateMemberID"
	ReasonInvalidStrategyParameters = "InvalidStrategyParameters"
	ReasonAllocationFailed          = "AllocationFailed"
	ReasonInvalidSelector           = "InvalidSelector"
	ReasonAssignmentTooLarge        = "AssignmentTooLarge"
)

// isMember reports whether a pod that matches the selector takes part in the group: it must be Running,
// Ready and not being deleted, so that queues only go to pods that can consume them.
func isMember(pod *corev1.Pod) bool {
	if pod.DeletionTimestamp != nil || pod.Status.Phase != corev1.PodRunning {
		return false
	}
	for _, c := range pod.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// membersFor returns the group's members among pods (all of which match the group's selector), sorted by
// pod name. nodeZones maps a node name to its zone label. A pod whose annotations cannot be read, or two
// pods with the same member id, make the whole membership invalid: publishing without them would move
// their queues for a configuration mistake.
func membersFor(group *v1alpha1.ConsumerGroup, pods []corev1.Pod, nodeZones map[string]string) ([]member, *problem) {
	members := make([]member, 0, len(pods))
	podByID := make(map[string]string, len(pods))
	for i := range pods {
		pod := &pods[i]
		if !isMember(pod) {
			continue
		}
		id := pod.Name
		if key := group.Spec.MemberIdentity.Annotation; key != nil {
			id = pod.Annotations[*key]
			if id == "" {
				return nil, &problem{ReasonInvalidMemberAnnotation,
					fmt.Sprintf("pod %s has no annotation %s, which spec.memberIdentity.annotation names as its member id", pod.Name, *key)}
			}
		}
		if other, dup := podByID[id]; dup {
			return nil, &problem{ReasonDuplicateMemberID,
				fmt.Sprintf("pods %s and %s have the same member id %q", other, pod.Name, id)}
		}
		podByID[id] = pod.Name

		weight := int32(1)
		if v, ok := pod.Annotations[v1alpha1.WeightAnnotation]; ok {
			w, err := strconv.ParseInt(strings.TrimSpace(v), 10, 32)
			if err != nil || w < 1 || w > maxWeight {
				return nil, &problem{ReasonInvalidMemberAnnotation,
					fmt.Sprintf("pod %s: annotation %s=%q must be a whole number from 1 to %d", pod.Name, v1alpha1.WeightAnnotation, v, maxWeight)}
			}
			weight = int32(w)
		}
		zone := nodeZones[pod.Spec.NodeName]
		if v, ok := pod.Annotations[v1alpha1.ZoneAnnotation]; ok {
			zone = v
		}
		members = append(members, member{Member: allocate.Member{ID: id, Zone: zone, Weight: weight}, Pod: pod.Name})
	}
	slices.SortFunc(members, func(a, b member) int { return strings.Compare(a.Pod, b.Pod) })
	return members, nil
}
