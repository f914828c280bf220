package nameserver_test

import (
	"context"
	"crypto/tls"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/consumergroup-operator/consumergroup-operator/internal/rocketmqstandin"
	"github.com/consumergroup-operator/consumergroup-operator/pkg/nameserver"
)

func TestRoutesOverTLS(t *testing.T) {
	serverConfig, roots := rocketmqstandin.Certificates(t)
	nsrv := rocketmqstandin.StartTLS(t, serverConfig)
	nsrv.SetTopic("orders", rocketmqstandin.Broker{Name: "broker-a", Queues: 8})
	_, port, _ := net.SplitHostPort(nsrv.Addr)

	// The server name is the dialled host, an IP or a name, unless set.
	trusted := 0 // the trusted cases -run selects, each one request for orders
	for _, tc := range []struct{ name, addr string }{
		{"trusted, dialled by IP", nsrv.Addr},
		{"trusted, dialled by name", net.JoinHostPort("localhost", port)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			trusted++
			c := &nameserver.Client{TLS: &tls.Config{RootCAs: roots}, Timeout: 2 * time.Second}
			answers, by, errs := c.Routes(context.Background(), []string{tc.addr}, []string{"orders", "gone"})
			if len(errs) != 0 || by != tc.addr || answers["orders"].Route == nil || !answers["gone"].Absent {
				t.Fatalf("%s: answers %v by %q, errors %v", tc.addr, answers, by, errs)
			}
		})
	}
	_, otherRoots := rocketmqstandin.Certificates(t)
	for _, tc := range []struct {
		name   string
		config *tls.Config
	}{
		{"another CA", &tls.Config{RootCAs: otherRoots}},
		{"another server name", &tls.Config{RootCAs: roots, ServerName: "name-server.example"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := &nameserver.Client{TLS: tc.config, Timeout: 2 * time.Second}
			answers, _, errs := c.Routes(context.Background(), []string{nsrv.Addr}, []string{"orders"})
			if len(answers) != 0 || len(errs) != 1 || errs[0].Reason != nameserver.ReasonUntrusted {
				t.Errorf("answers %v, errors %v; want one Untrusted", answers, errs)
			}
		})
	}
	if n := nsrv.Requests("orders"); n != trusted {
		t.Errorf("%d requests for orders reached the name server, want %d: none over a connection not trusted", n, trusted)
	}
}

func TestTLSFailsFastAgainstPlaintext(t *testing.T) {
	_, roots := rocketmqstandin.Certificates(t)
	plain := rocketmqstandin.Start(t)
	plain.SetTopic("orders", rocketmqstandin.Broker{Name: "broker-a", Queues: 8})
	c := &nameserver.Client{TLS: &tls.Config{RootCAs: roots}, Timeout: 2 * time.Second}
	start := time.Now()
	_, _, errs := c.Routes(context.Background(), []string{plain.Addr}, []string{"orders"})
	if took := time.Since(start); took > time.Second {
		t.Errorf("took %v: a plaintext name server should fail the handshake at once", took)
	}
	if len(errs) != 1 || errs[0].Reason != nameserver.ReasonUntrusted {
		t.Fatalf("errors %v, want one Untrusted", errs)
	}
}

// A handshake that runs out of time is a timeout, not a matter of trust.
func TestTLSHandshakeWithinTheDeadline(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = ln.Close() }()
	held := make(chan net.Conn, 1)
	go func() {
		if c, err := ln.Accept(); err == nil {
			held <- c // accepted, never answered
		}
	}()
	defer func() {
		select {
		case c := <-held:
			_ = c.Close()
		default:
		}
	}()
	_, roots := rocketmqstandin.Certificates(t)
	c := &nameserver.Client{TLS: &tls.Config{RootCAs: roots}, Timeout: 200 * time.Millisecond}
	start := time.Now()
	_, _, errs := c.Routes(context.Background(), []string{ln.Addr().String()}, []string{"orders"})
	if took := time.Since(start); took > time.Second {
		t.Errorf("took %v, want the 200ms timeout", took)
	}
	if len(errs) != 1 || errs[0].Reason != nameserver.ReasonTimeout {
		t.Fatalf("errors %v, want one Timeout", errs)
	}
}

func TestCredentialsOnlyOverTLS(t *testing.T) {
	creds := &nameserver.Credentials{AccessKey: "ak", SecretKey: "sk"}
	plain := rocketmqstandin.Start(t)
	plain.SetTopic("orders", rocketmqstandin.Broker{Name: "broker-a", Queues: 8})
	other := rocketmqstandin.Start(t)
	before, beforeOther := accepted(t, plain), accepted(t, other)

	c := &nameserver.Client{Credentials: creds, Timeout: time.Second}
	answers, by, errs := c.Routes(context.Background(), []string{plain.Addr, other.Addr}, []string{"orders"})
	if len(answers) != 0 || by != "" || len(errs) != 2 {
		t.Fatalf("answers %v by %q, errors %v; want a denial per name server", answers, by, errs)
	}
	for i, e := range errs {
		if e.Reason != nameserver.ReasonDenied || e.Addr != []string{plain.Addr, other.Addr}[i] {
			t.Errorf("error %d: %v, want Denied", i, e)
		}
	}
	if n, m := accepted(t, plain)-before-1, accepted(t, other)-beforeOther-1; n+m != 0 {
		t.Errorf("%d and %d connections reached the name servers", n, m)
	}

	c = &nameserver.Client{Credentials: creds, PlaintextCredentials: true, Timeout: time.Second}
	if _, _, errs := c.Routes(context.Background(), []string{plain.Addr}, []string{"orders"}); len(errs) != 0 {
		t.Fatalf("in clear, allowed: %v", errs)
	}
	if req := plain.LastRequest(); req.ExtFields["AccessKey"] != "ak" || req.ExtFields["Signature"] == "" {
		t.Errorf("in clear, allowed: the request was %v, want it signed", req.ExtFields)
	}

	serverConfig, roots := rocketmqstandin.Certificates(t)
	secure := rocketmqstandin.StartTLS(t, serverConfig)
	secure.SetTopic("orders", rocketmqstandin.Broker{Name: "broker-a", Queues: 8})
	c = &nameserver.Client{Credentials: creds, TLS: &tls.Config{RootCAs: roots}, Timeout: 2 * time.Second}
	if _, _, errs := c.Routes(context.Background(), []string{secure.Addr}, []string{"orders"}); len(errs) != 0 {
		t.Fatalf("over TLS: %v", errs)
	}
	if req := secure.LastRequest(); req.ExtFields["AccessKey"] != "ak" || req.ExtFields["Signature"] == "" {
		t.Errorf("over TLS: the request was %v, want it signed", req.ExtFields)
	}
}

func TestSentencesAreFixed(t *testing.T) {
	reasons := []string{nameserver.ReasonUnreachable, nameserver.ReasonRefused, nameserver.ReasonTimeout, nameserver.ReasonGarbled,
		nameserver.ReasonRejected, nameserver.ReasonNotAllowed, nameserver.ReasonDenied, nameserver.ReasonUntrusted}
	seen := map[string]string{}
	for _, r := range reasons {
		s := (&nameserver.Error{Reason: r}).Sentence()
		if s == "" || seen[s] != "" {
			t.Errorf("%s: sentence %q, already %s's", r, s, seen[s])
		}
		seen[s] = r
	}
	if s := (&nameserver.Error{Reason: "Other"}).Sentence(); s == "" {
		t.Error("an unknown reason has no sentence")
	}

	// What a name server says goes no further than the operator's log, and is cut short there.
	const secret = "internal host db-7.corp:5432 password=hunter2 "
	errs := rejectingNameServer(t, strings.Repeat(secret, 100))
	if s := errs[0].Sentence(); strings.Contains(s, "hunter2") || s != (&nameserver.Error{Reason: nameserver.ReasonRejected}).Sentence() {
		t.Errorf("sentence %q", s)
	}
	if e := errs[0].Error(); len(e) > 400 {
		t.Errorf("the error's text is %d bytes long", len(e))
	}
}
