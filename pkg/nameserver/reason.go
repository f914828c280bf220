package nameserver

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"strings"
	"syscall"
)

// Reasons a name server could not be read, for conditions and metrics.
const (
	ReasonUnreachable = "Unreachable" // the connection could not be opened or was closed
	ReasonRefused     = "Refused"     // the connection was refused (nothing listens there)
	ReasonTimeout     = "Timeout"     // no answer within the timeout
	ReasonGarbled     = "Garbled"     // the answer cannot be read
	ReasonRejected    = "Rejected"    // the name server answered with an error code
	ReasonNotAllowed  = "NotAllowed"  // the destination is not allowed by the Client's Egress: nothing was dialled
	ReasonDenied      = "Denied"      // the credentials could not be used (they would go in clear): nothing was dialled
	ReasonUntrusted   = "Untrusted"   // the TLS handshake failed, or the name server's certificate is not trusted
)

// sentences are what each reason says to a person, in words fixed here.
var sentences = map[string]string{
	ReasonUnreachable: "the name server could not be reached or closed the connection",
	ReasonRefused:     "the connection was refused",
	ReasonTimeout:     "the name server did not answer in time",
	ReasonGarbled:     "the name server's answer could not be read",
	ReasonRejected:    "the name server answered the request with an error",
	ReasonNotAllowed:  "the address is not among the allowed destinations, so it was not dialled",
	ReasonDenied:      "the credentials were not sent, as they would have gone without TLS",
	ReasonUntrusted:   "the TLS handshake failed or the name server's certificate is not trusted",
}

// Error is a failure to read from one name server.
type Error struct {
	Addr   string
	Topic  string
	Reason string
	// Err is the cause, for the operator's own log. Its text may carry what the remote sent (a
	// rejection's remark, cut short): put Sentence, not Err, where tenants read.
	Err error
}

// Error is the failure in detail, for the operator's own log.
func (e *Error) Error() string {
	return fmt.Sprintf("name server %s, topic %s: %s: %v", e.Addr, e.Topic, e.Reason, e.Err)
}

func (e *Error) Unwrap() error { return e.Err }

// Sentence says what went wrong in a fixed English sentence per reason, without the error's text or any
// byte the name server sent: it is what goes into conditions and events.
func (e *Error) Sentence() string {
	if s, ok := sentences[e.Reason]; ok {
		return s
	}
	return "the name server could not be read"
}

// ErrNotAllowed is the cause of a ReasonNotAllowed failure.
var ErrNotAllowed = errors.New("destination not allowed")

// ErrDenied is the cause of a ReasonDenied failure.
var ErrDenied = errors.New("credentials would be sent without TLS")

// rejected is an answer with an error code.
type rejected struct {
	code   int
	remark string
}

func (e *rejected) Error() string { return fmt.Sprintf("answered code %d: %q", e.code, e.remark) }

// untrusted is a TLS handshake that failed other than by running out of time.
type untrusted struct{ err error }

func (e *untrusted) Error() string { return "TLS handshake: " + e.err.Error() }
func (e *untrusted) Unwrap() error { return e.err }

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return strings.ToValidUTF8(s[:n], "") + "…"
}

// reasonOf classifies a failure.
func reasonOf(err error) string {
	var (
		rej *rejected
		unt *untrusted
	)
	switch {
	case errors.As(err, &rej):
		return ReasonRejected
	case errors.Is(err, ErrNotAllowed):
		return ReasonNotAllowed
	case errors.Is(err, ErrDenied):
		return ReasonDenied
	case errors.Is(err, ErrGarbled):
		return ReasonGarbled
	case isTimeout(err):
		return ReasonTimeout
	case errors.As(err, &unt):
		return ReasonUntrusted
	case errors.Is(err, syscall.ECONNREFUSED):
		return ReasonRefused
	}
	return ReasonUnreachable
}

func isTimeout(err error) bool {
	if errors.Is(err, os.ErrDeadlineExceeded) || errors.Is(err, context.DeadlineExceeded) {
		return true
	}
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// handshakeError is err, from a TLS handshake, marked untrusted unless it is a timeout or the caller's
// cancellation.
func handshakeError(err error) error {
	if isTimeout(err) || errors.Is(err, context.Canceled) {
		return err
	}
	return &untrusted{err: err}
}
