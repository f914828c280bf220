package nodeagent

import (
	"encoding/base64"
	"errors"
	"strings"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/consumergroup-operator/consumergroup-operator/pkg/protocol"
)

const testNode = "node-a"

// nodeView is the node view of testNode holding lines, as the operator writes it.
func nodeView(lines ...protocol.NodeViewLine) *corev1.ConfigMap {
	var v protocol.NodeViewLines
	for _, l := range lines {
		v = v.With(l)
	}
	name := protocol.NodeViewName(testNode)
	data, digest := protocol.NodeViewData(name, v)
	return &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "operator", Name: name,
		Annotations: map[string]string{protocol.DigestAnnotation: digest}}, Data: data}
}

func TestAnswer(t *testing.T) {
	orders := protocol.NodeViewLine{Namespace: "shop", Group: "orders", GroupUID: "u1", MustSee: 5}
	view := nodeView(orders, protocol.NodeViewLine{Namespace: "bank", Group: "orders", GroupUID: "u2", MustSee: 1})
	edited := view.DeepCopy()
	edited.Data[protocol.NodeViewKey] = strings.Replace(edited.Data[protocol.NodeViewKey], `"mustSee":5`, `"mustSee":1`, 1)
	notFound := apierrors.NewNotFound(schema.GroupResource{Resource: "configmaps"}, view.Name)
	ask := query{namespace: "shop", group: "orders", groupUID: "u1", generation: 5}
	tests := []struct {
		name    string
		cm      *corev1.ConfigMap
		getErr  error
		q       query
		confirm bool
		reason  string
	}{
		{"generation at the line's must-see", view, nil, ask, true, ""},
		{"generation above it", view, nil, with(ask, func(q *query) { q.generation = 9 }), true, ""},
		{"generation below it", view, nil, with(ask, func(q *query) { q.generation = 4 }), false, "holds generation 4 of group shop/orders, which must see generation 5"},
		{"generation 0", view, nil, with(ask, func(q *query) { q.generation = 0 }), false, "must see generation 5"},
		{"no line for the group", view, nil, with(ask, func(q *query) { q.group = "payments" }), false, "no line for group shop/payments"},
		{"the same group name in another namespace", view, nil, with(ask, func(q *query) { q.namespace = "bank"; q.groupUID = "u2"; q.generation = 0 }), false, "must see generation 1"},
		{"another incarnation of the group", view, nil, with(ask, func(q *query) { q.groupUID = "u0" }), false, "incarnation"},
		{"an edited view", edited, nil, ask, false, "edited by someone other than the operator"},
		{"no view", nil, notFound, ask, false, "does not exist"},
		{"a failed read", nil, errors.New("connection refused"), ask, false, "could not read its node view"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := answer(readOf(view.Name, tt.cm, tt.getErr), tt.q)
			if got.Confirmed != tt.confirm || !strings.Contains(got.Reason, tt.reason) || (tt.confirm && got.Reason != "") {
				t.Fatalf("answer = %+v, want confirmed %v with a reason containing %q", got, tt.confirm, tt.reason)
			}
			if strings.Contains(got.Reason, "connection refused") {
				t.Fatalf("the reason %q quotes the API error", got.Reason)
			}
		})
	}
}

func with(q query, edit func(*query)) query {
	edit(&q)
	return q
}

func TestIdentityOf(t *testing.T) {
	good := authenticationv1.TokenReviewStatus{
		Authenticated: true,
		Audiences:     []string{protocol.NodeAgentAudience},
		User: authenticationv1.UserInfo{Username: "system:serviceaccount:shop:consumer", Extra: map[string]authenticationv1.ExtraValue{
			extraPodName: {"consumer-0"}, extraPodUID: {"pod-uid"}, extraNodeName: {testNode},
		}},
	}
	edit := func(f func(s *authenticationv1.TokenReviewStatus)) authenticationv1.TokenReviewStatus {
		s := *good.DeepCopy()
		f(&s)
		return s
	}
	tests := []struct {
		name   string
		status authenticationv1.TokenReviewStatus
		reason string
	}{
		{"a pod-bound token of a pod on the node", good, ""},
		{"not authenticated", edit(func(s *authenticationv1.TokenReviewStatus) { s.Authenticated = false }), "not valid"},
		{"the API server's audience", edit(func(s *authenticationv1.TokenReviewStatus) { s.Audiences = []string{"https://kubernetes.default.svc"} }), "not for audience"},
		{"a user's token", edit(func(s *authenticationv1.TokenReviewStatus) { s.User.Username = "alice" }), "not a service account's"},
		{"a malformed service account name", edit(func(s *authenticationv1.TokenReviewStatus) { s.User.Username = "system:serviceaccount:shop" }), "not a service account's"},
		{"not bound to a pod", edit(func(s *authenticationv1.TokenReviewStatus) { delete(s.User.Extra, extraPodUID) }), "not bound to a pod"},
		{"no node", edit(func(s *authenticationv1.TokenReviewStatus) { delete(s.User.Extra, extraNodeName) }), "names no node"},
		{"another node", edit(func(s *authenticationv1.TokenReviewStatus) { s.User.Extra[extraNodeName] = []string{"node-b"} }), "runs on node node-b"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			id, err := identityOf(tt.status, testNode)
			if tt.reason == "" {
				want := identity{Namespace: "shop", ServiceAccount: "consumer", Pod: "consumer-0", PodUID: "pod-uid", Node: testNode}
				if err != nil || id != want {
					t.Fatalf("identityOf = %+v, %v; want %+v", id, err, want)
				}
				return
			}
			if err == nil || !isRefusal(err) || !strings.Contains(err.Error(), tt.reason) {
				t.Fatalf("identityOf = %+v, %v; want a refusal containing %q", id, err, tt.reason)
			}
		})
	}
}

func TestCacheUntil(t *testing.T) {
	now := time.Unix(1_000_000, 0)
	jwt := func(payload string) string {
		return "e30." + b64(payload) + ".c2ln"
	}
	tests := []struct {
		name  string
		token string
		want  time.Time
	}{
		{"expires after the TTL", jwt(`{"exp":1000900}`), now.Add(10 * time.Minute)},
		{"expires before the TTL", jwt(`{"exp":1000060}`), time.Unix(1_000_060, 0)},
		{"no expiry", jwt(`{"sub":"x"}`), now.Add(10 * time.Minute)},
		{"not a JWT", "opaque", now.Add(10 * time.Minute)},
		{"a payload that is not base64", "a.!!.c", now.Add(10 * time.Minute)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := cacheUntil(now, 10*time.Minute, tt.token); !got.Equal(tt.want) {
				t.Fatalf("cacheUntil = %v, want %v", got, tt.want)
			}
		})
	}
}

func TestReadRequest(t *testing.T) {
	tests := []struct {
		name string
		body string
		err  string
	}{
		{"a request", `{"group":"orders","groupUID":"u1","generation":3}`, ""},
		{"generation 0", `{"group":"orders","generation":0}`, ""},
		{"a field this agent does not know", `{"group":"orders","generation":3,"pod":"x"}`, ""},
		{"not JSON", `group=orders`, "not a JSON confirmation request"},
		{"no group", `{"generation":3}`, "not a valid object name"},
		{"a group that is no object name", `{"group":"Orders_1","generation":3}`, "not a valid object name"},
		{"a negative generation", `{"group":"orders","generation":-1}`, "outside 0"},
		{"a generation above the maximum", `{"group":"orders","generation":9007199254740993}`, "outside 0"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := readRequest(strings.NewReader(tt.body))
			if (tt.err == "") != (err == nil) || (err != nil && !strings.Contains(err.Error(), tt.err)) {
				t.Fatalf("readRequest(%s) = %v, want an error containing %q", tt.body, err, tt.err)
			}
		})
	}
}

func b64(s string) string { return base64.RawURLEncoding.EncodeToString([]byte(s)) }
