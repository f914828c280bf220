//go:build envtest

package nodeagent_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/consumergroup-operator/consumergroup-operator/internal/testenv"
	"github.com/consumergroup-operator/consumergroup-operator/pkg/nodeagent"
	"github.com/consumergroup-operator/consumergroup-operator/pkg/protocol"
)

// One real API server, which signs and reviews the tokens, for the package's tests; each test works in
// namespaces of its own.
var (
	restConfig *rest.Config
	cs         kubernetes.Interface
	nsCounter  atomic.Int64
)

func TestMain(m *testing.M) {
	testenv.Main(m, nil, func(_ *envtest.Environment, cfg *rest.Config) error {
		restConfig = cfg
		var err error
		cs, err = kubernetes.NewForConfig(cfg)
		return err
	})
}

const (
	nodeA     = "node-a"
	nodeB     = "node-b"
	groupName = "orders"
	groupUID  = "group-uid-1"
)

func newNamespace(t *testing.T, prefix string) string {
	t.Helper()
	name := fmt.Sprintf("%s-%d", prefix, nsCounter.Add(1))
	_, err := cs.CoreV1().Namespaces().Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("creating namespace: %v", err)
	}
	return name
}

// startAgent runs an agent for node, reading the node views of namespace views with client, behind an
// httptest server, until the test ends. It returns the server's URL.
func startAgent(t *testing.T, client kubernetes.Interface, views, node string, minInterval time.Duration) string {
	t.Helper()
	url, _ := startAgentServer(t, client, views, node, minInterval)
	return url
}

// startAgentServer is startAgent, and the agent itself.
func startAgentServer(t *testing.T, client kubernetes.Interface, views, node string, minInterval time.Duration) (string, *nodeagent.Server) {
	t.Helper()
	s, err := nodeagent.New(nodeagent.Config{Node: node, Namespace: views, Client: client, MinReadInterval: minInterval})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	srv := httptest.NewServer(s.Handler())
	t.Cleanup(func() {
		srv.Close()
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	})
	return srv.URL, s
}

// confirm posts body to the agent at base with token, and returns the status and the answer.
func confirm(t *testing.T, base, token, body string) (int, protocol.NodeAgentConfirmResponse) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, base+protocol.NodeAgentConfirmPath, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = resp.Body.Close() }()
	var a protocol.NodeAgentConfirmResponse
	if err := json.NewDecoder(resp.Body).Decode(&a); err != nil {
		t.Fatalf("decoding the answer (status %s): %v", resp.Status, err)
	}
	return resp.StatusCode, a
}

func requestBody(group string, uid types.UID, generation int64) string {
	raw, err := json.Marshal(protocol.NodeAgentConfirmRequest{Group: group, GroupUID: uid, Generation: generation})
	if err != nil {
		panic(err)
	}
	return string(raw)
}

// TestPodBoundTokensNameTheNode checks what the agent relies on: the API server puts the pod's node in
// the extra fields of a token bound to a pod (Kubernetes 1.30 and later, ServiceAccountTokenPodNodeInfo),
// and TokenReview reports it.
func TestPodBoundTokensNameTheNode(t *testing.T) {
	ns := newNamespace(t, "token")
	pod := testenv.PodOnNode(t, cs, ns, "consumer-0", "consumer", nodeA)
	token := testenv.PodToken(t, cs, pod, protocol.NodeAgentAudience)
	review, err := cs.AuthenticationV1().TokenReviews().Create(context.Background(), &authenticationv1.TokenReview{
		Spec: authenticationv1.TokenReviewSpec{Token: token, Audiences: []string{protocol.NodeAgentAudience}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	s := review.Status
	want := map[string]string{
		"authentication.kubernetes.io/pod-name":  pod.Name,
		"authentication.kubernetes.io/pod-uid":   string(pod.UID),
		"authentication.kubernetes.io/node-name": nodeA,
	}
	for key, value := range want {
		if got := s.User.Extra[key]; len(got) != 1 || got[0] != value {
			t.Errorf("extra %s = %v, want [%s] (status %+v)", key, got, value, s)
		}
	}
	if !s.Authenticated || s.User.Username != "system:serviceaccount:"+ns+":consumer" {
		t.Errorf("review status %+v", s)
	}
}

// TestConfirm runs an agent of node-a against the node view the test writes, with real tokens.
func TestConfirm(t *testing.T) {
	ns, views := newNamespace(t, "shop"), newNamespace(t, "operator")
	pod := testenv.PodOnNode(t, cs, ns, "consumer-0", "consumer", nodeA)
	elsewhere := testenv.PodOnNode(t, cs, ns, "consumer-1", "consumer", nodeB)
	token := testenv.PodToken(t, cs, pod, protocol.NodeAgentAudience)
	testenv.WriteNodeView(t, cs, views, nodeA, protocol.NodeViewLines{}.
		With(protocol.NodeViewLine{Namespace: ns, Group: groupName, GroupUID: groupUID, MustSee: 5}).
		With(protocol.NodeViewLine{Namespace: "other", Group: "payments", GroupUID: "u2", MustSee: 1}))
	agent, server := startAgentServer(t, cs, views, nodeA, 10*time.Millisecond)

	tests := []struct {
		name    string
		token   string
		body    string
		status  int
		confirm bool
		reason  string
	}{
		{"the generation the line must see", token, requestBody(groupName, groupUID, 5), http.StatusOK, true, ""},
		{"a later generation", token, requestBody(groupName, groupUID, 6), http.StatusOK, true, ""},
		{"an earlier generation", token, requestBody(groupName, groupUID, 4), http.StatusOK, false, "must see generation 5"},
		{"another incarnation of the group", token, requestBody(groupName, "group-uid-0", 5), http.StatusOK, false, "incarnation"},
		{"a group without a line", token, requestBody("payments", "u2", 5), http.StatusOK, false, "no line for group " + ns + "/payments"},
		{"a pod on another node", testenv.PodToken(t, cs, elsewhere, protocol.NodeAgentAudience), requestBody(groupName, groupUID, 5), http.StatusUnauthorized, false, "runs on node node-b"},
		{"a token for the API server", testenv.PodToken(t, cs, pod), requestBody(groupName, groupUID, 5), http.StatusUnauthorized, false, "not valid"},
		{"a garbage token", "not-a-token", requestBody(groupName, groupUID, 5), http.StatusUnauthorized, false, "not valid"},
		{"no token", "", requestBody(groupName, groupUID, 5), http.StatusUnauthorized, false, "no bearer token"},
		{"a body that is not JSON", token, "generation=5", http.StatusBadRequest, false, "not a JSON"},
		{"a negative generation", token, requestBody(groupName, groupUID, -1), http.StatusBadRequest, false, "outside 0"},
		{"a body too large", token, `{"group":"` + strings.Repeat("a", protocol.MaxNodeAgentRequestBytes) + `"}`, http.StatusBadRequest, false, "larger than"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			status, a := confirm(t, agent, tt.token, tt.body)
			if status != tt.status || a.Confirmed != tt.confirm || !strings.Contains(a.Reason, tt.reason) {
				t.Fatalf("status %d, answer %+v; want status %d, confirmed %v, a reason containing %q", status, a, tt.status, tt.confirm, tt.reason)
			}
			if tt.token != "" && strings.Contains(a.Reason, tt.token) {
				t.Fatalf("the reason %q quotes the token", a.Reason)
			}
			// A caller in the agent's process gets the same answer for the same request.
			var req protocol.NodeAgentConfirmRequest
			if len(tt.body) > protocol.MaxNodeAgentRequestBytes || json.Unmarshal([]byte(tt.body), &req) != nil {
				return // the direct call takes no body to decode or to bound
			}
			status, direct, err := server.Confirm(context.Background(), tt.token, req)
			if err != nil || status != tt.status || direct != a {
				t.Fatalf("Confirm: status %d, answer %+v, error %v; the handler's: status %d, answer %+v", status, direct, err, tt.status, a)
			}
		})
	}
}

// TestAViewThatIsMissingOrEditedConfirmsNothing: the agent confirms from the view the operator wrote, and
// from nothing else.
func TestAViewThatIsMissingOrEditedConfirmsNothing(t *testing.T) {
	ns, views := newNamespace(t, "shop"), newNamespace(t, "operator")
	pod := testenv.PodOnNode(t, cs, ns, "consumer-0", "consumer", nodeA)
	token := testenv.PodToken(t, cs, pod, protocol.NodeAgentAudience)
	agent := startAgent(t, cs, views, nodeA, 10*time.Millisecond)
	body := requestBody(groupName, groupUID, 5)

	// No view at all answers 404, as an address without an agent: an operator that keeps no node views
	// leaves a member that has not settled its mode to confirm its view itself.
	if status, a := confirm(t, agent, token, body); status != http.StatusNotFound || a.Confirmed || !strings.Contains(a.Reason, "does not exist") {
		t.Fatalf("without a node view: %d %+v", status, a)
	}
	view := testenv.WriteNodeView(t, cs, views, nodeA, protocol.NodeViewLines{}.
		With(protocol.NodeViewLine{Namespace: ns, Group: groupName, GroupUID: groupUID, MustSee: 5}))
	if status, a := confirm(t, agent, token, body); status != http.StatusOK || !a.Confirmed {
		t.Fatalf("with the view written: %d %+v", status, a)
	}
	view.Data[protocol.NodeViewKey] = strings.Replace(view.Data[protocol.NodeViewKey], `"mustSee":5`, `"mustSee":6`, 1)
	if _, err := cs.CoreV1().ConfigMaps(views).Update(context.Background(), view, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, a := confirm(t, agent, token, body); a.Confirmed || !strings.Contains(a.Reason, "edited by someone other than the operator") {
		t.Fatalf("with the view edited: %+v", a)
	}
}

// getCounter counts the GETs of ConfigMaps sent with the client configurations it wraps.
type getCounter struct {
	next http.RoundTripper
	gets *atomic.Int64
}

func (c getCounter) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.Method == http.MethodGet && strings.Contains(req.URL.Path, "/configmaps/") {
		c.gets.Add(1)
	}
	return c.next.RoundTrip(req)
}

// TestConcurrentRequestsShareReads: the requests of every member on the node cost one read a second,
// not one each. The first request's read is sent at once; those that arrive while it is in flight share
// the next, a second later: two reads at most.
func TestConcurrentRequestsShareReads(t *testing.T) {
	ns, views := newNamespace(t, "shop"), newNamespace(t, "operator")
	pod := testenv.PodOnNode(t, cs, ns, "consumer-0", "consumer", nodeA)
	token := testenv.PodToken(t, cs, pod, protocol.NodeAgentAudience)
	testenv.WriteNodeView(t, cs, views, nodeA, protocol.NodeViewLines{}.
		With(protocol.NodeViewLine{Namespace: ns, Group: groupName, GroupUID: groupUID, MustSee: 5}))
	var gets atomic.Int64
	cfg := rest.CopyConfig(restConfig)
	cfg.Wrap(func(rt http.RoundTripper) http.RoundTripper { return getCounter{next: rt, gets: &gets} })
	counted, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	agent := startAgent(t, counted, views, nodeA, time.Second)
	// The token is reviewed once before the requests, so that they all reach the reader together.
	if status, a := confirm(t, agent, token, requestBody(groupName, groupUID, 5)); status != http.StatusOK || !a.Confirmed {
		t.Fatalf("first request: %d %+v", status, a)
	}
	time.Sleep(time.Second) // past the minimum interval since that read
	before := gets.Load()

	const members = 50
	var wg sync.WaitGroup
	var confirmed atomic.Int64
	for range members {
		wg.Go(func() {
			body, _ := json.Marshal(protocol.NodeAgentConfirmRequest{Group: groupName, GroupUID: groupUID, Generation: 5})
			req, _ := http.NewRequest(http.MethodPost, agent+protocol.NodeAgentConfirmPath, bytes.NewReader(body))
			req.Header.Set("Authorization", "Bearer "+token)
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Error(err)
				return
			}
			defer func() { _ = resp.Body.Close() }()
			var a protocol.NodeAgentConfirmResponse
			if err := json.NewDecoder(resp.Body).Decode(&a); err == nil && a.Confirmed {
				confirmed.Add(1)
			}
		})
	}
	wg.Wait()
	if got := confirmed.Load(); got != members {
		t.Fatalf("%d of %d requests confirmed", got, members)
	}
	if n := gets.Load() - before; n < 1 || n > 2 {
		t.Fatalf("%d requests cost %d reads of the node view, want 1 or 2", members, n)
	}
}
