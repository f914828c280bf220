//go:build envtest

package member_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/consumergroup-operator/consumergroup-operator/internal/testenv"
	"github.com/consumergroup-operator/consumergroup-operator/pkg/member"
	"github.com/consumergroup-operator/consumergroup-operator/pkg/protocol"
)

func TestDeliversEachNewGeneration(t *testing.T) {
	ns := newNamespace(t)
	m := startMember(t, ns, nil, nil)

	publish(t, ns, 1, map[string][]member.Queue{"consumer-0": queues(0, 1, 2), "consumer-1": queues(3)})
	eventually(t, 10*time.Second, inForce(m.client, 1, queues(0, 1, 2)))

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	next := make(chan member.Assignment, 1)
	go func() {
		a, err := m.client.Next(ctx, 1)
		if err != nil {
			t.Errorf("Next: %v", err)
		}
		next <- a
	}()
	publish(t, ns, 2, map[string][]member.Queue{"consumer-0": queues(0, 1), "consumer-1": queues(2, 3)})
	a := <-next
	if a.Generation != 2 || fmt.Sprint(a.Queues) != fmt.Sprint(queues(0, 1)) || a.Member != "consumer-0" {
		t.Fatalf("Next delivered %+v, want generation 2 with queues 0 and 1 for consumer-0", a)
	}

	// The Updates channel holds the newest assignment.
	eventually(t, 10*time.Second, func() error {
		select {
		case u := <-m.client.Updates():
			if u.Generation == 2 {
				return nil
			}
			return fmt.Errorf("Updates delivered generation %d", u.Generation)
		default:
			return errors.New("nothing on Updates")
		}
	})
}

func TestMissingEntryMeansNoQueues(t *testing.T) {
	ns := newNamespace(t)
	m := startMember(t, ns, nil, nil)
	publish(t, ns, 4, map[string][]member.Queue{"consumer-0": queues(0)})
	eventually(t, 10*time.Second, inForce(m.client, 4, queues(0)))

	publish(t, ns, 5, map[string][]member.Queue{"consumer-1": queues(0)})
	eventually(t, 10*time.Second, inForce(m.client, 5, nil))

	// Without the ConfigMap there is no assignment at all: generation 0, hold nothing.
	if err := cs.CoreV1().ConfigMaps(ns).Delete(context.Background(), protocol.AssignmentName("orders"), metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, 10*time.Second, inForce(m.client, 0, nil))
}

func TestLeaseNamesPodAndGroupAsOwnersAndIsRenewed(t *testing.T) {
	ns := newNamespace(t)
	m := startMember(t, ns, func(c *member.Config) { c.MemberID = "10.0.0.7@consumer-0" }, nil)
	publish(t, ns, 1, map[string][]member.Queue{"consumer-1": queues(0)})

	var firstRenew time.Time
	eventually(t, 10*time.Second, func() error {
		lease, err := cs.CoordinationV1().Leases(ns).Get(context.Background(), protocol.LeaseName("orders", "consumer-0"), metav1.GetOptions{})
		if err != nil {
			return err
		}
		// The pod and the group own it: it outlives the pod until the group goes.
		if len(lease.OwnerReferences) != 2 || lease.OwnerReferences[0].UID != m.pod.UID || lease.OwnerReferences[0].Kind != "Pod" ||
			lease.OwnerReferences[1].UID != groupUID || lease.OwnerReferences[1].Kind != protocol.GroupKind {
			return fmt.Errorf("owner references %+v, want the pod %s and the group %s", lease.OwnerReferences, m.pod.UID, groupUID)
		}
		if lease.Labels[protocol.GroupLabel] != "orders" {
			return fmt.Errorf("labels %v, want %s=orders", lease.Labels, protocol.GroupLabel)
		}
		state := protocol.ReadLease(lease)
		if state.Member != "10.0.0.7@consumer-0" || state.Duration != 3*time.Second || state.RenewTime.IsZero() || state.PodUID != m.pod.UID {
			return fmt.Errorf("lease state %+v, want holder 10.0.0.7@consumer-0 of pod %s, duration 3s and a renew time", state, m.pod.UID)
		}
		if !state.Released() || state.AckedGeneration != 0 {
			return fmt.Errorf("claim %v, acked %d; want nothing claimed or acknowledged", state.Claim, state.AckedGeneration)
		}
		firstRenew = state.RenewTime
		return nil
	})
	eventually(t, 10*time.Second, func() error {
		lease, err := cs.CoordinationV1().Leases(ns).Get(context.Background(), m.client.LeaseName(), metav1.GetOptions{})
		if err != nil {
			return err
		}
		if renew := protocol.ReadLease(lease).RenewTime; !renew.After(firstRenew) {
			return fmt.Errorf("renew time %v has not moved past %v", renew, firstRenew)
		}
		return nil
	})

	// A deleted Lease is written again.
	if err := cs.CoordinationV1().Leases(ns).Delete(context.Background(), m.client.LeaseName(), metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, 10*time.Second, ackedInLease(ns, m, 0))
}

func TestAckWritesTheLeaseAndOnlyGrows(t *testing.T) {
	ns := newNamespace(t)
	m := startMember(t, ns, nil, nil)
	publish(t, ns, 3, map[string][]member.Queue{"consumer-0": queues(0)})
	eventually(t, 10*time.Second, inForce(m.client, 3, queues(0)))
	ctx := context.Background()

	if err := m.client.Ack(ctx, 3); err != nil {
		t.Fatalf("Ack(3): %v", err)
	}
	eventually(t, 10*time.Second, ackedInLease(ns, m, 3))
	if err := m.client.Ack(ctx, 2); err != nil {
		t.Fatalf("Ack(2) after Ack(3): %v", err)
	}
	if err := m.client.Ack(ctx, 4); !errors.Is(err, member.ErrUnknownGeneration) {
		t.Fatalf("Ack(4) before generation 4 was published returned %v, want ErrUnknownGeneration", err)
	}
	// Renewals rewrite the annotation from memory; it must stay at 3.
	time.Sleep(2 * time.Second)
	if err := ackedInLease(ns, m, 3)(); err != nil {
		t.Fatal(err)
	}

	// A group deleted and created again starts its generations over; the old ack is withdrawn.
	if err := cs.CoreV1().ConfigMaps(ns).Delete(ctx, protocol.AssignmentName("orders"), metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	publishAs(t, ns, "group-uid-2", 1, 1, map[string][]member.Queue{"consumer-0": queues(5)})
	eventually(t, 10*time.Second, ackedInLease(ns, m, 0))
	eventually(t, 10*time.Second, inForce(m.client, 1, queues(5)))
	if err := m.client.Ack(ctx, 1); err != nil {
		t.Fatalf("Ack(1) in the new group: %v", err)
	}
	eventually(t, 10*time.Second, ackedInLease(ns, m, 1))
}

func TestAutoAck(t *testing.T) {
	ns := newNamespace(t)
	m := startMember(t, ns, func(c *member.Config) { c.AutoAck = true }, nil)
	publish(t, ns, 7, map[string][]member.Queue{"consumer-0": queues(1)})
	eventually(t, 10*time.Second, ackedInLease(ns, m, 7))
	publish(t, ns, 8, map[string][]member.Queue{"consumer-0": queues(1, 2)})
	eventually(t, 10*time.Second, ackedInLease(ns, m, 8))
}

func TestDrainWaitsForTheOperatorToReleaseTheQueues(t *testing.T) {
	ns := newNamespace(t)
	m := startMember(t, ns, func(c *member.Config) { c.DrainAckTimeout = time.Hour }, nil)
	publish(t, ns, 1, map[string][]member.Queue{"consumer-0": queues(0, 1)})
	eventually(t, 10*time.Second, inForce(m.client, 1, queues(0, 1)))

	// While the pod still has queues, Drain runs into its deadline and says why.
	short, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	err := m.client.Drain(short)
	cancel()
	if !isDeadline(err) || !strings.Contains(err.Error(), "still gives this pod 2 queues") {
		t.Fatalf("Drain with queues assigned returned %v, want a deadline error naming the 2 queues", err)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	drained := make(chan error, 1)
	go func() { drained <- m.client.Drain(ctx) }()

	publish(t, ns, 2, map[string][]member.Queue{"consumer-0": nil, "consumer-1": queues(0, 1)})
	eventually(t, 10*time.Second, inForce(m.client, 2, nil))
	select {
	case err := <-drained:
		t.Fatalf("Drain returned %v before generation 2 was acknowledged", err)
	default:
	}
	// The application stops consuming and acknowledges: Drain returns.
	if err := m.client.Ack(ctx, 2); err != nil {
		t.Fatal(err)
	}
	if err := <-drained; err != nil {
		t.Fatalf("Drain: %v", err)
	}
	if err := ackedInLease(ns, m, 2)(); err != nil {
		t.Fatal(err)
	}
	drainedForGood(t, ns, m, 3)
}

func TestDrainAcknowledgesTheReleaseItselfWhenTheApplicationDoesNot(t *testing.T) {
	ns := newNamespace(t)
	m := startMember(t, ns, func(c *member.Config) { c.DrainAckTimeout = 200 * time.Millisecond }, nil)
	publish(t, ns, 1, map[string][]member.Queue{"consumer-0": queues(0)})
	eventually(t, 10*time.Second, inForce(m.client, 1, queues(0)))

	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	drained := make(chan error, 1)
	go func() { drained <- m.client.Drain(ctx) }()
	publish(t, ns, 2, map[string][]member.Queue{"consumer-1": queues(0)})
	if err := <-drained; err != nil {
		t.Fatalf("Drain: %v", err)
	}
	if err := ackedInLease(ns, m, 2)(); err != nil {
		t.Fatal(err)
	}
	// The acknowledgement Drain wrote for the application is the member's last: it has stopped.
	drainedForGood(t, ns, m, 3)
}

// A pod whose assignment ConfigMap is gone while it drains (deleted mid-rollout, or with its group) has
// been handed generation 0. Drain gives the application DrainAckTimeout to stop, then releases the claim
// in the Lease before it returns: the operator may never hear that the pod's containers ended, and
// without the release its queues would wait for the Lease to expire.
func TestDrainReleasesTheClaimWhenTheAssignmentIsGone(t *testing.T) {
	ns := newNamespace(t)
	m := startMember(t, ns, func(c *member.Config) { c.DrainAckTimeout = 2 * time.Second }, nil)
	publish(t, ns, 1, map[string][]member.Queue{podName: queues(0, 1)})
	eventually(t, 10*time.Second, inForce(m.client, 1, queues(0, 1)))
	ctx := context.Background()
	if err := m.client.Ack(ctx, 1); err != nil {
		t.Fatal(err)
	}
	if got := leaseState(t, ns, m).Claim; fmt.Sprint(got) != fmt.Sprint(queues(0, 1)) {
		t.Fatalf("the Lease claims %v after the acknowledgement, want %v", got, queues(0, 1))
	}

	if err := cs.CoreV1().ConfigMaps(ns).Delete(ctx, protocol.AssignmentName(group), metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, 10*time.Second, inForce(m.client, 0, nil))

	// Within DrainAckTimeout of being handed generation 0 the application may still be stopping: the
	// claim stays.
	short, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	err := m.client.Drain(short)
	cancel()
	if !isDeadline(err) || !strings.Contains(err.Error(), "does not exist") {
		t.Fatalf("Drain within DrainAckTimeout returned %v, want a deadline error saying the ConfigMap does not exist", err)
	}
	if s := leaseState(t, ns, m); s.Released() {
		t.Fatalf("the Lease released its claim %v before the application had DrainAckTimeout to stop", s.Claim)
	}

	long, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	if err := m.client.Drain(long); err != nil {
		t.Fatalf("Drain: %v", err)
	}
	if s := leaseState(t, ns, m); !s.Released() || s.ClaimErr != nil || s.AckedGeneration != 1 {
		t.Fatalf("when Drain returned the Lease claims %v (error %v), acknowledges %d; want an empty claim and generation 1 still acknowledged",
			s.Claim, s.ClaimErr, s.AckedGeneration)
	}
	drainedForGood(t, ns, m, 2)
}

// leaseState reads the member's Lease.
func leaseState(t *testing.T, ns string, m testMember) protocol.LeaseState {
	t.Helper()
	lease, err := cs.CoordinationV1().Leases(ns).Get(context.Background(), m.client.LeaseName(), metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return protocol.ReadLease(lease)
}

// drainedForGood checks that a member whose Drain returned reads and claims nothing from then on: it
// claims nothing in its Lease and says there that it stopped, a generation gen that gives its pod queues is
// neither delivered nor claimed by the renewals after it, an acknowledgement of it is refused, and Drain
// returns at once.
func drainedForGood(t *testing.T, ns string, m testMember, gen int64) {
	t.Helper()
	if s := leaseState(t, ns, m); !s.Released() || !s.Stopped {
		t.Fatalf("after the drain the Lease claims %v (error %v), stopped %v; want nothing, and stopped", s.Claim, s.ClaimErr, s.Stopped)
	}
	if st := m.client.Status(); st.InForce.Generation != 0 || len(st.InForce.Queues) != 0 || !st.Drained || !strings.Contains(st.Reason, "drained") {
		t.Fatalf("after the drain the status is %+v, want generation 0 in force, drained, and a reason saying so", st)
	}

	publish(t, ns, gen, map[string][]member.Queue{podName: queues(7, 8)})
	eventually(t, 10*time.Second, func() error {
		if got := m.client.Status().PublishedGeneration; got != gen {
			return fmt.Errorf("the member sees generation %d published, want %d", got, gen)
		}
		return nil
	})
	seen := time.Now()
	eventually(t, 10*time.Second, func() error {
		if renewed := leaseState(t, ns, m).RenewTime; !renewed.After(seen) {
			return fmt.Errorf("the Lease was last renewed at %v, not since generation %d was seen at %v", renewed, gen, seen)
		}
		return nil
	})
	if s := leaseState(t, ns, m); !s.Released() || !s.Stopped {
		t.Fatalf("a drained member claims %v (stopped %v) once generation %d gives its pod queues, want nothing, and stopped", s.Claim, s.Stopped, gen)
	}
	if a := m.client.Current(); a.Generation != 0 || len(a.Queues) != 0 {
		t.Fatalf("a drained member has %+v in force once generation %d gives its pod queues, want generation 0", a, gen)
	}
	if err := m.client.Ack(context.Background(), gen); !errors.Is(err, member.ErrDrained) {
		t.Fatalf("Ack(%d) after the drain returned %v, want ErrDrained", gen, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	if err := m.client.Drain(ctx); err != nil {
		t.Fatalf("a second Drain returned %v, want nil at once", err)
	}
}

func TestHoldsNothingWhileTheLeaseCannotBeRenewed(t *testing.T) {
	ns := newNamespace(t)
	var fail atomic.Bool
	m := startMember(t, ns, nil, kubernetes.NewForConfigOrDie(testenv.LeaseWrites(restConfig, &fail, 0)))
	publish(t, ns, 1, map[string][]member.Queue{"consumer-0": queues(0, 1)})
	eventually(t, 10*time.Second, inForce(m.client, 1, queues(0, 1)))

	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	fail.Store(true)
	// Within the lease duration (3 s) the member gives up its queues on its own.
	a, err := m.client.Next(ctx, 1)
	if err != nil || a.Generation != 0 || len(a.Queues) != 0 {
		t.Fatalf("Next after the Lease stopped renewing returned %+v, %v; want generation 0 and no queues", a, err)
	}
	if reason := m.client.Status().Reason; !strings.Contains(reason, "has not been renewed") {
		t.Fatalf("status reason %q does not say the Lease was not renewed", reason)
	}
	fail.Store(false)
	a, err = m.client.Next(ctx, 0)
	if err != nil || a.Generation != 1 || len(a.Queues) != 2 {
		t.Fatalf("Next after the Lease renewed again returned %+v, %v; want generation 1 with 2 queues", a, err)
	}
}

func TestRunTwiceFails(t *testing.T) {
	ns := newNamespace(t)
	m := startMember(t, ns, nil, nil)
	eventually(t, 10*time.Second, func() error {
		if !m.client.Status().Synced {
			return errors.New("the first Run has not read the assignment yet")
		}
		return nil
	})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := m.client.Run(ctx); err == nil {
		t.Fatal("a second Run returned nil, want an error")
	}
}

// stallingWatches holds back what watch responses deliver while stall is set, as a silently stuck
// connection would; the data flows again once it is cleared.
type stallingWatches struct {
	next  http.RoundTripper
	stall *atomic.Bool
}

func (s stallingWatches) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := s.next.RoundTrip(req)
	if err != nil || req.URL.Query().Get("watch") != "true" {
		return resp, err
	}
	resp.Body = &stallingBody{ReadCloser: resp.Body, stall: s.stall, done: req.Context().Done()}
	return resp, nil
}

type stallingBody struct {
	io.ReadCloser
	stall *atomic.Bool
	done  <-chan struct{}
}

func (b *stallingBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	for b.stall.Load() {
		select {
		case <-b.done:
			return 0, io.ErrUnexpectedEOF
		case <-time.After(10 * time.Millisecond):
		}
	}
	return n, err
}

func TestHoldsNothingWhileTheWatchIsStuck(t *testing.T) {
	ns := newNamespace(t)
	var stall atomic.Bool
	cfg := rest.CopyConfig(restConfig)
	cfg.Wrap(func(rt http.RoundTripper) http.RoundTripper { return stallingWatches{next: rt, stall: &stall} })
	m := startMember(t, ns, nil, kubernetes.NewForConfigOrDie(cfg))
	publish(t, ns, 1, map[string][]member.Queue{"consumer-0": queues(0, 1)})
	eventually(t, 10*time.Second, inForce(m.client, 1, queues(0, 1)))

	// The operator takes the queues away, but the pod's watch does not deliver it: the pod must stop
	// renewing its Lease and, after the lease duration, hold nothing rather than keep queues it lost.
	stall.Store(true)
	publish(t, ns, 2, map[string][]member.Queue{"consumer-1": queues(0, 1)})
	eventually(t, 20*time.Second, inForce(m.client, 0, nil))
	if err := m.client.Status().LeaseError; err == nil || !strings.Contains(err.Error(), "behind the API server") {
		t.Fatalf("lease error %v, want one saying the watch is behind", err)
	}

	stall.Store(false)
	eventually(t, 20*time.Second, inForce(m.client, 2, nil))
}

func TestFollowsTheShardOfAShardedAssignment(t *testing.T) {
	ns := newNamespace(t)
	m := startMember(t, ns, nil, nil)
	others := map[string][]member.Queue{}
	for i := 1; i < 40; i++ {
		others[fmt.Sprintf("consumer-%d", i)] = queues(int32(100 + i))
	}
	with := func(own []member.Queue) map[string][]member.Queue {
		all := maps.Clone(others)
		all[podName] = own
		return all
	}

	publish(t, ns, 1, with(queues(0)))
	eventually(t, 10*time.Second, inForce(m.client, 1, queues(0)))
	publishAs(t, ns, groupUID, 2, 4, with(queues(0, 1)))
	eventually(t, 10*time.Second, inForce(m.client, 2, queues(0, 1)))
	publishAs(t, ns, groupUID, 3, 4, with(queues(2)))
	eventually(t, 10*time.Second, inForce(m.client, 3, queues(2)))
	// More shards: the pod's entry may move to another shard.
	publishAs(t, ns, groupUID, 4, 16, with(queues(3)))
	eventually(t, 10*time.Second, inForce(m.client, 4, queues(3)))
	// Back to one ConfigMap.
	publish(t, ns, 5, with(queues(4)))
	eventually(t, 10*time.Second, inForce(m.client, 5, queues(4)))
}

// TestAckReturnsInTimeWhenWritesAreSlow: with every Lease write held back 8 s, longer than the member's
// promise (its stop timeout plus contact timeout), Ack returns within AckWait, so that the documented loop
// takes the next generation, which revokes the queues, within the stop timeout of its delivery; and the
// acknowledgement still reaches the Lease once the write lands.
func TestAckReturnsInTimeWhenWritesAreSlow(t *testing.T) {
	ns := newNamespace(t)
	var slow atomic.Bool
	const delay = 8 * time.Second
	m := startMember(t, ns, func(c *member.Config) { c.LeaseDuration = 30 * time.Second },
		kubernetes.NewForConfigOrDie(testenv.LeaseWrites(restConfig, &slow, delay)))
	publish(t, ns, 1, map[string][]member.Queue{"consumer-0": queues(0, 1)})
	eventually(t, 10*time.Second, inForce(m.client, 1, queues(0, 1)))
	if promise := m.cfg.StopTimeout + m.cfg.ContactTimeout; delay <= promise {
		t.Fatalf("the writes are held back %v, not longer than the promise %v", delay, promise)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	slow.Store(true)
	publish(t, ns, 2, map[string][]member.Queue{"consumer-0": queues(0)})
	eventually(t, 10*time.Second, inForce(m.client, 2, queues(0)))

	// The documented loop: consume generation 2, acknowledge it, take the next.
	next := make(chan time.Time, 1)
	go func() {
		start := time.Now()
		err := m.client.Ack(ctx, 2)
		if took := time.Since(start); !errors.Is(err, member.ErrAckPending) || took > m.client.AckWait()+time.Second {
			t.Errorf("Ack(2) returned %v after %v; want ErrAckPending within %v", err, took, m.client.AckWait())
		}
		if a, err := m.client.Next(ctx, 2); err != nil || a.Generation != 3 || len(a.Queues) != 0 {
			t.Errorf("Next after generation 2: %+v, %v; want generation 3 without queues", a, err)
		}
		next <- time.Now()
	}()
	time.Sleep(100 * time.Millisecond)
	published := time.Now()
	publish(t, ns, 3, map[string][]member.Queue{"consumer-0": nil})
	took := (<-next).Sub(published)
	t.Logf("with Lease writes held back %v, the loop took generation 3 %v after it was published", delay, took.Round(time.Millisecond))
	if took > m.cfg.StopTimeout {
		t.Errorf("the loop took generation 3 %v after it was published; want it within the stop timeout %v", took, m.cfg.StopTimeout)
	}
	// The acknowledgement was kept and lands with the slow write.
	eventually(t, 3*delay, func() error {
		if got := leaseState(t, ns, m).AckedGeneration; got < 2 {
			return fmt.Errorf("the Lease acknowledges %d", got)
		}
		return nil
	})
}
