package main

import (
	"context"
	"fmt"
	"net/http"
	"sync/atomic"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/consumergroup-operator/consumergroup-operator/internal/testenv"
	"github.com/consumergroup-operator/consumergroup-operator/pkg/nodeagent"
	"github.com/consumergroup-operator/consumergroup-operator/pkg/protocol"
)

// The liveness designs a run can measure (docs/protocol.md): each member confirming its own view, or a
// node agent on each node confirming the views of all the members on it.
const (
	designPerMember = "per-member"
	designNode      = "node"
)

// operatorNamespace is where the operator of a node-mode run keeps its node views and the agents read
// them; memberServiceAccount is the service account of the members' pods, whose tokens, bound to the pods,
// they present to their agents.
const (
	operatorNamespace    = "consumergroup-system"
	memberServiceAccount = "scale-member"
)

// nodeAgents are the node agents of a node-mode run, one per node, each a pkg/nodeagent server with its
// own connection to the API server, which can be cut, as its node's, and its heartbeat with it. The members of a node ask their
// agent with a call in their own process (nodeagent.Server.Confirm, member.Config.NodeAgentCall), not over
// HTTP: on a real cluster each node's members and agent share that node's cores, where here 20,000
// members asking once a second, even through the agent's HTTP handler in process, would need most of the
// machine's two. The agent's work (the token's identity, the request's checks, the shared read) and
// every request it sends the API server are the same.
type nodeAgents struct {
	servers map[string]*nodeagent.Server
	cut     map[string]*atomic.Bool
	stop    context.CancelFunc
}

// startNodeAgents starts an agent for each node, until ctx ends or close.
func startNodeAgents(ctx context.Context, cfg *rest.Config, nodes []string) (*nodeAgents, error) {
	ctx, stop := context.WithCancel(ctx)
	a := &nodeAgents{servers: map[string]*nodeagent.Server{}, cut: map[string]*atomic.Bool{}, stop: stop}
	for _, node := range nodes {
		cut := &atomic.Bool{}
		agentCfg := ownConnections(cfg)
		agentCfg.Wrap(func(rt http.RoundTripper) http.RoundTripper { return testenv.Partitionable(rt, cut) })
		cs, err := kubernetes.NewForConfig(agentCfg)
		if err != nil {
			stop()
			return nil, err
		}
		// Each renews its heartbeat as consumergroup-agent node does, every 2 s: it is what tells the
		// operator that a node is lost, and a cut agent renews it no more.
		srv, err := nodeagent.New(nodeagent.Config{Node: node, Namespace: operatorNamespace, Client: cs,
			Heartbeat: protocol.DefaultNodeAgentHeartbeat, Pod: "node-agent-" + node})
		if err != nil {
			stop()
			return nil, fmt.Errorf("node agent of %s: %w", node, err)
		}
		go func() { _ = srv.Run(ctx) }()
		a.cut[node] = cut
		a.servers[node] = srv
	}
	return a, nil
}

// call is how the members on node ask their agent.
func (a *nodeAgents) call(node string) func(context.Context, string, protocol.NodeAgentConfirmRequest) (int, protocol.NodeAgentConfirmResponse, error) {
	return a.servers[node].Confirm
}

// url names node's agent in the members' logs; nothing is sent to it.
func (a *nodeAgents) url(node string) string { return "http://node-agent." + node + ".invalid" }

// cutOff cuts node's agent off the API server, as a lost node's: it confirms nothing more.
func (a *nodeAgents) cutOff(node string) { a.cut[node].Store(true) }

// close stops the agents.
func (a *nodeAgents) close() { a.stop() }

// memberTokens are, for each pod, a token of its service account bound to it, for the agents' audience:
// what a member reads from its projected volume.
func memberTokens(ctx context.Context, cs kubernetes.Interface, pods []*corev1.Pod, workers int) ([]string, error) {
	tokens := make([]string, len(pods))
	err := testenv.Parallel(ctx, len(pods), workers, func(i int) (err error) {
		tokens[i], err = testenv.BoundToken(ctx, cs, pods[i], protocol.NodeAgentAudience)
		return err
	})
	return tokens, err
}
