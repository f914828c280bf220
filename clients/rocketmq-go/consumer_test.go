//go:build envtest

package cgrocketmq

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	rocketmq "github.com/apache/rocketmq-client-go/v2"
	"github.com/apache/rocketmq-client-go/v2/consumer"
	"github.com/apache/rocketmq-client-go/v2/primitive"
	"github.com/apache/rocketmq-client-go/v2/rlog"
	coordinationv1 "k8s.io/api/coordination/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/consumergroup-operator/consumergroup-operator/api/v1alpha1"
	"github.com/consumergroup-operator/consumergroup-operator/internal/manager"
	"github.com/consumergroup-operator/consumergroup-operator/internal/testenv"
	"github.com/consumergroup-operator/consumergroup-operator/internal/testoperator"
	"github.com/consumergroup-operator/consumergroup-operator/pkg/member"
	"github.com/consumergroup-operator/consumergroup-operator/pkg/protocol"
)

var (
	restConfig *rest.Config
	k8s        client.Client
)

func TestMain(m *testing.M) {
	rlog.SetLogLevel("error")
	testenv.Main(m, []string{"../../config/crd/bases"}, func(_ *envtest.Environment, cfg *rest.Config) error {
		restConfig = cfg
		var err error
		k8s, err = client.New(cfg, client.Options{Scheme: manager.Scheme()})
		return err
	})
}

// ackRecorder notes, from the member's own requests, when each Lease write acknowledging a generation was
// sent: the moment from which the operator may hand the queues it released to another pod. It holds the
// first write of each generation for settle before it notes the time and sends it, so that whatever the
// consumer sent the broker before that write has arrived by then.
type ackRecorder struct {
	next http.RoundTripper
	mu   sync.Mutex
	sent map[int64]time.Time // generation -> when the first write acknowledging it was sent
}

const settle = 100 * time.Millisecond

func (r *ackRecorder) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.Body != nil && (req.Method == http.MethodPut || req.Method == http.MethodPost) && strings.Contains(req.URL.Path, "/leases") {
		body, err := io.ReadAll(req.Body)
		if err != nil {
			return nil, err
		}
		req.Body = io.NopCloser(bytes.NewReader(body))
		obj, _, err := scheme.Codecs.UniversalDeserializer().Decode(body, nil, nil)
		if err != nil {
			return nil, fmt.Errorf("decoding a Lease write: %w", err)
		}
		if lease, ok := obj.(*coordinationv1.Lease); ok && lease.Annotations[protocol.AckedGenerationAnnotation] != "" {
			g, err := strconv.ParseInt(lease.Annotations[protocol.AckedGenerationAnnotation], 10, 64)
			if err != nil {
				return nil, err
			}
			r.mu.Lock()
			_, seen := r.sent[g]
			r.mu.Unlock()
			if !seen {
				time.Sleep(settle)
				r.mu.Lock()
				r.sent[g] = time.Now()
				r.mu.Unlock()
			}
		}
	}
	return r.next.RoundTrip(req)
}

// firstAckAfter returns the earliest acknowledgement of a generation above gen, and when it was sent.
func (r *ackRecorder) firstAckAfter(gen int64) (int64, time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	var first int64
	var at time.Time
	for g, t := range r.sent {
		if g > gen && (at.IsZero() || t.Before(at)) {
			first, at = g, t
		}
	}
	return first, at
}

func strs(qs []member.Queue) []string {
	out := make([]string, len(qs))
	for i, q := range qs {
		out[i] = q.String()
	}
	slices.Sort(out)
	return out
}

// TestPushConsumerFollowsTheOperator runs a real rocketmq-client-go push consumer, with the strategy
// wired in by consumer.WithStrategy, against a name server and broker that speak RocketMQ's protocol
// (fakeRocketMQ), and the operator and a real API server. The broker's pulls show which queues the
// consumer applied; the member's own Lease writes show when it acknowledged.
func TestPushConsumerFollowsTheOperator(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ns := testoperator.Start(t, restConfig, k8s, "rocketmq-go")

	const group, topic, queues = "orders", "orders", 8
	broker := startFakeRocketMQ(t, map[string]int{topic: queues, "%RETRY%" + group: 1})
	testenv.Group(ns, group).Topic(topic, testenv.Broker(brokerName, queues, "")).Strategy(v1alpha1.Strategy{Type: v1alpha1.Sticky}).
		Handoff(v1alpha1.Handoff{Mode: v1alpha1.Cooperative}).Create(t, k8s)
	pod := testenv.Pod(ns, "go-0", group).Create(t, k8s)

	acks := &ackRecorder{sent: map[int64]time.Time{}}
	cfg := rest.CopyConfig(restConfig)
	cfg.Wrap(func(next http.RoundTripper) http.RoundTripper { acks.next = next; return acks })
	cs, err := kubernetes.NewForConfig(cfg)
	testenv.Must(t, err)
	m, err := member.New(cs, member.Config{Namespace: ns, Group: group, Pod: pod.Name, PodUID: pod.UID, LeaseDuration: 10 * time.Second})
	testenv.Must(t, err)
	memberDone := make(chan struct{})
	go func() { _ = m.Run(ctx); close(memberDone) }()
	defer func() { cancel(); <-memberDone }()

	s := New(m, Options{Topics: []string{topic}})
	c, err := rocketmq.NewPushConsumer(
		consumer.WithGroupName(group),
		consumer.WithInstance(ns),
		consumer.WithNsResolver(primitive.NewPassthroughResolver([]string{broker.addr})),
		consumer.WithStrategy(s.Allocate),
	)
	testenv.Must(t, err)
	testenv.Must(t, c.Subscribe(topic, consumer.MessageSelector{}, func(context.Context, ...*primitive.MessageExt) (consumer.ConsumeResult, error) {
		return consumer.ConsumeSuccess, nil
	}))
	testenv.Must(t, c.Start())
	defer func() { _ = c.Shutdown() }()
	runDone := make(chan error, 1)
	go func() { runDone <- s.Run(ctx, c) }()
	defer func() {
		cancel()
		if err := <-runDone; !errors.Is(err, context.Canceled) {
			t.Errorf("Run returned %v, want context.Canceled", err)
		}
	}()

	// Alone, the pod gets every queue: the consumer pulls all of them and acknowledges the generation.
	var first member.Assignment
	testenv.Poll(t, 20*time.Second, 50*time.Millisecond, nil, func() error {
		first = m.Current()
		pulling := broker.pulling(topic)
		switch {
		case len(first.Queues) != queues:
			return fmt.Errorf("generation %d gives go-0 %d queues, want %d", first.Generation, len(first.Queues), queues)
		case !slices.Equal(pulling, strs(first.Queues)):
			return fmt.Errorf("the consumer pulls %v, want generation %d's %v", pulling, first.Generation, strs(first.Queues))
		case m.Acked() != first.Generation:
			return fmt.Errorf("the Lease acknowledges generation %d, want %d", m.Acked(), first.Generation)
		}
		return nil
	})
	if s.Calls() == 0 {
		t.Fatal("the consumer pulls its queues but never called the strategy")
	}
	if _, err := SerializedRebalance(c); err != nil {
		t.Fatal(err)
	}

	// A second member joins. The operator takes half the queues from go-0; the consumer drops them and
	// acknowledges within a rebalance round started at once, not at its next 20 s round; only then does
	// the operator give them to the newcomer.
	joined := time.Now()
	own := testenv.NewOwnership()
	other := testenv.StartMember(t, restConfig, group, testenv.Pod(ns, "sim-1", group).Create(t, k8s), own, testenv.MemberOptions{})
	var now member.Assignment
	testenv.Poll(t, 15*time.Second, 50*time.Millisecond, nil, func() error {
		now = m.Current()
		reads := strs(own.Reading(other.Reader()))
		pulling := broker.pulling(topic)
		switch {
		case len(reads) != queues/2:
			return fmt.Errorf("sim-1 reads %d queues, want %d", len(reads), queues/2)
		case !slices.Equal(pulling, strs(now.Queues)):
			return fmt.Errorf("the consumer pulls %v, want generation %d's %v", pulling, now.Generation, strs(now.Queues))
		case m.Acked() != now.Generation:
			return fmt.Errorf("the Lease acknowledges generation %d, want %d", m.Acked(), now.Generation)
		case len(slices.Concat(reads, pulling)) != queues || len(slices.Compact(slices.Sorted(slices.Values(slices.Concat(reads, pulling))))) != queues:
			return fmt.Errorf("sim-1 reads %v and go-0 pulls %v: want every queue read once", reads, pulling)
		}
		return nil
	})
	if took := time.Since(joined); took > 10*time.Second {
		t.Errorf("the handoff took %s: the strategy did not start a rebalance round when the generation changed", took)
	}
	released, ackedAt := acks.firstAckAfter(first.Generation)
	if released == 0 {
		t.Fatal("no acknowledgement after the first generation was recorded")
	}
	// Dropping a queue writes its offset to the broker (for the first queue a round drops, at least: the
	// client forgets the others' offsets then). Those writes, and the last pulls, come before the
	// acknowledgement.
	dropsSeen := 0
	for _, q := range own.Reading(other.Reader()) {
		if last := broker.pulledAt(q.String()); !last.Before(ackedAt) {
			t.Errorf("go-0 pulled %s at %s, after it acknowledged generation %d at %s, which released it",
				q, last.Format(time.StampMicro), released, ackedAt.Format(time.StampMicro))
		}
		if at := broker.offsetWrittenAt(q.String()); at.After(joined) {
			dropsSeen++
			if !at.Before(ackedAt) {
				t.Errorf("go-0 dropped %s at %s, after it acknowledged generation %d at %s, which released it",
					q, at.Format(time.StampMicro), released, ackedAt.Format(time.StampMicro))
			}
		}
	}
	if dropsSeen == 0 {
		t.Errorf("the broker saw no offset written for the %d queues go-0 dropped", queues/2)
	}
	if v := own.Violations(); len(v) > 0 {
		t.Errorf("ownership violations: %v", v)
	}
	t.Logf("handoff to the new member took %s; go-0 acknowledged generation %d, which released %d queues", time.Since(joined).Round(time.Millisecond), released, queues/2)
}
