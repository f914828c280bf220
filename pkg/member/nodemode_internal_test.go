package member

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/utils/ptr"

	"github.com/consumergroup-operator/consumergroup-operator/pkg/protocol"
)

const (
	testGroup    = "orders"
	testPod      = "consumer-0"
	testGroupUID = types.UID("group-uid-1")
)

// assignmentConfigMap is a ConfigMap of group testGroup at generation gen, owned by the group: the index
// (with shards when above 1) or, with entries, a shard.
func assignmentConfigMap(name string, gen int64, shards int, entries map[string]string) *corev1.ConfigMap {
	cm := &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: name, ResourceVersion: strconv.FormatInt(gen, 10),
			Annotations: map[string]string{protocol.GenerationAnnotation: strconv.FormatInt(gen, 10)},
			OwnerReferences: []metav1.OwnerReference{{APIVersion: protocol.GroupAPIVersion, Kind: protocol.GroupKind,
				Name: testGroup, UID: testGroupUID, Controller: ptr.To(true)}}},
		Data: entries,
	}
	if shards > 1 {
		cm.Annotations[protocol.ShardsAnnotation] = strconv.Itoa(shards)
	}
	return cm
}

func entryOf(gen int64) map[string]string {
	return map[string]string{testPod: string(protocol.NewEntry(testPod, "pod-uid", gen, nil).Encode())}
}

// TestHeldGeneration: the generation a member vouches for to its node agent is one whose assignment, and
// every earlier one, has reached its view whole.
func TestHeldGeneration(t *testing.T) {
	shard := protocol.ShardName(testGroup, protocol.ShardOf(testPod, 2))
	inForceAt2 := protocol.EntryView{Exists: true, GroupUID: testGroupUID, Generation: 2}
	tests := []struct {
		name   string
		view   *assignmentView
		want   heldView
		wantOK bool
	}{
		{"not synced", &assignmentView{}, heldView{}, false},
		{"no assignment", &assignmentView{synced: true}, heldView{}, true},
		{"the index's generation", &assignmentView{synced: true, index: assignmentConfigMap(protocol.AssignmentName(testGroup), 3, 1, entryOf(3))},
			heldView{published: true, groupUID: testGroupUID, generation: 3}, true},
		{"a shard as new as the index", &assignmentView{synced: true, index: assignmentConfigMap(protocol.AssignmentName(testGroup), 3, 2, nil),
			shard: shardWatch{name: shard, read: true, cm: assignmentConfigMap(shard, 3, 1, entryOf(3))}},
			heldView{published: true, groupUID: testGroupUID, generation: 3}, true},
		{"a shard behind the index: the entry in force", &assignmentView{synced: true, index: assignmentConfigMap(protocol.AssignmentName(testGroup), 3, 2, nil),
			shard: shardWatch{name: shard, read: true, cm: assignmentConfigMap(shard, 2, 1, entryOf(2))}, entry: inForceAt2},
			heldView{published: true, groupUID: testGroupUID, generation: 2}, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			v := tt.view
			v.group, v.pod, v.podUID = testGroup, testPod, "pod-uid"
			got, ok := v.held()
			if got != tt.want || ok != tt.wantOK {
				t.Fatalf("held = %+v, %v; want %+v, %v", got, ok, tt.want, tt.wantOK)
			}
		})
	}
}

// TestHeldFollowsTheViewsObjects: held keeps its reading of the entry only while the view holds the same
// objects; each new index, shard or shard read is read again.
func TestHeldFollowsTheViewsObjects(t *testing.T) {
	index := protocol.AssignmentName(testGroup)
	shard := protocol.ShardName(testGroup, protocol.ShardOf(testPod, 2))
	v := &assignmentView{synced: true, group: testGroup, pod: testPod, podUID: "pod-uid",
		index: assignmentConfigMap(index, 3, 1, entryOf(3))}
	want := func(gen int64) {
		t.Helper()
		got, ok := v.held()
		if !ok || got.generation != gen || !got.published {
			t.Fatalf("held = %+v, %v; want generation %d", got, ok, gen)
		}
	}
	want(3)
	want(3)
	v.index = assignmentConfigMap(index, 4, 1, entryOf(4))
	want(4)
	// Sharded at generation 5: until the shard is read the entry in force stands; then the shard's.
	v.index, v.entry = assignmentConfigMap(index, 5, 2, nil), protocol.EntryView{Exists: true, GroupUID: testGroupUID, Generation: 4}
	v.shard = shardWatch{name: shard}
	if _, ok := v.held(); !ok {
		t.Fatal("held before the shard was read: not ok")
	}
	v.shard.read, v.shard.cm = true, assignmentConfigMap(shard, 5, 1, entryOf(5))
	want(5)
	v.shard.cm = assignmentConfigMap(shard, 6, 1, entryOf(6))
	v.index = assignmentConfigMap(index, 6, 2, nil)
	want(6)
	v.index = nil
	if got, ok := v.held(); !ok || got.published {
		t.Fatalf("held with no assignment = %+v, %v; want nothing published", got, ok)
	}
}

// fakeAgent answers confirmation requests with status and answer, and records the last request.
func fakeAgent(t *testing.T, status int, answer protocol.NodeAgentConfirmResponse) (*httptest.Server, *atomic.Pointer[protocol.NodeAgentConfirmRequest]) {
	t.Helper()
	var last atomic.Pointer[protocol.NodeAgentConfirmRequest]
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != protocol.NodeAgentConfirmPath || r.Header.Get("Authorization") != "Bearer the-token" {
			http.NotFound(w, r)
			return
		}
		var req protocol.NodeAgentConfirmRequest
		_ = json.NewDecoder(r.Body).Decode(&req)
		last.Store(&req)
		w.WriteHeader(status)
		_ = json.NewEncoder(w).Encode(answer)
	}))
	t.Cleanup(srv.Close)
	return srv, &last
}

// TestNodeConfirmerMode: a member settles its mode at its first request. No agent at the address (a
// refused connection, or 404) makes it a per-member member for good; any answer of an agent, even a
// refusal, keeps it in node mode, where only the agent confirms.
func TestNodeConfirmerMode(t *testing.T) {
	confirmed := protocol.NodeAgentConfirmResponse{Confirmed: true}
	refused := protocol.NodeAgentConfirmResponse{Reason: "the token is not for audience consumergroup-node-agent"}
	closed := httptest.NewServer(http.NotFoundHandler())
	closed.Close()
	tests := []struct {
		name      string
		status    int
		answer    protocol.NodeAgentConfirmResponse
		url       string // when not "", instead of the fake agent's
		mode      confirmMode
		confirmed bool
		err       string
	}{
		{"confirmed", http.StatusOK, confirmed, "", modeNode, true, ""},
		{"not confirmed", http.StatusOK, protocol.NodeAgentConfirmResponse{Reason: "must see generation 4"}, "", modeNode, false, "did not confirm generation 3: must see generation 4"},
		{"a refused token", http.StatusUnauthorized, refused, "", modeNode, false, "401 Unauthorized: the token is not for audience"},
		{"no agent at the address: 404", http.StatusOK, confirmed, "/elsewhere", modePerMember, true, ""},
		{"nothing listens at the address", http.StatusOK, confirmed, closed.URL, modePerMember, true, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			agent, last := fakeAgent(t, tt.status, tt.answer)
			url := agent.URL
			if strings.HasPrefix(tt.url, "/") {
				url += tt.url
			} else if tt.url != "" {
				url = tt.url
			}
			index := assignmentConfigMap(protocol.AssignmentName(testGroup), 3, 1, entryOf(3))
			cfg := Config{Namespace: "shop", Group: testGroup, Pod: testPod, PodUID: "pod-uid", NodeAgent: url,
				NodeAgentToken: func() (string, error) { return "the-token", nil }}.withDefaults()
			view := newAssignmentView(fake.NewClientset(index), cfg, func() {})
			view.synced, view.index = true, index
			n := newNodeConfirmer(cfg, view)
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()

			ok, err := n.confirm(ctx)
			if ok != tt.confirmed || (err == nil) != (tt.err == "") || (err != nil && !strings.Contains(err.Error(), tt.err)) {
				t.Fatalf("confirm = %v, %v; want %v with an error containing %q", ok, err, tt.confirmed, tt.err)
			}
			if got := confirmMode(n.mode.Load()); got != tt.mode {
				t.Fatalf("mode %d, want %d", got, tt.mode)
			}
			if tt.mode == modeNode {
				want := protocol.NodeAgentConfirmRequest{Group: testGroup, GroupUID: testGroupUID, Generation: 3}
				if got := last.Load(); got == nil || *got != want {
					t.Fatalf("the agent was asked %+v, want %+v", got, want)
				}
				// An agent gone after its first answer is a failure, not a switch.
				agent.Close()
				if ok, err := n.confirm(ctx); ok || err == nil || confirmMode(n.mode.Load()) != modeNode {
					t.Fatalf("with the agent gone: confirm = %v, %v, mode %d", ok, err, n.mode.Load())
				}
			}
		})
	}
}

// TestNodeAgentCallIsReadAsTheHTTPAnswer: a member that asks its agent in process (Config.NodeAgentCall)
// reads the status and answer as it reads the agent's HTTP answer.
func TestNodeAgentCallIsReadAsTheHTTPAnswer(t *testing.T) {
	tests := []struct {
		name      string
		status    int
		answer    protocol.NodeAgentConfirmResponse
		err       error
		mode      confirmMode
		confirmed bool
		wantErr   string
	}{
		{"confirmed", http.StatusOK, protocol.NodeAgentConfirmResponse{Confirmed: true}, nil, modeNode, true, ""},
		{"not confirmed", http.StatusOK, protocol.NodeAgentConfirmResponse{Reason: "must see generation 4"}, nil, modeNode, false, "did not confirm generation 3: must see generation 4"},
		{"a refused token", http.StatusUnauthorized, protocol.NodeAgentConfirmResponse{Reason: "not valid"}, nil, modeNode, false, "401 Unauthorized: not valid"},
		{"no node view: 404", http.StatusNotFound, protocol.NodeAgentConfirmResponse{}, nil, modePerMember, true, ""},
		{"the call ends with the request", 0, protocol.NodeAgentConfirmResponse{}, context.DeadlineExceeded, modeUndecided, false, "deadline exceeded"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var asked protocol.NodeAgentConfirmRequest
			var token string
			index := assignmentConfigMap(protocol.AssignmentName(testGroup), 3, 1, entryOf(3))
			cfg := Config{Namespace: "shop", Group: testGroup, Pod: testPod, PodUID: "pod-uid", NodeAgent: "http://node-agent.invalid",
				NodeAgentToken: func() (string, error) { return "the-token", nil },
				NodeAgentCall: func(_ context.Context, tok string, req protocol.NodeAgentConfirmRequest) (int, protocol.NodeAgentConfirmResponse, error) {
					token, asked = tok, req
					return tt.status, tt.answer, tt.err
				}}.withDefaults()
			view := newAssignmentView(fake.NewClientset(index), cfg, func() {})
			view.synced, view.index = true, index
			n := newNodeConfirmer(cfg, view)
			ok, err := n.confirm(context.Background())
			if ok != tt.confirmed || (err == nil) != (tt.wantErr == "") || (err != nil && !strings.Contains(err.Error(), tt.wantErr)) {
				t.Fatalf("confirm = %v, %v; want %v with an error containing %q", ok, err, tt.confirmed, tt.wantErr)
			}
			if got := confirmMode(n.mode.Load()); got != tt.mode {
				t.Fatalf("mode %d, want %d", got, tt.mode)
			}
			want := protocol.NodeAgentConfirmRequest{Group: testGroup, GroupUID: testGroupUID, Generation: 3}
			if asked != want || token != "the-token" {
				t.Fatalf("the agent was asked %+v with token %q, want %+v with the pod's", asked, token, want)
			}
		})
	}
}

// An agent that accepts the connection but answers too late is there, only slow (a node under load): the
// attempt fails, and the member's mode stays to be settled by a later answer. Falling back for good on a
// slow first answer would make every member of a loaded node read the API server once a second.
func TestASlowFirstAnswerSettlesNoMode(t *testing.T) {
	release := make(chan struct{})
	slow := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		<-release
		_ = json.NewEncoder(w).Encode(protocol.NodeAgentConfirmResponse{Confirmed: true})
	}))
	defer slow.Close()
	defer close(release)
	index := assignmentConfigMap(protocol.AssignmentName(testGroup), 3, 1, entryOf(3))
	cfg := Config{Namespace: "shop", Group: testGroup, Pod: testPod, PodUID: "pod-uid", NodeAgent: slow.URL,
		NodeAgentToken: func() (string, error) { return "the-token", nil }}.withDefaults()
	view := newAssignmentView(fake.NewClientset(index), cfg, func() {})
	view.synced, view.index = true, index
	n := newNodeConfirmer(cfg, view)
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	if ok, err := n.confirm(ctx); ok || err == nil {
		t.Fatalf("confirm = %v, %v; want no confirmation, with an error", ok, err)
	}
	if got := confirmMode(n.mode.Load()); got != modeUndecided {
		t.Fatalf("mode %d after a slow first answer, want undecided (%d)", got, modeUndecided)
	}
}

// TestAssignmentListOptions: the informer's lists and watches name the one ConfigMap; its watches last
// 30 to 60 minutes instead of the informer's 5 to 10, and its lists, which ask for no timeout, get none.
func TestAssignmentListOptions(t *testing.T) {
	list := metav1.ListOptions{}
	assignmentListOptions(&list, "orders-assignment", 0.5)
	if list.FieldSelector != "metadata.name=orders-assignment" || list.TimeoutSeconds != nil {
		t.Fatalf("list options %+v: want the name's field selector and no timeout", list)
	}
	for _, tc := range []struct {
		r    float64
		want int64
	}{{0, 1800}, {0.5, 2700}, {0.999, 3598}} {
		watch := metav1.ListOptions{TimeoutSeconds: ptr.To[int64](421)} // as the informer's reflector asks
		assignmentListOptions(&watch, "orders-assignment", tc.r)
		if watch.FieldSelector != "metadata.name=orders-assignment" || watch.TimeoutSeconds == nil || *watch.TimeoutSeconds != tc.want {
			t.Fatalf("watch options at %v: %+v, want the field selector and a timeout of %d s", tc.r, watch, tc.want)
		}
	}
}
