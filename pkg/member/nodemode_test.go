//go:build envtest

package member_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/consumergroup-operator/consumergroup-operator/internal/testenv"
	"github.com/consumergroup-operator/consumergroup-operator/pkg/member"
	"github.com/consumergroup-operator/consumergroup-operator/pkg/nodeagent"
	"github.com/consumergroup-operator/consumergroup-operator/pkg/protocol"
)

// The node of the node-mode tests, and the contact timeout of their members: 2 s, so that a member
// confirms every half second and fences itself 2 s after its last confirmation.
const (
	agentNode          = "node-a"
	nodeContactTimeout = 2 * time.Second
)

// runningAgent is a node agent behind an httptest server.
type runningAgent struct {
	url string
	// asked counts the confirmation requests it received.
	asked *atomic.Int64
	stop  func()
}

// startNodeAgent runs the agent of agentNode, reading the node views of namespace views, until stop or
// the end of the test.
func startNodeAgent(t *testing.T, views string) runningAgent {
	t.Helper()
	s, err := nodeagent.New(nodeagent.Config{Node: agentNode, Namespace: views, Client: cs, MinReadInterval: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	var asked atomic.Int64
	handler := s.Handler()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == protocol.NodeAgentConfirmPath {
			asked.Add(1)
		}
		handler.ServeHTTP(w, r)
	}))
	var stopped atomic.Bool
	stop := func() {
		if stopped.CompareAndSwap(false, true) {
			srv.CloseClientConnections()
			srv.Close()
			cancel()
			if err := <-done; err != nil {
				t.Errorf("node agent: %v", err)
			}
		}
	}
	t.Cleanup(stop)
	return runningAgent{url: srv.URL, asked: &asked, stop: stop}
}

// nodeModeMember runs a member of pod podName, on agentNode, that confirms through the agent at agentURL,
// with clientset (the test's when nil).
func nodeModeMember(t *testing.T, ns, agentURL string, clientset kubernetes.Interface) testMember {
	t.Helper()
	pod := testenv.PodOnNode(t, cs, ns, podName, "consumer", agentNode)
	token := testenv.PodToken(t, cs, pod, protocol.NodeAgentAudience)
	return startMemberOf(t, pod, func(c *member.Config) {
		c.ContactTimeout = nodeContactTimeout
		c.NodeAgent = agentURL
		c.NodeAgentToken = func() (string, error) { return token, nil }
	}, clientset)
}

// mustSee writes agentNode's view with one line: group must see generation gen.
func mustSee(t *testing.T, views, ns string, gen int64) {
	t.Helper()
	testenv.WriteNodeView(t, cs, views, agentNode, protocol.NodeViewLines{}.
		With(protocol.NodeViewLine{Namespace: ns, Group: group, GroupUID: groupUID, MustSee: gen}))
}

// fencedWithin waits until m reads nothing, and fails unless that came within bound of since.
func fencedWithin(t *testing.T, m testMember, since time.Time, bound time.Duration) {
	t.Helper()
	eventually(t, 10*time.Second, inForce(m.client, 0, nil))
	if took := time.Since(since); took > bound {
		t.Fatalf("the member fenced itself %v after it lost its confirmation, later than %v", took, bound)
	}
}

// TestNodeModeConfirmsThroughTheAgent: a member in node mode reads its queues while the agent confirms
// its view, and fences itself within its contact timeout once the node view asks for a generation its
// view does not hold: a generation published that has not reached it. It reads again once it has.
func TestNodeModeConfirmsThroughTheAgent(t *testing.T) {
	ns, views := newNamespace(t), newNamespace(t)
	agent := startNodeAgent(t, views)
	mustSee(t, views, ns, 1)
	publish(t, ns, 1, map[string][]member.Queue{podName: queues(0, 1)})
	m := nodeModeMember(t, ns, agent.url, nil)
	eventually(t, 10*time.Second, inForce(m.client, 1, queues(0, 1)))
	if agent.asked.Load() == 0 {
		t.Fatal("the member reads its queues without having asked the agent")
	}
	// Its Lease says so at once, not at its next renewal minutes away: its agent's heartbeat counts for it.
	eventually(t, 5*time.Second, saysThroughAgent(ns, true))

	// The operator raises the line to generation 2, whose publication has not reached the member.
	raised := time.Now()
	mustSee(t, views, ns, 2)
	fencedWithin(t, m, raised, nodeContactTimeout+time.Second)
	if lost := m.client.Status().ContactLost; !strings.Contains(lost, "must see generation 2") {
		t.Fatalf("Status().ContactLost = %q, want the agent's reason", lost)
	}

	publish(t, ns, 2, map[string][]member.Queue{podName: queues(0, 1)})
	eventually(t, 10*time.Second, inForce(m.client, 2, queues(0, 1)))
}

// TestNodeModeFencesWhenTheAgentStops: once the agent has answered, it confirms the member's view or
// nothing does. When it stops, the member fences itself within its contact timeout, and does not turn to
// reads of its own, which would cost the API server what node mode saves.
func TestNodeModeFencesWhenTheAgentStops(t *testing.T) {
	ns, views := newNamespace(t), newNamespace(t)
	agent := startNodeAgent(t, views)
	mustSee(t, views, ns, 1)
	publish(t, ns, 1, map[string][]member.Queue{podName: queues(0)})
	m := nodeModeMember(t, ns, agent.url, nil)
	eventually(t, 10*time.Second, inForce(m.client, 1, queues(0)))

	stopped := time.Now()
	agent.stop()
	fencedWithin(t, m, stopped, nodeContactTimeout+time.Second)
	time.Sleep(2 * protocol.ContactInterval(nodeContactTimeout))
	if a := m.client.Current(); a.Generation != 0 {
		t.Fatalf("with its agent stopped, the member reads again: %+v", a)
	}
	if lost := m.client.Status().ContactLost; !strings.Contains(lost, "node agent cannot be reached") {
		t.Fatalf("Status().ContactLost = %q", lost)
	}
}

// TestNodeModeWithoutAnAgentRunsPerMember: a member whose agent cannot be reached at its first request
// (no agent on the node) confirms with its own reads, and reads its queues.
func TestNodeModeWithoutAnAgentRunsPerMember(t *testing.T) {
	ns, views := newNamespace(t), newNamespace(t)
	agent := startNodeAgent(t, views)
	agent.stop() // its address now refuses connections
	publish(t, ns, 1, map[string][]member.Queue{podName: queues(0)})
	m := nodeModeMember(t, ns, agent.url, nil)
	eventually(t, 10*time.Second, inForce(m.client, 1, queues(0)))
	// It stays confirmed by its own reads, past several contact timeouts.
	time.Sleep(2 * nodeContactTimeout)
	if err := inForce(m.client, 1, queues(0))(); err != nil {
		t.Fatal(err)
	}
	// An agent's heartbeat on its node says nothing of it.
	if err := saysThroughAgent(ns, false)(); err != nil {
		t.Fatal(err)
	}
}

// saysThroughAgent checks whether the member's Lease says that it confirms through its node's agent.
func saysThroughAgent(ns string, want bool) func() error {
	return func() error {
		lease, err := cs.CoordinationV1().Leases(ns).Get(context.Background(), protocol.LeaseName(group, podName), metav1.GetOptions{})
		if err != nil {
			return err
		}
		if got := protocol.ReadLeaseTerms(lease).ThroughNodeAgent; got != want {
			return fmt.Errorf("the member's Lease says it confirms through its agent: %v, want %v (%s=%q)", got, want,
				protocol.ConfirmsThroughAnnotation, lease.Annotations[protocol.ConfirmsThroughAnnotation])
		}
		return nil
	}
}

// TestRenewalsReadOnlyWhenTheWatchIsSilent: before each renewal a member checks that its watch of the
// assignment delivers. A member that promises contact fencing (here in node mode) takes any event the
// watch delivered since the last check as that proof, and reads the ConfigMap only when the watch was
// silent; a member without the promise, which counts on the check to see revocations, reads before every
// renewal.
func TestRenewalsReadOnlyWhenTheWatchIsSilent(t *testing.T) {
	for _, tc := range []struct {
		name     string
		nodeMode bool
		// readsWhileDelivering is whether the member reads its assignment before renewals while the watch
		// delivers events.
		readsWhileDelivering bool
	}{
		{name: "node mode", nodeMode: true, readsWhileDelivering: false},
		{name: "no promise", nodeMode: false, readsWhileDelivering: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ns, views := newNamespace(t), newNamespace(t)
			var reads, renewals atomic.Int64
			assignment := "/configmaps/" + protocol.AssignmentName(group)
			counted := countingClient(func(req *http.Request) {
				switch {
				case req.Method == http.MethodGet && strings.HasSuffix(req.URL.Path, assignment):
					reads.Add(1)
				case req.Method == http.MethodPut && strings.Contains(req.URL.Path, "/leases/"):
					renewals.Add(1)
				}
			})
			publish(t, ns, 1, map[string][]member.Queue{podName: queues(0)})
			var m testMember
			if tc.nodeMode {
				agent := startNodeAgent(t, views)
				mustSee(t, views, ns, 1)
				m = nodeModeMember(t, ns, agent.url, counted)
			} else {
				m = startMember(t, ns, nil, counted)
			}
			eventually(t, 10*time.Second, inForce(m.client, 1, queues(0)))

			// The watch delivers: a generation every 300 ms, while the member renews every second (its
			// Lease lasts 3 s).
			reads.Store(0)
			renewals.Store(0)
			for gen := int64(2); gen <= 16; gen++ {
				publish(t, ns, gen, map[string][]member.Queue{podName: queues(0)})
				time.Sleep(300 * time.Millisecond)
			}
			delivering, renewed := reads.Load(), renewals.Load()
			if renewed < 3 {
				t.Fatalf("%d renewals in 4.5 s of a 3 s Lease, want 3 or more", renewed)
			}
			if got := delivering > 0; got != tc.readsWhileDelivering {
				t.Fatalf("%d reads of the assignment over %d renewals while the watch delivered; want reads: %v", delivering, renewed, tc.readsWhileDelivering)
			}
			eventually(t, 10*time.Second, inForce(m.client, 16, queues(0)))

			// The watch is silent (the API server's next bookmark is up to a minute away): every member reads.
			reads.Store(0)
			time.Sleep(4 * time.Second)
			if reads.Load() == 0 {
				t.Fatalf("no read of the assignment in 4 s of renewals with a silent watch")
			}
		})
	}
}
