// Package cgrocketmq plugs a rocketmq-client-go push consumer into a ConsumerGroup: the consumer reads the
// queues the operator assigned to its pod, and tells the operator once it has applied them.
//
//	m, _ := member.New(clientset, cfg)           // pkg/member: this pod's view of the group
//	go m.Run(ctx)
//	s := cgrocketmq.New(m, cgrocketmq.Options{Topics: []string{"orders"}})
//	c, _ := rocketmq.NewPushConsumer(consumer.WithGroupName("orders"), consumer.WithStrategy(s.Allocate), ...)
//	_ = c.Subscribe("orders", consumer.MessageSelector{}, handle)
//	_ = c.Start()
//	go s.Run(ctx, c)                             // rebalance at once on a new generation, and acknowledge it
//
// RocketMQ calls the strategy once per subscribed topic in each rebalance round, and applies the result
// (drops the queues it no longer lists, starts pulling the new ones) before the round ends. The client's
// own rounds run every 20 s and are serialised by a lock; Run starts a round under that same lock whenever
// a new generation is in force, and acknowledges the generation once a round in which every call returned
// it has finished. The operator never hands a queue to another pod before that acknowledgement.
//
// The operator names members by pod (or by the annotation spec.memberIdentity names), not by RocketMQ's
// client id (IP@instance), which changes when a pod restarts: the strategy ignores the client id and the
// consumer list RocketMQ passes it, and a pod keeps its queues across a restart of its process.
package cgrocketmq

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"sort"
	"sync"
	"time"
	"unsafe"

	rocketmq "github.com/apache/rocketmq-client-go/v2"
	"github.com/apache/rocketmq-client-go/v2/consumer"
	"github.com/apache/rocketmq-client-go/v2/primitive"

	"github.com/consumergroup-operator/consumergroup-operator/pkg/member"
)

// Assignments is the pod's view of its group: *member.Client.
type Assignments interface {
	// Current is the assignment in force; generation 0 means consume nothing.
	Current() member.Assignment
	// Next waits for an assignment in force with a generation other than after.
	Next(ctx context.Context, after int64) (member.Assignment, error)
	// Ack tells the operator the application has applied generation.
	Ack(ctx context.Context, generation int64) error
}

// Options configure a Strategy.
type Options struct {
	// Topics are the subscribed topics whose queues the ConsumerGroup assigns. A generation is acknowledged
	// only once every one of them has been allocated at it and applied.
	Topics []string
	// Fallback allocates the queues of topics not in Topics. A ConsumerGroup with spec.nameServer assigns
	// the consumer group's retry topic (%RETRY%group): list it in Topics, and nothing is left to the
	// fallback; a group with static topics does not, and its retry topic falls back. Default:
	// consumer.AllocateByAveragely.
	Fallback consumer.AllocateStrategy
	// RetryInterval is how long Run waits before starting another round when a round could not
	// acknowledge (a topic was not allocated, or the generation changed during the round). Default 200 ms.
	RetryInterval time.Duration
}

// Strategy is a consumer.AllocateStrategy backed by the operator's assignment.
type Strategy struct {
	assignments Assignments
	opts        Options
	managed     map[string]bool

	mu sync.Mutex
	// calls counts Allocate calls; since and sinceGens record, per managed topic, the generations returned
	// since a round was started, so that Run can tell whether every call of its round returned one generation.
	calls     int64
	since     map[string]int64
	sinceGens map[int64]bool
}

// New returns a Strategy that allocates opts.Topics from assignments.
func New(assignments Assignments, opts Options) *Strategy {
	if opts.Fallback == nil {
		opts.Fallback = consumer.AllocateByAveragely
	}
	if opts.RetryInterval <= 0 {
		opts.RetryInterval = 200 * time.Millisecond
	}
	s := &Strategy{assignments: assignments, opts: opts, managed: map[string]bool{}}
	for _, t := range opts.Topics {
		s.managed[t] = true
	}
	s.resetRound()
	return s
}

// Allocate is the consumer.AllocateStrategy: for a topic in Options.Topics it returns the queues of mqAll
// that the assignment in force lists for this pod, in mqAll's order; for any other topic it defers to
// Options.Fallback. currentCID and cidAll matter only to the fallback.
func (s *Strategy) Allocate(group, currentCID string, mqAll []*primitive.MessageQueue, cidAll []string) []*primitive.MessageQueue {
	if len(mqAll) == 0 {
		return nil
	}
	topic := mqAll[0].Topic
	if !s.managed[topic] {
		return s.opts.Fallback(group, currentCID, mqAll, cidAll)
	}
	a := s.assignments.Current()
	s.mu.Lock()
	s.calls++
	s.since[topic] = a.Generation
	s.sinceGens[a.Generation] = true
	s.mu.Unlock()
	return Select(a, mqAll)
}

// Select returns the queues of mqAll that a lists, in mqAll's order; none when a's generation is 0.
func Select(a member.Assignment, mqAll []*primitive.MessageQueue) []*primitive.MessageQueue {
	if a.Generation == 0 {
		return []*primitive.MessageQueue{}
	}
	mine := make(map[member.Queue]bool, len(a.Queues))
	for _, q := range a.Queues {
		mine[q] = true
	}
	out := []*primitive.MessageQueue{}
	for _, mq := range mqAll {
		if mine[member.Queue{Topic: mq.Topic, Broker: mq.BrokerName, ID: int32(mq.QueueId)}] {
			out = append(out, mq)
		}
	}
	return out
}

// Calls is how many times RocketMQ called Allocate for a managed topic.
func (s *Strategy) Calls() int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.calls
}

func (s *Strategy) resetRound() {
	s.mu.Lock()
	s.since, s.sinceGens = map[string]int64{}, map[int64]bool{}
	s.mu.Unlock()
}

// roundApplied returns the generation every managed topic was allocated at since resetRound, and true,
// when all of them were and every call returned that one generation.
func (s *Strategy) roundApplied() (int64, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.sinceGens) != 1 {
		return 0, false
	}
	for _, t := range s.opts.Topics {
		if _, ok := s.since[t]; !ok {
			return 0, false
		}
	}
	for g := range s.sinceGens {
		return g, true
	}
	return 0, false
}

// Run keeps c in step with the assignment until ctx ends: whenever the generation in force changes it
// runs a rebalance round of c at once, rather than at c's next 20 s round, and it acknowledges the
// generation once a finished round applied it to every topic in Options.Topics.
func (s *Strategy) Run(ctx context.Context, c rocketmq.PushConsumer) error {
	rebalance, err := SerializedRebalance(c)
	if err != nil {
		return err
	}
	return s.run(ctx, rebalance)
}

// run is Run with the round given: rebalance must return once a round has applied its results, and must
// not overlap another round.
func (s *Strategy) run(ctx context.Context, rebalance func()) error {
	var acked int64 = -1 // the generation last acknowledged (or, for 0, applied)
	for {
		a := s.assignments.Current()
		if a.Generation == acked {
			if _, err := s.assignments.Next(ctx, acked); err != nil {
				return ctx.Err()
			}
			continue
		}
		// Rounds are serialised: every call after resetRound comes from this round or from one that
		// finished before it started, so once rebalance returns, what those calls returned is applied.
		// A call that returned another generation (the generation changed mid-round, or a round that
		// ran before this one) leaves more than one generation recorded, and the round is repeated.
		s.resetRound()
		rebalance()
		if g, ok := s.roundApplied(); ok && g == a.Generation {
			if g == 0 {
				acked = 0 // consume nothing is applied; there is nothing to acknowledge
				continue
			}
			err := s.assignments.Ack(ctx, g)
			switch {
			case err == nil:
				acked = g
				continue
			case errors.Is(err, member.ErrUnknownGeneration):
				return err // not expected: the generation came from Current
			}
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(s.opts.RetryInterval):
		}
	}
}

// SerializedRebalance returns a function that runs one rebalance round of c under the lock that
// serialises c's own rounds, and returns once the round has applied its results.
//
// The push consumer's exported Rebalance does not take that lock: a round it starts can overlap one of
// the client's own 20 s rounds, and a round that read an older generation could then apply it after this
// one, giving back a queue the operator was told had been released. The client's RebalanceImmediately
// takes the lock, but is reachable only through the consumer's unexported client field; this reads it, and
// fails, rather than rebalancing unserialised, if a version of the client no longer has it.
func SerializedRebalance(c rocketmq.PushConsumer) (func(), error) {
	v := reflect.ValueOf(c)
	if v.Kind() != reflect.Pointer || v.IsNil() || v.Elem().Kind() != reflect.Struct {
		return nil, fmt.Errorf("cgrocketmq: %T is not rocketmq-client-go's push consumer", c)
	}
	field := v.Elem().FieldByName("client")
	if !field.IsValid() || field.Kind() != reflect.Interface || !field.CanAddr() {
		return nil, fmt.Errorf("cgrocketmq: %T has no client field: this version of rocketmq-client-go is not supported", c)
	}
	client := reflect.NewAt(field.Type(), unsafe.Pointer(field.UnsafeAddr())).Elem()
	if client.IsNil() {
		return nil, fmt.Errorf("cgrocketmq: %T has no client yet", c)
	}
	method := client.MethodByName("RebalanceImmediately")
	if !method.IsValid() || method.Type().NumIn() != 0 {
		return nil, fmt.Errorf("cgrocketmq: %T's client has no RebalanceImmediately(): this version of rocketmq-client-go is not supported", c)
	}
	return func() { method.Call(nil) }, nil
}

// Queues returns mqs as "topic/broker/id" strings, sorted, for logs and tests.
func Queues(mqs []*primitive.MessageQueue) []string {
	out := make([]string, len(mqs))
	for i, mq := range mqs {
		out[i] = member.Queue{Topic: mq.Topic, Broker: mq.BrokerName, ID: int32(mq.QueueId)}.String()
	}
	sort.Strings(out)
	return out
}
