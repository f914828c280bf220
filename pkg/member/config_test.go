package member_test

import (
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
