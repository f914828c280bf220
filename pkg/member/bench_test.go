//go:build envtest

package member_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/consumergroup-operator/consumergroup-operator/internal/testenv"
	"github.com/consumergroup-operator/consumergroup-operator/pkg/member"
	"github.com/consumergroup-operator/consumergroup-operator/pkg/nodeagent"
	"github.com/consumergroup-operator/consumergroup-operator/pkg/protocol"
)

// BenchmarkDelivery measures how long a new generation takes from the start of the ConfigMap write (as the
// operator would issue it) to its delivery through Client.Next, one update at a time. Each op is one
// update; run with -benchtime=Nx, N ≥ 200, for meaningful percentiles. The ConfigMap has one entry of 8
// queues per member, and every update changes the watched pod's entry.
func BenchmarkDelivery(b *testing.B) {
	for _, members := range []int{64, 1024} {
		b.Run(fmt.Sprintf("members=%d", members), func(b *testing.B) {
			ns := newNamespace(b)
			m := startMember(b, ns, nil, nil)
			ctx := context.Background()

			entries := func(gen int64) map[string]string {
				data := make(map[string]string, members)
				for i := range members {
					// Rotating the queues changes every entry, as a rebalance of the whole group would.
					first := int32((int64(i)*8 + gen) % 65536)
					qs := queues(first, first+1, first+2, first+3, first+4, first+5, first+6, first+7)
					uid := ""
					if i == 0 {
						uid = string(m.pod.UID)
					}
					data[fmt.Sprintf("consumer-%d", i)] = string(protocol.NewEntry(fmt.Sprintf("consumer-%d", i), uid, gen, qs).Encode())
				}
				return data
			}
			cm, err := cs.CoreV1().ConfigMaps(ns).Create(ctx, &corev1.ConfigMap{
				ObjectMeta: metav1.ObjectMeta{
					Name:        protocol.AssignmentName("orders"),
					Annotations: map[string]string{protocol.GenerationAnnotation: "1"},
				},
				Data: entries(1),
			}, metav1.CreateOptions{})
			if err != nil {
				b.Fatal(err)
			}
			eventually(b, 10*time.Second, func() error {
				if g := m.client.Current().Generation; g != 1 {
					return fmt.Errorf("generation %d in force, want 1", g)
				}
				return nil
			})

			// The entries are built outside the timed part: the operator's encoding is not the pod's cost.
			prepared := make([]map[string]string, b.N)
			for i := range prepared {
				prepared[i] = entries(int64(i) + 2)
			}
			latencies := make([]time.Duration, 0, b.N)
			writes := make([]time.Duration, 0, b.N)
			gen := int64(1)
			b.ResetTimer()
			for i := range b.N {
				gen++
				cm.Annotations[protocol.GenerationAnnotation] = fmt.Sprint(gen)
				cm.Data = prepared[i]
				start := time.Now()
				if cm, err = cs.CoreV1().ConfigMaps(ns).Update(ctx, cm, metav1.UpdateOptions{}); err != nil {
					b.Fatal(err)
				}
				writes = append(writes, time.Since(start))
				waitCtx, cancel := context.WithTimeout(ctx, 30*time.Second)
				a, err := m.client.Next(waitCtx, gen-1)
				cancel()
				if err != nil || a.Generation != gen {
					b.Fatalf("waiting for generation %d: got %d, %v", gen, a.Generation, err)
				}
				latencies = append(latencies, time.Since(start))
			}
			b.StopTimer()
			slices.Sort(latencies)
			b.ReportMetric(ms(percentile(latencies, 50)), "p50-ms")
			b.ReportMetric(ms(percentile(latencies, 99)), "p99-ms")
			b.ReportMetric(ms(latencies[len(latencies)-1]), "max-ms")
			// The write's own round trip, to tell the API server's share from the watch and the client's.
			slices.Sort(writes)
			b.ReportMetric(ms(percentile(writes, 50)), "write-p50-ms")
		})
	}
}

// percentile is the p-th percentile of sorted, by the nearest-rank method.
func percentile(sorted []time.Duration, p int) time.Duration {
	rank := (p*len(sorted) + 99) / 100
	return sorted[max(rank, 1)-1]
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// BenchmarkSteadyStateLeaseWrites counts the Lease writes of members with the default lease duration that
// have nothing new to apply, at the API server: a watch on the members' namespace sees one event per write.
// It counts over one lease duration and reports writes per second per 1,000 members, and the reads the
// members send meanwhile (contact fencing's metadata reads, and the check before each renewal).
//
//	go test -tags envtest ./pkg/member -run '^$' -bench SteadyStateLeaseWrites -benchtime 1x
func BenchmarkSteadyStateLeaseWrites(b *testing.B) {
	const members = 100
	ns := newNamespace(b)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var reads atomic.Int64
	counted := countingClient(func(req *http.Request) {
		if req.Method == http.MethodGet && req.URL.Query().Get("watch") != "true" {
			reads.Add(1)
		}
	})
	startSteadyMembers(ctx, b, ns, counted, members, func(i int) (*corev1.Pod, func(*member.Config)) {
		return newPod(b, ns, fmt.Sprintf("steady-%d", i)), func(*member.Config) {}
	})
	window := protocol.DefaultLeaseDuration
	var writes int
	readsBefore := reads.Load()
	for b.Loop() {
		// Watch from now on: the Leases that exist are not writes of the window.
		list, err := cs.CoordinationV1().Leases(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			b.Fatal(err)
		}
		w, err := cs.CoordinationV1().Leases(ns).Watch(ctx, metav1.ListOptions{ResourceVersion: list.ResourceVersion})
		if err != nil {
			b.Fatal(err)
		}
		deadline := time.After(window)
	count:
		for {
			select {
			case ev := <-w.ResultChan():
				if ev.Type == watch.Modified || ev.Type == watch.Added {
					writes++
				}
			case <-deadline:
				break count
			}
		}
		w.Stop()
	}
	b.ReportMetric(float64(writes)/float64(b.N)/window.Seconds()*1000/members, "lease-writes/s/1000-members")
	b.ReportMetric(float64(reads.Load()-readsBefore)/float64(b.N)/window.Seconds()*1000/members, "reads/s/1000-members")
}

// startSteadyMembers runs n members with clientset, that acknowledge what they are given, until ctx ends:
// the pod of member i and what its configuration adds come from podOf. It publishes generation 1, which
// gives member i queue i, and waits until every member has acknowledged it and reads its queue.
func startSteadyMembers(ctx context.Context, b *testing.B, ns string, clientset kubernetes.Interface, n int, podOf func(i int) (*corev1.Pod, func(*member.Config))) {
	entries := map[string][]member.Queue{}
	clients := make([]*member.Client, n)
	for i := range n {
		pod, tweak := podOf(i)
		cfg := member.Config{Namespace: ns, Group: group, Pod: pod.Name, PodUID: pod.UID, AutoAck: true}
		tweak(&cfg)
		c, err := member.New(clientset, cfg)
		if err != nil {
			b.Fatal(err)
		}
		clients[i] = c
		go func() { _ = c.Run(ctx) }()
		entries[pod.Name] = queues(int32(i))
	}
	publish(b, ns, 1, entries)
	eventually(b, time.Minute, func() error {
		for i, c := range clients {
			if got := c.Current(); c.Acked() != 1 || len(got.Queues) != 1 {
				return fmt.Errorf("member %d has acknowledged %d and reads %v", i, c.Acked(), got.Queues)
			}
		}
		return nil
	})
}

// countingClient is a clientset of the test's API server, without a client-side rate limit, that shows
// count every request before it sends it.
func countingClient(count func(*http.Request)) kubernetes.Interface {
	cfg := rest.CopyConfig(restConfig)
	cfg.QPS, cfg.Burst = 10000, 10000
	cfg.Wrap(func(rt http.RoundTripper) http.RoundTripper {
		return roundTripFunc(func(req *http.Request) (*http.Response, error) {
			count(req)
			return rt.RoundTrip(req)
		})
	})
	return kubernetes.NewForConfigOrDie(cfg)
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(req *http.Request) (*http.Response, error) { return f(req) }

// nodeModeBound is the most API requests a member in node mode may cost a second, agent included, for
// BenchmarkNodeModeRequests to pass: the target of docs/performance.md.
const nodeModeBound = 0.05

// BenchmarkNodeModeRequests runs 40 members on one node in node mode, with their node agent and its
// heartbeat, and counts every API request they and the agent send over a steady window, watches aside:
// the agent's one read a second and its heartbeat's renewal every 2 s, shared by all, and whatever the
// members send on their own. 40 is about the fewest members a node at which node mode stays within
// nodeModeBound (1.5 requests a second for the node: 0.0375 a member); a node of 30, as 150,000 pods on
// 5,000 nodes would have, costs 0.05 with the heartbeat (docs/protocol.md, node mode). It fails when that
// is more than nodeModeBound a member a second: a change that makes members confirm on their own again,
// or the agent read per request, shows here.
//
//	go test -tags envtest ./pkg/member -run '^$' -bench NodeModeRequests -benchtime 1x
func BenchmarkNodeModeRequests(b *testing.B) {
	const members = 40
	ns, views := newNamespace(b), newNamespace(b)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var requests atomic.Int64
	counted := countingClient(func(req *http.Request) {
		if req.URL.Query().Get("watch") != "true" {
			requests.Add(1)
		}
	})
	agent, err := nodeagent.New(nodeagent.Config{Node: agentNode, Namespace: views, Client: counted,
		Heartbeat: protocol.DefaultNodeAgentHeartbeat, Pod: "node-agent"})
	if err != nil {
		b.Fatal(err)
	}
	go func() { _ = agent.Run(ctx) }()
	srv := httptest.NewServer(agent.Handler())
	defer srv.Close()
	testenv.WriteNodeView(b, cs, views, agentNode, protocol.NodeViewLines{}.
		With(protocol.NodeViewLine{Namespace: ns, Group: group, GroupUID: groupUID, MustSee: 1}))

	startSteadyMembers(ctx, b, ns, counted, members, func(i int) (*corev1.Pod, func(*member.Config)) {
		pod := testenv.PodOnNode(b, cs, ns, fmt.Sprintf("node-mode-%d", i), "consumer", agentNode)
		token := testenv.PodToken(b, cs, pod, protocol.NodeAgentAudience)
		return pod, func(c *member.Config) {
			c.NodeAgent, c.NodeAgentToken = srv.URL, func() (string, error) { return token, nil }
		}
	})
	// A member confirms its first view with a read of its own when nothing was published yet, and asks
	// its agent from then on: its token's review, the agent's first, comes a moment later.
	time.Sleep(protocol.DefaultContactTimeout)
	const window = 20 * time.Second
	before := requests.Load()
	for b.Loop() {
		time.Sleep(window)
	}
	perMember := float64(requests.Load()-before) / float64(b.N) / window.Seconds() / members
	b.ReportMetric(perMember, "requests/member/s")
	if perMember > nodeModeBound {
		b.Fatalf("%.3f API requests a member a second in node mode, more than %.2f", perMember, nodeModeBound)
	}
}
