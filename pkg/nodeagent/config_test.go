package nodeagent

import (
	"strings"
	"testing"
	"time"

	"k8s.io/client-go/kubernetes/fake"
)

// New refuses a configuration it cannot run safely, naming what is wrong; zero values take the defaults.
func TestNewRefusesABadConfig(t *testing.T) {
	good := func() Config { return Config{Node: "n", Namespace: "ns", Client: fake.NewClientset()} }
	for _, tc := range []struct {
		name string
		mod  func(*Config)
		want string // in the error; empty when New must accept it
	}{
		{"defaults", func(*Config) {}, ""},
		{"no node", func(c *Config) { c.Node = "" }, "node name is required"},
		{"no namespace", func(c *Config) { c.Namespace = "" }, "namespace of the node views is required"},
		{"no client", func(c *Config) { c.Client = nil }, "Kubernetes client is required"},
		{"negative read timeout", func(c *Config) { c.ReadTimeout = -time.Second }, "read timeout -1s must not be negative"},
		{"negative bound", func(c *Config) { c.MaxWaiting = -1 }, "must not be negative"},
		{"negative review rate", func(c *Config) { c.ReviewsPerSecond = -1 }, "review rate -1 a second and burst 256 must not be negative"},
		{"negative review burst", func(c *Config) { c.ReviewBurst = -5 }, "review rate 10 a second and burst -5 must not be negative"},
		{"a heartbeat", func(c *Config) { c.Heartbeat, c.Pod = 8*time.Second, "agent-x" }, ""},
		{"the shortest heartbeat", func(c *Config) { c.Heartbeat, c.Pod = MinHeartbeat, "agent-x" }, ""},
		{"a heartbeat under 4 s", func(c *Config) { c.Heartbeat, c.Pod = 3500*time.Millisecond, "agent-x" }, "heartbeat 3.5s must be at least 4s"},
		{"a heartbeat longer than a Lease holds", func(c *Config) { c.Heartbeat, c.Pod = 1<<31*time.Second, "agent-x" }, "must be at most 2147483647 seconds"},
		{"a heartbeat without a pod name", func(c *Config) { c.Heartbeat = 8 * time.Second }, "pod name, the holder of its heartbeat Lease, is required"},
		{"no heartbeat, no pod name", func(c *Config) { c.Heartbeat = -time.Second }, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := good()
			tc.mod(&cfg)
			_, err := New(cfg)
			switch {
			case tc.want == "" && err != nil:
				t.Fatalf("New: %v, want no error", err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Fatalf("New: %v, want an error with %q", err, tc.want)
			}
		})
	}
}
