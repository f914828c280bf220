package nodeagent

import (
	"context"
	"errors"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	"github.com/consumergroup-operator/consumergroup-operator/pkg/protocol"
)

// errBusy refuses a request while MaxWaiting others wait; errStopped one that arrives, or waits, once
// the reader has stopped.
var (
	errBusy    = errors.New("too many confirmation requests are waiting")
	errStopped = errors.New("the node agent is stopping")
)

// reader reads the node view for the requests that wait, one read at a time, at most once per
// minInterval, and answers each request with the first read sent after it arrived.
type reader struct {
	name        string
	get         func(ctx context.Context) (*corev1.ConfigMap, error)
	clock       clock.Clock
	minInterval time.Duration
	readTimeout time.Duration
	maxWaiting  int
	// wake tells run that a request arrived; stopped is closed once run has returned.
	wake    chan struct{}
	stopped chan struct{}

	// mu guards the fields below it.
	mu sync.Mutex
	// pending are the requests that arrived since the last read was sent: the next read answers them.
	pending map[*waiter]struct{}
	// waiting counts the requests not yet answered: pending ones and those the read in flight answers.
	waiting int
	// readErr is the error of the last read, nil when it succeeded or none was needed yet.
	readErr error
}

// waiter is one request waiting for its read.
type waiter struct {
	q      query
	answer chan verdict
}

func newReader(cfg Config) *reader {
	name := protocol.NodeViewName(cfg.Node)
	configMaps := cfg.Client.CoreV1().ConfigMaps(cfg.Namespace)
	return &reader{
		name: name,
		get: func(ctx context.Context) (*corev1.ConfigMap, error) {
			// A plain Get is served from etcd with a quorum read: what the operator wrote before the
			// read was sent is in it.
			return configMaps.Get(ctx, name, metav1.GetOptions{})
		},
		clock: cfg.Clock, minInterval: cfg.MinReadInterval, readTimeout: cfg.ReadTimeout, maxWaiting: cfg.MaxWaiting,
		wake: make(chan struct{}, 1), stopped: make(chan struct{}), pending: map[*waiter]struct{}{},
	}
}

// verdict is the answer a read gives a request, and whether the node has no view at all.
type verdict struct {
	answer protocol.NodeAgentConfirmResponse
	noView bool
}

// errNoNodeView comes with the answer of a read that found no node view: the operator keeps none for the
// node, or none at all (node views are off).
var errNoNodeView = errors.New("the node has no node view")

// confirm waits for the answer to q: that of the first read sent after confirm was called. It fails with
// errBusy when too many requests wait, and with ctx's error when ctx ends first; with errNoNodeView,
// beside the answer, when the read found no view.
func (r *reader) confirm(ctx context.Context, q query) (protocol.NodeAgentConfirmResponse, error) {
	w := &waiter{q: q, answer: make(chan verdict, 1)}
	r.mu.Lock()
	if r.waiting >= r.maxWaiting {
		r.mu.Unlock()
		return protocol.NodeAgentConfirmResponse{}, errBusy
	}
	r.pending[w] = struct{}{}
	r.waiting++
	r.mu.Unlock()
	defer func() {
		r.mu.Lock()
		delete(r.pending, w) // a request whose client went away costs no read
		r.waiting--
		r.mu.Unlock()
	}()
	select {
	case r.wake <- struct{}{}:
	default: // run is already woken
	}
	select {
	case v := <-w.answer:
		if v.noView {
			return v.answer, errNoNodeView
		}
		return v.answer, nil
	case <-ctx.Done():
		return protocol.NodeAgentConfirmResponse{}, ctx.Err()
	case <-r.stopped:
		return protocol.NodeAgentConfirmResponse{}, errStopped
	}
}

// run reads for the waiting requests until ctx ends.
func (r *reader) run(ctx context.Context) {
	defer close(r.stopped)
	var lastSent time.Time
	for {
		select {
		case <-ctx.Done():
			return
		case <-r.wake:
		}
		if !lastSent.IsZero() {
			if wait := r.minInterval - r.clock.Since(lastSent); wait > 0 {
				select {
				case <-ctx.Done():
					return
				case <-r.clock.After(wait):
				}
			}
		}
		// The requests taken now all arrived before the read below is sent; those that arrive while it
		// is in flight wait for the next one, and wake this loop again.
		batch := r.takePending()
		if len(batch) == 0 {
			continue
		}
		lastSent = r.clock.Now()
		read := r.read(ctx)
		for _, w := range batch {
			w.answer <- verdict{answer: answer(read, w.q), noView: read.missing}
		}
	}
}

// takePending empties pending and returns what it held.
func (r *reader) takePending() []*waiter {
	r.mu.Lock()
	defer r.mu.Unlock()
	batch := make([]*waiter, 0, len(r.pending))
	for w := range r.pending {
		batch = append(batch, w)
	}
	clear(r.pending)
	return batch
}

// read sends one GET of the node view and interprets its answer.
func (r *reader) read(ctx context.Context) viewRead {
	readCtx, cancel := context.WithTimeout(ctx, r.readTimeout)
	cm, err := r.get(readCtx)
	cancel()
	// A missing view is an answer from the API server: the agent is in contact, the operator has not
	// written the view.
	failed := err
	if apierrors.IsNotFound(err) {
		failed = nil
	}
	r.mu.Lock()
	was := r.readErr
	r.readErr = failed
	r.mu.Unlock()
	logger := klog.FromContext(ctx)
	switch {
	case failed != nil && was == nil:
		logger.Error(failed, "Cannot read the node view; members on this node are not confirmed until a read succeeds", "configMap", r.name)
	case failed == nil && was != nil:
		logger.Info("Read the node view again", "configMap", r.name)
	}
	return readOf(r.name, cm, err)
}

// health is the error of the last read, nil when it succeeded or none was needed yet.
func (r *reader) health() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.readErr
}
