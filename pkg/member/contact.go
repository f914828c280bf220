package member

import (
	"context"
	"fmt"
	"sync"
	"time"

	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	"github.com/consumergroup-operator/consumergroup-operator/pkg/protocol"
)

// contactFence confirms, every protocol.ContactInterval of the contact timeout, that the member's view of
// the assignment is current, and fences the member once it has not confirmed for the whole timeout: the
// application is then told to read nothing. It is what lets the operator count on the member's promise
// (protocol.StopsWithinAnnotation) without any write from the member: whatever the operator published
// before a read the member sent has reached the member's view when the read confirms it.
type contactFence struct {
	clock   clock.WithTickerAndDelayedExecution
	timeout time.Duration
	// attemptTimeout bounds one confirmation.
	attemptTimeout time.Duration
	// confirm says whether the view is current as of a read sent now; changed is called, with no lock
	// held, when the member becomes fenced or stops being fenced.
	confirm func(context.Context) (bool, error)
	changed func()

	// mu guards confirmedAt and why; nothing else is taken while it is held.
	mu sync.Mutex
	// confirmedAt is when the member sent the last read that confirmed its view; zero before the first.
	confirmedAt time.Time
	// why says why the last attempt did not confirm; "" when it did.
	why string
	// timer fires when the last confirmation stops covering the member. It belongs to run's goroutine.
	timer clock.Timer
}

func newContactFence(cfg Config, confirm func(context.Context) (bool, error), changed func()) *contactFence {
	return &contactFence{clock: cfg.Clock, timeout: cfg.ContactTimeout, attemptTimeout: attemptTimeout(cfg), confirm: confirm, changed: changed}
}

// attemptTimeout bounds one confirmation. A read of the member's own is bounded by the interval between
// them. A node agent answers with a read it sends up to its read interval (a second) after the request
// arrives, and the answer still counts from when the member sent the request: it is given two intervals
// and a second more.
func attemptTimeout(cfg Config) time.Duration {
	interval := protocol.ContactInterval(cfg.ContactTimeout)
	if cfg.nodeMode() {
		return 2*interval + time.Second
	}
	return perMemberAttemptTimeout(interval)
}

// perMemberAttemptTimeout bounds a confirmation by the member's own read.
func perMemberAttemptTimeout(interval time.Duration) time.Duration {
	return max(interval, 100*time.Millisecond)
}

// status is whether the member may read at now, and why not.
func (f *contactFence) status(now time.Time) (fresh bool, reason string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	switch {
	case f.confirmedAt.IsZero():
		return false, "the member has not yet confirmed that its view of the assignment is current"
	case now.Sub(f.confirmedAt) >= f.timeout:
		why := f.why
		if why == "" {
			why = "no read has completed"
		}
		return false, fmt.Sprintf("the member has not confirmed for %v that its view of the assignment is current (%s): it reads nothing until it does", f.timeout, why)
	}
	return true, ""
}

// run confirms the view until ctx ends.
func (f *contactFence) run(ctx context.Context) {
	interval := protocol.ContactInterval(f.timeout)
	ticker := f.clock.NewTicker(interval)
	defer ticker.Stop()
	defer func() {
		if f.timer != nil {
			f.timer.Stop()
		}
	}()
	logger := klog.FromContext(ctx)
	var failing bool
	for {
		ok, err := f.attempt(ctx)
		if ctx.Err() != nil {
			return
		}
		switch {
		case err != nil && !failing:
			logger.Error(err, "Cannot confirm that the assignment view is current; the member reads nothing once it has not confirmed for the contact timeout", "contactTimeout", f.timeout)
		case err == nil && failing:
			logger.Info("Confirmed the assignment view again")
		}
		failing = err != nil || !ok
		select {
		case <-ctx.Done():
			return
		case <-ticker.C():
		}
	}
}

// attempt sends one confirming read, bounded by attemptTimeout, and records what it showed. A
// confirmation counts from sentAt, taken before the read (or the request to the node agent) is sent,
// however long the answer takes.
func (f *contactFence) attempt(ctx context.Context) (bool, error) {
	sentAt := f.clock.Now()
	readCtx, cancel := context.WithTimeout(ctx, f.attemptTimeout)
	ok, err := f.confirm(readCtx)
	cancel()
	wasFresh, until := f.record(sentAt, ok, err)
	if ok && err == nil {
		// The timer that fences the member when no confirmation follows. Its callback only starts a
		// goroutine: a clock may run it while holding its own lock (a fake one does).
		if f.timer == nil {
			f.timer = f.clock.AfterFunc(until, func() { go f.changed() })
		} else {
			f.timer.Reset(until)
		}
		if !wasFresh {
			f.changed()
		}
	}
	return ok, err
}

// record notes what a read sent at sentAt showed. It reports whether the member was confirmed before, and
// how long from now the last confirmation covers it.
func (f *contactFence) record(sentAt time.Time, ok bool, err error) (wasFresh bool, until time.Duration) {
	f.mu.Lock()
	defer f.mu.Unlock()
	wasFresh = !f.confirmedAt.IsZero() && f.clock.Now().Sub(f.confirmedAt) < f.timeout
	switch {
	case err != nil:
		f.why = err.Error()
	case !ok:
		f.why = "the watch has not caught up with the API server"
	default:
		f.why = ""
		f.confirmedAt = sentAt
	}
	return wasFresh, f.confirmedAt.Add(f.timeout).Sub(f.clock.Now())
}
