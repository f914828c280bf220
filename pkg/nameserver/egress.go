package nameserver

import (
	"fmt"
	"net/netip"
	"slices"
)

// Egress is where a Client may connect: an administrator's list of ranges and ports. Addresses are
// checked after name resolution, as they are dialled (see Client.Egress).
//
// Some addresses need more than a broad range: loopback (127.0.0.0/8, ::1) and link-local
// (169.254.0.0/16, fe80::/10, where cloud metadata services answer) are allowed only by a listed CIDR
// that contains the address and is at least as specific as that range, so 0.0.0.0/0 or 10.0.0.0/8 never
// open 127.0.0.1 or 169.254.169.254, but 127.0.0.0/8 or 127.0.0.1/32 listed on purpose does. Forbidden
// addresses (the API server's, say) need a CIDR of exactly that address (/32 or /128). Unspecified and
// multicast addresses are never allowed, nor port 0.
//
// A nil *Egress allows every destination.
type Egress struct {
	// CIDRs are the ranges an address must fall in.
	CIDRs []netip.Prefix
	// Ports are the ports that may be dialled; empty allows any.
	Ports []uint16
	// Forbidden are addresses allowed only by a CIDR of exactly that address.
	Forbidden []netip.Addr
}

// specialRanges need a CIDR at least as specific as themselves.
var specialRanges = []netip.Prefix{
	netip.MustParsePrefix("127.0.0.0/8"),
	netip.MustParsePrefix("::1/128"),
	netip.MustParsePrefix("169.254.0.0/16"),
	netip.MustParsePrefix("fe80::/10"),
}

// ParseEgress is the Egress of CIDRs such as "10.20.0.0/16" and ports from 1 to 65535. A CIDR with
// bits set past its mask is taken as its range ("10.0.0.1/8" is 10.0.0.0/8), as a Kubernetes isCIDR
// rule accepts it. An IPv4-mapped IPv6 CIDR is taken as the IPv4 CIDR it maps.
func ParseEgress(cidrs []string, ports []int32) (*Egress, error) {
	e := &Egress{}
	for _, s := range cidrs {
		p, err := netip.ParsePrefix(s)
		if err != nil {
			return nil, fmt.Errorf("CIDR %q: %w", s, err)
		}
		e.CIDRs = append(e.CIDRs, unmapPrefix(p.Masked()))
	}
	for _, p := range ports {
		if p < 1 || p > 65535 {
			return nil, fmt.Errorf("port %d: want 1 to 65535", p)
		}
		e.Ports = append(e.Ports, uint16(p))
	}
	return e, nil
}

// Allows reports whether ap may be dialled.
func (e *Egress) Allows(ap netip.AddrPort) bool {
	if e == nil {
		return true
	}
	// A zone (fe80::1%eth0) is where an address is, not which: prefixes never contain zoned addresses.
	a := ap.Addr().Unmap().WithZone("")
	if !a.IsValid() || a.IsUnspecified() || a.IsMulticast() || ap.Port() == 0 {
		return false
	}
	if len(e.Ports) > 0 && !slices.Contains(e.Ports, ap.Port()) {
		return false
	}
	minBits := 0
	for _, s := range specialRanges {
		if s.Contains(a) {
			minBits = s.Bits()
		}
	}
	for _, f := range e.Forbidden {
		if f.Unmap().WithZone("") == a {
			minBits = a.BitLen()
		}
	}
	for _, p := range e.CIDRs {
		p = unmapPrefix(p)
		if p.Contains(a) && p.Bits() >= minBits {
			return true
		}
	}
	return false
}

// unmapPrefix is an IPv4-mapped IPv6 prefix (::ffff:10.0.0.0/104) as the IPv4 prefix it maps
// (10.0.0.0/8); any other prefix as it is.
func unmapPrefix(p netip.Prefix) netip.Prefix {
	if !p.Addr().Is4In6() || p.Bits() < 96 {
		return p
	}
	return netip.PrefixFrom(p.Addr().Unmap(), p.Bits()-96)
}
