package protocol

import (
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	"k8s.io/apimachinery/pkg/types"
)

// The node agent's API (docs/protocol.md, node mode). A member in node mode asks the agent on its node,
// every quarter of its contact timeout, to confirm the view it holds; the agent answers each request with
// the first read of its node view that it sent after the request arrived.
const (
	// NodeAgentConfirmPath is the agent's confirmation endpoint: POST a NodeAgentConfirmRequest with the
	// member's service account token, bound to its pod, as a bearer token.
	NodeAgentConfirmPath = "/v1/confirm"
	// NodeAgentAudience is the audience of the token a member presents to the agent: a token for the API
	// server is refused, so the agent cannot replay what it is sent.
	NodeAgentAudience = "consumergroup-node-agent"
	// DefaultNodeAgentPort is the port the agent listens on, on its node's IP.
	DefaultNodeAgentPort = 9443
	// MaxNodeAgentRequestBytes bounds a confirmation request's body.
	MaxNodeAgentRequestBytes = 4096
)

// NodeAgentConfirmRequest asks the agent to confirm that the member's view of its group's assignment,
// at Generation, is current. The pod is the one the token is bound to.
//
// GroupUID is the UID of the group incarnation the view holds (the index's controller): generations
// only compare within one incarnation. A member whose watch stopped while its group was deleted and
// created again holds a high generation of the old incarnation; without the UID, a line of the new one,
// whose generations start again from 1, would confirm it.
type NodeAgentConfirmRequest struct {
	Group      string    `json:"group"`
	GroupUID   types.UID `json:"groupUID"`
	Generation int64     `json:"generation"`
}

// NodeAgentConfirmResponse is the agent's answer. Confirmed is true only when a read of the node view
// that the agent sent after the request arrived lists the group with a must-see generation at most the
// request's. Reason says why not, in words.
type NodeAgentConfirmResponse struct {
	Confirmed bool   `json:"confirmed"`
	Reason    string `json:"reason,omitempty"`
}

// The node agent's heartbeat (docs/protocol.md, node mode, rule 6). The agent renews a Lease of its own,
// in the operator's namespace, every quarter of DefaultNodeAgentHeartbeat, where a kubelet renews its
// node's every 10 s: the operator finds a lost node in 8 s instead of 12 s. It counts only for the members
// that confirm through the agent (ConfirmsThroughAnnotation): a member in per-member mode on the same node
// does not stop with its agent.
const (
	// NodeAgentHeartbeatLabel marks the agents' heartbeat Leases; its value is "true".
	NodeAgentHeartbeatLabel = "messaging.consumergroup.io/node-agent-heartbeat"
	// DefaultNodeAgentHeartbeat is the duration of an agent's heartbeat Lease; the agent renews it every
	// quarter of it, as a kubelet does its node's.
	DefaultNodeAgentHeartbeat = 16 * time.Second
	// ConfirmsThroughAnnotation on a member's Lease says how the member confirms its view; its one value
	// is ConfirmsThroughNodeAgent, written once the member's agent has answered it. A member that says so
	// fences itself when its agent stops answering, so its agent's heartbeat counts for it.
	ConfirmsThroughAnnotation = "messaging.consumergroup.io/confirms-through"
	ConfirmsThroughNodeAgent  = "node-agent"
)

// NodeAgentHeartbeatName is the name of the heartbeat Lease of node's agent. It carries the node's name
// in NodeViewNodeAnnotation, as a view does, for a long name is cut and hashed.
func NodeAgentHeartbeatName(node string) string { return boundedName("node-agent." + node) }

// HeartbeatNode is the node whose agent renews lease: the node its annotation names, when the Lease is
// labelled as a heartbeat and named after that node; false otherwise.
func HeartbeatNode(lease *coordinationv1.Lease) (string, bool) {
	node := lease.Annotations[NodeViewNodeAnnotation]
	if lease.Labels[NodeAgentHeartbeatLabel] != "true" || node == "" || NodeAgentHeartbeatName(node) != lease.Name {
		return "", false
	}
	return node, true
}
