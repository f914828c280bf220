package observe

import (
	"sync"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"

	"github.com/consumergroup-operator/consumergroup-operator/internal/plan"
	"github.com/consumergroup-operator/consumergroup-operator/pkg/protocol"
)

// The kubelet renews its node's Lease (namespace kube-node-lease, named after the node) every quarter of
// its duration: 10 s of 40 s by default. That is a heartbeat per node the cluster pays for anyway, and
// the first sign that a node is lost or cut off, with no kubelet left to report its pods: Kubernetes
// marks the node NotReady only 40 s or more later. A member on a node whose Lease the operator has not
// seen renewed for a renewal interval and a fifth stops being a member, if its own Lease promises contact
// fencing (protocol.StopsWithinAnnotation): its queues are revoked then and move on when its promise runs
// out, about 19 s after the node's last renewal with the defaults. A false alarm (a kubelet that cannot
// reach the API server while its pods can) moves queues; it never lets two pods read one.

// kubeletRenewFraction is the share of a node Lease's duration after which the kubelet renews it.
const kubeletRenewFraction = 4

// NodeLeaseSightings time node Lease renewals on the operator's clock, as Sightings do for the
// members' Leases: a renewal counts when the operator sees spec.renewTime change. A renewal it saw only
// after the fact, as it started, counts from the time it states plus the clock skew bound, when that is
// earlier: a restarted operator resumes the wait for a lost node rather than starting it again. Lateness
// only decides which queues are revoked, never when another may read them.
type NodeLeaseSightings struct {
	mu    sync.Mutex
	nodes map[string]nodeSighting
}

type nodeSighting struct {
	renewTime, seenAt time.Time
	interval          time.Duration
	// afterTheFact is set while renewTime is the one the operator first read the Lease with.
	afterTheFact bool
}

// saw records a node Lease as seen at now. It reports whether the node had been silent past its
// deadline: its groups should then look again, as their members on it may be members again.
func (s *NodeLeaseSightings) Saw(lease *coordinationv1.Lease, now time.Time, maxSkew time.Duration) (wasLate bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.nodes == nil {
		s.nodes = map[string]nodeSighting{}
	}
	duration := 40 * time.Second
	if d := lease.Spec.LeaseDurationSeconds; d != nil && *d > 0 {
		duration = min(time.Duration(*d)*time.Second, protocol.MaxLeaseDuration)
	}
	renewTime := protocol.RenewTimeOf(lease)
	prev, known := s.nodes[lease.Name]
	next := nodeSighting{renewTime: renewTime, seenAt: now, interval: duration / kubeletRenewFraction, afterTheFact: !known}
	if known && renewTime.Equal(prev.renewTime) {
		next.seenAt, next.afterTheFact = prev.seenAt, prev.afterTheFact
	}
	s.nodes[lease.Name] = next
	return known && !now.Before(prev.lateAt(maxSkew)) && next.seenAt.Equal(now)
}

// forget drops a node whose Lease is gone: nothing is known of it any more, which suspects nothing.
func (s *NodeLeaseSightings) Forget(node string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.nodes, node)
}

// lateAt is when a node's next renewal is overdue: one renewal interval and a fifth after the last, counted
// from when it was seen or, seen after the fact, from the time it states plus maxSkew when earlier.
func (n nodeSighting) lateAt(maxSkew time.Duration) time.Time {
	return plan.RenewedBy(n.renewTime, n.seenAt, n.afterTheFact, maxSkew).Add(n.interval + n.interval/5)
}

// lateAt says, for each of nodes whose Lease the operator has seen, when it is overdue.
func (s *NodeLeaseSightings) lateAt(nodes map[string]string, maxSkew time.Duration) map[string]time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make(map[string]time.Time, len(nodes))
	for node := range nodes {
		if n, ok := s.nodes[node]; ok {
			out[node] = n.lateAt(maxSkew)
		}
	}
	return out
}

// LateAt is when node's kubelet is overdue, as lateAt says; false when its Lease was never seen or is
// forgotten.
func (s *NodeLeaseSightings) LateAt(node string, maxSkew time.Duration) (time.Time, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	n, ok := s.nodes[node]
	if !ok {
		return time.Time{}, false
	}
	return n.lateAt(maxSkew), true
}
