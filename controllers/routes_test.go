//go:build envtest

package controllers

import (
	"context"
	"fmt"
	"net"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/consumergroup-operator/consumergroup-operator/api/v1alpha1"
	"github.com/consumergroup-operator/consumergroup-operator/internal/plan"
	"github.com/consumergroup-operator/consumergroup-operator/internal/rocketmqstandin"
	"github.com/consumergroup-operator/consumergroup-operator/internal/testenv"
	"github.com/consumergroup-operator/consumergroup-operator/pkg/allocate"
	"github.com/consumergroup-operator/consumergroup-operator/pkg/nameserver"
	"github.com/consumergroup-operator/consumergroup-operator/pkg/protocol"
)

// discoveredGroup is a Cooperative Sticky group named name whose one topic, "t", is discovered from the
// inline name servers addrs.
func discoveredGroup(ns, name string, addrs []string, retry v1alpha1.RetryTopicMode) *v1alpha1.ConsumerGroup {
	g := cooperativeGroup(ns, name, 1, 10).Obj()
	g.Spec.Topics = []v1alpha1.Topic{{Name: "t"}}
	g.Spec.NameServer = &v1alpha1.NameServer{Addresses: addrs, RetryTopic: retry}
	return g
}

// inlineNameServers turns inline name servers on for this machine's loopback addresses, where the
// stand-ins listen, and reads every source every second: below the API's minimum, for tests.
func inlineNameServers() func(*ConsumerGroupReconciler) {
	return func(r *ConsumerGroupReconciler) {
		egress, err := nameserver.ParseEgress([]string{"127.0.0.0/8"}, nil)
		if err != nil {
			panic(err)
		}
		r.NameServers.Inline, r.NameServers.RefreshInterval = egress, time.Second
	}
}

// startDiscovered runs an operator with inline name servers read every second (then configure), and the
// group g with members simulated members, in g's namespace.
func startDiscovered(t *testing.T, g *v1alpha1.ConsumerGroup, members int, configure ...func(*ConsumerGroupReconciler)) (*testenv.Ownership, []*testenv.SimMember) {
	t.Helper()
	startManager(t, g.Namespace, append([]func(*ConsumerGroupReconciler){inlineNameServers()}, configure...)...)
	must(t, k8s.Create(context.Background(), g))
	own := testenv.NewOwnership()
	ms := make([]*testenv.SimMember, members)
	for i := range ms {
		ms[i] = startSimMember(t, g.Name, testenv.Pod(g.Namespace, fmt.Sprintf("%s-%d", g.Name, i), g.Name).Create(t, k8s), own)
	}
	return own, ms
}

// queuesOf lists queues 0 .. n-1 of topic on broker.
func queuesOf(topic, broker string, n int32) []allocate.Queue {
	out := make([]allocate.Queue, 0, n)
	for id := range n {
		out = append(out, allocate.Queue{Topic: topic, Broker: broker, ID: id})
	}
	return out
}

// publishedQueues are the queues the group's assignment gives to some member, sorted.
func publishedQueues(t *testing.T, ns, group string) ([]allocate.Queue, int64) {
	t.Helper()
	cm := getAssignment(t, ns, group)
	if cm == nil {
		return nil, 0
	}
	p := protocol.ReadPublished(group, cm, nil)
	var out []allocate.Queue
	for _, e := range p.Entries {
		out = append(out, e.Queues...)
	}
	slices.SortFunc(out, allocate.CompareRocketMQ)
	return out, p.Generation
}

// waitForReaders waits until each of want is read by exactly one of members and nothing else is read.
func waitForReaders(t *testing.T, own *testenv.Ownership, members []*testenv.SimMember, want []allocate.Queue, within time.Duration) {
	t.Helper()
	eventually(t, within, func() error {
		for _, q := range want {
			if n := own.Readers(q); n != 1 {
				return fmt.Errorf("queue %v has %d readers", q, n)
			}
		}
		n := 0
		for _, m := range members {
			n += len(own.Reading(m.Reader()))
		}
		if n != len(want) {
			return fmt.Errorf("%d queues are read, want %d", n, len(want))
		}
		return nil
	})
}

// TestRoutesFollowTheNameServer: a topic grows from 8 to 16 queues, a broker is added, then a broker
// turns read-only. The new queues are published within one refresh interval, and the read-only broker's
// queues are revoked through the handoff; no queue ever has two readers.
func TestRoutesFollowTheNameServer(t *testing.T) {
	nsrv := rocketmqstandin.Start(t)
	nsrv.SetTopic("t", rocketmqstandin.Broker{Name: "b", Queues: 8})
	const interval = 2 * time.Second
	g := discoveredGroup(newNamespace(t), "routes", []string{nsrv.Addr}, v1alpha1.RetryTopicIgnore)
	own, ms := startDiscovered(t, g, 3, func(r *ConsumerGroupReconciler) { r.NameServers.RefreshInterval = interval })
	waitForReaders(t, own, ms, queuesOf("t", "b", 8), waitFor)

	grown := time.Now()
	nsrv.SetTopic("t", rocketmqstandin.Broker{Name: "b", Queues: 16})
	want := queuesOf("t", "b", 16)
	eventually(t, waitFor, func() error {
		if got, _ := publishedQueues(t, g.Namespace, g.Name); !slices.Equal(got, want) {
			return fmt.Errorf("published %d queues, want %d", len(got), len(want))
		}
		return nil
	})
	// One interval for the read to come due, and a moment for the pass that publishes it.
	took := time.Since(grown)
	if took > interval+time.Second {
		t.Errorf("the new queues were published %v after the topic grew; the refresh interval is %v", took, interval)
	}
	t.Logf("the new queues were published %v after the topic grew, with a refresh interval of %v", took.Round(time.Millisecond), interval)
	waitForReaders(t, own, ms, want, waitFor)

	nsrv.SetTopic("t", rocketmqstandin.Broker{Name: "b", Queues: 16}, rocketmqstandin.Broker{Name: "b2", Queues: 4})
	waitForReaders(t, own, ms, append(queuesOf("t", "b", 16), queuesOf("t", "b2", 4)...), waitFor)

	nsrv.SetTopic("t", rocketmqstandin.Broker{Name: "b", Queues: 16, Perm: nameserver.PermWrite}, rocketmqstandin.Broker{Name: "b2", Queues: 4})
	waitForReaders(t, own, ms, queuesOf("t", "b2", 4), waitFor)
	eventually(t, waitFor, func() error {
		got := getGroup(t, g.Namespace, g.Name)
		if got.Status.QueueCount != 4 || got.Status.Routes == nil || len(got.Status.Routes.Topics) != 1 {
			return fmt.Errorf("status counts %d queues, routes %+v", got.Status.QueueCount, got.Status.Routes)
		}
		if b := got.Status.Routes.Topics[0].Brokers[0]; b.Name != "b" || b.Queues != 0 || b.ReadQueueNums != 16 || b.Perm != nameserver.PermWrite {
			return fmt.Errorf("broker b's route %+v", b)
		}
		return nil
	})
	assertNoOverlap(t, own)
	waitForEvent(t, g.Namespace, g.Name, EventRoutesChanged)
	waitForCondition(t, g.Namespace, g.Name, v1alpha1.ConditionTopologyStale, metav1.ConditionFalse, v1alpha1.ReasonRoutesFresh)
	// The metrics count the readable queues in force and date the last read that reached the topic.
	labels := map[string]string{"namespace": g.Namespace, "group": g.Name}
	expectMetric(t, "consumergroup_discovered_queues", labels, 4)
	read := getGroup(t, g.Namespace, g.Name).Status.Routes.ReadTime
	if got := metricValue(t, "consumergroup_routes_last_read_timestamp_seconds", labels); read == nil || got < float64(read.Unix()-1) || got > float64(time.Now().Unix()) {
		t.Errorf("consumergroup_routes_last_read_timestamp_seconds = %v, status.routes.readTime %v", got, read)
	}
}

// TestRoutesKeptWhileTheNameServerFails: the name server goes down, answers junk, answers a route that
// cannot be read, hangs, announces a 2 GiB frame, sends an endless one or closes in the middle of one.
// Each time the group reports TopologyStale, naming the address and the reason in a fixed sentence
// (nothing the name server sent, no error text), with a Warning event, and nothing moves, although the
// name server's routes changed meanwhile.
func TestRoutesKeptWhileTheNameServerFails(t *testing.T) {
	nsrv := rocketmqstandin.Start(t)
	nsrv.SetTopic("t", rocketmqstandin.Broker{Name: "b", Queues: 8})
	g := discoveredGroup(newNamespace(t), "stale", []string{nsrv.Addr}, v1alpha1.RetryTopicIgnore)
	own, ms := startDiscovered(t, g, 2, func(r *ConsumerGroupReconciler) { r.NameServerTimeout = 500 * time.Millisecond })
	want := queuesOf("t", "b", 8)
	waitForReaders(t, own, ms, want, waitFor)
	_, generation := publishedQueues(t, g.Namespace, g.Name)
	labels := map[string]string{"namespace": g.Namespace, "group": g.Name}

	for _, tc := range []struct {
		mode   rocketmqstandin.Mode
		reason string
	}{
		{rocketmqstandin.Down, nameserver.ReasonUnreachable},
		{rocketmqstandin.Junk, nameserver.ReasonGarbled},
		{rocketmqstandin.Garbled, nameserver.ReasonGarbled},
		{rocketmqstandin.Hang, nameserver.ReasonTimeout},
		{rocketmqstandin.HugeLength, nameserver.ReasonGarbled},
		{rocketmqstandin.Endless, nameserver.ReasonTimeout},
		{rocketmqstandin.CloseMidFrame, nameserver.ReasonUnreachable},
	} {
		// Counted before the name server fails: a read may fail between SetMode and any later look.
		errorsBefore := max(0, metricValue(t, "consumergroup_routes_read_errors_total", with(labels, "reason", tc.reason)))
		nsrv.SetMode(tc.mode)
		// Were the name server read, this would move queues.
		nsrv.SetTopic("t", rocketmqstandin.Broker{Name: "b", Queues: 2})
		got := waitForCondition(t, g.Namespace, g.Name, v1alpha1.ConditionTopologyStale, metav1.ConditionTrue, tc.reason)
		c := meta.FindStatusCondition(got.Status.Conditions, v1alpha1.ConditionTopologyStale)
		if !strings.Contains(c.Message, nsrv.Addr) {
			t.Errorf("mode %d: the condition does not name the name server: %s", tc.mode, c.Message)
		}
		// Only the operator's sentence for the reason: no frame length, byte or error text.
		sentence := (&nameserver.Error{Reason: tc.reason}).Sentence()
		if !strings.Contains(c.Message, sentence) || strings.ContainsAny(c.Message, "\x00\"{}") || strings.Contains(c.Message, "frame") || len(c.Message) > maxRouteMessage {
			t.Errorf("mode %d: the condition says %q; want the sentence %q and nothing the name server sent", tc.mode, c.Message, sentence)
		}
		// The pass counts the error after it wrote the condition.
		eventually(t, 5*time.Second, func() error {
			if n := metricValue(t, "consumergroup_routes_read_errors_total", with(labels, "reason", tc.reason)); n <= errorsBefore {
				return fmt.Errorf("mode %d: consumergroup_routes_read_errors_total{reason=%q} = %v, was %v", tc.mode, tc.reason, n, errorsBefore)
			}
			return nil
		})
		time.Sleep(2500 * time.Millisecond) // two more intervals of failed reads
		if q, gen := publishedQueues(t, g.Namespace, g.Name); !slices.Equal(q, want) || gen != generation {
			t.Fatalf("mode %d: generation %d publishes %d queues; want generation %d and its %d queues", tc.mode, gen, len(q), generation, len(want))
		}
		waitForReaders(t, own, ms, want, time.Second)
		nsrv.SetMode(rocketmqstandin.Serve)
		nsrv.SetTopic("t", rocketmqstandin.Broker{Name: "b", Queues: 8})
		waitForCondition(t, g.Namespace, g.Name, v1alpha1.ConditionTopologyStale, metav1.ConditionFalse, v1alpha1.ReasonRoutesFresh)
	}
	waitForEvent(t, g.Namespace, g.Name, v1alpha1.ConditionTopologyStale)
	// The failed reads never dropped a queue from the count of those in force.
	expectMetric(t, "consumergroup_discovered_queues", labels, float64(len(want)))
	if _, gen := publishedQueues(t, g.Namespace, g.Name); gen != generation {
		t.Errorf("generation %d after the failures, want %d", gen, generation)
	}
	assertNoOverlap(t, own)
}

// TestRoutesAbsentTopicWaits: the name server stops knowing the topic. Its queues stay for three refresh
// intervals, then go.
func TestRoutesAbsentTopicWaits(t *testing.T) {
	nsrv := rocketmqstandin.Start(t)
	nsrv.SetTopic("t", rocketmqstandin.Broker{Name: "b", Queues: 8})
	const interval = time.Second
	g := discoveredGroup(newNamespace(t), "absent", []string{nsrv.Addr}, v1alpha1.RetryTopicIgnore)
	own, ms := startDiscovered(t, g, 2)
	want := queuesOf("t", "b", 8)
	waitForReaders(t, own, ms, want, waitFor)

	removed := time.Now()
	nsrv.RemoveTopic("t")
	var dropped time.Time
	testenv.Poll(t, waitFor, 50*time.Millisecond, func() string { return "the absent topic's queues are still published" }, func() error {
		q, _ := publishedQueues(t, g.Namespace, g.Name)
		if len(q) == len(want) {
			return fmt.Errorf("still published")
		}
		dropped = time.Now()
		return nil
	})
	if wait := dropped.Sub(removed); wait < absentIntervals*interval {
		t.Fatalf("the absent topic's queues went %v after it was removed; want at least %v", wait, absentIntervals*interval)
	}
	waitForReaders(t, own, ms, nil, waitFor)
	got := getGroup(t, g.Namespace, g.Name)
	if r := got.Status.Routes; r == nil || r.Topics[0].AbsentSince == nil || len(r.Topics[0].Brokers) != 0 {
		t.Fatalf("routes %+v", r)
	}
	// The topic comes back: at once.
	nsrv.SetTopic("t", rocketmqstandin.Broker{Name: "b", Queues: 8})
	waitForReaders(t, own, ms, want, waitFor)
	assertNoOverlap(t, own)
}

// TestRoutesRetryTopicAndRestart: the retry topic is assigned with the group's topics, and an operator
// that restarts while the name server is down keeps every queue: the routes are in the status.
func TestRoutesRetryTopicAndRestart(t *testing.T) {
	nsrv := rocketmqstandin.Start(t)
	nsrv.SetTopic("t", rocketmqstandin.Broker{Name: "b", Queues: 4})
	nsrv.SetTopic("%RETRY%orders", rocketmqstandin.Broker{Name: "b", Queues: 1})
	ns := newNamespace(t)
	g := discoveredGroup(ns, "retry", []string{nsrv.Addr}, "")
	g.Spec.NameServer.GroupName = "orders"
	stop := startManager(t, ns, inlineNameServers())
	must(t, k8s.Create(context.Background(), g))
	own := testenv.NewOwnership()
	var ms []*testenv.SimMember
	for i := range 2 {
		ms = append(ms, startSimMember(t, g.Name, testenv.Pod(ns, fmt.Sprintf("retry-%d", i), g.Name).Create(t, k8s), own))
	}
	want := append(queuesOf("%RETRY%orders", "b", 1), queuesOf("t", "b", 4)...)
	slices.SortFunc(want, allocate.CompareRocketMQ)
	waitForReaders(t, own, ms, want, waitFor)
	_, generation := publishedQueues(t, ns, g.Name)

	stop()
	nsrv.SetMode(rocketmqstandin.Down)
	startManager(t, ns, inlineNameServers())
	waitForCondition(t, ns, g.Name, v1alpha1.ConditionTopologyStale, metav1.ConditionTrue, nameserver.ReasonUnreachable)
	time.Sleep(1500 * time.Millisecond)
	if q, gen := publishedQueues(t, ns, g.Name); !slices.Equal(q, want) || gen != generation {
		t.Fatalf("after a restart with the name server down: generation %d publishes %v; want generation %d with %v", gen, q, generation, want)
	}
	assertNoOverlap(t, own)
}

// TestRoutesThroughAServiceWithCredentials: the inline name server is named by a Service, and requests
// are signed with the credentials of a Secret in the group's namespace; a Secret that is missing is
// reported (Denied) until it exists.
func TestRoutesThroughAServiceWithCredentials(t *testing.T) {
	nsrv := rocketmqstandin.Start(t)
	nsrv.SetTopic("t", rocketmqstandin.Broker{Name: "b", Queues: 4})
	ns := newNamespace(t)
	g := discoveredGroup(ns, "svc", nil, v1alpha1.RetryTopicIgnore)
	g.Spec.NameServer.Addresses = nil
	g.Spec.NameServer.Service = &v1alpha1.NameServerService{Name: "namesrv", Port: 9876}
	g.Spec.NameServer.CredentialsSecret = "acl"
	serviceAddr := "namesrv." + ns + ".svc:9876"
	dial := func(r *ConsumerGroupReconciler) {
		r.NameServerDial = func(ctx context.Context, network, addr string) (net.Conn, error) {
			if addr != serviceAddr {
				return nil, fmt.Errorf("dialled %s, want %s", addr, serviceAddr)
			}
			var d net.Dialer
			return d.DialContext(ctx, network, nsrv.Addr)
		}
	}
	own, ms := startDiscovered(t, g, 1, dial)
	got := waitForCondition(t, ns, g.Name, v1alpha1.ConditionTopologyStale, metav1.ConditionTrue, nameserver.ReasonDenied)
	if c := meta.FindStatusCondition(got.Status.Conditions, v1alpha1.ConditionTopologyStale); !strings.Contains(c.Message, "credentials Secret cannot be read") {
		t.Errorf("the condition does not say the credentials cannot be read: %s", c.Message)
	}
	if nsrv.Accepted() != 0 {
		t.Errorf("the name server was dialled %d times without credentials", nsrv.Accepted())
	}
	must(t, k8s.Create(context.Background(), &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "acl"},
		Data: map[string][]byte{"accessKey": []byte("ak"), "secretKey": []byte("sk")}}))
	waitForReaders(t, own, ms, queuesOf("t", "b", 4), waitFor)
	req := nsrv.LastRequest()
	check := nameserver.RouteRequest("t", req.Opaque)
	(&nameserver.Credentials{AccessKey: "ak", SecretKey: "sk"}).Sign(&check, nil)
	if req.ExtFields["AccessKey"] != "ak" || req.ExtFields["Signature"] != check.ExtFields["Signature"] {
		t.Fatalf("request header fields %v, want them signed as %v", req.ExtFields, check.ExtFields)
	}
	waitForCondition(t, ns, g.Name, v1alpha1.ConditionTopologyStale, metav1.ConditionFalse, v1alpha1.ReasonRoutesFresh)
}

// TestRoutesMixStaticAndDiscoveredTopics: a static topic keeps its brokers as written, a discovered one
// follows the name server, and discovered brokers get their zones from brokerZones or their names.
func TestRoutesMixStaticAndDiscoveredTopics(t *testing.T) {
	nsrv := rocketmqstandin.Start(t)
	nsrv.SetTopic("d", rocketmqstandin.Broker{Name: "room-a@b", Queues: 2}, rocketmqstandin.Broker{Name: "c", Queues: 2})
	nsrv.SetTopic("s", rocketmqstandin.Broker{Name: "b", Queues: 64}) // ignored: s is static
	ns := newNamespace(t)
	g := testenv.Group(ns, "mix").Topic("s", testenv.Broker("b", 3, "")).Obj()
	g.Spec.Topics = append(g.Spec.Topics, v1alpha1.Topic{Name: "d"})
	g.Spec.NameServer = &v1alpha1.NameServer{Addresses: []string{nsrv.Addr}, BrokerZones: []v1alpha1.BrokerZone{{Broker: "c", Zone: "room-c"}}}
	startManager(t, ns, inlineNameServers())
	must(t, k8s.Create(context.Background(), g))
	testenv.Pod(ns, "mix-0", "mix").Create(t, k8s)
	want := append(queuesOf("d", "c", 2), queuesOf("d", "room-a@b", 2)...)
	want = append(want, queuesOf("s", "b", 3)...)
	want = append(want, queuesOf("%RETRY%mix", "b", 0)...)
	eventually(t, waitFor, func() error {
		if got, _ := publishedQueues(t, ns, "mix"); !slices.Equal(got, want) {
			return fmt.Errorf("published %v, want %v", got, want)
		}
		return nil
	})
	mix := getGroup(t, ns, "mix")
	topo := plan.TopologyOf(mix, mix.Status.Routes)
	zones := map[string]string{}
	for _, tp := range topo {
		for _, b := range tp.Brokers {
			zones[tp.Name+"/"+b.Name] = b.Zone
		}
	}
	if zones["d/room-a@b"] != "room-a" || zones["d/c"] != "room-c" || zones["s/b"] != "" {
		t.Fatalf("zones %v", zones)
	}
	// The retry topic %RETRY%mix is not known to the name server: asked for, and nothing assigned.
	if nsrv.Requests("%RETRY%mix") == 0 || nsrv.Requests("s") != 0 {
		t.Fatalf("route requests: retry topic %d, static topic %d", nsrv.Requests("%RETRY%mix"), nsrv.Requests("s"))
	}
}
