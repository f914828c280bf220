package nameserver_test

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"strconv"
	"testing"
	"time"

	"github.com/consumergroup-operator/consumergroup-operator/internal/rocketmqstandin"
	"github.com/consumergroup-operator/consumergroup-operator/pkg/nameserver"
)

func egress(t *testing.T, cidrs []string, ports []int32, forbidden ...string) *nameserver.Egress {
	t.Helper()
	e, err := nameserver.ParseEgress(cidrs, ports)
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range forbidden {
		e.Forbidden = append(e.Forbidden, netip.MustParseAddr(f))
	}
	return e
}

func TestEgressAllows(t *testing.T) {
	const apiServer = "10.96.0.1"
	for _, tc := range []struct {
		name  string
		cidrs []string
		ports []int32
		addr  string
		want  bool
	}{
		{"in a CIDR", []string{"10.0.0.0/8"}, nil, "10.1.2.3:9876", true},
		{"outside every CIDR", []string{"10.0.0.0/8"}, nil, "192.168.1.1:9876", false},
		{"in the second CIDR", []string{"10.0.0.0/8", "192.168.0.0/16"}, nil, "192.168.1.1:9876", true},
		{"an allowed port", []string{"10.0.0.0/8"}, []int32{9876, 9877}, "10.1.2.3:9877", true},
		{"another port", []string{"10.0.0.0/8"}, []int32{9876}, "10.1.2.3:22", false},
		{"port 0", []string{"0.0.0.0/0"}, nil, "10.1.2.3:0", false},
		{"IPv6", []string{"fd00::/8"}, nil, "[fd00::1]:9876", true},
		{"IPv4 CIDR, IPv6 address", []string{"0.0.0.0/0"}, nil, "[fd00::1]:9876", false},
		{"IPv4-mapped address", []string{"10.0.0.0/8"}, nil, "[::ffff:10.1.2.3]:9876", true},
		{"IPv4-mapped CIDR", []string{"::ffff:10.0.0.0/104"}, nil, "10.1.2.3:9876", true},
		{"unspecified", []string{"0.0.0.0/0"}, nil, "0.0.0.0:9876", false},
		{"unspecified, listed exactly", []string{"0.0.0.0/32"}, nil, "0.0.0.0:9876", false},
		{"IPv6 unspecified", []string{"::/0"}, nil, "[::]:9876", false},
		{"multicast", []string{"224.0.0.0/4"}, nil, "224.0.0.1:9876", false},
		{"IPv6 multicast", []string{"::/0"}, nil, "[ff02::1]:9876", false},
		{"loopback, everything listed", []string{"0.0.0.0/0"}, nil, "127.0.0.1:9876", false},
		{"loopback, a broad CIDR", []string{"96.0.0.0/3"}, nil, "127.0.0.1:9876", false},
		{"loopback, listed", []string{"127.0.0.0/8"}, nil, "127.0.0.1:9876", true},
		{"loopback, one address", []string{"127.0.0.1/32"}, nil, "127.0.0.1:9876", true},
		{"loopback, another address", []string{"127.0.0.1/32"}, nil, "127.0.0.2:9876", false},
		{"loopback as IPv4-mapped", []string{"0.0.0.0/0"}, nil, "[::ffff:127.0.0.1]:9876", false},
		{"IPv6 loopback", []string{"::/0"}, nil, "[::1]:9876", false},
		{"IPv6 loopback, listed", []string{"::1/128"}, nil, "[::1]:9876", true},
		{"metadata, everything listed", []string{"0.0.0.0/0"}, nil, "169.254.169.254:80", false},
		{"metadata, 128.0.0.0/1", []string{"128.0.0.0/1"}, nil, "169.254.169.254:80", false},
		{"link-local, listed", []string{"169.254.0.0/16"}, nil, "169.254.169.254:80", true},
		{"link-local, one address", []string{"169.254.10.1/32"}, nil, "169.254.10.1:80", true},
		{"IPv6 link-local", []string{"::/0"}, nil, "[fe80::1]:9876", false},
		{"IPv6 link-local with a zone", []string{"::/0"}, nil, "[fe80::1%eth0]:9876", false},
		{"IPv6 link-local, listed, with a zone", []string{"fe80::/10"}, nil, "[fe80::1%eth0]:9876", true},
		{"the API server, in a CIDR", []string{"10.0.0.0/8"}, nil, apiServer + ":443", false},
		{"the API server, in a /31", []string{"10.96.0.0/31"}, nil, apiServer + ":443", false},
		{"the API server, listed exactly", []string{"10.96.0.1/32"}, nil, apiServer + ":443", true},
		{"next to the API server", []string{"10.0.0.0/8"}, nil, "10.96.0.2:443", true},
		{"nothing listed", nil, nil, "10.1.2.3:9876", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := egress(t, tc.cidrs, tc.ports, apiServer)
			if got := e.Allows(netip.MustParseAddrPort(tc.addr)); got != tc.want {
				t.Errorf("%v allows %s: %v, want %v", tc.cidrs, tc.addr, got, tc.want)
			}
		})
	}
	var none *nameserver.Egress
	if !none.Allows(netip.MustParseAddrPort("169.254.169.254:80")) {
		t.Error("a nil Egress refuses")
	}
}

func TestParseEgress(t *testing.T) {
	e, err := nameserver.ParseEgress([]string{"10.0.0.1/8", "fd00::/8"}, []int32{9876})
	if err != nil {
		t.Fatal(err)
	}
	if e.CIDRs[0] != netip.MustParsePrefix("10.0.0.0/8") || e.Ports[0] != 9876 {
		t.Errorf("parsed %+v", e)
	}
	for _, bad := range []struct {
		name  string
		cidrs []string
		ports []int32
	}{
		{"an address without a prefix length", []string{"10.0.0.0"}, nil},
		{"a prefix length past 32", []string{"10.0.0.0/33"}, nil},
		{"a host name", []string{"example.com/8"}, nil},
		{"port 0", []string{"10.0.0.0/8"}, []int32{0}},
		{"a port past 65535", []string{"10.0.0.0/8"}, []int32{65536}},
	} {
		t.Run(bad.name, func(t *testing.T) {
			if _, err := nameserver.ParseEgress(bad.cidrs, bad.ports); err == nil {
				t.Errorf("ParseEgress(%v, %v) accepted", bad.cidrs, bad.ports)
			}
		})
	}
}

// accepted is how many connections n accepted, once a probe of the test's own is: the probe is accepted
// after every connection made before it, so none is still waiting to be counted. The count includes
// the probe.
func accepted(t *testing.T, n *rocketmqstandin.NameServer) int {
	t.Helper()
	before := n.Accepted()
	probe, err := net.Dial("tcp", n.Addr)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = probe.Close() }()
	for deadline := time.Now().Add(5 * time.Second); n.Accepted() == before; {
		if time.Now().After(deadline) {
			t.Fatal("the probe was not accepted")
		}
		time.Sleep(time.Millisecond)
	}
	return n.Accepted()
}

func TestNotAllowedDialsNothing(t *testing.T) {
	nsrv := rocketmqstandin.Start(t)
	nsrv.SetTopic("orders", rocketmqstandin.Broker{Name: "broker-a", Queues: 8})
	_, port, _ := net.SplitHostPort(nsrv.Addr)
	byName := net.JoinHostPort("localhost", port)
	for _, tc := range []struct {
		name  string
		addr  string
		cidrs []string
		ports []int32
	}{
		{"an IP literal outside the CIDRs", nsrv.Addr, []string{"10.0.0.0/8"}, nil},
		{"an IP literal on another port", nsrv.Addr, []string{"127.0.0.0/8"}, []int32{1}},
		{"loopback under everything", nsrv.Addr, []string{"0.0.0.0/0"}, nil},
		{"a name resolving outside the CIDRs", byName, []string{"10.0.0.0/8"}, nil},
		{"a name resolving to loopback under everything", byName, []string{"0.0.0.0/0", "::/0"}, nil},
		{"a port by name", "127.0.0.1:http", []string{"127.0.0.0/8"}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := accepted(t, nsrv)
			c := &nameserver.Client{Egress: egress(t, tc.cidrs, tc.ports), Timeout: time.Second}
			answers, _, errs := c.Routes(context.Background(), []string{tc.addr}, []string{"orders"})
			if len(answers) != 0 || len(errs) != 1 || errs[0].Reason != nameserver.ReasonNotAllowed || !errors.Is(errs[0], nameserver.ErrNotAllowed) {
				t.Fatalf("answers %v, errors %v; want one NotAllowed", answers, errs)
			}
			if n := accepted(t, nsrv) - before - 1; n != 0 {
				t.Errorf("%d connections reached the name server", n)
			}
		})
	}
	t.Run("a test's Dial is not called for an IP literal not allowed", func(t *testing.T) {
		called := false
		c := &nameserver.Client{Egress: egress(t, []string{"10.0.0.0/8"}, nil), Dial: func(ctx context.Context, network, addr string) (net.Conn, error) {
			called = true
			var d net.Dialer
			return d.DialContext(ctx, network, addr)
		}}
		_, _, errs := c.Routes(context.Background(), []string{nsrv.Addr}, []string{"orders"})
		if called || len(errs) != 1 || errs[0].Reason != nameserver.ReasonNotAllowed {
			t.Fatalf("dialled: %v; errors %v", called, errs)
		}
	})
	for _, tc := range []struct{ name, addr string }{
		{"allowed: an IP literal", nsrv.Addr},
		{"allowed: a name resolving to loopback", byName},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := &nameserver.Client{Egress: egress(t, []string{"127.0.0.0/8"}, []int32{int32(mustAtoi(t, port))}), Timeout: time.Second}
			answers, by, errs := c.Routes(context.Background(), []string{tc.addr}, []string{"orders"})
			if len(errs) != 0 || by != tc.addr || answers["orders"].Route == nil {
				t.Fatalf("answers %v by %q, errors %v", answers, by, errs)
			}
		})
	}
}

func mustAtoi(t *testing.T, s string) int {
	t.Helper()
	n, err := strconv.Atoi(s)
	if err != nil {
		t.Fatal(err)
	}
	return n
}
