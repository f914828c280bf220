package nodeagent

import (
	"context"
	"errors"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	testingclock "k8s.io/utils/clock/testing"

	"github.com/consumergroup-operator/consumergroup-operator/pkg/protocol"
)

// heldReads is a fake API server whose reads of ConfigMaps take the object when they are sent, then wait
// until the test releases them: a read in flight, as long as a test needs it to be.
type heldReads struct {
	cs      *fake.Clientset
	sent    chan struct{}
	release chan error
}

func newHeldReads(objects ...runtime.Object) heldReads {
	h := heldReads{cs: fake.NewClientset(objects...), sent: make(chan struct{}, 16), release: make(chan error)}
	h.cs.PrependReactor("get", "configmaps", func(action k8stesting.Action) (bool, runtime.Object, error) {
		get := action.(k8stesting.GetAction)
		obj, err := h.cs.Tracker().Get(get.GetResource(), get.GetNamespace(), get.GetName())
		h.sent <- struct{}{}
		if injected := <-h.release; injected != nil {
			return true, nil, injected
		}
		return true, obj, err
	})
	return h
}

// startReader runs a reader of testNode's view on a fake clock until the test ends.
func startReader(t *testing.T, h heldReads, maxWaiting int) (*reader, *testingclock.FakeClock) {
	t.Helper()
	clock := testingclock.NewFakeClock(time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC))
	cfg := Config{Node: testNode, Namespace: "operator", Client: h.cs, Clock: clock, MaxWaiting: maxWaiting}.withDefaults()
	r := newReader(cfg)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { r.run(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
	return r, clock
}

type result struct {
	a   protocol.NodeAgentConfirmResponse
	err error
}

// ask sends q to r on a goroutine of its own; the answer arrives on the channel.
func ask(ctx context.Context, r *reader, q query) <-chan result {
	out := make(chan result, 1)
	go func() {
		a, err := r.confirm(ctx, q)
		out <- result{a, err}
	}()
	return out
}

func waitFor(t *testing.T, what string, ch <-chan struct{}) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(10 * time.Second):
		t.Fatalf("%s: not within 10 s", what)
	}
}

func answerOf(t *testing.T, ch <-chan result) result {
	t.Helper()
	select {
	case r := <-ch:
		return r
	case <-time.After(10 * time.Second):
		t.Fatal("no answer within 10 s")
		return result{}
	}
}

// pendingCount is how many requests wait for the next read.
func (r *reader) pendingCount() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.pending)
}

func poll(t *testing.T, done func() bool) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); !done(); time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("not done within 10 s")
		}
	}
}

// TestARequestIsNotAnsweredByAReadSentBeforeItArrived: the read in flight when a request arrives took the
// node view before the request was sent, so it may miss a generation the operator published since; the
// request waits for the next read. Here the operator raises the line while the first read is in flight:
// the first request is confirmed by the old line, the second is not.
func TestARequestIsNotAnsweredByAReadSentBeforeItArrived(t *testing.T) {
	h := newHeldReads(nodeView(protocol.NodeViewLine{Namespace: "shop", Group: "orders", GroupUID: "u1", MustSee: 3}))
	r, clock := startReader(t, h, 0)
	ctx := context.Background()
	q := query{namespace: "shop", group: "orders", groupUID: "u1", generation: 3}

	first := ask(ctx, r, q)
	waitFor(t, "the first read", h.sent)
	second := ask(ctx, r, q)
	poll(t, func() bool { return r.pendingCount() == 1 })
	raised := nodeView(protocol.NodeViewLine{Namespace: "shop", Group: "orders", GroupUID: "u1", MustSee: 4})
	// Through the tracker: the fake clientset holds its lock while a reactor runs, and the read holds one.
	if err := h.cs.Tracker().Update(corev1.SchemeGroupVersion.WithResource("configmaps"), raised, "operator"); err != nil {
		t.Fatal(err)
	}
	h.release <- nil
	if got := answerOf(t, first); !got.a.Confirmed {
		t.Fatalf("the first request, sent before the read, got %+v", got)
	}
	select {
	case got := <-second:
		t.Fatalf("the second request, which arrived while the first read was in flight, was answered by it: %+v", got)
	case <-time.After(50 * time.Millisecond):
	}
	// The next read waits for the minimum interval since the first was sent.
	select {
	case <-h.sent:
		t.Fatal("a second read was sent before the minimum interval passed")
	case <-time.After(50 * time.Millisecond):
	}
	clock.Step(DefaultMinReadInterval)
	waitFor(t, "the second read", h.sent)
	h.release <- nil
	if got := answerOf(t, second); got.a.Confirmed || got.err != nil {
		t.Fatalf("the second request got %+v; want it refused by the raised line", got)
	}
}

// TestRequestsThatGoAwayCostNoRead: a client that gives up before the read is sent leaves nothing for the
// reader to read for; and a request beyond MaxWaiting is refused at once.
func TestRequestsThatGoAwayCostNoRead(t *testing.T) {
	h := newHeldReads(nodeView(protocol.NodeViewLine{Namespace: "shop", Group: "orders", GroupUID: "u1", MustSee: 1}))
	r, clock := startReader(t, h, 1)
	q := query{namespace: "shop", group: "orders", groupUID: "u1", generation: 1}

	first := ask(context.Background(), r, q)
	waitFor(t, "the first read", h.sent)
	if _, err := r.confirm(context.Background(), q); !errors.Is(err, errBusy) {
		t.Fatalf("a request beyond MaxWaiting returned %v, want errBusy", err)
	}
	h.release <- nil
	answerOf(t, first)

	ctx, cancel := context.WithCancel(context.Background())
	gone := ask(ctx, r, q)
	poll(t, func() bool { return r.pendingCount() == 1 })
	cancel()
	if got := answerOf(t, gone); !errors.Is(got.err, context.Canceled) {
		t.Fatalf("a request whose client went away returned %+v", got)
	}
	clock.Step(DefaultMinReadInterval)
	select {
	case <-h.sent:
		t.Fatal("a read was sent for a request whose client had gone")
	case <-time.After(100 * time.Millisecond):
	}
}

// TestHealth: /healthz fails while the last read failed, and only then; a missing view is an answer.
func TestHealth(t *testing.T) {
	h := newHeldReads()
	r, clock := startReader(t, h, 0)
	q := query{namespace: "shop", group: "orders", groupUID: "u1", generation: 1}
	if err := r.health(); err != nil {
		t.Fatalf("before any read: %v", err)
	}
	steps := []struct {
		name     string
		injected error
		healthy  bool
	}{
		{"a failed read", errors.New("connection refused"), false},
		{"a read that finds no view", nil, true},
	}
	for _, s := range steps {
		got := ask(context.Background(), r, q)
		clock.Step(DefaultMinReadInterval)
		waitFor(t, s.name, h.sent)
		h.release <- s.injected
		if a := answerOf(t, got); a.a.Confirmed {
			t.Fatalf("%s confirmed %+v", s.name, a)
		}
		if err := r.health(); (err == nil) != s.healthy {
			t.Fatalf("after %s, health = %v", s.name, err)
		}
	}
}
