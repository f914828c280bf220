//go:build envtest

package controllers

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/consumergroup-operator/consumergroup-operator/internal/testenv"
)

// runKubelet stands in for a kubelet: it creates node's Lease in kube-node-lease with a duration of
// 4 s and renews it every second, a quarter of it, as a kubelet does, until the returned func is called.
func runKubelet(t *testing.T, node string) (stop func()) {
	t.Helper()
	ctx := context.Background()
	now := metav1.NewMicroTime(time.Now())
	lease := &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Name: node, Namespace: corev1.NamespaceNodeLease},
		Spec:       coordinationv1.LeaseSpec{HolderIdentity: ptr.To(node), LeaseDurationSeconds: ptr.To[int32](4), RenewTime: &now},
	}
	must(t, k8s.Create(ctx, lease))
	t.Cleanup(func() { _ = k8s.Delete(ctx, lease) })
	done := make(chan struct{})
	stopped := make(chan struct{})
	go func() {
		defer close(stopped)
		tick := time.NewTicker(time.Second)
		defer tick.Stop()
		for {
			select {
			case <-done:
				return
			case <-tick.C:
			}
			_ = retry.RetryOnConflict(retry.DefaultRetry, func() error {
				var l coordinationv1.Lease
				if err := k8s.Get(ctx, client.ObjectKeyFromObject(lease), &l); err != nil {
					return err
				}
				l.Spec.RenewTime = ptr.To(metav1.NewMicroTime(time.Now()))
				return k8s.Update(ctx, &l)
			})
		}
	}()
	var once bool
	stop = func() {
		if !once {
			once = true
			close(done)
			<-stopped
		}
	}
	t.Cleanup(stop)
	return stop
}

// TestLostNodesQueuesMoveWithinThePromise loses a node: its kubelet stops renewing the node's Lease and
// the member pod on it is cut off from the API server, its process still running, its pod still Ready
// and nothing from a kubelet to say otherwise. The member's Lease lasts 60 s; it promises (contact
// timeout 1 s, stop timeout 1 s) to read nothing 2 s after an assignment without its queues is
// published. Its queues must be read again by the member on the other node well before its Lease
// would let them go (60 s plus skew): within the node Lease's renewal interval and a fifth (1.2 s), the
// promise, the operator's 1 s margin and a few passes. From the members' own records, no queue has two
// readers at any moment.
func TestLostNodesQueuesMoveWithinThePromise(t *testing.T) {
	ns := newNamespace(t)
	startManager(t, ns)
	own := testenv.NewOwnership()
	cooperativeGroup(ns, "l", 8, 30).Create(t, k8s)
	nodeA, nodeB := ns+"-a", ns+"-b"
	loseNodeA := runKubelet(t, nodeA)
	runKubelet(t, nodeB)
	opts := testenv.MemberOptions{LeaseDuration: time.Minute, MaxClockSkew: testClockSkew, DrainAckTimeout: time.Second,
		ContactTimeout: time.Second, StopTimeout: time.Second}
	onA := testenv.StartMember(t, restConfig, "l", testenv.Pod(ns, "l-0", "l").OnNode(nodeA).Create(t, k8s), own, opts)
	onB := testenv.StartMember(t, restConfig, "l", testenv.Pod(ns, "l-1", "l").OnNode(nodeB).Create(t, k8s), own, opts)
	waitForSettled(t, ns, "l", own, 8, 2)
	held := own.Reading(onA.Reader())
	if len(held) == 0 {
		t.Fatal("the member on node A reads nothing before the node is lost")
	}

	loseNodeA()
	onA.Partition(true)
	lost := time.Now()
	eventually(t, 20*time.Second, func() error {
		reading := own.Reading(onB.Reader())
		for _, q := range held {
			if !slices.Contains(reading, q) {
				return fmt.Errorf("queue %v is not read by the member on node B yet", q)
			}
		}
		return nil
	})
	took := time.Since(lost)
	assertNoOverlap(t, own)
	if gap := own.Longest(); gap.Took != "" {
		t.Logf("longest unread: %s", gap)
	}
	t.Logf("the lost node's queues were read again %v after it was lost", took.Round(time.Millisecond))
	if took > 10*time.Second {
		t.Fatalf("the lost node's queues took %v to be read again; want within 10 s, not the member Lease's 60 s", took)
	}
	if reading := own.Reading(onA.Reader()); len(reading) > 0 {
		t.Fatal(errors.New("the cut-off member still reads queues by its own record"))
	}
}
