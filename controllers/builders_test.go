package controllers

import (
	"context"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/consumergroup-operator/consumergroup-operator/api/v1alpha1"
)

// groupBuilder builds ConsumerGroups for tests.
type groupBuilder struct{ g v1alpha1.ConsumerGroup }

func newGroup(ns, name string) *groupBuilder {
	return &groupBuilder{g: v1alpha1.ConsumerGroup{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: v1alpha1.ConsumerGroupSpec{
			Selector: metav1.LabelSelector{MatchLabels: map[string]string{"app": name}},
			Strategy: v1alpha1.Strategy{Type: v1alpha1.Averagely},
			// Most tests run pods without the member package, which acknowledge nothing; the handoff tests
			// choose Cooperative.
			Handoff: v1alpha1.Handoff{Mode: v1alpha1.Immediate},
		},
	}}
}

func (b *groupBuilder) handoff(h v1alpha1.Handoff) *groupBuilder {
	b.g.Spec.Handoff = h
	return b
}

func (b *groupBuilder) topic(name string, brokers ...v1alpha1.Broker) *groupBuilder {
	b.g.Spec.Topics = append(b.g.Spec.Topics, v1alpha1.Topic{Name: name, Brokers: brokers})
	return b
}

func (b *groupBuilder) strategy(s v1alpha1.Strategy) *groupBuilder {
	b.g.Spec.Strategy = s
	return b
}

func (b *groupBuilder) broadcasting() *groupBuilder {
	b.g.Spec.MessageModel = v1alpha1.Broadcasting
	return b
}

func (b *groupBuilder) identityAnnotation(key string) *groupBuilder {
	b.g.Spec.MemberIdentity = v1alpha1.MemberIdentity{Annotation: &key}
	return b
}

func (b *groupBuilder) obj() *v1alpha1.ConsumerGroup { return b.g.DeepCopy() }

func (b *groupBuilder) create(t testing.TB) {
	t.Helper()
	must(t, k8s.Create(context.Background(), b.obj()))
}

func broker(name string, queues int32, zone string) v1alpha1.Broker {
	return v1alpha1.Broker{Name: name, Queues: queues, Zone: zone}
}

// podBuilder builds pods for tests. The test API server runs no kubelet, so a pod's phase and Ready
// condition are written through the status subresource as a kubelet would.
type podBuilder struct {
	p     corev1.Pod
	ready bool
}

func newPod(ns, name, app string) *podBuilder {
	return &podBuilder{p: corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: map[string]string{"app": app}},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "consumer", Image: "consumer:test"}}},
	}, ready: true}
}

func (b *podBuilder) onNode(node string) *podBuilder {
	b.p.Spec.NodeName = node
	return b
}

func (b *podBuilder) annotate(key, value string) *podBuilder {
	if b.p.Annotations == nil {
		b.p.Annotations = map[string]string{}
	}
	b.p.Annotations[key] = value
	return b
}

func (b *podBuilder) notReady() *podBuilder {
	b.ready = false
	return b
}

func (b *podBuilder) create(t testing.TB) *corev1.Pod {
	t.Helper()
	p := b.p.DeepCopy()
	must(t, k8s.Create(context.Background(), p))
	setPodReady(t, p, b.ready)
	return p
}

// setPodReady writes the status a kubelet would for a running pod, Ready or not.
func setPodReady(t testing.TB, p *corev1.Pod, ready bool) {
	t.Helper()
	status := corev1.ConditionFalse
	if ready {
		status = corev1.ConditionTrue
	}
	p.Status.Phase = corev1.PodRunning
	p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: status, LastTransitionTime: metav1.Now()}}
	must(t, k8s.Status().Update(context.Background(), p))
}

func createNode(t testing.TB, name, zone string) *corev1.Node {
	t.Helper()
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{ZoneLabel: zone}}}
	must(t, k8s.Create(context.Background(), n))
	t.Cleanup(func() { _ = k8s.Delete(context.Background(), n) })
	return n
}
