package member

import (
	"context"
	"fmt"
	"sync"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	"github.com/consumergroup-operator/consumergroup-operator/pkg/protocol"
)

// fieldManager names this package in the Lease's managed fields.
const fieldManager = "consumergroup-member"

// leaseRecord is what the member writes in its Lease, as the client fills it in for each write. It is not
// protocol.LeaseState, which is what a reader of the Lease (the operator) makes of it.
type leaseRecord struct {
	acked    int64
	claim    []Queue
	groupUID types.UID
	// load is the application's latest load report, for the queues of claim only.
	load map[Queue]float64
	// stopped says that the member has stopped for good (Drain): the claim is empty.
	stopped bool
	// throughAgent says that the member confirms its view through its node's agent
	// (protocol.ConfirmsThroughAnnotation), so that the agent's heartbeat counts for it.
	throughAgent bool
}

// leaseSource is the member a leaseKeeper writes the Lease for: the Client. The keeper calls it without
// its mu held, and record, recorded and adopt with its writeMu held: they may take the member's own lock,
// but must not wait for a write of the Lease.
type leaseSource interface {
	// record is what the Lease must say now.
	record() leaseRecord
	// recorded is told that a write of rec succeeded: the Lease says it.
	recorded(rec leaseRecord)
	// adopt takes over what an earlier process of this pod left in the Lease: the generation it
	// acknowledged and the queues it claimed.
	adopt(acked int64, claim []Queue)
	// leaseChanged is told that the Lease was taken or lost, or that its freshness changed.
	leaseChanged()
}

// leaseKeeper keeps the member's Lease: it takes the Lease (creates it, adopts the one this pod's earlier
// process wrote, or takes over one an earlier pod of the same name left, once that pod's claim no longer
// stands), renews it every third of its duration, and writes the member's acknowledgement and claim.
//
// Locks: writeMu is taken first and held across a whole write, API calls included; mu guards only the
// fields below it, for short reads and updates, and nothing else is taken while it is held.
type leaseKeeper struct {
	cs         kubernetes.Interface
	cfg        Config
	name       string
	renewEvery time.Duration
	clock      clock.WithTickerAndDelayedExecution
	member     leaseSource
	kick       chan struct{}

	// writeMu serialises writes, so that what the Lease says only moves forward.
	writeMu sync.Mutex
	// last is the Lease as last written or read; nil while not held.
	last *coordinationv1.Lease

	mu sync.Mutex
	// held is set while this process holds the Lease.
	held bool
	// waiting says why the Lease is not held yet.
	waiting string
	// freshUntil is when the last successful renewal stops covering the member: the application must
	// then stop reading, so that it has stopped by the time the operator may count the member as gone.
	freshUntil time.Time
	renewedAt  time.Time
	err        error

	// fence belongs to the goroutine that runs the keeper.
	fence clock.Timer
}

func newLeaseKeeper(cs kubernetes.Interface, cfg Config, member leaseSource) *leaseKeeper {
	return &leaseKeeper{
		cs: cs, cfg: cfg, name: cfg.leaseName(), renewEvery: cfg.renewEvery(),
		clock: cfg.Clock, member: member, kick: make(chan struct{}, 1),
		waiting: "the Lease has not been written yet",
	}
}

// status is how the Lease stands at now.
func (k *leaseKeeper) status(now time.Time) leaseStatus {
	k.mu.Lock()
	defer k.mu.Unlock()
	st := leaseStatus{renewedAt: k.renewedAt, err: k.err}
	switch {
	case !k.held:
		st.reason = fmt.Sprintf("Lease %s: %s", k.name, k.waiting)
	case !now.Before(k.freshUntil):
		st.reason = fmt.Sprintf("Lease %s has not been renewed for %v: the member must stop reading before its Lease runs out and the operator hands the queues on", k.name, protocol.StopAfter(k.cfg.LeaseDuration))
	default:
		st.fresh = true
	}
	return st
}

// requestWrite makes the loop write now rather than at its next tick.
func (k *leaseKeeper) requestWrite() {
	select {
	case k.kick <- struct{}{}:
	default:
	}
}

// run takes and renews the Lease until ctx ends. checkView fails while the member's view of the
// assignment is behind the API server: the member then does not renew.
func (k *leaseKeeper) run(ctx context.Context, checkView func(context.Context) error) {
	logger := klog.FromContext(ctx)
	timer := k.clock.NewTimer(0)
	defer timer.Stop()
	defer func() {
		if k.fence != nil {
			k.fence.Stop()
		}
	}()
	var failing bool
	for {
		select {
		case <-ctx.Done():
			return
		case <-timer.C():
		case <-k.kick:
		}
		next, err := k.renew(ctx, checkView)
		if ctx.Err() != nil {
			return
		}
		k.setErr(err)
		switch {
		case err != nil && !failing:
			logger.Error(err, "Failed to renew Lease; the member holds no queues once the Lease has not been renewed for its duration",
				"lease", k.name, "leaseDuration", k.cfg.LeaseDuration)
		case err == nil && failing:
			logger.Info("Renewed Lease again", "lease", k.name)
		}
		failing = err != nil
		timer.Stop()
		timer.Reset(next)
	}
}

// renew takes the Lease if this process does not hold it, else renews it, and says when to try next.
func (k *leaseKeeper) renew(ctx context.Context, checkView func(context.Context) error) (time.Duration, error) {
	if err := checkView(ctx); err != nil {
		return k.renewEvery, err
	}
	k.writeMu.Lock()
	defer k.writeMu.Unlock()
	// The renewal covers the member from before the request was sent: the operator's view of renewTime
	// can only be later than this process's.
	sentAt := k.clock.Now()
	if k.last == nil {
		retryAt, err := k.acquire(ctx, sentAt)
		if err != nil || !retryAt.IsZero() {
			k.member.leaseChanged() // the reason nothing is in force changed
			return min(k.renewEvery, max(retryAt.Sub(sentAt), 100*time.Millisecond)), err
		}
	} else if err := k.write(ctx, &sentAt); err != nil {
		return k.renewEvery, err
	}
	untilStop := k.renewed(sentAt)
	// The timer that stops the member when no renewal follows. Its callback only starts a goroutine: a
	// clock may run it while holding its own lock (a fake one does), and re-evaluating reads the clock.
	if k.fence == nil {
		k.fence = k.clock.AfterFunc(untilStop, func() { go k.member.leaseChanged() })
	} else {
		k.fence.Reset(untilStop)
	}
	k.member.leaseChanged()
	return k.renewEvery, nil
}

func (k *leaseKeeper) setErr(err error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.err = err
}

// renewed records a renewal sent at sentAt, and returns how long from now it covers the member.
func (k *leaseKeeper) renewed(sentAt time.Time) time.Duration {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.renewedAt = sentAt
	k.freshUntil = sentAt.Add(protocol.StopAfter(k.cfg.LeaseDuration))
	return k.freshUntil.Sub(k.clock.Now())
}

// acquire creates the Lease, adopts this pod's own, or takes over an earlier pod's once its claim no
// longer stands. It returns when to try again while an earlier pod's claim stands. k.writeMu is held.
//
// It creates first and reads only when the Lease exists: most pods are new, with a name no Lease has, and
// a create fails as a whole when one does, so a pod's start costs the API server one request, not two.
func (k *leaseKeeper) acquire(ctx context.Context, now time.Time) (retryAt time.Time, err error) {
	leases := k.cs.CoordinationV1().Leases(k.cfg.Namespace)
	st := k.member.record()
	created, err := leases.Create(ctx, k.lease(st, nil, &now, &now), metav1.CreateOptions{FieldManager: fieldManager})
	switch {
	case err == nil:
		k.hold(created, st)
		return time.Time{}, nil
	case !apierrors.IsAlreadyExists(err):
		return time.Time{}, fmt.Errorf("creating Lease %s: %w", k.name, err)
	}
	existing, err := leases.Get(ctx, k.name, metav1.GetOptions{})
	if err != nil {
		// Gone again (deleted after the create failed) is tried again at the next attempt, as any error.
		return time.Time{}, fmt.Errorf("reading Lease %s: %w", k.name, err)
	}

	if protocol.HeldBy(existing, k.cfg.PodUID) {
		// An earlier process of this pod (a restarted container) wrote it. The application may still read
		// what it claimed (a sidecar restarts on its own), so the claim and the acknowledgement stay.
		s := protocol.ReadLease(existing)
		if s.ClaimErr == nil {
			k.member.adopt(s.AckedGeneration, s.Claim)
		}
		st = k.member.record()
		updated, err := leases.Update(ctx, k.lease(st, existing, nil, &now), metav1.UpdateOptions{FieldManager: fieldManager})
		if err != nil {
			return time.Time{}, fmt.Errorf("adopting Lease %s: %w", k.name, err)
		}
		k.hold(updated, st)
		return time.Time{}, nil
	}

	// An earlier pod of the same name wrote it. Its process may still run, cut off from the API server:
	// the Lease is this pod's only once that process has stopped by its own count, however the clocks
	// differ, or once it released everything.
	s := protocol.ReadLease(existing)
	if !s.Released() && s.Stands(now, k.cfg.MaxClockSkew) {
		k.setWaiting(fmt.Sprintf("it is held by pod UID %s, an earlier pod named %s, whose claim stands until %s",
			s.PodUID, k.cfg.Pod, s.Expiry(k.cfg.MaxClockSkew).UTC().Format(time.RFC3339)))
		return s.Expiry(k.cfg.MaxClockSkew), nil
	}
	st = k.member.record()
	updated, err := leases.Update(ctx, k.lease(st, existing, &now, &now), metav1.UpdateOptions{FieldManager: fieldManager})
	if err != nil {
		return time.Time{}, fmt.Errorf("taking over Lease %s from pod UID %s: %w", k.name, s.PodUID, err)
	}
	k.hold(updated, st)
	return time.Time{}, nil
}

// lease is the Lease saying st, written over base (nil for a new one).
func (k *leaseKeeper) lease(st leaseRecord, base *coordinationv1.Lease, acquireAt, renewAt *time.Time) *coordinationv1.Lease {
	m := protocol.MemberLease{
		Group: k.cfg.Group, GroupUID: st.groupUID, Pod: k.cfg.Pod, PodUID: k.cfg.PodUID, Member: k.cfg.MemberID,
		Duration: k.cfg.LeaseDuration, Acked: st.acked, Claim: st.claim, Load: st.load, StopsWithin: k.cfg.stopsWithin(),
		Stopped: st.stopped, ThroughNodeAgent: st.throughAgent,
	}
	if base != nil {
		base = base.DeepCopy()
	}
	return m.Apply(base, k.cfg.Namespace, acquireAt, renewAt)
}

// hold records that this process holds the Lease, written as st. k.writeMu is held.
func (k *leaseKeeper) hold(lease *coordinationv1.Lease, st leaseRecord) {
	k.last = lease
	k.member.recorded(st)
	k.setHeld(true, "")
}

// lose records that the Lease is no longer this process's: it holds nothing from now on. k.writeMu is held.
func (k *leaseKeeper) lose(why string) {
	k.last = nil
	k.setHeld(false, why)
	k.member.leaseChanged()
}

// setHeld records whether the Lease is held, and why not; a Lease lost covers the member no longer.
func (k *leaseKeeper) setHeld(held bool, waiting string) {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.held, k.waiting = held, waiting
	if !held {
		k.freshUntil = time.Time{}
	}
}

func (k *leaseKeeper) setWaiting(why string) {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.waiting = why
}

// write updates the held Lease with what the member says now; renewAt moves renewTime (a renewal), nil
// leaves it (an acknowledgement, which is not a sign that the member's view is current). An update that
// conflicts re-reads the Lease: one this pod still holds is written again; one another pod took over is
// lost. A deleted Lease is created again: the application still reads what the member claims.
// k.writeMu is held.
func (k *leaseKeeper) write(ctx context.Context, renewAt *time.Time) error {
	leases := k.cs.CoordinationV1().Leases(k.cfg.Namespace)
	for attempt := 0; ; attempt++ {
		if k.last == nil {
			return fmt.Errorf("the Lease %s is not held", k.name)
		}
		st := k.member.record()
		updated, err := leases.Update(ctx, k.lease(st, k.last, nil, renewAt), metav1.UpdateOptions{FieldManager: fieldManager})
		var current *coordinationv1.Lease
		if apierrors.IsConflict(err) && attempt < 3 {
			// Someone else wrote the Lease, or deleted it (an update of a deleted object conflicts too).
			current, err = leases.Get(ctx, k.name, metav1.GetOptions{})
		}
		switch {
		case err == nil && current == nil:
			k.last = updated
			k.member.recorded(st)
			return nil
		case apierrors.IsNotFound(err):
			now := k.clock.Now()
			created, err := leases.Create(ctx, k.lease(st, nil, &now, renewAt), metav1.CreateOptions{FieldManager: fieldManager})
			if err != nil {
				return fmt.Errorf("creating Lease %s again: %w", k.name, err)
			}
			k.last = created
			k.member.recorded(st)
			return nil
		case err == nil:
			if !protocol.HeldBy(current, k.cfg.PodUID) {
				k.lose(fmt.Sprintf("another pod named %s took it over", k.cfg.Pod))
				return fmt.Errorf("the Lease %s was taken over by another pod", k.name)
			}
			k.last = current
		default:
			return fmt.Errorf("writing Lease %s: %w", k.name, err)
		}
	}
}

// writeNow writes what the member says now without renewing: an acknowledgement.
func (k *leaseKeeper) writeNow(ctx context.Context) error {
	k.writeMu.Lock()
	defer k.writeMu.Unlock()
	return k.write(ctx, nil)
}

// flush writes what the member says now, without renewing, unless written says the Lease already says it
// or this process does not hold the Lease (then nothing of the member's is in it; a Lease taken later is
// written from what the member says then). It holds writeMu throughout, so no write that began before it
// can land after it.
func (k *leaseKeeper) flush(ctx context.Context, written func() bool) error {
	k.writeMu.Lock()
	defer k.writeMu.Unlock()
	if k.last == nil || written() {
		return nil
	}
	return k.write(ctx, nil)
}
