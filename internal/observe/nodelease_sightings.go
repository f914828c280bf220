package observe

import (
	"cmp"
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

// kubeletRenewFraction is the share of a node Lease's duration after which the kubelet renews it, as a
// node agent does its heartbeat.
const kubeletRenewFraction = 4

// NodeLeaseSightings time node Lease renewals on the operator's clock, as Sightings do for the
// members' Leases: a renewal counts when the operator sees spec.renewTime change. A renewal it saw only
// after the fact, as it started, counts from the time it states plus the clock skew bound, when that is
// earlier: a restarted operator resumes the wait for a lost node rather than starting it again. Lateness
// only decides which queues are revoked, never when another may read them.
//
// The same sightings time the node agents' heartbeats (Heartbeats set): Leases in the operator's
// namespace that an agent renews every quarter of their duration, 16 s by default
// (protocol.NodeAgentHeartbeatName), keyed by the node each names. A heartbeat is overdue after two
// renewal intervals, 8 s, where a kubelet's is after one and a fifth: it is renewed every 4 s, through
// the same API server as everything else, and a write slowed by half a second must not revoke a whole
// node's queues.
type NodeLeaseSightings struct {
	// Heartbeats marks the sightings of node agents' heartbeats rather than of kubelets' node Leases.
	Heartbeats bool

	mu    sync.Mutex
	nodes map[string]nodeSighting
}

type nodeSighting struct {
	renewTime, seenAt time.Time
	interval          time.Duration
	// overdueAfter is how long after a renewal the next is overdue.
	overdueAfter time.Duration
	// afterTheFact is set while renewTime is the one the operator first read the Lease with.
	afterTheFact bool
}

// NodeOf is the node whose kubelet or agent renews lease; false for a Lease that is no heartbeat.
func (s *NodeLeaseSightings) NodeOf(lease *coordinationv1.Lease) (string, bool) {
	if s.Heartbeats {
		return protocol.HeartbeatNode(lease)
	}
	return lease.Name, true
}

// cadence is the renewal interval and the overdue time of a Lease of duration d (0 when not set).
func (s *NodeLeaseSightings) cadence(d time.Duration) (interval, overdueAfter time.Duration) {
	if s.Heartbeats {
		interval = cmp.Or(d, protocol.DefaultNodeAgentHeartbeat) / kubeletRenewFraction
		return interval, 2 * interval
	}
	interval = cmp.Or(d, 40*time.Second) / kubeletRenewFraction
	return interval, interval + interval/5
}

// saw records a node Lease as seen at now. It reports whether the node had been silent past its
// deadline: its groups should then look again, as their members on it may be members again.
func (s *NodeLeaseSightings) Saw(lease *coordinationv1.Lease, now time.Time, maxSkew time.Duration) (wasLate bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	node, ok := s.NodeOf(lease)
	if !ok {
		return false
	}
	if s.nodes == nil {
		s.nodes = map[string]nodeSighting{}
	}
	var duration time.Duration
	if d := lease.Spec.LeaseDurationSeconds; d != nil && *d > 0 {
		duration = min(time.Duration(*d)*time.Second, protocol.MaxLeaseDuration)
	}
	renewTime := protocol.RenewTimeOf(lease)
	prev, known := s.nodes[node]
	next := nodeSighting{renewTime: renewTime, seenAt: now, afterTheFact: !known}
	next.interval, next.overdueAfter = s.cadence(duration)
	if known && renewTime.Equal(prev.renewTime) {
		next.seenAt, next.afterTheFact = prev.seenAt, prev.afterTheFact
	}
	s.nodes[node] = next
	return known && !now.Before(prev.lateAt(maxSkew)) && next.seenAt.Equal(now)
}

// Forget drops the node of a Lease that is gone: nothing is known of it any more, which suspects nothing.
func (s *NodeLeaseSightings) Forget(lease *coordinationv1.Lease) {
	node, ok := s.NodeOf(lease)
	if !ok {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.nodes, node)
}

// renewedBy is when the node's kubelet or agent was last known alive: when the operator saw its last
// renewal or, seen after the fact, the time it states plus maxSkew when earlier.
func (n nodeSighting) renewedBy(maxSkew time.Duration) time.Time {
	return plan.RenewedBy(n.renewTime, n.seenAt, n.afterTheFact, maxSkew)
}

// lateAt is when a node's next renewal is overdue: overdueAfter past renewedBy.
func (n nodeSighting) lateAt(maxSkew time.Duration) time.Time {
	return n.renewedBy(maxSkew).Add(n.overdueAfter)
}

// heartbeats says, for each of nodes whose agent's heartbeat the operator has seen, what it saw; nothing
// while too many heartbeats are overdue at now to believe them (disrupted).
func (s *NodeLeaseSightings) heartbeats(nodes map[string]string, now time.Time, maxSkew time.Duration) map[string]plan.Heartbeat {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.disrupted(now, maxSkew) {
		return nil
	}
	out := make(map[string]plan.Heartbeat, len(nodes))
	for node := range nodes {
		if n, ok := s.nodes[node]; ok {
			out[node] = plan.Heartbeat{RenewedBy: n.renewedBy(maxSkew), LateAt: n.lateAt(maxSkew), Duration: n.interval * kubeletRenewFraction}
		}
	}
	return out
}

// lateAt says, for each of nodes whose Lease the operator has seen, when it is overdue; nothing while too
// many are overdue at now to believe them (disrupted).
func (s *NodeLeaseSightings) lateAt(nodes map[string]string, now time.Time, maxSkew time.Duration) map[string]time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.disrupted(now, maxSkew) {
		return nil
	}
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

// Disrupted reports whether more of the Leases are overdue at now than nodes fail at once (disrupted):
// none of them is believed meanwhile.
func (s *NodeLeaseSightings) Disrupted(now time.Time, maxSkew time.Duration) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.disrupted(now, maxSkew)
}

// disrupted reports whether more heartbeats or kubelets' Leases are overdue at now than nodes fail at
// once: more than two, and more than a tenth of the heartbeats or more than 55 % of the kubelets' Leases
// (kubeletDisruptedPercent). Then it is the API server that is slow to take the
// agents' and kubelets' writes, or the operator to see them, rather than the nodes that are lost: a
// heartbeat renewed every 4 s is late after 8 s, a kubelet's renewed every 10 s after 12 s, and an API
// server whose writes take seconds would have every node's members' queues revoked, and the revocations'
// writes, and the acknowledgements of the plans that follow, load it further: a 20,000-pod run whose
// Lease writes took 7 s never came back (docs/performance.md). Kubernetes' node lifecycle controller
// stops evicting in a zone most of whose nodes are not ready, for the same reason. While the heartbeats
// are disrupted the nodes' kubelets time them alone (19 s for a lost node, not 15 s); while the kubelets
// are too, a lost node's members are timed by their own Leases. s.mu is held.
func (s *NodeLeaseSightings) disrupted(now time.Time, maxSkew time.Duration) bool {
	late := 0
	for _, n := range s.nodes {
		if !now.Before(n.lateAt(maxSkew)) {
			late++
		}
	}
	if s.Heartbeats {
		return late > 2 && late*10 > len(s.nodes)
	}
	return late > 2 && late*100 > len(s.nodes)*kubeletDisruptedPercent
}

// kubeletDisruptedPercent is the share of the nodes whose kubelets' Leases must be overdue at once,
// beyond which none is believed: Kubernetes' node lifecycle controller's unhealthy-zone threshold. A zone
// lost with its nodes, a third of a cluster of three zones or half of one of two, is a failure the
// members' queues must move away from within seconds, and is believed; the agents' heartbeats, which the
// kubelets' Leases stand behind, give up at a tenth.
const kubeletDisruptedPercent = 55
