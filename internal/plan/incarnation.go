package plan

import (
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/consumergroup-operator/consumergroup-operator/pkg/allocate"
	"github.com/consumergroup-operator/consumergroup-operator/pkg/protocol"
)

// incarnation is one pod incarnation (pod name and UID) that may be reading queues: a member, a pod that
// was one, or the holder of a Lease whose pod is gone.
type incarnation struct {
	pod string
	uid types.UID
	// exists is set while a pod of this name and UID exists; stopped when the kubelet reports that every
	// container of it has terminated: evidence that no process of it reads anything.
	exists, stopped bool
	// node is the node its pod runs on, "" when unknown (its pod is gone, or not scheduled): only that
	// node's agent can confirm its view (NodeViews.KnownSince).
	node string
	// lease is the Lease this incarnation holds; nil when it holds none.
	lease *protocol.LeaseState
	// unseenUntil is, for an incarnation the operator published an entry for but that has neither a pod
	// nor a Lease, until when it may still be reading: its Lease may have vanished before this operator
	// started, and a vanished Lease proves nothing.
	unseenUntil time.Time
}

// IncarnationKey identifies an incarnation in maps.
func IncarnationKey(pod string, uid types.UID) string { return pod + "\x00" + string(uid) }

// incarnationState is what the operator can tell of an incarnation at a moment. A pass derives it afresh
// from the evidence it observed (the pod, its Lease, what was published) in one place, incarnation.state;
// every rule that asks whether an incarnation may read, or whether its Lease may go, asks it.
type incarnationState uint8

const (
	// incarnationRunning: its pod exists, the kubelet does not report it stopped, and its Lease, if it
	// holds one, stands. It may be reading. An incarnation without a Lease does not follow the member
	// protocol: it is taken to read while its pod exists.
	incarnationRunning incarnationState = iota
	// incarnationDeparted: its pod is gone, its Lease stands. It may still be reading: neither a vanished
	// pod nor a vanished Lease proves that a process stopped.
	incarnationDeparted
	// incarnationUnseen: named only by what was published, with neither a pod nor a Lease, until
	// unseenUntil. It may still be reading: its Lease may have vanished before this operator started.
	incarnationUnseen
	// incarnationLapsed: its pod exists, its Lease has expired by the operator's count
	// (protocol.LeaseState.Stands). By the protocol it reads nothing until it renews.
	incarnationLapsed
	// incarnationDrained: its Lease says it stopped for good, with an empty claim
	// (protocol.LeaseState.Stopped). A stopped member needs to acknowledge nothing, a recovery included:
	// it takes no assignment again, and another process of its pod would claim before reading, which
	// ends the word.
	incarnationDrained
	// incarnationStopped: the kubelet reports that every container of its pod has terminated
	// (StoppedByKubelet): evidence that no process of it reads anything.
	incarnationStopped
	// incarnationGone: no pod, and neither a standing Lease nor a window in which an unseen one may read.
	incarnationGone
)

// state is what the operator can tell of the incarnation at now.
func (i *incarnation) state(now time.Time, maxSkew time.Duration) incarnationState {
	standing := i.lease != nil && i.lease.Stands(now, maxSkew)
	switch {
	case i.stopped:
		return incarnationStopped
	case i.lease == nil && i.exists:
		return incarnationRunning
	case i.lease == nil && now.Before(i.unseenUntil):
		return incarnationUnseen
	case i.lease == nil || !i.exists && !standing:
		return incarnationGone
	case i.lease.Stopped:
		return incarnationDrained
	case !standing:
		return incarnationLapsed
	case !i.exists:
		return incarnationDeparted
	}
	return incarnationRunning
}

// mayRead reports whether an incarnation in state s may be reading.
func (s incarnationState) mayRead() bool {
	return s == incarnationRunning || s == incarnationDeparted || s == incarnationUnseen
}

// stands reports whether the incarnation may still be reading now.
func (i *incarnation) stands(now time.Time, maxSkew time.Duration) bool {
	return i.state(now, maxSkew).mayRead()
}

func (i *incarnation) acked() int64 {
	if i.lease == nil {
		return 0
	}
	return i.lease.AckedGeneration
}

// aliveAt reports whether the incarnation showed it was alive at or after t: its Lease was renewed then, or,
// without a Lease, its pod still exists. A renewal the operator saw only after the fact (its first read of
// the Lease, after a restart) counts from the latest time it can have happened (RenewedBy), not from
// when it was read: a member that stopped renewing before t is not taken for one that renewed after.
func (i *incarnation) aliveAt(t time.Time) bool {
	if i.lease != nil {
		by := i.lease.RenewedBy
		if by.IsZero() {
			by = i.lease.RenewTime // a Lease not timed by sightings: its renewal as read
		}
		return !i.lease.RenewTime.Before(t) && !by.Before(t)
	}
	return i.exists
}

// StoppedByKubelet reports whether the kubelet says no container of pod runs and each has terminated at
// least once: no process of the pod can be reading. A pod that is only NotReady, or gone, proves nothing.
func StoppedByKubelet(pod *corev1.Pod) bool {
	if pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed {
		return true
	}
	statuses := append(slices.Clone(pod.Status.InitContainerStatuses), pod.Status.ContainerStatuses...)
	if len(pod.Status.ContainerStatuses) == 0 {
		return false
	}
	for _, c := range statuses {
		if c.State.Running != nil || c.State.Terminated == nil && c.LastTerminationState.Terminated == nil {
			return false
		}
	}
	return true
}

// claims reports whether inc's readable claim lists q, and q is not fenced from it.
func claims(inc *incarnation, fenced *queueSet, q allocate.Queue) bool {
	if inc.lease == nil || inc.lease.ClaimErr != nil || fenced != nil && fenced.has(q) {
		return false
	}
	_, ok := slices.BinarySearchFunc(inc.lease.Claim, q, protocol.CompareCanonical)
	return ok
}
