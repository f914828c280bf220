package manager

import (
	"context"
	"net/netip"
	"testing"

	"k8s.io/client-go/rest"
)

// TestNameServerPolicy: no flag leaves inline name servers off; the inline CIDRs and ports bound where
// they may be dialled, and the API server's address is refused even inside a CIDR that covers it.
func TestNameServerPolicy(t *testing.T) {
	t.Setenv("KUBERNETES_SERVICE_HOST", "10.96.0.1")
	cfg := &rest.Config{Host: "https://10.0.0.5:6443"}
	off, err := NameServerFlags{CredentialsNamespace: "ops"}.Policy(context.Background(), cfg)
	if err != nil || off.Inline != nil || off.CredentialsNamespace != "ops" {
		t.Fatalf("without inline CIDRs: %+v, %v; want inline name servers off", off, err)
	}
	p, err := NameServerFlags{InlineCIDRs: "10.0.0.0/8", InlinePorts: []int32{9876}}.Policy(context.Background(), cfg)
	if err != nil || p.Inline == nil {
		t.Fatalf("with inline CIDRs: %+v, %v", p, err)
	}
	for addr, want := range map[string]bool{
		"10.1.2.3:9876":  true,
		"10.1.2.3:22":    false, // not an allowed port
		"127.0.0.1:9876": false, // loopback needs a CIDR within it
		"10.96.0.1:9876": false, // the API server's Service
		"10.0.0.5:9876":  false, // the API server the operator talks to
		"192.0.2.1:9876": false,
	} {
		if got := p.Inline.Allows(netip.MustParseAddrPort(addr)); got != want {
			t.Errorf("%s: allowed %v, want %v", addr, got, want)
		}
	}
	if _, err := (NameServerFlags{InlineCIDRs: "10.0.0.0/33"}).Policy(context.Background(), cfg); err == nil {
		t.Error("an invalid CIDR was accepted")
	}
}
