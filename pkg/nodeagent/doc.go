// Package nodeagent is the node agent of node mode (docs/protocol.md, "Node mode: one confirmation per
// node"): one per node, it answers the confirmation requests of the members on its node with reads of the
// node's view, which the operator writes, so that the API server serves one read per node a second rather
// than one per member.
//
// Its one promise: a request is answered with the first read of the node view that the agent sent after
// the request arrived, and confirmed only when that read lists the member's group at a must-see generation
// no higher than the generation the member says its view holds. The member counts its contact timeout
// from when it sent the request, which came before the read. A late, lost or restarted agent can only
// withhold a confirmation: the member then fences itself, which is safe.
//
// Who asks is settled by the token each request carries: a service account token bound to the member's
// pod, for protocol.NodeAgentAudience, which the agent checks with a TokenReview. The pod's namespace is
// the token's, so a pod can only ask about groups of its own namespace; a pod on another node is refused.
//
// The one object it writes is its heartbeat, a Lease in the operator's namespace that it renews every
// quarter of Config.Heartbeat: the operator finds a node whose agent is gone sooner than the kubelet's
// node Lease would tell it. The admission policy node-agent-heartbeats lets the agent write its own
// node's heartbeat only.
package nodeagent
