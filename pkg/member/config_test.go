package member_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/consumergroup-operator/consumergroup-operator/pkg/member"
	"github.com/consumergroup-operator/consumergroup-operator/pkg/protocol"
)

func TestConfigFromEnv(t *testing.T) {
	t.Setenv(member.EnvPodName, "consumer-0")
	t.Setenv(member.EnvPodNamespace, "shop")
	t.Setenv(member.EnvPodUID, "6f1c")
	t.Setenv(member.EnvConsumerGroup, "orders")
	t.Setenv(member.EnvMemberID, "")
	cfg, err := member.ConfigFromEnv()
	if err != nil {
		t.Fatal(err)
	}
	if cfg.MemberID != "" || cfg.Pod != "consumer-0" || cfg.Namespace != "shop" || cfg.Group != "orders" || cfg.PodUID != "6f1c" {
		t.Fatalf("ConfigFromEnv = %+v", cfg)
	}
	// New checks the configuration and talks to nothing: no clientset is needed to see the defaults.
	c, err := member.New(nil, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if got := c.Config(); got.MemberID != "consumer-0" || got.LeaseDuration != protocol.DefaultLeaseDuration || got.MaxClockSkew != protocol.DefaultMaxClockSkew {
		t.Fatalf("defaults: member id %q, lease duration %v, clock skew %v", got.MemberID, got.LeaseDuration, got.MaxClockSkew)
	}
	if c.LeaseName() != "orders.consumer-0" {
		t.Fatalf("Lease name %q", c.LeaseName())
	}

	t.Setenv(member.EnvPodUID, "")
	t.Setenv(member.EnvConsumerGroup, "")
	_, err = member.ConfigFromEnv()
	if err == nil || !strings.Contains(err.Error(), member.EnvPodUID) || !strings.Contains(err.Error(), member.EnvConsumerGroup) {
		t.Fatalf("ConfigFromEnv without POD_UID and CONSUMER_GROUP returned %v, want an error naming both", err)
	}
	for _, tc := range []struct {
		name string
		d    time.Duration
	}{
		{"lease duration not in whole seconds", 1500 * time.Millisecond},
		{"lease duration past the maximum", 2 * time.Hour},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := member.New(nil, member.Config{Namespace: "shop", Group: "orders", Pod: "p", PodUID: "u", LeaseDuration: tc.d}); err == nil {
				t.Errorf("New accepted a lease duration of %v", tc.d)
			}
		})
	}
}

func TestNodeModeConfig(t *testing.T) {
	for _, name := range []string{member.EnvPodName, member.EnvPodNamespace, member.EnvPodUID, member.EnvConsumerGroup} {
		t.Setenv(name, "x")
	}
	tokenFile := filepath.Join(t.TempDir(), "token")
	tests := []struct {
		name      string
		agent     string
		tokenFile string
		err       []string
	}{
		{"per-member mode", "", "", nil},
		{"node mode", "http://10.0.0.5:9443", tokenFile, nil},
		{"no token file", "http://10.0.0.5:9443", "", []string{member.EnvNodeAgentTokenFile}},
		{"not a URL", "10.0.0.5:9443", tokenFile, []string{"not an http or https URL", member.EnvNodeAgent}},
		{"no host", "http://:9443", tokenFile, []string{"not an http or https URL"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Setenv(member.EnvNodeAgent, tt.agent)
			t.Setenv(member.EnvNodeAgentTokenFile, tt.tokenFile)
			cfg, err := member.ConfigFromEnv()
			if len(tt.err) == 0 {
				if err != nil || cfg.NodeAgent != tt.agent || cfg.NodeAgentTokenFile != tt.tokenFile {
					t.Fatalf("ConfigFromEnv = %+v, %v", cfg, err)
				}
				return
			}
			for _, want := range tt.err {
				if err == nil || !strings.Contains(err.Error(), want) {
					t.Errorf("ConfigFromEnv returned %v, want an error containing %q", err, want)
				}
			}
		})
	}
}

// The token file is read anew for each request: the kubelet rotates the token in place.
func TestNodeAgentTokenIsReadFromItsFileEachTime(t *testing.T) {
	tokenFile := filepath.Join(t.TempDir(), "token")
	c, err := member.New(nil, member.Config{Namespace: "shop", Group: "orders", Pod: "p", PodUID: "u",
		NodeAgent: "http://10.0.0.5:9443", NodeAgentTokenFile: tokenFile})
	if err != nil {
		t.Fatal(err)
	}
	token := c.Config().NodeAgentToken
	if _, err := token(); err == nil {
		t.Fatal("a missing token file gave a token")
	}
	for _, want := range []string{"first", "rotated"} {
		if err := os.WriteFile(tokenFile, []byte(want+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		if got, err := token(); err != nil || got != want {
			t.Fatalf("token() = %q, %v; want %q", got, err, want)
		}
	}
}

// A member in node mode keeps a 10-minute Lease unless told otherwise: its agent confirms its view, so its
// renewals only tell of a member cut off alone.
func TestNodeModeLeaseDuration(t *testing.T) {
	token := func() (string, error) { return "t", nil }
	tests := []struct {
		name  string
		agent string
		set   time.Duration
		want  time.Duration
	}{
		{"per-member mode", "", 0, protocol.DefaultLeaseDuration},
		{"node mode", "http://10.0.0.5:9443", 0, protocol.DefaultNodeModeLeaseDuration},
		{"node mode, set", "http://10.0.0.5:9443", 90 * time.Second, 90 * time.Second},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := member.New(nil, member.Config{Namespace: "shop", Group: "orders", Pod: "p", PodUID: "u",
				NodeAgent: tt.agent, NodeAgentToken: token, LeaseDuration: tt.set})
			if err != nil {
				t.Fatal(err)
			}
			if got := c.Config().LeaseDuration; got != tt.want {
				t.Fatalf("lease duration %v, want %v", got, tt.want)
			}
		})
	}
}
