package main

import (
	"context"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	"k8s.io/client-go/kubernetes/fake"

	"github.com/consumergroup-operator/consumergroup-operator/pkg/nodeagent"
	"github.com/consumergroup-operator/consumergroup-operator/pkg/protocol"
)

func TestParseNodeFlags(t *testing.T) {
	env := map[string]string{envNodeName: "node-a", envPodNamespace: "cg-system", envPodName: "node-agent-x7k2p", envHostIP: "10.0.0.5"}
	bare := map[string]string{envNodeName: "n", envPodNamespace: "ns", envPodName: "p"}
	tests := []struct {
		name string
		args []string
		env  map[string]string
		want nodeOptions
		err  []string
	}{
		{"from the environment", nil, env,
			nodeOptions{node: "node-a", namespace: "cg-system", pod: "node-agent-x7k2p", listen: "10.0.0.5:9443", minReadInterval: time.Second, heartbeat: 16 * time.Second}, nil},
		{"flags over the environment", []string{"-node=node-b", "-namespace=ops", "-pod=agent-b", "-listen=127.0.0.1:0", "-min-read-interval=500ms", "-heartbeat=12s"}, env,
			nodeOptions{node: "node-b", namespace: "ops", pod: "agent-b", listen: "127.0.0.1:0", minReadInterval: 500 * time.Millisecond, heartbeat: 12 * time.Second}, nil},
		{"an IPv6 host IP", nil, map[string]string{envNodeName: "n", envPodNamespace: "ns", envPodName: "p", envHostIP: "fd00::5"},
			nodeOptions{node: "n", namespace: "ns", pod: "p", listen: "[fd00::5]:9443", minReadInterval: time.Second, heartbeat: 16 * time.Second}, nil},
		{"no environment", nil, nil, nodeOptions{}, []string{"-node or $NODE_NAME", "-namespace or $POD_NAMESPACE", "-pod or $POD_NAME"}},
		{"no host IP: every address of the pod", nil, bare,
			nodeOptions{node: "n", namespace: "ns", pod: "p", listen: ":9443", minReadInterval: time.Second, heartbeat: 16 * time.Second}, nil},
		{"an empty listen address", []string{"-listen="}, bare, nodeOptions{}, []string{"-listen is empty"}},
		{"a node name but no namespace", []string{"-node=n", "-pod=p", "-listen=127.0.0.1:0"}, nil, nodeOptions{}, []string{"$POD_NAMESPACE"}},
		{"no read interval", []string{"-min-read-interval=0s"}, env, nodeOptions{}, []string{"must be positive"}},
		{"no pod name", nil, map[string]string{envNodeName: "n", envPodNamespace: "ns"}, nodeOptions{}, []string{"-pod or $POD_NAME", "negative -heartbeat"}},
		{"the heartbeat off: no pod name needed", []string{"-heartbeat=-1s"}, map[string]string{envNodeName: "n", envPodNamespace: "ns"},
			nodeOptions{node: "n", namespace: "ns", listen: ":9443", minReadInterval: time.Second, heartbeat: -time.Second}, nil},
		{"a heartbeat under 4 s", []string{"-heartbeat=3s"}, env, nodeOptions{}, []string{"-heartbeat=3s must be at least 4s, or negative"}},
		{"a zero heartbeat", []string{"-heartbeat=0s"}, env, nodeOptions{}, []string{"-heartbeat=0s must be at least 4s"}},
		{"an unknown flag", []string{"-contact-timeout=4s"}, env, nodeOptions{}, []string{"not defined"}},
		{"an argument", []string{"extra"}, env, nodeOptions{}, []string{"unexpected arguments"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := parseNodeFlags(tt.args, func(k string) string { return tt.env[k] }, io.Discard)
			if len(tt.err) == 0 {
				if err != nil || got != tt.want {
					t.Fatalf("parseNodeFlags = %+v, %v; want %+v", got, err, tt.want)
				}
				return
			}
			if err == nil {
				t.Fatalf("parseNodeFlags = %+v, want an error", got)
			}
			for _, want := range tt.err {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("error %q does not say %q", err, want)
				}
			}
		})
	}
}

// TestServeNodeStopsWithItsContext: SIGTERM (the context's end) stops the node agent's server, and its
// heartbeat, promptly.
func TestServeNodeStopsWithItsContext(t *testing.T) {
	agent, err := nodeagent.New(nodeagent.Config{Node: "node-a", Namespace: "cg-system", Client: fake.NewClientset(),
		Heartbeat: protocol.DefaultNodeAgentHeartbeat, Pod: "node-agent-x7k2p"})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- serveNode(ctx, agent, ln) }()
	if err := checkHealth(context.Background(), "http://"+ln.Addr().String()+"/healthz", 5*time.Second); err != nil {
		t.Fatalf("a node agent that has read nothing yet is not healthy: %v", err)
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("serveNode returned %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("serveNode still runs 5 s after its context ended")
	}
}
