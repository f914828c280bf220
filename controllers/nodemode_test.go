//go:build envtest

package controllers

import (
	"context"
	"fmt"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/consumergroup-operator/consumergroup-operator/internal/testenv"
	"github.com/consumergroup-operator/consumergroup-operator/pkg/nodeagent"
	"github.com/consumergroup-operator/consumergroup-operator/pkg/protocol"
)

// testAgent is a node agent run in the test's process, with its own connection to the API server,
// which cut cuts as a lost node's.
type testAgent struct {
	server *nodeagent.Server
	cut    atomic.Bool
}

// startTestAgent runs the agent of node, reading the node views in views and renewing its heartbeat
// there every second (a 4 s heartbeat, late 2 s after its last renewal), until the test ends.
func startTestAgent(t *testing.T, views, node string) *testAgent {
	t.Helper()
	a := &testAgent{}
	cfg := rest.CopyConfig(restConfig)
	cfg.Wrap(func(rt http.RoundTripper) http.RoundTripper { return testenv.Partitionable(rt, &a.cut) })
	cs, err := kubernetes.NewForConfig(cfg)
	must(t, err)
	a.server, err = nodeagent.New(nodeagent.Config{Node: node, Namespace: views, Client: cs, MinReadInterval: 100 * time.Millisecond,
		Heartbeat: nodeagent.MinHeartbeat, Pod: "node-agent-" + node})
	must(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = a.server.Run(ctx)
	}()
	t.Cleanup(func() {
		cancel()
		<-done
	})
	return a
}

// startNodeModeMember runs a member of group for a new pod name on node, confirming through agent.
func startNodeModeMember(t *testing.T, ns, group, name, node string, agent *testAgent, own *testenv.Ownership, opts testenv.MemberOptions) *testenv.SimMember {
	t.Helper()
	pod := testenv.Pod(ns, name, group).OnNode(node).ServiceAccount("consumer").Create(t, k8s)
	token := testenv.PodToken(t, kubernetes.NewForConfigOrDie(restConfig), pod, protocol.NodeAgentAudience)
	opts.NodeAgent = "http://node-agent." + node + ".invalid"
	opts.NodeAgentToken = func() (string, error) { return token, nil }
	opts.NodeAgentCall = agent.server.Confirm
	return testenv.StartMember(t, restConfig, group, pod, own, opts)
}

// renewNodeLeaseNow renews node's Lease once, as its kubelet would.
func renewNodeLeaseNow(t *testing.T, node string) {
	t.Helper()
	must(t, retry.RetryOnConflict(retry.DefaultRetry, func() error {
		var l coordinationv1.Lease
		if err := k8s.Get(context.Background(), client.ObjectKey{Namespace: corev1.NamespaceNodeLease, Name: node}, &l); err != nil {
			return err
		}
		l.Spec.RenewTime = ptr.To(metav1.NewMicroTime(time.Now()))
		return k8s.Update(context.Background(), &l)
	}))
}

// TestNodeModeLostNodesQueuesMoveByItsAgentsHeartbeat loses a node in node mode: its kubelet, which
// renews a 40 s Lease every 10 s as real kubelets do, renews it one last time as the node is lost, so
// the kubelet is overdue only 12 s later; the node's agent, which renews its heartbeat every second, is
// cut off with the node, and the member on it, its process running on, with it. The members say in their
// Leases that they confirm through their agents, so the heartbeat, late 2 s after its last renewal, ends
// the lost member's membership: its queues are revoked, lapse 2 s (its promise) and 1 s later, and are
// read by the member on the other node well before the kubelet's Lease could have told (12 s, and the
// promise, 15 s). From the members' own records, no queue has two readers at any moment.
func TestNodeModeLostNodesQueuesMoveByItsAgentsHeartbeat(t *testing.T) {
	ns := newNamespace(t)
	startManager(t, ns, func(r *ConsumerGroupReconciler) { r.NodeViewsNamespace = ns })
	must(t, k8s.Create(context.Background(), &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "consumer"}}))
	own := testenv.NewOwnership()
	cooperativeGroup(ns, "hb", 8, 30).Create(t, k8s)
	nodeA, nodeB := ns+"-a", ns+"-b"
	stopKubeletA := runKubeletOf(t, nodeA, 40)
	runKubeletOf(t, nodeB, 40)
	agentA, agentB := startTestAgent(t, ns, nodeA), startTestAgent(t, ns, nodeB)
	opts := testenv.MemberOptions{LeaseDuration: time.Minute, MaxClockSkew: testClockSkew, DrainAckTimeout: time.Second,
		ContactTimeout: time.Second, StopTimeout: time.Second}
	onA := startNodeModeMember(t, ns, "hb", "hb-0", nodeA, agentA, own, opts)
	onB := startNodeModeMember(t, ns, "hb", "hb-1", nodeB, agentB, own, opts)
	waitForSettled(t, ns, "hb", own, 8, 2)
	for _, pod := range []string{"hb-0", "hb-1"} {
		eventually(t, 10*time.Second, func() error {
			var l coordinationv1.Lease
			if err := k8s.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: protocol.LeaseName("hb", pod)}, &l); err != nil {
				return err
			}
			if !protocol.ReadLeaseTerms(&l).ThroughNodeAgent {
				return fmt.Errorf("member %s does not say that it confirms through its agent", pod)
			}
			return nil
		})
	}
	held := own.Reading(onA.Reader())
	if len(held) == 0 {
		t.Fatal("the member on node A reads nothing before the node is lost")
	}

	stopKubeletA()
	renewNodeLeaseNow(t, nodeA)
	agentA.cut.Store(true)
	onA.Partition(true)
	lost := time.Now()
	waitUntilReading(t, own, onB, held, 30*time.Second)
	took := time.Since(lost)
	assertNoOverlap(t, own)
	t.Logf("the lost node's queues were read again %v after it was lost; longest unread: %s", took.Round(time.Millisecond), own.Longest())
	if took > 10*time.Second {
		t.Fatalf("the lost node's queues took %v to be read again; want within 10 s: the heartbeat's 2 s, the promise and a few passes, not the kubelet's 12 s", took)
	}
	if reading := own.Reading(onA.Reader()); len(reading) > 0 {
		t.Fatalf("the cut-off member still reads %v by its own record", reading)
	}
}
