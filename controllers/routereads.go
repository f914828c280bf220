package controllers

import (
	"context"
	"slices"
	"sync"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/event"

	"github.com/consumergroup-operator/consumergroup-operator/api/v1alpha1"
)

// routeReads runs the reads of every route source, shared by the groups that read from it: one read of a
// source per refresh interval asks every topic any of its groups wants, however many groups want it. A
// source belongs to one namespace (routeSource), so a namespace's topics are asked in its own reads. A
// read starts when one is due and no read of its source is in flight, and waits for a slot: at most
// maxReads in flight at once, and at most maxPerNamespace of one namespace's, so that one namespace's
// reads, however slow or large, leave slots for the others. A source no group reads any more, or whose
// object changed, has its read cancelled.
type routeReads struct {
	mu      sync.Mutex
	sources map[string]*sourceState
	groups  map[types.NamespacedName]*groupInterest
	seq     int64
	// slots holds a token per read in flight; nsSlots the same per namespace.
	slots           chan struct{}
	nsSlots         map[string]chan struct{}
	maxPerNamespace int
	// events wakes the groups of a source whose read finished.
	events chan event.GenericEvent
	read   func(ctx context.Context, src *routeSource, topics []string) *routeRead
	// done reports each finished read of src, outside the lock (recordClusterNameServer).
	done func(ctx context.Context, src *routeSource, read *routeRead)
	// ctx ends the reads when the operator stops.
	ctx context.Context
}

// sourceState is what the operator keeps in memory of one source's reads.
type sourceState struct {
	src *routeSource
	// groups are the groups that read from it.
	groups    map[types.NamespacedName]bool
	flight    *readFlight
	attempted time.Time
	latest    *routeRead
	// again asks for a read as soon as the one in flight ends: a group wants a topic it does not ask.
	again bool
}

// readFlight is a read in flight.
type readFlight struct {
	cancel context.CancelFunc
	topics []string
}

// groupInterest is what one group reads, and the last read it recorded.
type groupInterest struct {
	source   string
	topics   []string
	recorded int64
}

// init readies the reads to run with read until ctx ends.
func (b *routeReads) init(ctx context.Context, policy NameServerPolicy, read func(ctx context.Context, src *routeSource, topics []string) *routeRead,
	done func(ctx context.Context, src *routeSource, read *routeRead)) {
	b.ctx, b.read, b.done = ctx, read, done
	b.events = make(chan event.GenericEvent, 64)
	b.slots = make(chan struct{}, cmpOr(policy.MaxReads, defaultMaxReads))
	b.maxPerNamespace = cmpOr(policy.MaxReadsPerNamespace, defaultMaxReadsPerNamespace)
	b.sources, b.groups, b.nsSlots = map[string]*sourceState{}, map[types.NamespacedName]*groupInterest{}, map[string]chan struct{}{}
}

func cmpOr(v, def int) int {
	if v > 0 {
		return v
	}
	return def
}

// routePass is what a pass knows of its group's routes.
type routePass struct {
	// pending is a read the group has not recorded yet, or the problem that keeps it from reading.
	pending *routeRead
	// source is where the group reads; nil when it may not read or has no spec.nameServer.
	source *routeSource
	// requeueAfter is when the next read is due, 0 when none will be.
	requeueAfter time.Duration
}

// pass registers that group reads topics from src and starts a read when one is due: none of src's reads
// asked every topic of group's yet, or its last read is a refresh interval old. It returns the finished
// read the group has not recorded. It never waits for a read. A group that reads from nothing is
// forgotten instead.
func (b *routeReads) pass(group types.NamespacedName, src *routeSource, topics []string, now time.Time) routePass {
	b.mu.Lock()
	defer b.mu.Unlock()
	gi := b.groups[group]
	if gi != nil && gi.source != src.key {
		b.dropInterest(group)
		gi = nil
	}
	if gi == nil {
		gi = &groupInterest{source: src.key}
		b.groups[group] = gi
	}
	if !slices.Equal(gi.topics, topics) {
		// The group records the last read again, for the topics it wants now.
		gi.topics, gi.recorded = topics, 0
	}
	s := b.sources[src.key]
	if s == nil || s.src.version != src.version {
		groups := map[types.NamespacedName]bool{}
		if s != nil {
			if s.flight != nil {
				s.flight.cancel()
			}
			groups = s.groups
		}
		s = &sourceState{src: src, groups: groups}
		b.sources[src.key] = s
	}
	s.groups[group] = true
	asked := s.latest != nil && containsAll(s.latest.topics, topics)
	due := !asked || !now.Before(s.attempted.Add(src.interval))
	switch {
	case due && s.flight == nil:
		b.start(s, now)
	case !asked && s.flight != nil && !containsAll(s.flight.topics, topics):
		s.again = true
	}
	next := s.attempted.Add(src.interval).Sub(now)
	if s.flight != nil && next <= 0 {
		// A read slower than the interval: its end wakes the group; until then, nothing is due.
		next = src.interval
	}
	out := routePass{source: src, requeueAfter: max(next, time.Millisecond)}
	if s.latest != nil && s.latest.seq > gi.recorded {
		out.pending = s.latest
	}
	return out
}

// start starts a read of s asking every topic its groups want. b.mu is held.
func (b *routeReads) start(s *sourceState, now time.Time) {
	var lists [][]string
	for name := range s.groups {
		lists = append(lists, b.groups[name].topics)
	}
	topics := sortedUnion(lists...)
	ctx, cancel := context.WithCancel(b.ctx)
	f := &readFlight{cancel: cancel, topics: topics}
	s.flight, s.attempted, s.again = f, now, false
	nsSlot := b.nsSlots[s.src.namespace]
	if nsSlot == nil {
		nsSlot = make(chan struct{}, b.maxPerNamespace)
		b.nsSlots[s.src.namespace] = nsSlot
	}
	go b.run(ctx, s, f, nsSlot)
}

// run waits for a slot, reads, and hands the read to the source's groups, unless the read was
// cancelled meanwhile.
func (b *routeReads) run(ctx context.Context, s *sourceState, f *readFlight, nsSlot chan struct{}) {
	defer f.cancel()
	if !acquire(ctx, nsSlot) {
		return
	}
	defer release(nsSlot)
	if !acquire(ctx, b.slots) {
		return
	}
	rctx, cancel := context.WithTimeout(ctx, routeReadBudget)
	read := b.read(rctx, s.src, f.topics)
	cancel()
	release(b.slots)
	b.mu.Lock()
	if ctx.Err() != nil || s.flight != f {
		b.mu.Unlock()
		return
	}
	b.seq++
	read.seq = b.seq
	s.latest, s.flight = read, nil
	if s.again {
		b.start(s, s.attempted)
	}
	wake := make([]types.NamespacedName, 0, len(s.groups))
	for name := range s.groups {
		wake = append(wake, name)
	}
	b.mu.Unlock()
	if b.done != nil {
		b.done(ctx, s.src, read)
	}
	for _, name := range wake {
		ev := event.GenericEvent{Object: &v1alpha1.ConsumerGroup{ObjectMeta: metav1.ObjectMeta{Namespace: name.Namespace, Name: name.Name}}}
		select {
		case b.events <- ev:
		case <-b.ctx.Done():
			return
		}
	}
}

// acquire takes a token of slots, unless ctx ends first.
func acquire(ctx context.Context, slots chan struct{}) bool {
	select {
	case slots <- struct{}{}:
		return true
	case <-ctx.Done():
		return false
	}
}

func release(slots chan struct{}) {
	<-slots
}

// recorded notes that group's status holds read.
func (b *routeReads) recorded(group types.NamespacedName, read *routeRead) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if gi := b.groups[group]; gi != nil && read.seq > gi.recorded {
		gi.recorded = read.seq
	}
}

// forget drops group's interest, cancelling its source's read if no other group reads from it.
func (b *routeReads) forget(group types.NamespacedName) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.dropInterest(group)
}

// dropInterest drops group's interest; b.mu is held.
func (b *routeReads) dropInterest(group types.NamespacedName) {
	gi := b.groups[group]
	if gi == nil {
		return
	}
	delete(b.groups, group)
	s := b.sources[gi.source]
	if s == nil {
		return
	}
	delete(s.groups, group)
	if len(s.groups) == 0 {
		if s.flight != nil {
			s.flight.cancel()
		}
		delete(b.sources, gi.source)
	}
}

// containsAll reports whether the sorted set have holds every name of want.
func containsAll(have, want []string) bool {
	for _, w := range want {
		if _, ok := slices.BinarySearch(have, w); !ok {
			return false
		}
	}
	return true
}
