package testenv

import (
	"context"
	"fmt"
	"testing"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/consumergroup-operator/consumergroup-operator/pkg/protocol"
)

// WriteNodeView writes the node view of node, in namespace ns, holding lines, as the operator would:
// labelled, annotated with its node, and digested. It creates the view or replaces it.
func WriteNodeView(t testing.TB, cs kubernetes.Interface, ns, node string, lines protocol.NodeViewLines) *corev1.ConfigMap {
	t.Helper()
	name := protocol.NodeViewName(node)
	data, digest := protocol.NodeViewData(name, lines)
	want := &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name,
			Labels:      map[string]string{protocol.NodeViewLabel: "true"},
			Annotations: map[string]string{protocol.NodeViewNodeAnnotation: node, protocol.DigestAnnotation: digest}},
		Data: data,
	}
	ctx := context.Background()
	cms := cs.CoreV1().ConfigMaps(ns)
	got, err := cms.Create(ctx, want, metav1.CreateOptions{})
	if apierrors.IsAlreadyExists(err) {
		got, err = cms.Update(ctx, want, metav1.UpdateOptions{})
	}
	if err != nil {
		t.Fatalf("writing node view %s/%s: %v", ns, name, err)
	}
	return got
}

// PodOnNode creates, in namespace ns, the service account sa (unless it exists) and a pod called name
// that runs as sa on node: no kubelet runs it, but the API server binds tokens to it.
func PodOnNode(t testing.TB, cs kubernetes.Interface, ns, name, sa, node string) *corev1.Pod {
	t.Helper()
	ctx := context.Background()
	_, err := cs.CoreV1().ServiceAccounts(ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: sa}}, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatalf("creating service account %s/%s: %v", ns, sa, err)
	}
	pod, err := cs.CoreV1().Pods(ns).Create(ctx, &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: corev1.PodSpec{ServiceAccountName: sa, NodeName: node,
			Containers: []corev1.Container{{Name: "consumer", Image: "consumer"}}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("creating pod %s/%s: %v", ns, name, err)
	}
	return pod
}

// PodToken is a token of pod's service account bound to pod, for audiences (the API server's when none),
// as the kubelet would mount it.
func PodToken(t testing.TB, cs kubernetes.Interface, pod *corev1.Pod, audiences ...string) string {
	t.Helper()
	token, err := BoundToken(context.Background(), cs, pod, audiences...)
	if err != nil {
		t.Fatal(err)
	}
	return token
}

// BoundToken is PodToken for callers that are not tests: it returns the error.
func BoundToken(ctx context.Context, cs kubernetes.Interface, pod *corev1.Pod, audiences ...string) (string, error) {
	tr, err := cs.CoreV1().ServiceAccounts(pod.Namespace).CreateToken(ctx, pod.Spec.ServiceAccountName,
		&authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{
			Audiences:      audiences,
			BoundObjectRef: &authenticationv1.BoundObjectReference{Kind: "Pod", APIVersion: "v1", Name: pod.Name, UID: pod.UID},
		}}, metav1.CreateOptions{})
	if err != nil {
		return "", fmt.Errorf("requesting a token for pod %s/%s: %w", pod.Namespace, pod.Name, err)
	}
	return tr.Status.Token, nil
}
