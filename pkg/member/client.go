package member

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	"github.com/consumergroup-operator/consumergroup-operator/pkg/protocol"
)

// Queue is one message queue: topic, broker name and queue id, as RocketMQ's MessageQueue.
type Queue = protocol.Queue

// ErrUnknownGeneration is returned by Ack for a generation the pod has not seen published.
var ErrUnknownGeneration = errors.New("generation not published")

// ErrAckPending is returned by Ack when the acknowledgement's write did not land within AckWait (a quarter
// of the stop timeout): the acknowledgement is kept, the write goes on, and the Lease's next write carries
// it if this one fails. The application carries on: it takes its next assignment in time.
var ErrAckPending = errors.New("acknowledgement not yet written")

// ErrDrained is returned by Ack once Drain has stopped the member: it reads nothing until its process
// restarts, so it acknowledges nothing new.
var ErrDrained = errors.New("the member has drained")

// drainedReason is the reason nothing is in force once Drain has stopped the member.
const drainedReason = "the member has drained: it reads nothing, and claims nothing, until its process restarts"

// Assignment is what a member consumes: the queues one generation of the group's assignment lists for
// it. Generation 0 means no assignment is in force and the member must consume nothing: none has been
// published yet, the group is gone, or the member does not hold a fresh Lease.
type Assignment struct {
	// Generation is the assignment generation; it only grows while the group exists.
	Generation int64
	// Member is the member id the operator published the entry for.
	Member string
	// Queues are the member's queues, sorted by topic, broker and id.
	Queues []Queue
}

func (a Assignment) equal(b Assignment) bool {
	return a.Generation == b.Generation && a.Member == b.Member && slices.Equal(a.Queues, b.Queues)
}

// memberLease is the member's Lease as the Client uses it: kept (taken and renewed) by a leaseKeeper, which
// asks the Client, as its leaseSource, what to write.
type memberLease interface {
	// run takes and renews the Lease until ctx ends. checkView fails while the member's view of the
	// assignment is behind the API server: the Lease is then not renewed.
	run(ctx context.Context, checkView func(context.Context) error)
	// status is how the Lease stands at now.
	status(now time.Time) leaseStatus
	// requestWrite asks for a write soon, without waiting for it: a claim of new queues.
	requestWrite()
	// writeNow writes what the member says now, without renewing, and fails while the Lease is not held:
	// an acknowledgement.
	writeNow(ctx context.Context) error
	// flush is writeNow unless written reports that the Lease already says what the member says, or the
	// Lease is not held. No write that began before it lands after it.
	flush(ctx context.Context, written func() bool) error
}

// leaseStatus is how the member's Lease stands at a moment.
type leaseStatus struct {
	// fresh is set while the Lease is held and its last renewal covers the member; reason says why not.
	fresh  bool
	reason string
	// renewedAt is when the Lease was last renewed, zero when never; err is the last failure to renew it.
	renewedAt time.Time
	err       error
}

// Client is one member pod's view of its group's assignment, and its voice to the operator.
// Its methods are safe for concurrent use; Run must be running for anything to be delivered.
type Client struct {
	cfg   Config
	view  *assignmentView
	lease memberLease
	// contact fences the member when it cannot confirm its view; nil without contact fencing.
	contact *contactFence
	// throughAgent reports whether the member confirms its view through its node's agent, which its
	// Lease then says; nil in per-member mode.
	throughAgent func() bool

	running atomic.Bool
	// updates holds the newest undelivered assignment: a slow reader skips to the latest.
	updates chan Assignment
	// autoAck wakes the loop that acknowledges delivered assignments when Config.AutoAck is set.
	autoAck chan struct{}
	// ackMu serialises acknowledgements. It is taken before the keeper's writeMu and mu (the package
	// doc's Locks).
	ackMu sync.Mutex
	// ackWrite is the acknowledgement write in flight, and ackNext the one that follows it, which carries
	// the acknowledgements recorded while the first was in flight; both guarded by ackMu.
	ackWrite, ackNext *ackWrite
	// runCtx is the context of Run: the acknowledgement writes outlive the Ack calls that start them.
	runCtx atomic.Pointer[context.Context]

	// mu guards state and the fields below it.
	mu sync.Mutex
	// state is what the member has decided (decide): its phase, the assignment in force, and the one
	// pending its claim. It changes in applyLocked only.
	state memberState
	// inForceSince is when state.inForce was delivered.
	inForceSince time.Time
	// claimed is the claim the Lease holds, as last written; writtenStopped whether it says the member
	// stopped.
	claimed        []Queue
	writtenStopped bool
	// acked is the last generation the application acknowledged and ackedQueues its queues; written is
	// the acknowledged generation the Lease holds.
	acked       int64
	ackedQueues []Queue
	written     int64
	// delivered are the assignments delivered since the last acknowledgement, by generation, so that an
	// acknowledgement of any of them claims its queues.
	delivered map[int64][]Queue
	// changed is closed and replaced whenever the assignment in force or the acknowledgement changes, and
	// when the member stops.
	changed chan struct{}
	// load is the application's latest load report (ReportLoad).
	load map[Queue]float64
}

// New returns a Client for the member cfg describes. It checks cfg and talks to nothing until Run.
func New(cs kubernetes.Interface, cfg Config) (*Client, error) {
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, fmt.Errorf("member configuration: %w", err)
	}
	c := &Client{
		cfg:       cfg,
		updates:   make(chan Assignment, 1),
		autoAck:   make(chan struct{}, 1),
		changed:   make(chan struct{}),
		delivered: map[int64][]Queue{},
		state:     memberState{phase: phaseStarting, reason: "the assignment has not been read yet"},
	}
	// Nothing is in force from the start, but an earlier process of this pod may have handed the
	// application queues (a sidecar restarts on its own): it is told generation 0 from now on.
	c.inForceSince = cfg.Clock.Now()
	c.view = newAssignmentView(cs, cfg, c.evaluate)
	c.lease = newLeaseKeeper(cs, cfg, c)
	if cfg.contactFencing() {
		confirm := c.view.confirm
		if cfg.nodeMode() {
			agent := newNodeConfirmer(cfg, c.view)
			// The Lease says so at once rather than at its next renewal, minutes away in node mode.
			agent.firstAnswered = c.lease.requestWrite
			c.throughAgent = agent.confirmsThroughAgent
			confirm = agent.confirm
		}
		c.contact = newContactFence(cfg, confirm, c.evaluate)
	}
	return c, nil
}

// Config is the client's configuration, with defaults filled in.
func (c *Client) Config() Config { return c.cfg }

// LeaseName is the name of the member's Lease.
func (c *Client) LeaseName() string { return c.cfg.leaseName() }

// Run watches the assignment and keeps the Lease until ctx ends, then returns nil. A Client runs once: a
// second call returns an error at once. Failed API calls are logged and retried; while the Lease cannot be
// renewed, the member holds no queues.
func (c *Client) Run(ctx context.Context) error {
	if !c.running.CompareAndSwap(false, true) {
		return errors.New("member client is already running")
	}
	logger := klog.FromContext(ctx).WithValues("group", c.cfg.Group, "pod", c.cfg.Pod)
	ctx = klog.NewContext(ctx, logger)
	c.runCtx.Store(&ctx)

	synced := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() { c.view.run(ctx, synced) })
	wg.Go(func() {
		// The Lease names the group as its owner, which the assignment says: read it first.
		select {
		case <-synced:
			logger.V(1).Info("Read assignment ConfigMap", "configMap", protocol.AssignmentName(c.cfg.Group))
		case <-ctx.Done():
			return
		}
		if c.contact != nil {
			wg.Go(func() { c.contact.run(ctx) })
		}
		c.lease.run(ctx, c.view.checkCurrent)
	})
	if c.cfg.AutoAck {
		wg.Go(func() { c.autoAckLoop(ctx) })
	}
	wg.Wait()
	return nil
}

// record is what the Lease must say now: the acknowledged generation, and a claim of every queue the
// application may be reading, those it acknowledged and those delivered since.
func (c *Client) record() leaseRecord {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.state.phase == phaseStopped {
		// Drain has handed the application generation 0 and waited for it to stop: the claim is empty,
		// which tells the operator and a new pod of the same name that this pod reads nothing, and
		// stopped that it never will (it takes no assignment again), so that the operator need not wait
		// for it to acknowledge anything, a recovery included.
		return leaseRecord{acked: c.acked, groupUID: c.state.group, stopped: true, throughAgent: c.confirmsThroughAgent()}
	}
	claim := protocol.UnionQueues(protocol.UnionQueues(c.ackedQueues, c.state.inForce.Queues), c.state.pending.Queues)
	var load map[Queue]float64
	if len(c.load) > 0 {
		// Only what the member may be reading: the report stays as small as the claim.
		load = make(map[Queue]float64, min(len(c.load), len(claim)))
		for _, q := range claim {
			if v, ok := c.load[q]; ok {
				load[q] = v
			}
		}
	}
	return leaseRecord{acked: c.acked, claim: claim, groupUID: c.state.group, load: load, throughAgent: c.confirmsThroughAgent()}
}

// confirmsThroughAgent reports whether the member confirms its view through its node's agent: once the
// agent has answered, for the rest of the process's life.
func (c *Client) confirmsThroughAgent() bool { return c.throughAgent != nil && c.throughAgent() }

// ReportLoad records the load of the queues the application reads, in the group's unit (for example an
// average of messages per second per queue): a finite number of 0 or more each. It replaces the last
// report; a queue left out has no reported load. The report reaches the operator with the member's next
// Lease renewal, within a third of the lease duration, and never causes a write of its own. Only the
// queues the member may be reading are reported.
func (c *Client) ReportLoad(loads map[Queue]float64) error {
	if err := protocol.CheckLoad(loads); err != nil {
		return err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.load = maps.Clone(loads)
	return nil
}

// recorded takes what the Lease says after a write: the claim it holds may let a pending assignment be
// delivered.
func (c *Client) recorded(st leaseRecord) {
	if c.takeRecord(st) {
		c.evaluate()
	}
}

// takeRecord notes what the Lease says after a write, and reports whether its claim now covers the
// assignment pending it.
func (c *Client) takeRecord(st leaseRecord) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.claimed, c.writtenStopped = st.claim, st.stopped
	if st.acked != c.written {
		c.written = st.acked
		c.notifyLocked()
	}
	return c.state.phase == phaseClaiming && protocol.SubtractQueues(c.state.pending.Queues, c.claimed) == nil
}

// adopt takes over what an earlier process of this pod left in the Lease: the application (in another
// container) may still read it.
func (c *Client) adopt(acked int64, claim []Queue) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.acked == 0 {
		c.acked, c.written = acked, acked
	}
	if c.state.phase == phaseStopped {
		return // the application was told to read nothing, and Drain waited for it
	}
	c.ackedQueues = protocol.UnionQueues(c.ackedQueues, claim)
}

// leaseChanged re-evaluates the assignment in force once the Lease was taken or lost, or its freshness
// changed.
func (c *Client) leaseChanged() { c.evaluate() }

// evaluate decides, from what the member observes now, what is in force, and delivers it if it changed.
func (c *Client) evaluate() {
	o := c.observe()
	c.mu.Lock()
	defer c.mu.Unlock()
	o.claimed = c.claimed
	c.applyLocked(decide(c.state, observed, o))
}

// observe reads the view, the Lease and the contact fence, each under its own lock, before c.mu is taken:
// none of theirs is ever held with c.mu.
func (c *Client) observe() observation {
	synced, view := c.view.current()
	now := c.cfg.Clock.Now()
	lease := c.lease.status(now)
	fresh, notFresh := lease.fresh, lease.reason
	if c.contact != nil && fresh {
		fresh, notFresh = c.contact.status(now)
	}
	return observation{
		synced: synced, view: view, fresh: fresh, notFresh: notFresh,
		configMap: protocol.AssignmentName(c.cfg.Group), memberID: c.cfg.MemberID,
	}
}

// applyLocked carries out t: the acknowledgements and the Lease follow the member's new state, and a new
// assignment in force is handed to the application.
func (c *Client) applyLocked(t transition) {
	if t.newGroup {
		// No acknowledgement of the old incarnation counts for the new one.
		c.acked, c.delivered = 0, map[int64][]Queue{}
	}
	c.state = t.next
	if t.newGroup || t.claim {
		c.lease.requestWrite()
	}
	if !t.deliver {
		return
	}
	a := c.state.inForce
	if a.Generation > 0 {
		c.delivered[a.Generation] = a.Queues
	}
	c.deliverLocked(a)
	if c.cfg.AutoAck && a.Generation > c.acked {
		select {
		case c.autoAck <- struct{}{}:
		default:
		}
	}
}

// deliverLocked hands a, now in force, to the application.
func (c *Client) deliverLocked(a Assignment) {
	c.inForceSince = c.cfg.Clock.Now()
	c.notifyLocked()
	// One producer, under c.mu: after emptying the buffer the send cannot block.
	select {
	case <-c.updates:
	default:
	}
	c.updates <- a
}

func (c *Client) notifyLocked() {
	close(c.changed)
	c.changed = make(chan struct{})
}

// Current is the assignment in force now. Its Queues are shared: do not modify them.
func (c *Client) Current() Assignment {
	return c.snapshot().inForce
}

// snapshot is the member's state at one moment, with the channel closed at its next change: what Next and
// Drain wait on.
type snapshot struct {
	phase        phase
	inForce      Assignment
	inForceSince time.Time
	written      int64
	changed      <-chan struct{}
}

func (c *Client) snapshot() snapshot {
	c.mu.Lock()
	defer c.mu.Unlock()
	return snapshot{
		phase: c.state.phase, inForce: c.state.inForce, inForceSince: c.inForceSince,
		written: c.written, changed: c.changed,
	}
}

// Updates delivers each new assignment in force. It holds only the newest one: a reader that falls
// behind skips to it. Use one reader; others should use Next.
func (c *Client) Updates() <-chan Assignment { return c.updates }

// Next waits until the assignment in force has a generation other than after, and returns it. Generations
// grow, so this is the next generation, except that generation 0 (hold nothing) is returned when the
// member loses its assignment or its Lease, and a lower one when the group was deleted and created again.
func (c *Client) Next(ctx context.Context, after int64) (Assignment, error) {
	for {
		now := c.snapshot()
		a := now.inForce
		if a.Generation != after {
			return a, nil
		}
		select {
		case <-now.changed:
		case <-ctx.Done():
			return a, fmt.Errorf("waiting for an assignment after generation %d: %w", after, ctx.Err())
		}
	}
}

// Ack records that the application has applied generation: it consumes exactly the queues that
// generation lists for it. It writes the generation, and the claim that follows from it, into the Lease,
// where the operator reads them. Acknowledging a generation at or below the last one written does
// nothing; one that was never delivered is an error wrapping ErrUnknownGeneration, and any other once Drain
// has stopped the member an error wrapping ErrDrained. When the write fails, the acknowledgement is still
// kept, and written with the next renewal.
//
// Ack returns within AckWait, a quarter of the stop timeout, however slow the API server is: an
// application that waited on a slow write would take the next assignment, which may revoke queues, late,
// and read them past the member's promise (docs/protocol.md). A write still in flight then goes on, and
// Ack returns an error wrapping ErrAckPending.
func (c *Client) Ack(ctx context.Context, generation int64) error {
	if generation < 0 {
		return fmt.Errorf("generation %d is negative", generation)
	}
	if generation == 0 {
		return nil
	}
	c.ackMu.Lock()
	write, err := c.recordAck(generation)
	if !write || err != nil {
		c.ackMu.Unlock()
		return err
	}
	w := c.startAckWriteLocked()
	c.ackMu.Unlock()
	wait := c.cfg.Clock.NewTimer(c.AckWait())
	defer wait.Stop()
	select {
	case <-w.done:
		if w.err != nil {
			return fmt.Errorf("acknowledging generation %d in Lease %s: %w", generation, c.cfg.leaseName(), w.err)
		}
		return nil
	case <-wait.C():
	case <-ctx.Done():
	}
	return fmt.Errorf("%w: generation %d, in Lease %s; the write goes on", ErrAckPending, generation, c.cfg.leaseName())
}

// AckWait is the longest Ack waits for its write.
func (c *Client) AckWait() time.Duration { return c.cfg.StopTimeout / 4 }

// ackWrite is one write of the acknowledgements recorded before it started.
type ackWrite struct {
	done chan struct{}
	err  error
}

// startAckWriteLocked returns the write that will carry the acknowledgements recorded so far: a new one
// when none is in flight, else the one that follows the write in flight. ackMu is held.
func (c *Client) startAckWriteLocked() *ackWrite {
	if c.ackWrite == nil {
		c.ackWrite = &ackWrite{done: make(chan struct{})}
		go c.runAckWrite(c.ackWrite)
		return c.ackWrite
	}
	if c.ackNext == nil {
		c.ackNext = &ackWrite{done: make(chan struct{})}
	}
	return c.ackNext
}

// runAckWrite writes the Lease for w, then starts the write that follows, if any.
func (c *Client) runAckWrite(w *ackWrite) {
	ctx := context.Background()
	if p := c.runCtx.Load(); p != nil {
		ctx = *p
	}
	w.err = c.lease.writeNow(ctx)
	close(w.done)
	c.ackMu.Lock()
	defer c.ackMu.Unlock()
	c.ackWrite, c.ackNext = c.ackNext, nil
	if c.ackWrite != nil {
		go c.runAckWrite(c.ackWrite)
	}
}

// recordAck records the acknowledgement of generation, for the Lease's next write, and reports whether
// it is to be written now: not when the Lease already says it, or when it cannot be acknowledged.
func (c *Client) recordAck(generation int64) (bool, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	queues, delivered := c.delivered[generation]
	// The generation a restarted process took over from the Lease, delivered to it again: its queues
	// replace the claim the earlier process left, which may list more.
	narrows := delivered && generation == c.acked && !slices.Equal(queues, c.ackedQueues)
	switch {
	case c.state.phase == phaseStopped && generation > c.written:
		return false, fmt.Errorf("%w: generation %d is not acknowledged; %s", ErrDrained, generation, drainedReason)
	case generation > c.state.highest.Generation:
		return false, fmt.Errorf("%w: generation %d, but the newest generation delivered to this pod is %d", ErrUnknownGeneration, generation, c.state.highest.Generation)
	case generation <= c.written && !narrows:
		return false, nil
	}
	if generation > c.acked || narrows {
		if !delivered {
			// An acknowledgement of a generation never delivered (the application skipped to it): claim
			// what was claimed, which covers it.
			queues = protocol.UnionQueues(c.ackedQueues, c.state.inForce.Queues)
		}
		c.acked, c.ackedQueues = generation, queues
		for g := range c.delivered {
			if g <= generation {
				delete(c.delivered, g)
			}
		}
		c.notifyLocked()
	}
	return true, nil
}

// Acked is the last generation acknowledged in the Lease.
func (c *Client) Acked() int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.written
}

func (c *Client) autoAckLoop(ctx context.Context) {
	logger := klog.FromContext(ctx)
	retry := c.cfg.Clock.NewTimer(time.Hour)
	retry.Stop()
	for {
		select {
		case <-ctx.Done():
			retry.Stop()
			return
		case <-c.autoAck:
		case <-retry.C():
		}
		a := c.Current()
		if a.Generation == 0 {
			continue
		}
		if err := c.Ack(ctx, a.Generation); err != nil && !errors.Is(err, ErrAckPending) && ctx.Err() == nil {
			logger.Error(err, "Failed to acknowledge assignment; retrying", "generation", a.Generation)
			retry.Reset(c.cfg.renewEvery())
		}
	}
}

// Drain is the member's shutdown: it waits until the operator has released the pod's queues, then stops
// the member for good and releases its claim. A preStop hook calls it; the operator releases the queues of
// a pod once the pod is being deleted.
//
// The queues are released when the assignment lists none for the pod (or the pod has no entry) and the
// application acknowledged that generation; if it does not within Config.DrainAckTimeout (at once with
// Config.AutoAck), Drain acknowledges it for the application. When there is no assignment at all (the
// ConfigMap is gone), the application has been handed generation 0; unless the assignment comes back
// first, Drain gives the application Config.DrainAckTimeout to stop. Either timeout counts from when the
// application was handed the release (or generation 0), or from when Drain saw it if that was later.
//
// Then the member stops: it hands the application generation 0, and until its process restarts it
// delivers nothing else, claims nothing and refuses acknowledgements of anything newer (ErrDrained). Drain
// returns once the Lease says so, with an empty claim, which shows the operator and a new pod of the same
// name that this pod reads nothing, whether or not its container's end is ever reported. Calling Drain
// again returns at once.
//
// Until ctx ends nothing changes: the member keeps its queues and Drain returns an error wrapping
// ctx.Err() saying what it was still waiting for.
func (c *Client) Drain(ctx context.Context) error {
	// releasedGen is the generation whose release waits for the application's acknowledgement, since
	// releasedAt; 0 for no assignment at all, -1 for none yet.
	releasedGen, releasedAt := int64(-1), time.Time{}
	for {
		synced, view := c.view.current()
		now := c.snapshot()
		if now.phase == phaseStopped {
			return c.releaseClaim(ctx)
		}

		var wait <-chan time.Time
		var timer clock.Timer
		var waitingFor string
		switch {
		case !synced:
			waitingFor = fmt.Sprintf("ConfigMap %s has not been read yet", protocol.AssignmentName(c.cfg.Group))
		case view.Err != nil:
			waitingFor = fmt.Sprintf("the pod's entry cannot be read: %v", view.Err)
		case len(view.Queues) > 0:
			waitingFor = fmt.Sprintf("generation %d still gives this pod %d queues", view.Generation, len(view.Queues))
		case view.Exists && view.Generation > 0 && now.written == view.Generation:
			// The application applied the release: it reads nothing.
			c.stop()
			continue
		default:
			var gen int64
			gen, waitingFor = c.releasePending(view)
			at := c.cfg.Clock.Now()
			if releasedGen != gen {
				releasedGen, releasedAt = gen, at
				if now.inForce.Generation == gen && now.inForceSince.Before(at) {
					releasedAt = now.inForceSince // the application's time to stop began when it was handed the release
				}
			}
			remaining := c.cfg.DrainAckTimeout - at.Sub(releasedAt)
			if c.cfg.AutoAck || remaining <= 0 {
				// The application had its time: stop it, and acknowledge the release for it.
				c.stop()
				continue
			}
			timer = c.cfg.Clock.NewTimer(remaining)
			wait = timer.C()
		}
		select {
		case <-now.changed:
		case <-wait:
		case <-ctx.Done():
			return fmt.Errorf("draining pod %s from group %s: %s: %w", c.cfg.Pod, c.cfg.Group, waitingFor, ctx.Err())
		}
		if timer != nil {
			timer.Stop()
		}
	}
}

// releasePending is the generation that releases the pod's queues in view (0 when nothing is published),
// which the application has yet to acknowledge, and what Drain waits for meanwhile.
func (c *Client) releasePending(view protocol.EntryView) (int64, string) {
	if view.Exists && view.Generation > 0 {
		return view.Generation, fmt.Sprintf("generation %d releases this pod's queues but is not acknowledged", view.Generation)
	}
	what := "does not exist"
	if view.Exists {
		what = "publishes no generation"
	}
	return 0, fmt.Sprintf("ConfigMap %s %s: the application was handed generation 0 and is given %v to stop",
		protocol.AssignmentName(c.cfg.Group), what, c.cfg.DrainAckTimeout)
}

// stop ends the member's reading until its process restarts: it hands the application generation 0 and
// empties the claim. When the assignment in view releases the pod's queues at a generation the application
// has not acknowledged, stop acknowledges it: from now on the application consumes exactly what it lists,
// nothing.
func (c *Client) stop() {
	_, view := c.view.current()
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.state.phase == phaseStopped {
		return
	}
	if view.Exists && view.Err == nil && len(view.Queues) == 0 && view.GroupUID == c.state.group && view.Generation > c.acked {
		c.acked = view.Generation
	}
	c.ackedQueues, c.delivered = nil, map[int64][]Queue{}
	t := decide(c.state, drained, observation{})
	c.applyLocked(t)
	if !t.deliver {
		c.notifyLocked() // Drain and Next see the member stopped, though nothing was in force
	}
}

// releaseClaim waits until the Lease says what a stopped member says: no claim, and the last
// acknowledgement.
func (c *Client) releaseClaim(ctx context.Context) error {
	for {
		err := c.lease.flush(ctx, c.leaseSaysStopped)
		if err == nil {
			return nil
		}
		t := c.cfg.Clock.NewTimer(c.cfg.renewEvery() / 4)
		select {
		case <-t.C():
		case <-ctx.Done():
			t.Stop()
			return fmt.Errorf("draining pod %s from group %s: releasing the claim in Lease %s: %v: %w", c.cfg.Pod, c.cfg.Group, c.cfg.leaseName(), err, ctx.Err())
		}
	}
}

// leaseSaysStopped is whether the Lease, as last written, claims nothing, holds the last acknowledgement
// and says that the member stopped.
func (c *Client) leaseSaysStopped() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.state.phase == phaseStopped && len(c.claimed) == 0 && c.written == c.acked && c.writtenStopped
}

// Status is a snapshot of the client's state, for health checks and diagnostics.
type Status struct {
	// Synced is set once the assignment ConfigMap has been read.
	Synced bool
	// PublishedGeneration is the generation the assignment ConfigMap publishes now.
	PublishedGeneration int64
	// AckedGeneration is the last generation acknowledged in the Lease.
	AckedGeneration int64
	// InForce is the assignment in force.
	InForce Assignment
	// Claimed is how many queues the Lease claims: those acknowledged and those in force.
	Claimed int
	// Reason says why no assignment is in force; "" when one is.
	Reason string
	// LeaseRenewedAt is when the Lease was last renewed; zero when never.
	LeaseRenewedAt time.Time
	// LeaseError is the last failure to renew the Lease; nil after a success.
	LeaseError error
	// Drained is set once Drain has stopped the member: it reads nothing until its process restarts.
	Drained bool
	// ContactLost says why the member has not confirmed its view for its contact timeout (contact
	// fencing); "" while it has, or without contact fencing.
	ContactLost string
}

// Unhealthy says why a member in status s cannot do its part, "" when it can: it has read its assignment,
// holds and renews its Lease, and, with contact fencing, has confirmed its view. A liveness probe that
// fails while it is not "" makes the kubelet restart a process that is cut off from the API server or
// hung, and the restart tells the operator at once (docs/protocol.md, recovery within 20 s). A drained
// member is unhealthy too: it reads nothing until its process restarts.
func (s Status) Unhealthy() string {
	switch {
	case s.Drained:
		return "the pod has drained: the member hands out nothing until its process restarts"
	case !s.Synced:
		return "the assignment ConfigMap has not been read yet"
	case s.LeaseRenewedAt.IsZero() && s.LeaseError != nil:
		return "the Lease has not been written yet: " + s.LeaseError.Error()
	case s.LeaseRenewedAt.IsZero():
		return "the Lease has not been written yet"
	case s.LeaseError != nil:
		return "renewing the Lease: " + s.LeaseError.Error()
	}
	// A view that cannot be confirmed is a member cut off or a loop that hangs.
	return s.ContactLost
}

// Status returns a snapshot of the client's state.
func (c *Client) Status() Status {
	synced, view := c.view.current()
	lease := c.lease.status(c.cfg.Clock.Now())
	var contactLost string
	if c.contact != nil {
		if fresh, why := c.contact.status(c.cfg.Clock.Now()); !fresh {
			contactLost = why
		}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return Status{
		Synced:              synced,
		PublishedGeneration: view.Generation,
		AckedGeneration:     c.written,
		InForce:             c.state.inForce,
		Claimed:             len(protocol.UnionQueues(c.ackedQueues, c.state.inForce.Queues)),
		Reason:              c.state.reason,
		LeaseRenewedAt:      lease.renewedAt,
		LeaseError:          lease.err,
		Drained:             c.state.phase == phaseStopped,
		ContactLost:         contactLost,
	}
}
