package controllers

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/types"
)

// fakeReads is a read function whose reads block until released, and that records each read's topics.
type fakeReads struct {
	mu       sync.Mutex
	asked    [][]string
	running  int
	peak     int
	release  chan struct{}
	canceled int
}

func (f *fakeReads) read(ctx context.Context, _ *routeSource, topics []string) *routeRead {
	f.mu.Lock()
	f.asked = append(f.asked, topics)
	f.running++
	f.peak = max(f.peak, f.running)
	f.mu.Unlock()
	defer func() {
		f.mu.Lock()
		f.running--
		f.mu.Unlock()
	}()
	select {
	case <-f.release:
	case <-ctx.Done():
		f.mu.Lock()
		f.canceled++
		f.mu.Unlock()
	}
	return &routeRead{topics: topics}
}

func (f *fakeReads) state() (asked [][]string, running, peak, canceled int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.asked), f.running, f.peak, f.canceled
}

func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); !cond(); {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting until %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

func newRouteReads(t *testing.T, policy NameServerPolicy, f *fakeReads) *routeReads {
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	b := &routeReads{}
	b.init(ctx, policy, f.read, nil)
	// Drain the wake-ups, as the controller's source would.
	go func() {
		for {
			select {
			case <-b.events:
			case <-ctx.Done():
				return
			}
		}
	}()
	return b
}

// TestRouteReadsShareOneRead: the groups of one source share its reads; a group that wants a topic the
// read in flight does not ask has it asked as soon as that read ends; a read slower than the interval
// does not make the group's passes spin; and once no group reads from the source, its read is cancelled.
func TestRouteReadsShareOneRead(t *testing.T) {
	f := &fakeReads{release: make(chan struct{})}
	b := newRouteReads(t, NameServerPolicy{}, f)
	src := &routeSource{key: "cluster/a", version: "1", interval: 10 * time.Second}
	g1, g2 := types.NamespacedName{Namespace: "n1", Name: "g1"}, types.NamespacedName{Namespace: "n2", Name: "g2"}
	t0 := time.Unix(1e9, 0)

	b.pass(g1, src, []string{"a"}, t0)
	b.pass(g2, src, []string{"a", "b"}, t0)
	waitUntil(t, "the first read runs", func() bool { _, running, _, _ := f.state(); return running == 1 })
	// Overdue while in flight: the read's end wakes the groups, so no pass is due before an interval.
	if p := b.pass(g1, src, []string{"a"}, t0.Add(time.Minute)); p.requeueAfter != src.interval {
		t.Errorf("a pass while a read is in flight past its interval requeues after %v, want %v", p.requeueAfter, src.interval)
	}
	f.release <- struct{}{}
	waitUntil(t, "the second read runs", func() bool { asked, running, _, _ := f.state(); return len(asked) == 2 && running == 1 })
	f.release <- struct{}{}
	waitUntil(t, "the second read ends", func() bool { _, running, _, _ := f.state(); return running == 0 })
	asked, _, _, _ := f.state()
	if want := [][]string{{"a"}, {"a", "b"}}; fmt.Sprint(asked) != fmt.Sprint(want) {
		t.Fatalf("asked %v, want %v", asked, want)
	}
	// Both groups get the last read; within the interval nothing is read again, however many passes.
	p1, p2 := b.pass(g1, src, []string{"a"}, t0.Add(time.Second)), b.pass(g2, src, []string{"a", "b"}, t0.Add(time.Second))
	if p1.pending == nil || p1.pending != p2.pending || !slices.Equal(p1.pending.topics, []string{"a", "b"}) {
		t.Fatalf("the groups got %+v and %+v, want the one read of a and b", p1.pending, p2.pending)
	}
	b.recorded(g1, p1.pending)
	if p := b.pass(g1, src, []string{"a"}, t0.Add(2*time.Second)); p.pending != nil {
		t.Errorf("a recorded read is handed over again: %+v", p.pending)
	}
	if asked, _, _, _ := f.state(); len(asked) != 2 {
		t.Fatalf("%d reads within the interval, want 2", len(asked))
	}

	// The next interval: one read; both groups leave and it is cancelled.
	b.pass(g1, src, []string{"a"}, t0.Add(time.Minute))
	waitUntil(t, "the third read runs", func() bool { _, running, _, _ := f.state(); return running == 1 })
	b.forget(g1)
	if _, _, _, canceled := f.state(); canceled != 0 {
		t.Fatal("the read was cancelled while g2 still reads from its source")
	}
	b.forget(g2)
	waitUntil(t, "the read is cancelled", func() bool { _, _, _, canceled := f.state(); return canceled == 1 })
}

// TestRouteReadsBoundPerNamespace: one namespace's inline sources hold at most MaxReadsPerNamespace of
// the MaxReads slots, so another namespace's read runs at once.
func TestRouteReadsBoundPerNamespace(t *testing.T) {
	f := &fakeReads{release: make(chan struct{})}
	b := newRouteReads(t, NameServerPolicy{MaxReads: 3, MaxReadsPerNamespace: 2}, f)
	t0 := time.Unix(1e9, 0)
	for i := range 5 {
		src := &routeSource{key: fmt.Sprintf("inline/slow/%d", i), version: "1", namespace: "slow", interval: 10 * time.Second}
		b.pass(types.NamespacedName{Namespace: "slow", Name: fmt.Sprint(i)}, src, []string{"t"}, t0)
	}
	waitUntil(t, "two slow reads run", func() bool { _, running, _, _ := f.state(); return running == 2 })
	quick := &routeSource{key: "inline/quick/0", version: "1", namespace: "quick", interval: 10 * time.Second}
	b.pass(types.NamespacedName{Namespace: "quick", Name: "q"}, quick, []string{"t"}, t0)
	waitUntil(t, "the other namespace's read runs", func() bool { _, running, _, _ := f.state(); return running == 3 })
	time.Sleep(20 * time.Millisecond)
	if _, _, peak, _ := f.state(); peak != 3 {
		t.Fatalf("%d reads ran at once, want 3: two of the slow namespace and the other's", peak)
	}
	close(f.release)
}
