package nameserver

import (
	"bufio"
	"context"
	"crypto/hmac"
	"crypto/sha1"
	"crypto/tls"
	"encoding/base64"
	"fmt"
	"maps"
	"net"
	"net/netip"
	"slices"
	"strconv"
	"sync/atomic"
	"syscall"
	"time"
)

// DefaultTimeout bounds one request, from dialling to the last byte of its answer, as RocketMQ clients'
// requestTimeout does.
const DefaultTimeout = 3 * time.Second

// maxSkippedFrames is how many frames that answer nothing of ours a connection may carry before the
// answer: name servers send none, so more is garbage.
const maxSkippedFrames = 8

// Credentials sign requests for a name server that enforces ACLs (RocketMQ's AclClientRPCHook).
type Credentials struct {
	AccessKey     string
	SecretKey     string
	SecurityToken string
}

// Sign adds the AccessKey, the Signature and, if set, the SecurityToken to cmd's header fields: the
// signature is an HMAC-SHA1 with the secret key of the header fields' values, AccessKey and SecurityToken
// included, in the order of their names, followed by body.
func (c *Credentials) Sign(cmd *Command, body []byte) {
	fields := map[string]string{"AccessKey": c.AccessKey}
	if c.SecurityToken != "" {
		fields["SecurityToken"] = c.SecurityToken
	}
	for k, v := range cmd.ExtFields {
		fields[k] = v
	}
	var content []byte
	for _, k := range slices.Sorted(maps.Keys(fields)) {
		content = append(content, fields[k]...)
	}
	mac := hmac.New(sha1.New, []byte(c.SecretKey))
	mac.Write(content)
	mac.Write(body)
	for k, v := range fields {
		cmd.ExtFields[k] = v
	}
	cmd.ExtFields["Signature"] = base64.StdEncoding.EncodeToString(mac.Sum(nil))
}

// Client asks name servers for routes.
type Client struct {
	// Dial opens a connection; a net.Dialer's when nil. It is a hook for tests: when set, Egress checks
	// only addresses whose host is an IP literal, before calling it, as the names Dial resolves are out
	// of sight.
	Dial func(ctx context.Context, network, addr string) (net.Conn, error)
	// Egress, when set, is where the Client may connect: an address whose host is an IP literal is
	// checked before anything is dialled, and the net.Dialer checks every address a name resolves to
	// just before it connects to it, so a name cannot lead elsewhere between a check and a connection.
	// A destination not allowed fails with ReasonNotAllowed, with no connection opened.
	Egress *Egress
	// TLS, when set, speaks TLS over every connection (RocketMQ's TLS is TLS around the same frames),
	// with a clone of this configuration whose ServerName is the dialled host when empty. The handshake
	// is part of the first request, within its deadline.
	TLS *tls.Config
	// Timeout bounds each request, connection included; DefaultTimeout when zero.
	Timeout time.Duration
	// Credentials, when set, sign each request. They are sent over TLS only: without TLS and without
	// PlaintextCredentials, Routes dials nothing and fails every name server with ReasonDenied.
	Credentials *Credentials
	// PlaintextCredentials lets Credentials be sent without TLS, where anybody on the path can read the
	// access key and replay signed requests.
	PlaintextCredentials bool
	opaque               atomic.Int32
}

// Answer is a name server's answer about one topic: its route, or that it does not exist.
type Answer struct {
	Route  *Route
	Absent bool
}

// Routes asks the name servers addrs, in turn, for the route of each topic: it starts with the first,
// and moves on to the next for the topics left whenever one fails. It returns the answers it got, the
// address that gave the last of them, and every failure met on the way. A topic missing from the answers
// could be read from none of them.
func (c *Client) Routes(ctx context.Context, addrs, topics []string) (answers map[string]Answer, answeredBy string, errs []*Error) {
	answers = map[string]Answer{}
	if len(topics) > 0 && c.Credentials != nil && c.TLS == nil && !c.PlaintextCredentials {
		for _, addr := range addrs {
			errs = append(errs, &Error{Addr: addr, Topic: topics[0], Reason: ReasonDenied, Err: ErrDenied})
		}
		return answers, "", errs
	}
	left := slices.Clone(topics)
	for _, addr := range addrs {
		if len(left) == 0 || ctx.Err() != nil {
			break
		}
		n, err := c.ask(ctx, addr, left, answers)
		if n > 0 {
			answeredBy = addr
		}
		left = left[n:]
		if err != nil {
			errs = append(errs, err)
		}
	}
	return answers, answeredBy, errs
}

// ask reads topics, in order, from addr over one connection, into answers, until one fails. It returns
// how many it read.
func (c *Client) ask(ctx context.Context, addr string, topics []string, answers map[string]Answer) (int, *Error) {
	timeout := c.Timeout
	if timeout <= 0 {
		timeout = DefaultTimeout
	}
	fail := func(topic string, err error) *Error {
		return &Error{Addr: addr, Topic: topic, Reason: reasonOf(err), Err: err}
	}
	// The first request's deadline covers the dial and the TLS handshake too.
	deadline := requestDeadline(ctx, timeout)
	dctx, cancel := context.WithDeadline(ctx, deadline)
	conn, err := c.connect(dctx, addr, deadline)
	cancel()
	if err != nil {
		return 0, fail(topics[0], err)
	}
	defer func() { _ = conn.Close() }()
	stop := context.AfterFunc(ctx, func() { _ = conn.SetDeadline(time.Now()) })
	defer stop()
	r := bufio.NewReader(conn)
	for i, topic := range topics {
		if i > 0 {
			deadline = requestDeadline(ctx, timeout)
		}
		if err := conn.SetDeadline(deadline); err != nil {
			return i, fail(topic, err)
		}
		a, err := c.askOne(conn, r, topic)
		if err != nil {
			return i, fail(topic, err)
		}
		answers[topic] = a
	}
	return len(topics), nil
}

// requestDeadline is when a request starting now must end: after timeout, or at ctx's deadline if sooner.
func requestDeadline(ctx context.Context, timeout time.Duration) time.Time {
	deadline := time.Now().Add(timeout)
	if d, ok := ctx.Deadline(); ok && d.Before(deadline) {
		deadline = d
	}
	return deadline
}

// connect dials addr, if Egress allows it, and shakes hands over TLS if the Client speaks it, all
// before deadline.
func (c *Client) connect(ctx context.Context, addr string, deadline time.Time) (net.Conn, error) {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, err
	}
	if c.Egress != nil {
		if err := c.checkLiteral(addr); err != nil {
			return nil, err
		}
	}
	conn, err := c.dial(ctx, addr)
	if err != nil {
		return nil, err
	}
	if c.TLS == nil {
		return conn, nil
	}
	cfg := c.TLS.Clone()
	if cfg.ServerName == "" {
		// A zone (fe80::1%eth0) is no part of a name a certificate carries.
		if ip, err := netip.ParseAddr(host); err == nil {
			host = ip.WithZone("").String()
		}
		cfg.ServerName = host
	}
	tc := tls.Client(conn, cfg)
	if err := conn.SetDeadline(deadline); err != nil {
		_ = conn.Close()
		return nil, err
	}
	if err := tc.HandshakeContext(ctx); err != nil {
		_ = conn.Close()
		return nil, handshakeError(err)
	}
	return tc, nil
}

// checkLiteral refuses addr if its host is an IP literal Egress does not allow, or if its port is not
// a number (a service name would be resolved out of sight). Host names are checked as they resolve.
func (c *Client) checkLiteral(addr string) error {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return err
	}
	p, err := strconv.ParseUint(port, 10, 16)
	if err != nil {
		return fmt.Errorf("%w: port %q is not a number", ErrNotAllowed, port)
	}
	// A host name is checked as it resolves, by the dialer's Control hook.
	if ip, perr := netip.ParseAddr(host); perr == nil && !c.Egress.Allows(netip.AddrPortFrom(ip, uint16(p))) {
		return fmt.Errorf("%w: %s", ErrNotAllowed, addr)
	}
	return nil
}

func (c *Client) dial(ctx context.Context, addr string) (net.Conn, error) {
	if c.Dial != nil {
		return c.Dial(ctx, "tcp", addr)
	}
	var d net.Dialer
	if c.Egress != nil {
		d.ControlContext = func(_ context.Context, _, address string, _ syscall.RawConn) error {
			ap, err := netip.ParseAddrPort(address)
			if err != nil || !c.Egress.Allows(ap) {
				return fmt.Errorf("%w: %s", ErrNotAllowed, address)
			}
			return nil
		}
	}
	return d.DialContext(ctx, "tcp", addr)
}

// RouteRequest is the request for topic's route, unsigned.
func RouteRequest(topic string, opaque int32) Command {
	return NewRequest(CodeGetRouteByTopic, opaque, map[string]string{"topic": topic})
}

func (c *Client) askOne(conn net.Conn, r *bufio.Reader, topic string) (Answer, error) {
	req := RouteRequest(topic, c.opaque.Add(1))
	if c.Credentials != nil {
		c.Credentials.Sign(&req, nil)
	}
	if err := WriteFrame(conn, req, nil); err != nil {
		return Answer{}, err
	}
	for range maxSkippedFrames {
		res, body, err := ReadFrame(r, MaxFrame)
		if err != nil {
			return Answer{}, err
		}
		if !res.IsResponse() || res.Opaque != req.Opaque {
			continue
		}
		switch res.Code {
		case CodeSuccess:
			route, err := DecodeRoute(body)
			if err != nil {
				return Answer{}, err
			}
			return Answer{Route: route}, nil
		case CodeTopicNotExist:
			return Answer{Absent: true}, nil
		default:
			return Answer{}, &rejected{code: res.Code, remark: truncate(res.Remark, 200)}
		}
	}
	return Answer{}, fmt.Errorf("%w: %d frames without the answer", ErrGarbled, maxSkippedFrames)
}
