package testenv

import (
	"errors"
	"net/http"
	"strings"
	"sync/atomic"
	"time"

	"k8s.io/client-go/rest"
)

// LeaseWrites is a copy of cfg whose writes to Leases, while on is set, are refused (delay 0), as by an
// API server the pod cannot reach or an admission webhook on Leases that is down, or held back by delay,
// as by an API server queueing writes (API Priority and Fairness). Its reads pass at once.
func LeaseWrites(cfg *rest.Config, on *atomic.Bool, delay time.Duration) *rest.Config {
	cfg = rest.CopyConfig(cfg)
	cfg.Wrap(func(rt http.RoundTripper) http.RoundTripper { return leaseWrites{next: rt, on: on, delay: delay} })
	return cfg
}

type leaseWrites struct {
	next  http.RoundTripper
	on    *atomic.Bool
	delay time.Duration
}

var errLeaseWriteRefused = errors.New("connection refused (injected)")

func (l leaseWrites) RoundTrip(req *http.Request) (*http.Response, error) {
	if l.on.Load() && strings.Contains(req.URL.Path, "/leases") && req.Method != http.MethodGet {
		if l.delay == 0 {
			return nil, errLeaseWriteRefused
		}
		time.Sleep(l.delay)
	}
	return l.next.RoundTrip(req)
}
