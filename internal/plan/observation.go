package plan

import (
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/consumergroup-operator/consumergroup-operator/pkg/protocol"
)

// Observation is the part of the world one group's assignment depends on: every read of a pass.
type Observation struct {
	// Pods match the group's selector, in its namespace; podsByName holds them and every other pod the
	// handoff must know about (named by a Lease, an entry or the handoff state), by name.
	Pods       []corev1.Pod
	PodsByName map[string]*corev1.Pod
	// NodeZones maps the name of each node a member pod runs on to its zone label.
	NodeZones map[string]string
	// NodeLateAt says, for those of the nodes whose Lease the operator has seen, when its kubelet's next
	// renewal is overdue.
	NodeLateAt map[string]time.Time
	// AgentHeartbeats says, for those of the nodes whose agent's heartbeat the operator has seen, what it
	// saw (observe.NodeLeaseSightings with Heartbeats).
	AgentHeartbeats map[string]Heartbeat
	// RestartedAt says, by pod UID, when the operator first saw the kubelet restart a pod's containers
	// with no renewal of its Lease since (internal/observe/restarts.go).
	RestartedAt map[types.UID]time.Time
	// Index is the group's assignment ConfigMap, nil when there is none; shards its shard ConfigMaps.
	Index  *corev1.ConfigMap
	Shards map[string]*corev1.ConfigMap
	// Published is what index and shards hold, checked against their digests; bookkeeping the handoff
	// state beside it, decoded once per pass (SetPublished), and bookkeepingErr why it cannot be read.
	Published      protocol.Published
	Bookkeeping    HandoffState
	BookkeepingErr error
	// Leases are the group's member Leases as the operator counts them (observe.Sightings): each renewed at the
	// operator's time of seeing it, and those that vanished while their claims may still stand. vanished
	// holds the UIDs of the latter, backwards names the Leases whose renewTime went backwards, and
	// sightedSince is when this operator first looked at the group.
	Leases       []protocol.LeaseState
	Vanished     map[types.UID]bool
	Backwards    []string
	SightedSince time.Time
	// Publications are the generations this operator knows were published, and since when.
	Publications Publications
	// FirstWrittenAt is when this operator's own first write of the assignment returned, zero before;
	// FirstWrittenGeneration the generation it wrote.
	FirstWrittenAt         time.Time
	FirstWrittenGeneration int64
	// NodeViews is what this operator knows of the group's lines in the node views: with node views, a
	// member's promise counts only once every line asks for the generation it is counted from.
	NodeViews NodeViews
	// LeasesAsWritten are the Leases as read, with the renewTimes their writers wrote.
	LeasesAsWritten []protocol.LeaseState
	// Scope is the spec's queues: what the operator reads of claims, entries and load reports.
	Scope *protocol.Scope
	// Foreign names the ConfigMaps under the names of the group's assignment that the group does not
	// control: the operator did not create them, and neither reads, writes nor deletes them.
	Foreign []string
	// LiveRead is set when the published objects and the Leases were read from the API server rather
	// than the cache, because the cache showed them deleted or edited.
	LiveRead bool
	// SelectorProblem is set when the selector cannot be read.
	SelectorProblem *Problem
}

// SetPublished records what the published objects hold, and decodes the handoff bookkeeping beside them,
// once for the whole pass.
func (obs *Observation) SetPublished(published protocol.Published) {
	obs.Published = published
	obs.Bookkeeping, obs.BookkeepingErr = decodeHandoff(published.Handoff, obs.Scope)
}

// RenewedBy is the latest time a renewal stated at renewTime and seen at seenAt can have happened, for
// lateness: seenAt, unless it was seen after the fact and renewTime plus maxSkew is earlier.
func RenewedBy(renewTime, seenAt time.Time, afterTheFact bool, maxSkew time.Duration) time.Time {
	if stated := renewTime.Add(maxSkew); afterTheFact && stated.Before(seenAt) {
		return stated
	}
	return seenAt
}

// Heartbeat is what the operator saw of a node agent's heartbeat: when the agent was last known alive
// (RenewedBy, as for a member's Lease), when its next renewal is overdue, and the heartbeat's duration.
type Heartbeat struct {
	RenewedBy, LateAt time.Time
	Duration          time.Duration
}
