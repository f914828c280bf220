//go:build envtest

package member_test

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/consumergroup-operator/consumergroup-operator/pkg/member"
)

// documentedRBAC returns the YAML documents between the consumer-pod-rbac markers of docs/protocol.md.
func documentedRBAC(t *testing.T) [][]byte {
	t.Helper()
	doc, err := os.ReadFile(filepath.Join("..", "..", "docs", "protocol.md"))
	if err != nil {
		t.Fatal(err)
	}
	_, rest, ok := strings.Cut(string(doc), "<!-- consumer-pod-rbac: begin")
	block, _, ok2 := strings.Cut(rest, "<!-- consumer-pod-rbac: end")
	if !ok || !ok2 {
		t.Fatal("docs/protocol.md has no consumer-pod-rbac block")
	}
	_, yamlText, ok := strings.Cut(block, "```yaml\n")
	yamlText, _, ok2 = strings.Cut(yamlText, "```")
	if !ok || !ok2 {
		t.Fatal("the consumer-pod-rbac block of docs/protocol.md has no yaml code block")
	}
	reader := utilyaml.NewYAMLReader(bufio.NewReader(strings.NewReader(yamlText)))
	var docs [][]byte
	for {
		d, err := reader.Read()
		if errors.Is(err, io.EOF) {
			return docs
		}
		if err != nil {
			t.Fatal(err)
		}
		if len(bytes.TrimSpace(d)) > 0 {
			docs = append(docs, d)
		}
	}
}

// TestDocumentedRBACIsEnough runs a member as the service account of docs/protocol.md, with exactly the
// Role documented there, through delivery, acknowledgement and drain.
func TestDocumentedRBACIsEnough(t *testing.T) {
	ns := newNamespace(t)
	ctx := context.Background()
	var serviceAccount string
	for _, d := range documentedRBAC(t) {
		obj, _, err := scheme.Codecs.UniversalDeserializer().Decode(d, nil, nil)
		if err != nil {
			t.Fatalf("decoding the documented RBAC: %v", err)
		}
		switch o := obj.(type) {
		case *corev1.ServiceAccount:
			serviceAccount = o.Name
			_, err = cs.CoreV1().ServiceAccounts(ns).Create(ctx, o, metav1.CreateOptions{})
		case *rbacv1.Role:
			_, err = cs.RbacV1().Roles(ns).Create(ctx, o, metav1.CreateOptions{})
		case *rbacv1.RoleBinding:
			_, err = cs.RbacV1().RoleBindings(ns).Create(ctx, o, metav1.CreateOptions{})
		default:
			t.Fatalf("unexpected %T in the documented RBAC", obj)
		}
		if err != nil {
			t.Fatalf("creating the documented RBAC: %v", err)
		}
	}
	user, err := testEnv.AddUser(envtest.User{
		Name:   "system:serviceaccount:" + ns + ":" + serviceAccount,
		Groups: []string{"system:serviceaccounts", "system:serviceaccounts:" + ns, "system:authenticated"},
	}, restConfig)
	if err != nil {
		t.Fatal(err)
	}
	podClient := kubernetes.NewForConfigOrDie(user.Config())

	// The Role names one ConfigMap: the pod cannot read any other.
	if _, err := podClient.CoreV1().ConfigMaps(ns).Get(ctx, "payments-assignment", metav1.GetOptions{}); !apierrors.IsForbidden(err) {
		t.Fatalf("reading another ConfigMap as the consumer returned %v, want Forbidden", err)
	}

	m := startMember(t, ns, func(c *member.Config) { c.DrainAckTimeout = 100 * time.Millisecond }, podClient)
	publish(t, ns, 1, map[string][]member.Queue{"consumer-0": queues(0, 1)})
	eventually(t, 10*time.Second, inForce(m.client, 1, queues(0, 1)))
	if err := m.client.Ack(ctx, 1); err != nil {
		t.Fatalf("Ack with the documented RBAC: %v", err)
	}
	eventually(t, 10*time.Second, ackedInLease(ns, m, 1))
	if st := m.client.Status(); st.LeaseError != nil {
		t.Fatalf("renewing with the documented RBAC: %v", st.LeaseError)
	}

	// A sharded assignment: the documented Role covers the shards too.
	publishAs(t, ns, groupUID, 2, 64, map[string][]member.Queue{podName: queues(0, 1, 2), "consumer-1": queues(3)})
	eventually(t, 10*time.Second, inForce(m.client, 2, queues(0, 1, 2)))

	drainCtx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	drained := make(chan error, 1)
	go func() { drained <- m.client.Drain(drainCtx) }()
	publishAs(t, ns, groupUID, 3, 64, map[string][]member.Queue{"consumer-1": queues(0, 1, 2, 3)})
	if err := <-drained; err != nil {
		t.Fatalf("Drain with the documented RBAC: %v", err)
	}
}
