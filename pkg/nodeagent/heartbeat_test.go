package nodeagent

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-logr/logr/funcr"
	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/klog/v2"
	testingclock "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"

	"github.com/consumergroup-operator/consumergroup-operator/pkg/protocol"
)

const (
	heartbeatNamespace = "operator"
	agentPod           = "node-agent-x7k2p"
)

// runAgent runs an agent with a 4 s heartbeat on a fake clock, logging to logger, until the test ends
// or stop is called; stop returns once Run has.
func runAgent(t *testing.T, cs *fake.Clientset, logger klog.Logger) (clock *testingclock.FakeClock, stop func()) {
	t.Helper()
	clock = testingclock.NewFakeClock(time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC))
	s, err := New(Config{Node: testNode, Namespace: heartbeatNamespace, Client: cs, Clock: clock, Heartbeat: MinHeartbeat, Pod: agentPod})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(klog.NewContext(context.Background(), logger))
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			if err := <-done; err != nil {
				t.Errorf("Run: %v", err)
			}
		})
	}
	t.Cleanup(stop)
	return clock, stop
}

// eventually polls check until it passes, for up to 10 s of real time: the lease controller renews on a
// timer of its own, a quarter of the heartbeat's real seconds, whatever the agent's clock says.
func eventually(t *testing.T, check func() error) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		err := check()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal(err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// heartbeatAt checks that the heartbeat Lease is testNode's, held by agentPod for 4 s, renewed at at.
func heartbeatAt(cs *fake.Clientset, at time.Time) func() error {
	return func() error {
		l, err := cs.CoordinationV1().Leases(heartbeatNamespace).Get(context.Background(), protocol.NodeAgentHeartbeatName(testNode), metav1.GetOptions{})
		if err != nil {
			return err
		}
		node, ok := protocol.HeartbeatNode(l)
		if !ok || node != testNode || ptr.Deref(l.Spec.HolderIdentity, "") != agentPod || ptr.Deref(l.Spec.LeaseDurationSeconds, 0) != 4 ||
			l.Spec.RenewTime == nil || !l.Spec.RenewTime.Equal(&metav1.MicroTime{Time: at}) {
			return fmt.Errorf("heartbeat Lease: node %q (%v), holder %q, %d s, renewed %v; want node %s, holder %s, 4 s, renewed %v; labels %v, annotations %v",
				node, ok, ptr.Deref(l.Spec.HolderIdentity, ""), ptr.Deref(l.Spec.LeaseDurationSeconds, 0), l.Spec.RenewTime, testNode, agentPod, at, l.Labels, l.Annotations)
		}
		return nil
	}
}

// TestRunRenewsTheHeartbeat: Run creates the agent's heartbeat Lease, marked as the heartbeat of its node
// and held by its pod for the heartbeat's seconds, at the agent's clock's time; renews it at the clock's
// new time; and leaves it when it stops.
func TestRunRenewsTheHeartbeat(t *testing.T) {
	cs := fake.NewClientset()
	clock, stop := runAgent(t, cs, klog.Background())
	eventually(t, heartbeatAt(cs, clock.Now()))
	clock.Step(time.Second)
	eventually(t, heartbeatAt(cs, clock.Now()))
	stop()
	if _, err := cs.CoordinationV1().Leases(heartbeatNamespace).Get(context.Background(), protocol.NodeAgentHeartbeatName(testNode), metav1.GetOptions{}); err != nil {
		t.Errorf("the heartbeat Lease once the agent stopped: %v; want it left to go stale", err)
	}
}

// TestRunTakesTheHeartbeatOver: a heartbeat Lease that another pod held, and that lost its marks, is
// the agent's, marked again, from its first renewal.
func TestRunTakesTheHeartbeatOver(t *testing.T) {
	cs := fake.NewClientset(&coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Namespace: heartbeatNamespace, Name: protocol.NodeAgentHeartbeatName(testNode)},
		Spec:       coordinationv1.LeaseSpec{HolderIdentity: ptr.To("node-agent-old"), LeaseDurationSeconds: ptr.To[int32](40)},
	})
	clock, _ := runAgent(t, cs, klog.Background())
	eventually(t, heartbeatAt(cs, clock.Now()))
}

// TestHeartbeatLogsAFailingSpellOnce: renewals that keep failing are logged once, and their end once.
func TestHeartbeatLogsAFailingSpellOnce(t *testing.T) {
	var (
		mu    sync.Mutex
		lines []string
	)
	logged := func(what string) int {
		mu.Lock()
		defer mu.Unlock()
		n := 0
		for _, l := range lines {
			if strings.Contains(l, what) {
				n++
			}
		}
		return n
	}
	logger := funcr.New(func(_, args string) {
		mu.Lock()
		defer mu.Unlock()
		lines = append(lines, args)
	}, funcr.Options{})

	cs := fake.NewClientset()
	var failing atomic.Bool
	var failed atomic.Int32
	cs.PrependReactor("update", "leases", func(k8stesting.Action) (bool, runtime.Object, error) {
		if failing.Load() {
			failed.Add(1)
			return true, nil, errors.New("the API server is away")
		}
		return false, nil, nil
	})
	failing.Store(true)
	clock, _ := runAgent(t, cs, logger)
	const spell, recovered = "Failed to renew the heartbeat Lease repeatedly", "Renewed the heartbeat Lease again"
	// The first renewal fails five times, then five more after the controller reads the Lease again.
	eventually(t, func() error {
		if failed.Load() < 10 {
			return fmt.Errorf("%d failed renewals, want 10", failed.Load())
		}
		return nil
	})
	failing.Store(false)
	clock.Step(time.Second)
	eventually(t, heartbeatAt(cs, clock.Now()))
	eventually(t, func() error {
		if logged(recovered) == 0 {
			return errors.New("no renewal logged after the failing spell")
		}
		return nil
	})
	if n, m := logged(spell), logged(recovered); n != 1 || m != 1 {
		t.Errorf("%d failed renewals logged %q %d times and %q %d times, want once each", failed.Load(), spell, n, recovered, m)
	}
}
