package manager

import (
	"context"
	"net"
	"net/netip"
	"net/url"
	"os"
	"strings"
	"time"

	"k8s.io/client-go/rest"

	"github.com/consumergroup-operator/consumergroup-operator/controllers"
	"github.com/consumergroup-operator/consumergroup-operator/pkg/nameserver"
)

// NameServerFlags are the command line's say on where groups may read routes from.
type NameServerFlags struct {
	// CredentialsNamespace is where ClusterNameServers' Secrets are read; the operator's own namespace
	// when empty.
	CredentialsNamespace string
	// InlineCIDRs, comma-separated, turns inline name servers (a group's own spec.nameServer.addresses
	// or service) on, for those destinations only. Empty, the default, leaves them off.
	InlineCIDRs string
	// InlinePorts, comma-separated, are the ports inline name servers may use; empty allows any.
	InlinePorts []int32
}

// serviceAccountNamespaceFile holds the namespace of a pod's ServiceAccount, as the kubelet mounts it.
const serviceAccountNamespaceFile = "/var/run/secrets/kubernetes.io/serviceaccount/namespace"

// Policy is the name-server policy the flags give, for an operator that talks to the API server of cfg,
// whose addresses no name server's egress opens unless it lists them exactly.
func (f NameServerFlags) Policy(ctx context.Context, cfg *rest.Config) (controllers.NameServerPolicy, error) {
	p := controllers.NameServerPolicy{CredentialsNamespace: f.CredentialsNamespace, Forbidden: apiServerAddrs(ctx, cfg)}
	if p.CredentialsNamespace == "" {
		if raw, err := os.ReadFile(serviceAccountNamespaceFile); err == nil {
			p.CredentialsNamespace = strings.TrimSpace(string(raw))
		}
	}
	if f.InlineCIDRs != "" {
		var cidrs []string
		for _, c := range strings.Split(f.InlineCIDRs, ",") {
			cidrs = append(cidrs, strings.TrimSpace(c))
		}
		egress, err := nameserver.ParseEgress(cidrs, f.InlinePorts)
		if err != nil {
			return p, err
		}
		egress.Forbidden = p.Forbidden
		p.Inline = egress
	}
	return p, nil
}

// apiServerAddrs are the addresses of the API server: the in-cluster Service's and those cfg's host
// resolves to. A name that does not resolve within a second adds nothing.
func apiServerAddrs(ctx context.Context, cfg *rest.Config) []netip.Addr {
	var hosts []string
	if h := os.Getenv("KUBERNETES_SERVICE_HOST"); h != "" {
		hosts = append(hosts, h)
	}
	if cfg != nil {
		if u, err := url.Parse(cfg.Host); err == nil && u.Hostname() != "" {
			hosts = append(hosts, u.Hostname())
		}
	}
	var out []netip.Addr
	for _, h := range hosts {
		if a, err := netip.ParseAddr(h); err == nil {
			out = append(out, a.Unmap())
			continue
		}
		lctx, cancel := context.WithTimeout(ctx, time.Second)
		ips, err := net.DefaultResolver.LookupNetIP(lctx, "ip", h)
		cancel()
		if err == nil {
			for _, a := range ips {
				out = append(out, a.Unmap())
			}
		}
	}
	return out
}
