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

	"github.com/consumergroup-operator/consumergroup-operator/internal/plan"
	"github.com/consumergroup-operator/consumergroup-operator/internal/testenv"
	"github.com/consumergroup-operator/consumergroup-operator/pkg/allocate"
)

// runKubelet stands in for a kubelet: it creates node's Lease in kube-node-lease with a duration of
// 4 s and renews it every second, a quarter of it, as a kubelet does, until the returned func is called.
func runKubelet(t *testing.T, node string) (stop func()) {
	t.Helper()
	return runKubeletOf(t, node, 4)
}

// runKubeletOf is runKubelet with a Lease of seconds, renewed every quarter of it.
func runKubeletOf(t *testing.T, node string, seconds int32) (stop func()) {
	t.Helper()
	ctx := context.Background()
	now := metav1.NewMicroTime(time.Now())
	lease := &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Name: node, Namespace: corev1.NamespaceNodeLease},
		Spec:       coordinationv1.LeaseSpec{HolderIdentity: ptr.To(node), LeaseDurationSeconds: ptr.To(seconds), RenewTime: &now},
	}
	must(t, k8s.Create(ctx, lease))
	t.Cleanup(func() { _ = k8s.Delete(ctx, lease) })
	renew := func() {
		_ = retry.RetryOnConflict(retry.DefaultRetry, func() error {
			var l coordinationv1.Lease
			if err := k8s.Get(ctx, client.ObjectKeyFromObject(lease), &l); err != nil {
				return err
			}
			l.Spec.RenewTime = ptr.To(metav1.NewMicroTime(time.Now()))
			return k8s.Update(ctx, &l)
		})
	}
	done := make(chan struct{})
	stopped := make(chan struct{})
	go func() {
		defer close(stopped)
		tick := time.NewTicker(time.Duration(seconds) * time.Second / 4)
		defer tick.Stop()
		for {
			select {
			case <-done:
				return
			case <-tick.C:
			}
			renew()
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

// twoNodes is a settled Cooperative group of 8 queues with a member on each of two nodes, whose kubelets
// renew the nodes' Leases until loseNodeA stops node A's. Its members' Leases last 60 s; they promise
// (contact timeout 1 s, stop timeout 1 s) to read nothing 2 s after an assignment without a queue.
type twoNodes struct {
	own          *testenv.Ownership
	nodeA, nodeB string
	onA, onB     *testenv.SimMember
	loseNodeA    func()
}

// settleOnTwoNodes creates group in ns on two nodes and waits until each member reads its share.
func settleOnTwoNodes(t *testing.T, ns, group string) twoNodes {
	t.Helper()
	w := twoNodes{own: testenv.NewOwnership(), nodeA: ns + "-a", nodeB: ns + "-b"}
	cooperativeGroup(ns, group, 8, 30).Create(t, k8s)
	w.loseNodeA = runKubelet(t, w.nodeA)
	runKubelet(t, w.nodeB)
	opts := testenv.MemberOptions{LeaseDuration: time.Minute, MaxClockSkew: testClockSkew, DrainAckTimeout: time.Second,
		ContactTimeout: time.Second, StopTimeout: time.Second}
	w.onA = testenv.StartMember(t, restConfig, group, testenv.Pod(ns, group+"-0", group).OnNode(w.nodeA).Create(t, k8s), w.own, opts)
	w.onB = testenv.StartMember(t, restConfig, group, testenv.Pod(ns, group+"-1", group).OnNode(w.nodeB).Create(t, k8s), w.own, opts)
	waitForSettled(t, ns, group, w.own, 8, 2)
	return w
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
	w := settleOnTwoNodes(t, ns, "l")
	own, onA, onB, loseNodeA := w.own, w.onA, w.onB, w.loseNodeA
	held := own.Reading(onA.Reader())
	if len(held) == 0 {
		t.Fatal("the member on node A reads nothing before the node is lost")
	}

	loseNodeA()
	onA.Partition(true)
	lost := time.Now()
	waitUntilReading(t, own, onB, held, 20*time.Second)
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

// TestCutOffMembersQueuesMoveWithinThePromise cuts one member off from the API server while its node
// stays well (its kubelet renews the node's Lease): its process runs on and its pod stays Ready. With a
// 20 s Lease (renewed every 6.67 s) it stops being a member once a renewal is overdue by half an
// interval, 10 s after its last; its queues are revoked then and lapse 2 s (its promise) plus 1 s later,
// where its Lease would have held them 20 s plus skew.
func TestCutOffMembersQueuesMoveWithinThePromise(t *testing.T) {
	// At most 10 s overdue (less when a renewal was due sooner), 3 s of promise and margin, and a few passes.
	if took := cutOffMembersQueuesMoveOn(t, 0); took > 16*time.Second {
		t.Fatalf("the cut-off member's queues took %v to be read again; want within 16 s, not the Lease's 20 s", took)
	}
}

// TestRestartedOperatorResumesACutOffMembersDeadline cuts one member off as
// TestCutOffMembersQueuesMoveWithinThePromise does, then restarts the operator 8 s later, before the
// member is overdue. The new operator has seen no renewal happen: it counts the member's last one from the
// time its Lease states plus the skew bound, so the member is still overdue 10 s after that renewal, not
// 10 s after the restart, and its queues are read again within the same 16 s of the cut (a restart that
// started the wait again would take about 8 s + 10 s + 3 s).
func TestRestartedOperatorResumesACutOffMembersDeadline(t *testing.T) {
	if took := cutOffMembersQueuesMoveOn(t, 8*time.Second); took > 16*time.Second {
		t.Fatalf("the cut-off member's queues took %v to be read again; want within 16 s, as without the restart", took)
	}
}

// cutOffMembersQueuesMoveOn runs an operator and a Cooperative group of 8 queues with two members on a
// node whose kubelet renews its Lease, each with a 20 s Lease and a 2 s promise; it cuts one of them off
// from the API server, restarts the operator restartAfter later (0: never), and returns how long after the
// cut the other member reads every queue the cut-off one read. No queue has two readers meanwhile.
func cutOffMembersQueuesMoveOn(t *testing.T, restartAfter time.Duration) time.Duration {
	t.Helper()
	ns := newNamespace(t)
	stopOperator := startManager(t, ns)
	own := testenv.NewOwnership()
	cooperativeGroup(ns, "c", 8, 30).Create(t, k8s)
	node := ns + "-n"
	runKubelet(t, node)
	opts := testenv.MemberOptions{LeaseDuration: 20 * time.Second, MaxClockSkew: testClockSkew, DrainAckTimeout: time.Second,
		ContactTimeout: time.Second, StopTimeout: time.Second}
	cut := testenv.StartMember(t, restConfig, "c", testenv.Pod(ns, "c-0", "c").OnNode(node).Create(t, k8s), own, opts)
	other := testenv.StartMember(t, restConfig, "c", testenv.Pod(ns, "c-1", "c").OnNode(node).Create(t, k8s), own, opts)
	waitForSettled(t, ns, "c", own, 8, 2)
	held := own.Reading(cut.Reader())

	cut.Partition(true)
	at := time.Now()
	if restartAfter > 0 {
		time.Sleep(restartAfter)
		stopOperator()
		startManager(t, ns)
	}
	waitUntilReading(t, own, other, held, 30*time.Second)
	took := time.Since(at)
	assertNoOverlap(t, own)
	t.Logf("the cut-off member's queues were read again %v after it was cut off (operator restarted after %v); longest unread: %s",
		took.Round(time.Millisecond), restartAfter, own.Longest())
	return took
}

// waitUntilReading waits until m reads every queue of queues, by its own record.
func waitUntilReading(t *testing.T, own *testenv.Ownership, m *testenv.SimMember, queues []allocate.Queue, timeout time.Duration) {
	t.Helper()
	eventually(t, timeout, func() error {
		reading := own.Reading(m.Reader())
		for _, q := range queues {
			if !slices.Contains(reading, q) {
				return fmt.Errorf("queue %v is not read by %s yet", q, m.Reader())
			}
		}
		return nil
	})
}

// restartContainers writes, as a kubelet would after a liveness probe failed, that pod's containers were
// restarted once more.
func restartContainers(t *testing.T, pod *corev1.Pod) {
	t.Helper()
	must(t, retry.RetryOnConflict(retry.DefaultRetry, func() error {
		var p corev1.Pod
		if err := k8s.Get(context.Background(), client.ObjectKeyFromObject(pod), &p); err != nil {
			return err
		}
		for i := range p.Status.ContainerStatuses {
			c := &p.Status.ContainerStatuses[i]
			c.RestartCount++
			c.LastTerminationState = corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 137, FinishedAt: metav1.Now()}}
			c.State = corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: metav1.Now()}}
		}
		return k8s.Status().Update(context.Background(), &p)
	}))
}

// probedMemberOptions are a member with a 120 s Lease (renewed every 40 s, overdue after 60 s) and the
// member package's default promise (4 s contact timeout, 2 s stop timeout): only the kubelet's word can
// move its queues within 20 s of a failure its node does not share.
var probedMemberOptions = testenv.MemberOptions{LeaseDuration: 120 * time.Second, MaxClockSkew: testClockSkew, DrainAckTimeout: time.Second}

// twoProbedMembers runs an operator and a Cooperative group of 8 queues in a namespace of its own, with
// two members (probedMemberOptions) on a node whose kubelet renews its Lease, and waits until it settles.
func twoProbedMembers(t *testing.T, group string) (ns string, own *testenv.Ownership, first, second *testenv.SimMember) {
	t.Helper()
	ns = newNamespace(t)
	startManager(t, ns)
	own = testenv.NewOwnership()
	cooperativeGroup(ns, group, 8, 30).Create(t, k8s)
	node := ns + "-n"
	runKubelet(t, node)
	first = testenv.StartMember(t, restConfig, group, testenv.Pod(ns, group+"-0", group).OnNode(node).Create(t, k8s), own, probedMemberOptions)
	second = testenv.StartMember(t, restConfig, group, testenv.Pod(ns, group+"-1", group).OnNode(node).Create(t, k8s), own, probedMemberOptions)
	waitForSettled(t, ns, group, own, 8, 2)
	return ns, own, first, second
}

// TestRestartedCutOffMembersQueuesMoveWithin20s cuts one member off from the API server while its node
// (its kubelet's Lease) stays healthy. Its process runs on, cut off, and fences itself after its contact
// timeout; its /healthz then fails, so its liveness probe (every second, two failures) makes the kubelet
// restart it, and the pod's status shows the restart. The restarted process, still cut off, cannot write
// its Lease. Its queues must be read again by the other member within 20 s of the cut, where its Lease
// alone would hold them for 60 s or more; from the members' own records, no queue has two readers.
func TestRestartedCutOffMembersQueuesMoveWithin20s(t *testing.T) {
	_, own, cut, other := twoProbedMembers(t, "r")
	held := own.Reading(cut.Reader())

	cut.Partition(true)
	at := time.Now()
	// The kubelet's part: the probe fails once the member has lost contact, twice a second apart.
	eventually(t, 10*time.Second, func() error {
		if lost := cut.Client.Status().ContactLost; lost == "" {
			return errors.New("the member has not lost contact yet")
		}
		return nil
	})
	time.Sleep(2 * time.Second)
	restartContainers(t, cut.Pod)
	t.Logf("the kubelet restarted the cut-off member %v after it was cut off", time.Since(at).Round(time.Millisecond))
	waitUntilReading(t, own, other, held, 30*time.Second)
	took := time.Since(at)
	assertNoOverlap(t, own)
	t.Logf("the cut-off member's queues were read again %v after it was cut off; longest unread: %s", took.Round(time.Millisecond), own.Longest())
	if took > 20*time.Second {
		t.Fatalf("the cut-off member's queues took %v to be read again; want within 20 s", took)
	}
}

// TestHungMemberRestartedByItsProbeKeepsItsQueues hangs a member's process: it reads nothing and writes
// nothing while its pod stays Running and Ready, and its Lease, renewed every 40 s, says nothing for a
// while. Its liveness probe gets no answer, twice a second apart, and the kubelet restarts it, as it does
// after a crash too. The new process reaches the API server, writes its Lease, and reads its queues again:
// they went unread for the probe and the restart, well within 20 s; no queue moves to another member, and
// no new generation is published.
func TestHungMemberRestartedByItsProbeKeepsItsQueues(t *testing.T) {
	ns, own, hung, _ := twoProbedMembers(t, "a")
	held := own.Reading(hung.Reader())
	generation := getGroup(t, ns, "a").Status.AssignmentGeneration

	hung.Stop()
	at := time.Now()
	time.Sleep(2 * time.Second)
	restartContainers(t, hung.Pod)
	again := testenv.StartMember(t, restConfig, "a", hung.Pod, own, probedMemberOptions)
	waitUntilReading(t, own, again, held, 10*time.Second)
	took := time.Since(at)
	// Past the grace a restart has to be answered, and a pass or two.
	time.Sleep(plan.RestartRenewGrace + 2*time.Second)
	if g := getGroup(t, ns, "a").Status.AssignmentGeneration; g != generation {
		t.Fatalf("the restart published generation %d after %d; a restart answered by a renewal moves nothing", g, generation)
	}
	if reading := own.Reading(again.Reader()); !slices.Equal(reading, held) {
		t.Fatalf("after its restart the member reads %v, want %v", reading, held)
	}
	assertNoOverlap(t, own)
	t.Logf("the hung member's queues were read again %v after it hung; longest unread: %s", took.Round(time.Millisecond), own.Longest())
	if took > 20*time.Second {
		t.Fatalf("the hung member's queues took %v to be read again; want within 20 s", took)
	}
}
