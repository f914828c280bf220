package nameserver

import (
	"bufio"
	"context"
	"crypto/hmac"
	"crypto/sha1"
	"encoding/base64"
	"errors"
	"fmt"
	"maps"
	"net"
	"os"
	"slices"
	"strings"
	"sync/atomic"
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
	// Dial opens a connection; a net.Dialer's when nil.
	Dial func(ctx context.Context, network, addr string) (net.Conn, error)
	// Timeout bounds each request, connection included; DefaultTimeout when zero.
	Timeout time.Duration
	// Credentials, when set, sign each request.
	Credentials *Credentials
	opaque      atomic.Int32
}

// Answer is a name server's answer about one topic: its route, or that it does not exist.
type Answer struct {
	Route  *Route
	Absent bool
}

// Reasons a name server could not be read, for conditions and metrics.
const (
	ReasonUnreachable = "Unreachable" // the connection could not be opened or was closed
	ReasonTimeout     = "Timeout"     // no answer within the timeout
	ReasonGarbled     = "Garbled"     // the answer cannot be read
	ReasonRejected    = "Rejected"    // the name server answered with an error code
)

// Error is a failure to read from one name server.
type Error struct {
	Addr   string
	Topic  string
	Reason string
	Err    error
}

func (e *Error) Error() string {
	return fmt.Sprintf("name server %s, topic %s: %s", e.Addr, e.Topic, e.Err)
}

func (e *Error) Unwrap() error { return e.Err }

// Routes asks the name servers addrs, in turn, for the route of each topic: it starts with the first,
// and moves on to the next for the topics left whenever one fails. It returns the answers it got, the
// address that gave the last of them, and every failure met on the way. A topic missing from the answers
// could be read from none of them.
func (c *Client) Routes(ctx context.Context, addrs, topics []string) (answers map[string]Answer, answeredBy string, errs []*Error) {
	answers = map[string]Answer{}
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
	dctx, cancel := context.WithTimeout(ctx, timeout)
	conn, err := c.dial(dctx, addr)
	cancel()
	if err != nil {
		return 0, fail(topics[0], err)
	}
	defer func() { _ = conn.Close() }()
	stop := context.AfterFunc(ctx, func() { _ = conn.SetDeadline(time.Now()) })
	defer stop()
	r := bufio.NewReader(conn)
	for i, topic := range topics {
		deadline := time.Now().Add(timeout)
		if d, ok := ctx.Deadline(); ok && d.Before(deadline) {
			deadline = d
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

func (c *Client) dial(ctx context.Context, addr string) (net.Conn, error) {
	if c.Dial != nil {
		return c.Dial(ctx, "tcp", addr)
	}
	var d net.Dialer
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

type rejected struct {
	code   int
	remark string
}

func (e *rejected) Error() string { return fmt.Sprintf("answered code %d: %q", e.code, e.remark) }

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return strings.ToValidUTF8(s[:n], "") + "…"
}

// reasonOf classifies a failure.
func reasonOf(err error) string {
	var rej *rejected
	switch {
	case errors.As(err, &rej):
		return ReasonRejected
	case errors.Is(err, ErrGarbled):
		return ReasonGarbled
	case errors.Is(err, os.ErrDeadlineExceeded) || errors.Is(err, context.DeadlineExceeded):
		return ReasonTimeout
	}
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return ReasonTimeout
	}
	return ReasonUnreachable
}
