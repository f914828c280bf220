package plan

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/consumergroup-operator/consumergroup-operator/api/v1alpha1"
	"github.com/consumergroup-operator/consumergroup-operator/pkg/allocate"
	"github.com/consumergroup-operator/consumergroup-operator/pkg/protocol"
)

// ZoneLabel is the well-known node label that gives a member's zone.
const ZoneLabel = corev1.LabelTopologyZone

// maxWeight bounds the weight annotation so a typo cannot give one pod the whole group.
const maxWeight = 1000

// Member is one pod incarnation that takes part in the group.
type Member struct {
	allocate.Member
	// Pod is the member's pod name, its key in the assignment; UID is the pod's UID, which its entry names.
	Pod string
	UID types.UID
}

// IsRunningAndReady reports whether a pod that matches the selector can consume: Running, Ready and not
// being deleted.
func IsRunningAndReady(pod *corev1.Pod) bool {
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
// pod name. A pod is a member while it is Running and Ready, and, if its name has a Lease, while that
// Lease is its own and fresh: a member that has not renewed its Lease for the lease duration reads
// nothing, and a pod whose name's Lease an earlier pod still holds cannot read until it takes it over. A
// member whose Lease promises contact fencing is one only while its renewals are on time (within one and
// a half renewal intervals), its node's kubelet renews the node's Lease on time, and no restart of its
// containers goes unanswered by a renewal (kubelets): it may be cut off, and its promise lets its queues
// move on soon after.
// nodeZones maps a node name to its zone label; leases are the group's Leases by pod name. It also
// returns when the earliest member Lease expires, for the reconciler to look again then: renewals do not
// trigger a pass. A pod whose annotations cannot be read, or two pods with the same member id, make the
// whole membership invalid: publishing without them would move their queues for a configuration mistake.
func membersFor(group *v1alpha1.ConsumerGroup, pods []corev1.Pod, nodeZones map[string]string, kubelets kubeletSignals, leases map[string]*protocol.LeaseState, now time.Time) ([]Member, time.Time, *Problem) {
	members := make([]Member, 0, len(pods))
	podByID := make(map[string]string, len(pods))
	var nextExpiry time.Time
	for i := range pods {
		pod := &pods[i]
		if !IsRunningAndReady(pod) {
			continue
		}
		if lease := leases[pod.Name]; lease != nil {
			expiry := membershipEnds(lease, kubelets.nodeLate(lease, pod.Spec.NodeName), kubelets.restartedAt[pod.UID])
			if lease.PodUID != pod.UID || !now.Before(expiry) {
				continue
			}
			// The pass looks again when the member's own deadlines fall. Its node's falls at every kubelet
			// renewal, 10 s later; the operator wakes the node's groups itself once the node is overdue
			// (controllers' lateNodes), so that a still cluster costs no pass of every group every 12 s.
			if own := OwnMembershipEnd(lease, kubelets.restartedAt[pod.UID]); nextExpiry.IsZero() || own.Before(nextExpiry) {
				nextExpiry = own
			}
		}
		id := pod.Name
		if key := group.Spec.MemberIdentity.Annotation; key != nil {
			id = pod.Annotations[*key]
			if id == "" {
				return nil, time.Time{}, &Problem{v1alpha1.ReasonInvalidMemberAnnotation,
					fmt.Sprintf("pod %s has no annotation %s, which spec.memberIdentity.annotation names as its member id", pod.Name, *key)}
			}
		}
		if other, dup := podByID[id]; dup {
			return nil, time.Time{}, &Problem{v1alpha1.ReasonDuplicateMemberID, fmt.Sprintf("pods %s and %s have the same member id %q", other, pod.Name, id)}
		}
		podByID[id] = pod.Name

		weight := int32(1)
		if v, ok := pod.Annotations[v1alpha1.WeightAnnotation]; ok {
			w, err := strconv.ParseInt(strings.TrimSpace(v), 10, 32)
			if err != nil || w < 1 || w > maxWeight {
				return nil, time.Time{}, &Problem{v1alpha1.ReasonInvalidMemberAnnotation,
					fmt.Sprintf("pod %s: annotation %s=%q must be a whole number from 1 to %d", pod.Name, v1alpha1.WeightAnnotation, v, maxWeight)}
			}
			weight = int32(w)
		}
		zone := nodeZones[pod.Spec.NodeName]
		if v, ok := pod.Annotations[v1alpha1.ZoneAnnotation]; ok {
			zone = v
		}
		members = append(members, Member{Member: allocate.Member{ID: id, Zone: zone, Weight: weight}, Pod: pod.Name, UID: pod.UID})
	}
	slices.SortFunc(members, func(a, b Member) int { return strings.Compare(a.Pod, b.Pod) })
	return members, nextExpiry, nil
}

// kubeletSignals is what the kubelets say of the members besides their pods' phase and readiness: when
// each node's kubelet is overdue (nodeLateAt, by node name; nodeleases.go) and when the operator first saw
// each pod's containers restarted with no renewal of its Lease since (restartedAt, by pod UID;
// restarts.go).
type kubeletSignals struct {
	nodeLateAt  map[string]time.Time
	restartedAt map[types.UID]time.Time
	// agents is what the operator saw of each node's agent's heartbeat, by node name.
	agents map[string]Heartbeat
}

// nodeLate is when the node of a member whose Lease is lease is overdue, zero when unknown: when its
// kubelet is, or, for a member that confirms through its node's agent, when the agent's heartbeat is, if
// sooner. A member in node mode fences itself without its agent, so a node whose agent stopped, lost or
// cut off, holds no reader of its queues; the heartbeat, renewed every 4 s, tells so in 8 s where the
// kubelet's Lease takes 12. The heartbeat counts only when the agent was known alive within a heartbeat's
// duration of the member's last renewal: the member wrote that it confirms through its agent when the
// agent answered it, so an older heartbeat is one the agent no longer renews while it answers (turned
// off, or its writes refused), which must not keep its members out for ever.
func (k kubeletSignals) nodeLate(lease *protocol.LeaseState, node string) time.Time {
	late := k.nodeLateAt[node]
	agent, ok := k.agents[node]
	if !ok || !lease.ThroughNodeAgent || agent.RenewedBy.Before(lease.RenewedBy.Add(-agent.Duration)) {
		return late
	}
	if late.IsZero() || agent.LateAt.Before(late) {
		return agent.LateAt
	}
	return late
}

// OwnMembershipEnd is when a pod whose Lease is lease stops being a member by its own deadlines alone
// (membershipEnds without its node's): restartedAt is when the operator first saw its containers
// restarted, zero for never. Renewals only move it later, or end the restart's deadline.
func OwnMembershipEnd(lease *protocol.LeaseState, restartedAt time.Time) time.Time {
	return membershipEnds(lease, time.Time{}, restartedAt)
}

// membershipEnds is when a pod whose Lease is lease stops being a member unless it renews: when the Lease
// runs out. A member that promises contact fencing stops being one sooner, once a renewal is overdue by
// half an interval, once its node's kubelet is overdue (nodeLate, when known; nodeleases.go), or
// restartRenewGrace after the operator saw its containers restarted when no renewal answered the restart
// (restartedAt, when known; restarts.go): its queues are revoked then, and move on when its promise runs
// out, long before its Lease would. Both count from the Lease's RenewedBy, which a restarted operator does
// not move later than the renewal could have been (observe.Sightings): membership only decides what is
// revoked, never when another may read it.
func membershipEnds(lease *protocol.LeaseState, nodeLate, restartedAt time.Time) time.Time {
	if lease.StopsWithin <= 0 {
		return lease.RenewedBy.Add(lease.Duration)
	}
	interval := protocol.RenewInterval(lease.Duration)
	end := lease.RenewedBy.Add(interval + interval/2)
	if !nodeLate.IsZero() && nodeLate.Before(end) {
		end = nodeLate
	}
	if !restartedAt.IsZero() && !Answers(lease.RenewTime, restartedAt) {
		if cutOff := restartedAt.Add(RestartRenewGrace); cutOff.Before(end) {
			end = cutOff
		}
	}
	return end
}
