package protocol

import "k8s.io/apimachinery/pkg/types"

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
