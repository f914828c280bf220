//go:build envtest

package cgrocketmq

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	rocketmq "github.com/apache/rocketmq-client-go/v2"
	"github.com/apache/rocketmq-client-go/v2/consumer"
	"github.com/apache/rocketmq-client-go/v2/primitive"
	"k8s.io/client-go/kubernetes"

	"github.com/consumergroup-operator/consumergroup-operator/api/v1alpha1"
	"github.com/consumergroup-operator/consumergroup-operator/internal/rocketmqstandin"
	"github.com/consumergroup-operator/consumergroup-operator/internal/testenv"
	"github.com/consumergroup-operator/consumergroup-operator/internal/testoperator"
	"github.com/consumergroup-operator/consumergroup-operator/pkg/member"
	"github.com/consumergroup-operator/consumergroup-operator/pkg/nameserver"
)

// subscribed records, per topic, the queues the client rebalances over (the mqAll it hands the strategy).
type subscribed struct {
	mu     sync.Mutex
	topics map[string][]string
}

func (s *subscribed) wrap(next consumer.AllocateStrategy) consumer.AllocateStrategy {
	return func(group, cid string, mqAll []*primitive.MessageQueue, cidAll []string) []*primitive.MessageQueue {
		if len(mqAll) > 0 {
			qs := make([]string, len(mqAll))
			for i, mq := range mqAll {
				qs[i] = member.Queue{Topic: mq.Topic, Broker: mq.BrokerName, ID: int32(mq.QueueId)}.String()
			}
			slices.Sort(qs)
			s.mu.Lock()
			s.topics[mqAll[0].Topic] = qs
			s.mu.Unlock()
		}
		return next(group, cid, mqAll, cidAll)
	}
}

func (s *subscribed) of(topic string) []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.topics[topic]
}

func queueNames(topic string, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("%s/%s/%d", topic, brokerName, i)
	}
	slices.Sort(out)
	return out
}

// TestPushConsumerSubscribesToTheDiscoveredQueues runs a real rocketmq-client-go push consumer and the
// operator against the same name-server stand-in. The group lists its topic by name only: the operator
// discovers its queues and its retry topic's. The client rebalances over exactly the queues the operator
// assigns, retry topic included, none of them allocated client-side; it pulls them all; and when the
// topic grows, both follow.
func TestPushConsumerSubscribesToTheDiscoveredQueues(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ns := testoperator.Start(t, restConfig, k8s, "rocketmq-go-routes")
	const group, topic = "orders", "orders"
	retry := "%RETRY%" + group
	broker := startFakeRocketMQ(t, map[string]int{topic: 16, retry: 1}) // the broker; its routes go unused
	nsrv := rocketmqstandin.Start(t)
	readOnly := rocketmqstandin.Broker{Name: "broker-ro", Queues: 4, Perm: nameserver.PermWrite, Addr: broker.addr}
	nsrv.SetTopic(topic, rocketmqstandin.Broker{Name: brokerName, Queues: 8, Addr: broker.addr}, readOnly)
	nsrv.SetTopic(retry, rocketmqstandin.Broker{Name: brokerName, Queues: 1, Addr: broker.addr})

	g := testenv.Group(ns, group).Strategy(v1alpha1.Strategy{Type: v1alpha1.Sticky}).Handoff(v1alpha1.Handoff{Mode: v1alpha1.Cooperative}).Obj()
	g.Spec.Topics = []v1alpha1.Topic{{Name: topic}}
	g.Spec.NameServer = &v1alpha1.NameServer{Addresses: []string{nsrv.Addr}} // read every second by the test operator (testoperator.NameServers)
	testenv.Must(t, k8s.Create(ctx, g))
	pod := testenv.Pod(ns, "go-0", group).Create(t, k8s)

	cs, err := kubernetes.NewForConfig(restConfig)
	testenv.Must(t, err)
	m, err := member.New(cs, member.Config{Namespace: ns, Group: group, Pod: pod.Name, PodUID: pod.UID, LeaseDuration: 10 * time.Second})
	testenv.Must(t, err)
	memberDone := make(chan struct{})
	go func() { _ = m.Run(ctx); close(memberDone) }()
	defer func() { cancel(); <-memberDone }()

	var fallbacks atomic.Int32
	s := New(m, Options{Topics: []string{topic, retry}, Fallback: func(string, string, []*primitive.MessageQueue, []string) []*primitive.MessageQueue {
		fallbacks.Add(1)
		return nil
	}})
	seen := &subscribed{topics: map[string][]string{}}
	c, err := rocketmq.NewPushConsumer(
		consumer.WithGroupName(group),
		consumer.WithInstance(ns),
		consumer.WithNsResolver(primitive.NewPassthroughResolver([]string{nsrv.Addr})),
		consumer.WithStrategy(seen.wrap(s.Allocate)),
	)
	testenv.Must(t, err)
	testenv.Must(t, c.Subscribe(topic, consumer.MessageSelector{}, func(context.Context, ...*primitive.MessageExt) (consumer.ConsumeResult, error) {
		return consumer.ConsumeSuccess, nil
	}))
	testenv.Must(t, c.Start())
	defer func() { _ = c.Shutdown() }()
	go func() { _ = s.Run(ctx, c) }()

	agree := func(queues int) func() error {
		return func() error {
			want := slices.Concat(queueNames(retry, 1), queueNames(topic, queues))
			slices.Sort(want)
			a := m.Current()
			switch got := strs(a.Queues); {
			case !slices.Equal(got, want):
				return fmt.Errorf("the operator gives go-0 %v (generation %d), want %v", got, a.Generation, want)
			case !slices.Equal(seen.of(topic), queueNames(topic, queues)):
				return fmt.Errorf("the client rebalances %s over %v, want %v", topic, seen.of(topic), queueNames(topic, queues))
			case !slices.Equal(seen.of(retry), queueNames(retry, 1)):
				return fmt.Errorf("the client rebalances %s over %v", retry, seen.of(retry))
			case !slices.Equal(broker.pulling(topic), queueNames(topic, queues)):
				return fmt.Errorf("the consumer pulls %v", broker.pulling(topic))
			case !slices.Equal(broker.pulling(retry), queueNames(retry, 1)):
				return fmt.Errorf("the consumer pulls %v of the retry topic", broker.pulling(retry))
			case m.Acked() != a.Generation:
				return fmt.Errorf("the Lease acknowledges generation %d, want %d", m.Acked(), a.Generation)
			}
			return nil
		}
	}
	testenv.Poll(t, 30*time.Second, 100*time.Millisecond, nil, agree(8))
	nsrv.SetTopic(topic, rocketmqstandin.Broker{Name: brokerName, Queues: 12, Addr: broker.addr}, readOnly)
	// The client reads the name server every 30 s (pollNameServerInterval), the operator every second.
	testenv.Poll(t, 45*time.Second, 100*time.Millisecond, nil, agree(12))
	if n := fallbacks.Load(); n > 0 {
		t.Errorf("the client allocated %d topics' queues by itself", n)
	}
}
