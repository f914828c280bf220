package main

import (
	"flag"
	"io"
	"testing"

	"github.com/consumergroup-operator/consumergroup-operator/internal/manager"
)

func parse(t *testing.T, args ...string) (*config, error) {
	t.Helper()
	fs := flag.NewFlagSet("consumergroup-operator", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	return parseFlags(fs, args)
}

// TestDefaultFlags: without flags the operator serves its metrics over HTTPS with authentication and
// authorization on :8443, and keeps to the client rate limit sized for 10,000 pods.
func TestDefaultFlags(t *testing.T) {
	c, err := parse(t)
	if err != nil {
		t.Fatal(err)
	}
	if c.metrics.BindAddress != ":8443" || !c.metrics.Secure || c.metrics.CertDir != "" || c.metrics.EnableHTTP2 {
		t.Errorf("metrics %+v, want secure serving on :8443 with a self-signed certificate, HTTP/1.1 only", c.metrics)
	}
	if c.clientLimit.QPS != 100 || c.clientLimit.Burst != 200 {
		t.Errorf("client rate limit %+v, want QPS 100, burst 200", c.clientLimit)
	}
	if c.gcPercent != manager.DefaultGCPercent {
		t.Errorf("garbage collector's target %d, want %d", c.gcPercent, manager.DefaultGCPercent)
	}
	if c.concurrentPasses != 4 {
		t.Errorf("%d passes at once, want 4", c.concurrentPasses)
	}
	if c.clientLimit != manager.DefaultClientRateLimit || c.election != manager.DefaultLeaderElection {
		t.Errorf("defaults %+v, %+v differ from internal/manager's", c.clientLimit, c.election)
	}
}

func TestFlags(t *testing.T) {
	c, err := parse(t, "--kube-api-qps=50", "--kube-api-burst=60", "--metrics-secure=false", "--metrics-bind-address=127.0.0.1:8080", "--gc-percent=60", "--concurrent-passes=3")
	if err != nil {
		t.Fatal(err)
	}
	if c.gcPercent != 60 || c.concurrentPasses != 3 {
		t.Errorf("--gc-percent=60 --concurrent-passes=3 gave %d and %d", c.gcPercent, c.concurrentPasses)
	}
	if c.clientLimit != (manager.ClientRateLimit{QPS: 50, Burst: 60}) || c.metrics.Secure || c.metrics.BindAddress != "127.0.0.1:8080" {
		t.Errorf("flags gave %+v and %+v", c.clientLimit, c.metrics)
	}
	for _, args := range [][]string{
		{"--kube-api-qps=0"},
		{"--kube-api-burst=0"},
		{"--metrics-cert-path=" + t.TempDir()}, // no tls.crt or tls.key in it
		{"--leader-elect-lease-duration=1s"},
		{"--gc-percent=0"},
		{"--concurrent-passes=0"},
	} {
		if _, err := parse(t, args...); err == nil {
			t.Errorf("%q accepted", args)
		}
	}
}

// TestNameServerFlags: without flags, inline name servers are off; with them, they are on for the
// CIDRs and ports given, and a port out of range is refused.
func TestNameServerFlags(t *testing.T) {
	c, err := parse(t)
	if err != nil {
		t.Fatal(err)
	}
	if c.nameServers.InlineCIDRs != "" || len(c.nameServers.InlinePorts) != 0 || c.nameServers.CredentialsNamespace != "" {
		t.Errorf("name servers %+v by default, want inline ones off and the pod's namespace for credentials", c.nameServers)
	}
	c, err = parse(t, "--inline-name-server-cidrs=10.0.0.0/8,192.168.0.0/16", "--inline-name-server-ports=9876,9877", "--credentials-namespace=rocketmq")
	if err != nil {
		t.Fatal(err)
	}
	if c.nameServers.InlineCIDRs != "10.0.0.0/8,192.168.0.0/16" || len(c.nameServers.InlinePorts) != 2 || c.nameServers.CredentialsNamespace != "rocketmq" {
		t.Errorf("name servers %+v", c.nameServers)
	}
	if _, err := parse(t, "--inline-name-server-ports=0"); err == nil {
		t.Error("port 0 was accepted")
	}
}
