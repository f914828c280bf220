package main

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
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

// nodeAgents are the node agents of a node-mode run, one per node, each a pkg/nodeagent server on a
// loopback port with its own connection to the API server, which can be cut, as its node's. The members
// of a node ask their agent through one client, over one HTTP/2 connection: a run holds every node's
// connections in one process, whose open files are limited.
type nodeAgents struct {
	servers map[string]*httptest.Server
	clients map[string]*http.Client
	cut     map[string]*atomic.Bool
}

// startNodeAgents starts an agent for each node, until ctx ends.
func startNodeAgents(ctx context.Context, cfg *rest.Config, nodes []string) (*nodeAgents, error) {
	a := &nodeAgents{servers: map[string]*httptest.Server{}, clients: map[string]*http.Client{}, cut: map[string]*atomic.Bool{}}
	for _, node := range nodes {
		cut := &atomic.Bool{}
		agentCfg := rest.CopyConfig(cfg)
		agentCfg.Wrap(func(rt http.RoundTripper) http.RoundTripper { return testenv.Partitionable(rt, cut) })
		cs, err := kubernetes.NewForConfig(agentCfg)
		if err != nil {
			return nil, err
		}
		srv, err := nodeagent.New(nodeagent.Config{Node: node, Namespace: operatorNamespace, Client: cs})
		if err != nil {
			return nil, fmt.Errorf("node agent of %s: %w", node, err)
		}
		go func() { _ = srv.Run(ctx) }()
		ts := httptest.NewUnstartedServer(srv.Handler())
		ts.Config.Protocols = nodeagent.Protocols()
		ts.Start()
		h2c := new(http.Protocols)
		h2c.SetUnencryptedHTTP2(true)
		a.servers[node], a.cut[node] = ts, cut
		a.clients[node] = &http.Client{Transport: &http.Transport{Protocols: h2c}}
	}
	return a, nil
}

// client is the client the members on node ask their agent with.
func (a *nodeAgents) client(node string) *http.Client { return a.clients[node] }

// url is the base URL of node's agent.
func (a *nodeAgents) url(node string) string { return a.servers[node].URL }

// cutOff cuts node's agent off the API server, as a lost node's: it confirms nothing more.
func (a *nodeAgents) cutOff(node string) { a.cut[node].Store(true) }

func (a *nodeAgents) close() {
	for _, s := range a.servers {
		s.Close()
	}
}

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
