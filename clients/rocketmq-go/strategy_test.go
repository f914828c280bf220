package cgrocketmq

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/apache/rocketmq-client-go/v2/primitive"

	"github.com/consumergroup-operator/consumergroup-operator/pkg/member"
)

func mqs(topic string, n int) []*primitive.MessageQueue {
	out := make([]*primitive.MessageQueue, n)
	for i := range out {
		out[i] = &primitive.MessageQueue{Topic: topic, BrokerName: "broker-a", QueueId: i}
	}
	return out
}

func TestSelect(t *testing.T) {
	a := member.Assignment{Generation: 3, Queues: []member.Queue{
		{Topic: "orders", Broker: "broker-a", ID: 1},
		{Topic: "orders", Broker: "broker-a", ID: 3},
		{Topic: "orders", Broker: "broker-b", ID: 0},   // a broker the client does not offer
		{Topic: "payments", Broker: "broker-a", ID: 0}, // another topic: allocated in its own call
	}}
	for _, tc := range []struct {
		name string
		a    member.Assignment
		all  []*primitive.MessageQueue
		want []string
	}{
		{"matches topic, broker and id", a, mqs("orders", 4), []string{"orders/broker-a/1", "orders/broker-a/3"}},
		{"only what the client offers", a, mqs("orders", 2), []string{"orders/broker-a/1"}},
		{"generation 0 consumes nothing", member.Assignment{Queues: a.Queues}, mqs("orders", 4), []string{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := Queues(Select(tc.a, tc.all)); !slices.Equal(got, tc.want) {
				t.Errorf("Select = %v, want %v", got, tc.want)
			}
		})
	}
}

func TestAllocateDefersUnmanagedTopics(t *testing.T) {
	s := New(&fakeAssignments{a: member.Assignment{Generation: 1, Queues: []member.Queue{{Topic: "orders", Broker: "broker-a", ID: 0}}}},
		Options{Topics: []string{"orders"}})
	retry := mqs("%RETRY%orders", 2)
	if got := Queues(s.Allocate("orders", "b", retry, []string{"a", "b"})); !slices.Equal(got, []string{"%RETRY%orders/broker-a/1"}) {
		t.Errorf("the retry topic is allocated %v, want AllocateByAveragely's second half", got)
	}
	if s.Calls() != 0 {
		t.Errorf("a call for an unmanaged topic counted as a managed one")
	}
	if got := Queues(s.Allocate("orders", "b", mqs("orders", 2), []string{"a", "b"})); !slices.Equal(got, []string{"orders/broker-a/0"}) {
		t.Errorf("orders is allocated %v, want the assignment's queue whatever the client ids", got)
	}
}

// fakeAssignments is an assignment in force that a test sets, and the acknowledgements it got.
type fakeAssignments struct {
	mu      sync.Mutex
	a       member.Assignment
	changed chan struct{}
	acks    []int64
}

func (f *fakeAssignments) Current() member.Assignment {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.a
}

func (f *fakeAssignments) set(a member.Assignment) {
	f.mu.Lock()
	f.a = a
	if f.changed != nil {
		close(f.changed)
		f.changed = nil
	}
	f.mu.Unlock()
}

func (f *fakeAssignments) Next(ctx context.Context, after int64) (member.Assignment, error) {
	for {
		f.mu.Lock()
		a := f.a
		if f.changed == nil {
			f.changed = make(chan struct{})
		}
		ch := f.changed
		f.mu.Unlock()
		if a.Generation != after {
			return a, nil
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return a, ctx.Err()
		}
	}
}

func (f *fakeAssignments) Ack(_ context.Context, g int64) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.acks = append(f.acks, g)
	return nil
}

func (f *fakeAssignments) acked() []int64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.acks)
}

// TestRunAcknowledgesOnlyWhatARoundApplied drives run with a rebalance round that the test controls: it
// allocates the topics it is told to, as a client whose route lacks a topic or whose generation changes
// mid-round would.
func TestRunAcknowledgesOnlyWhatARoundApplied(t *testing.T) {
	f := &fakeAssignments{a: member.Assignment{Generation: 1}}
	s := New(f, Options{Topics: []string{"orders", "payments"}, RetryInterval: time.Millisecond})
	rounds := make(chan func())     // what the next round does
	finished := make(chan struct{}) // a round returned
	rebalance := func() {
		(<-rounds)()
		finished <- struct{}{}
	}
	allocate := func(topics ...string) {
		for _, topic := range topics {
			s.Allocate("g", "c", mqs(topic, 1), []string{"c"})
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.run(ctx, rebalance) }()
	round := func(steps func()) {
		t.Helper()
		select {
		case rounds <- steps:
		case <-time.After(5 * time.Second):
			t.Fatalf("run started no round within 5 s; it acknowledged %v", f.acked())
		}
		<-finished
	}

	round(func() { allocate("orders") }) // payments was not allocated: nothing is applied for it
	// Each round starts after run has acted on the one before, so what it acknowledged is recorded by then.
	expectAcked := func(want ...int64) {
		if got := f.acked(); !slices.Equal(got, want) {
			t.Errorf("acknowledged %v, want %v", got, want)
		}
	}
	round(func() { expectAcked(); allocate("orders", "payments") })
	waitFor(t, func() bool { return slices.Equal(f.acked(), []int64{1}) })

	f.set(member.Assignment{Generation: 2})
	round(func() {
		allocate("orders")
		f.set(member.Assignment{Generation: 3}) // changes mid-round: orders got 2, payments gets 3
		allocate("payments")
	})
	round(func() { expectAcked(1); allocate("orders", "payments") })
	waitFor(t, func() bool { return slices.Equal(f.acked(), []int64{1, 3}) })

	f.set(member.Assignment{}) // generation 0: applied, never acknowledged
	round(func() { allocate("orders", "payments") })
	cancel()
	if err := <-done; err != context.Canceled {
		t.Errorf("run returned %v, want context.Canceled", err)
	}
	if got := f.acked(); !slices.Equal(got, []int64{1, 3}) {
		t.Errorf("acknowledged %v, want [1 3]", got)
	}
}

func waitFor(t *testing.T, ok func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !ok() {
		if time.Now().After(deadline) {
			t.Fatal("condition not met within 5 s")
		}
		time.Sleep(time.Millisecond)
	}
}
