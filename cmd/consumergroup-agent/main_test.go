//go:build envtest

package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/consumergroup-operator/consumergroup-operator/internal/testenv"
	"github.com/consumergroup-operator/consumergroup-operator/pkg/member"
	"github.com/consumergroup-operator/consumergroup-operator/pkg/protocol"
)

// One real API server for the package's tests; each test works in a namespace of its own.
var (
	cs        kubernetes.Interface
	nsCounter atomic.Int64
)

func TestMain(m *testing.M) {
	testenv.Main(m, nil, func(_ *envtest.Environment, cfg *rest.Config) error {
		var err error
		cs, err = kubernetes.NewForConfig(cfg)
		return err
	})
}

// eventually polls check until it succeeds, failing the test with check's last error after a bound that
// catches a delivery that never comes, not a slow one.
func eventually(t *testing.T, check func() error) {
	t.Helper()
	testenv.Eventually(t, 10*time.Second, check)
}

// agent is a running agent on a real localhost listener, for one member pod.
type agent struct {
	t     *testing.T
	base  string
	ns    string
	group string
	pod   string
}

// tweak, when not nil, adjusts the member's configuration.
// agentGroup and agentPod are the group and the pod of every agent the tests start.
const (
	agentGroup = "orders"
	agentPod   = "consumer-0"
)

func startAgent(t *testing.T, prefix string, tweak func(*member.Config)) agent {
	t.Helper()
	return startAgentReading(t, prefix, tweak, nil)
}

// startAgentReading is startAgent with the agent reading the ConsumerGroup through readGroup; nil reads it
// from the API server, which has no ConsumerGroup API here.
func startAgentReading(t *testing.T, prefix string, tweak func(*member.Config), readGroup func(context.Context) ([]byte, error)) agent {
	group, pod := agentGroup, agentPod
	t.Helper()
	ctx := context.Background()
	ns := fmt.Sprintf("%s-%d", prefix, nsCounter.Add(1))
	if _, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	p, err := cs.CoreV1().Pods(ns).Create(ctx, &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: pod},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "consumer", Image: "consumer"}}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	cfg := member.Config{
		Namespace: ns, Group: group, Pod: pod, PodUID: p.UID,
		LeaseDuration: 3 * time.Second, DrainAckTimeout: time.Hour,
	}
	if tweak != nil {
		tweak(&cfg)
	}
	client, err := member.New(cs, cfg)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	topics := newGroupTopics(cs, cfg)
	if readGroup != nil {
		topics.read = readGroup
	}
	runCtx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() {
		done <- serve(runCtx, client, ln, limits{defaultPoll: 30 * time.Second, maxPoll: time.Minute, drain: time.Minute}, topics)
	}()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("serve: %v", err)
		}
	})
	return agent{t: t, base: "http://" + ln.Addr().String(), ns: ns, group: group, pod: pod}
}

// call sends a request and decodes the JSON response into out (when not nil), returning the status code.
func (a agent) call(method, path, body string, out any) int {
	a.t.Helper()
	req, err := http.NewRequest(method, a.base+path, strings.NewReader(body))
	if err != nil {
		a.t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		a.t.Fatalf("%s %s: %v", method, path, err)
	}
	defer func() { _ = resp.Body.Close() }()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		a.t.Fatal(err)
	}
	if ct := resp.Header.Get("Content-Type"); ct != "application/json" {
		a.t.Fatalf("%s %s: Content-Type %q, body %s", method, path, ct, data)
	}
	if out != nil {
		if err := json.NewDecoder(bytes.NewReader(data)).Decode(out); err != nil {
			a.t.Fatalf("%s %s: decoding %s: %v", method, path, data, err)
		}
	}
	return resp.StatusCode
}

// publish writes the group's assignment as the operator would; the agent's own pod's entry names its UID.
func (a agent) publish(generation int64, entries map[string][]member.Queue) {
	a.t.Helper()
	pa := testenv.Assignment{Namespace: a.ns, Group: a.group, GroupUID: "group-uid", Generation: generation, Entries: map[string]testenv.PodQueues{}}
	for pod, qs := range entries {
		var uid types.UID
		if p, err := cs.CoreV1().Pods(a.ns).Get(context.Background(), pod, metav1.GetOptions{}); err == nil {
			uid = p.UID
		}
		pa.Entries[pod] = testenv.PodQueues{UID: uid, Queues: qs}
	}
	testenv.Publish(a.t, cs, pa)
}

func orders(ids ...int32) []member.Queue {
	out := make([]member.Queue, len(ids))
	for i, id := range ids {
		out[i] = member.Queue{Topic: "orders", Broker: "broker-a", ID: id}
	}
	return out
}

type errorBody struct {
	Error string `json:"error"`
}

func TestAgentHTTPAPI(t *testing.T) {
	a := startAgent(t, "agent-api", nil)

	// Healthy once the assignment is read and the Lease written.
	eventually(t, func() error {
		var h healthResponse
		if code := a.call("GET", "/healthz", "", &h); code != http.StatusOK || !h.OK {
			return fmt.Errorf("healthz %d: %+v", code, h)
		}
		return nil
	})
	var resp assignmentResponse
	a.call("GET", "/v1/assignment", "", &resp)
	if resp.Generation != 0 || len(resp.Queues) != 0 || !strings.Contains(resp.Reason, "does not exist") {
		t.Fatalf("before anything is published: %+v, want generation 0, no queues and a reason", resp)
	}

	a.publish(1, map[string][]member.Queue{"consumer-0": orders(0, 1), "consumer-1": orders(2)})
	eventually(t, func() error {
		resp = assignmentResponse{}
		a.call("GET", "/v1/assignment", "", &resp)
		if resp.Generation != 1 {
			return fmt.Errorf("generation %d, want 1", resp.Generation)
		}
		return nil
	})
	want := assignmentResponse{
		Generation: 1, Member: "consumer-0", Group: "orders", Pod: "consumer-0",
		Queues:        []string{"orders/broker-a/0", "orders/broker-a/1"},
		MessageQueues: []messageQueue{{"orders", "broker-a", 0}, {"orders", "broker-a", 1}},
	}
	if fmt.Sprint(resp) != fmt.Sprint(want) {
		t.Fatalf("GET /v1/assignment = %+v, want %+v", resp, want)
	}

	// A long-poll returns the next generation once it is published.
	polled := make(chan assignmentResponse, 1)
	go func() {
		var r assignmentResponse
		a.call("GET", "/v1/assignment?after=1&timeout=20s", "", &r)
		polled <- r
	}()
	a.publish(2, map[string][]member.Queue{"consumer-0": orders(0), "consumer-1": orders(1, 2)})
	if r := <-polled; r.Generation != 2 || fmt.Sprint(r.Queues) != "[orders/broker-a/0]" {
		t.Fatalf("long-poll after 1 returned %+v, want generation 2 with orders/broker-a/0", r)
	}
	// A long-poll that times out returns what is in force.
	resp = assignmentResponse{}
	if code := a.call("GET", "/v1/assignment?after=2&timeout=100ms", "", &resp); code != http.StatusOK || resp.Generation != 2 {
		t.Fatalf("timed-out long-poll: %d %+v, want 200 with generation 2", code, resp)
	}

	// Acknowledgements.
	var acked map[string]int64
	if code := a.call("POST", "/v1/ack", `{"generation":2}`, &acked); code != http.StatusOK || acked["acked"] != 2 {
		t.Fatalf("POST /v1/ack 2: %d %v", code, acked)
	}
	eventually(t, func() error {
		lease, err := cs.CoordinationV1().Leases(a.ns).Get(context.Background(), protocol.LeaseName("orders", "consumer-0"), metav1.GetOptions{})
		if err != nil {
			return err
		}
		if v := lease.Annotations[protocol.AckedGenerationAnnotation]; v != "2" {
			return fmt.Errorf("acked annotation %q, want 2", v)
		}
		return nil
	})
	for _, tc := range []struct {
		method, path, body string
		code               int
		mentions           string
	}{
		{"POST", "/v1/ack", `{"generation":9}`, http.StatusConflict, "generation 9"},
		{"POST", "/v1/ack", `{"gen":2}`, http.StatusBadRequest, `{"generation": N}`},
		{"POST", "/v1/ack", `not json`, http.StatusBadRequest, `{"generation": N}`},
		{"GET", "/v1/assignment?after=x", "", http.StatusBadRequest, "after="},
		{"GET", "/v1/assignment?after=1&timeout=soon", "", http.StatusBadRequest, "timeout="},
		{"GET", "/v1/ack", "", http.StatusMethodNotAllowed, "not allowed"},
		{"PUT", "/v1/load", `{"loads":{"orders/broker-a/0":-1}}`, http.StatusBadRequest, "orders/broker-a/0"},
		{"PUT", "/v1/load", `{"loads":{"orders-broker-a-0":1}}`, http.StatusBadRequest, "TOPIC/BROKER/ID"},
		{"PUT", "/v1/load", `{"load":{}}`, http.StatusBadRequest, `{"loads"`},
		{"GET", "/v2/assignment", "", http.StatusNotFound, "/v1/assignment"},
	} {
		var e errorBody
		if code := a.call(tc.method, tc.path, tc.body, &e); code != tc.code || !strings.Contains(e.Error, tc.mentions) {
			t.Errorf("%s %s %s: %d %q, want %d mentioning %q", tc.method, tc.path, tc.body, code, e.Error, tc.code, tc.mentions)
		}
	}
}

// The agent reports the topics the operator assigns in the group, read from the ConsumerGroup, with
// every assignment, including one that gives the pod none of their queues; it reads them again when a
// new generation is published, and stops reporting them when it may no longer read the ConsumerGroup.
func TestAgentReportsAssignedTopics(t *testing.T) {
	// The ConsumerGroup's JSON, or the error reading it gives.
	type answer struct {
		json string
		err  error
	}
	var group atomic.Pointer[answer]
	group.Store(&answer{json: `{"metadata":{"name":"orders"},"spec":{"topics":[{"name":"orders"}],"nameServer":{"addresses":["10.0.0.1:9876"],"retryTopic":"Assign"}}}`})
	var reads atomic.Int64
	read := func(context.Context) ([]byte, error) {
		reads.Add(1)
		a := group.Load()
		return []byte(a.json), a.err
	}
	a := startAgentReading(t, "agent-topics", nil, read)
	assigned := func() []string {
		var resp assignmentResponse
		a.call("GET", "/v1/assignment", "", &resp)
		return resp.AssignedTopics
	}
	// Read before the API is served: the first answer has them, with nothing published yet.
	if got := assigned(); fmt.Sprint(got) != "[%RETRY%orders orders]" {
		t.Fatalf("assignedTopics %q before anything is published, want [%%RETRY%%orders orders]", got)
	}
	// The pod has none of the retry topic's queues; the topic is the operator's all the same.
	a.publish(1, map[string][]member.Queue{"consumer-0": orders(0), "consumer-1": {{Topic: "%RETRY%orders", Broker: "broker-a", ID: 0}}})
	var resp assignmentResponse
	eventually(t, func() error {
		resp = assignmentResponse{}
		if a.call("GET", "/v1/assignment", "", &resp); resp.Generation != 1 {
			return fmt.Errorf("generation %d in force, want 1", resp.Generation)
		}
		return nil
	})
	if fmt.Sprint(resp.AssignedTopics) != "[%RETRY%orders orders]" || fmt.Sprint(resp.Queues) != "[orders/broker-a/0]" {
		t.Fatalf("generation 1: %+v, want the queue orders/broker-a/0 and assignedTopics [%%RETRY%%orders orders]", resp)
	}

	// retryTopic: Ignore; the next generation makes the agent read the group again.
	group.Store(&answer{json: `{"metadata":{"name":"orders"},"spec":{"topics":[{"name":"orders"}],"nameServer":{"addresses":["10.0.0.1:9876"],"retryTopic":"Ignore"}}}`})
	a.publish(2, map[string][]member.Queue{"consumer-0": orders(0, 1)})
	eventually(t, func() error {
		if got := assigned(); fmt.Sprint(got) != "[orders]" {
			return fmt.Errorf("assignedTopics %q after retryTopic Ignore and a new generation, want [orders]", got)
		}
		return nil
	})

	// A transient failure keeps what was read; a refusal makes the topics unknown, and they are not reported.
	group.Store(&answer{err: errors.New("connection refused")})
	before := reads.Load()
	a.publish(3, map[string][]member.Queue{"consumer-0": orders(0)})
	a.awaitGeneration(3)
	eventually(t, func() error {
		if reads.Load() == before {
			return errors.New("the agent has not read the ConsumerGroup since generation 3")
		}
		return nil
	})
	if got := assigned(); fmt.Sprint(got) != "[orders]" {
		t.Fatalf("assignedTopics %q after a failed read, want those read before, [orders]", got)
	}
	group.Store(&answer{err: apierrors.NewForbidden(schema.GroupResource{Group: "messaging.consumergroup.io", Resource: "consumergroups"}, "orders", errors.New("no RBAC"))})
	a.publish(4, map[string][]member.Queue{"consumer-0": orders(1)})
	eventually(t, func() error {
		var raw map[string]any
		a.call("GET", "/v1/assignment", "", &raw)
		if raw["generation"] != float64(4) {
			return fmt.Errorf("generation %v in force, want 4", raw["generation"])
		}
		if v, ok := raw["assignedTopics"]; ok {
			return fmt.Errorf("assignedTopics %v reported while the ConsumerGroup may not be read, want the field absent", v)
		}
		return nil
	})
}

// A load report put to the agent reaches the Lease with its next renewal, for the queues the pod reads.
func TestAgentLoad(t *testing.T) {
	a := startAgent(t, "agent-load", nil)
	a.publish(1, map[string][]member.Queue{"consumer-0": orders(0, 1)})
	eventually(t, func() error {
		var resp assignmentResponse
		if a.call("GET", "/v1/assignment", "", &resp); resp.Generation != 1 {
			return fmt.Errorf("generation %d in force, want 1", resp.Generation)
		}
		return nil
	})
	var put map[string]int
	if code := a.call("PUT", "/v1/load", `{"loads":{"orders/broker-a/0":120.5,"orders/broker-a/1":3,"orders/broker-a/7":9}}`, &put); code != http.StatusOK || put["queues"] != 3 {
		t.Fatalf("PUT /v1/load: %d %v", code, put)
	}
	eventually(t, func() error {
		lease, err := cs.CoordinationV1().Leases(a.ns).Get(context.Background(), protocol.LeaseName(a.group, "consumer-0"), metav1.GetOptions{})
		if err != nil {
			return err
		}
		s := protocol.ReadLease(lease)
		want := map[member.Queue]float64{orders(0)[0]: 120.5, orders(1)[0]: 3}
		if s.LoadErr != nil || !maps.Equal(s.Load, want) {
			return fmt.Errorf("the Lease reports %v (error %v), want %v: the pod's two queues", s.Load, s.LoadErr, want)
		}
		return nil
	})
}

func TestAgentDrain(t *testing.T) {
	a := startAgent(t, "agent-drain", nil)
	a.publish(1, map[string][]member.Queue{"consumer-0": orders(0, 1, 2)})
	eventually(t, func() error {
		var resp assignmentResponse
		if a.call("GET", "/v1/assignment", "", &resp); resp.Generation != 1 {
			return fmt.Errorf("generation %d, want 1", resp.Generation)
		}
		return nil
	})

	var e errorBody
	if code := a.call("POST", "/v1/drain?timeout=300ms", "", &e); code != http.StatusGatewayTimeout || !strings.Contains(e.Error, "3 queues") {
		t.Fatalf("drain while holding queues: %d %q, want 504 naming the 3 queues", code, e.Error)
	}

	drained := make(chan int, 1)
	go func() { drained <- a.call("POST", "/v1/drain", "", nil) }()
	a.publish(2, map[string][]member.Queue{"consumer-0": nil, "consumer-1": orders(0, 1, 2)})
	// The consumer sees the release, stops, and acknowledges it; then the drain returns.
	var resp assignmentResponse
	a.call("GET", "/v1/assignment?after=1&timeout=20s", "", &resp)
	if resp.Generation != 2 || len(resp.Queues) != 0 {
		t.Fatalf("after the release: %+v, want generation 2 and no queues", resp)
	}
	if code := a.call("POST", "/v1/ack", `{"generation":2}`, nil); code != http.StatusOK {
		t.Fatalf("ack: %d", code)
	}
	if code := <-drained; code != http.StatusOK {
		t.Fatalf("drain returned %d, want 200", code)
	}
	a.drainedForGood(3)
}

// The drain is the only path on which the agent acknowledges for the consumer, and it is the agent's
// shutdown: once it acknowledged, the agent hands out nothing more.
func TestAgentDrainAcknowledgesOnlyAsItStops(t *testing.T) {
	a := startAgent(t, "agent-drain-ack", func(c *member.Config) { c.DrainAckTimeout = 300 * time.Millisecond })
	a.publish(1, map[string][]member.Queue{"consumer-0": orders(0, 1)})
	a.awaitGeneration(1)
	if code := a.call("POST", "/v1/ack", `{"generation":1}`, nil); code != http.StatusOK {
		t.Fatalf("ack 1: %d", code)
	}
	// A rebalance takes every queue from the pod; the consumer has not applied it yet. However long it
	// takes, only the consumer acknowledges it: the Lease goes on claiming what it may still read.
	a.publish(2, map[string][]member.Queue{"consumer-0": nil, "consumer-1": orders(0, 1)})
	a.awaitGeneration(2)
	time.Sleep(time.Second)
	if s := a.lease(); s.AckedGeneration != 1 || fmt.Sprint(s.Claim) != fmt.Sprint(orders(0, 1)) {
		t.Fatalf("without a drain the Lease acknowledges %d and claims %v, want 1 and %v", s.AckedGeneration, s.Claim, orders(0, 1))
	}

	// The pod shuts down: the drain acknowledges the release for the consumer after -drain-ack-timeout,
	// and stops the agent.
	var drained struct {
		Drained bool  `json:"drained"`
		Acked   int64 `json:"acked"`
	}
	if code := a.call("POST", "/v1/drain", "", &drained); code != http.StatusOK || !drained.Drained || drained.Acked != 2 {
		t.Fatalf("drain: %d %+v, want 200, drained, acked 2", code, drained)
	}
	if s := a.lease(); s.AckedGeneration != 2 || !s.Released() {
		t.Fatalf("after the drain the Lease acknowledges %d and claims %v, want 2 and nothing", s.AckedGeneration, s.Claim)
	}
	a.drainedForGood(3)
}

// awaitGeneration waits until the agent serves generation gen.
func (a agent) awaitGeneration(gen int64) {
	a.t.Helper()
	eventually(a.t, func() error {
		var resp assignmentResponse
		if a.call("GET", "/v1/assignment", "", &resp); resp.Generation != gen {
			return fmt.Errorf("generation %d in force, want %d", resp.Generation, gen)
		}
		return nil
	})
}

// lease reads the pod's Lease.
func (a agent) lease() protocol.LeaseState {
	a.t.Helper()
	lease, err := cs.CoordinationV1().Leases(a.ns).Get(context.Background(), protocol.LeaseName(a.group, a.pod), metav1.GetOptions{})
	if err != nil {
		a.t.Fatal(err)
	}
	return protocol.ReadLease(lease)
}

// drainedForGood checks that an agent whose drain returned hands out nothing from then on: generation 0
// with a reason, an unhealthy /healthz; a generation gen that gives the pod queues is neither served nor
// claimed by the Lease renewals after it, its acknowledgement is refused, and a second drain returns at
// once.
func (a agent) drainedForGood(gen int64) {
	t := a.t
	t.Helper()
	var resp assignmentResponse
	if a.call("GET", "/v1/assignment", "", &resp); resp.Generation != 0 || len(resp.Queues) != 0 || !strings.Contains(resp.Reason, "drained") {
		t.Fatalf("after the drain GET /v1/assignment = %+v, want generation 0, no queues and a reason saying the pod drained", resp)
	}
	var h healthResponse
	if code := a.call("GET", "/healthz", "", &h); code != http.StatusServiceUnavailable || !strings.Contains(h.Error, "drained") {
		t.Fatalf("after the drain /healthz = %d %+v, want 503 saying the pod drained", code, h)
	}
	if s := a.lease(); !s.Released() {
		t.Fatalf("after the drain the Lease claims %v, want nothing", s.Claim)
	}

	a.publish(gen, map[string][]member.Queue{a.pod: orders(5, 6)})
	eventually(t, func() error {
		var h healthResponse
		if a.call("GET", "/healthz", "", &h); h.PublishedGeneration != gen {
			return fmt.Errorf("the agent sees generation %d published, want %d", h.PublishedGeneration, gen)
		}
		return nil
	})
	seen := time.Now()
	resp = assignmentResponse{}
	if a.call("GET", "/v1/assignment?after=0&timeout=1500ms", "", &resp); resp.Generation != 0 || len(resp.Queues) != 0 {
		t.Fatalf("after the drain a long-poll served %+v once generation %d gave the pod queues, want generation 0", resp, gen)
	}
	eventually(t, func() error {
		if renewed := a.lease().RenewTime; !renewed.After(seen) {
			return fmt.Errorf("the Lease was last renewed at %v, not since %v", renewed, seen)
		}
		return nil
	})
	if s := a.lease(); !s.Released() {
		t.Fatalf("after the drain the Lease claims %v once generation %d gave the pod queues, want nothing", s.Claim, gen)
	}
	var e errorBody
	if code := a.call("POST", "/v1/ack", fmt.Sprintf(`{"generation":%d}`, gen), &e); code != http.StatusConflict || !strings.Contains(e.Error, "drained") {
		t.Fatalf("after the drain POST /v1/ack %d = %d %q, want 409 saying the pod drained", gen, code, e.Error)
	}
	if code := a.call("POST", "/v1/drain?timeout=1s", "", nil); code != http.StatusOK {
		t.Fatalf("a second drain returned %d, want 200", code)
	}
}

// TestProbe runs the liveness probe command against a real agent: it passes once the agent is healthy,
// fails with the agent's reason once it is not (here, drained), and fails when nothing answers.
func TestProbe(t *testing.T) {
	a := startAgent(t, "agent-probe", nil)
	listen := strings.TrimPrefix(a.base, "http://")
	var out strings.Builder
	eventually(t, func() error {
		out.Reset()
		if code := probe(context.Background(), []string{"-listen", listen}, &out); code != 0 {
			return fmt.Errorf("probe exited %d: %s", code, out.String())
		}
		return nil
	})
	// The pod is given nothing and its consumer applied that, so its drain has nothing to wait for.
	a.publish(1, map[string][]member.Queue{"consumer-0": nil, "consumer-1": orders(0)})
	a.awaitGeneration(1)
	if code := a.call("POST", "/v1/ack", `{"generation":1}`, nil); code != http.StatusOK {
		t.Fatalf("ack: %d", code)
	}
	if code := a.call("POST", "/v1/drain?timeout=20s", "", nil); code != http.StatusOK {
		t.Fatalf("drain of an agent holding nothing: %d", code)
	}
	out.Reset()
	if code := probe(context.Background(), []string{"-listen", listen}, &out); code != 1 || !strings.Contains(out.String(), "drained") {
		t.Fatalf("probe of a drained agent exited %d: %q; want 1 and the agent's reason", code, out.String())
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := ln.Addr().String()
	_ = ln.Close()
	out.Reset()
	if code := probe(context.Background(), []string{"-listen", closed, "-timeout", "200ms"}, &out); code != 1 {
		t.Fatalf("probe with no agent listening exited %d: %q; want 1", code, out.String())
	}
}
