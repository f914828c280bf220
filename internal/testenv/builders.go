package testenv

import (
	"context"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/consumergroup-operator/consumergroup-operator/api/v1alpha1"
)

// GroupWrapper builds a ConsumerGroup for a test, one setter at a time.
type GroupWrapper struct{ g v1alpha1.ConsumerGroup }

// Group is a group selecting the pods labelled app=name, with Averagely and Immediate handoff: most tests
// run pods without a member client, which acknowledge nothing; the handoff tests choose Cooperative.
func Group(ns, name string) *GroupWrapper {
	return &GroupWrapper{g: v1alpha1.ConsumerGroup{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: v1alpha1.ConsumerGroupSpec{
			Selector: metav1.LabelSelector{MatchLabels: map[string]string{"app": name}},
			Strategy: v1alpha1.Strategy{Type: v1alpha1.Averagely},
			Handoff:  v1alpha1.Handoff{Mode: v1alpha1.Immediate},
		},
	}}
}

// Topic adds a topic held by brokers.
func (w *GroupWrapper) Topic(name string, brokers ...v1alpha1.Broker) *GroupWrapper {
	w.g.Spec.Topics = append(w.g.Spec.Topics, v1alpha1.Topic{Name: name, Brokers: brokers})
	return w
}

// Strategy sets the strategy.
func (w *GroupWrapper) Strategy(s v1alpha1.Strategy) *GroupWrapper {
	w.g.Spec.Strategy = s
	return w
}

// Handoff sets the handoff.
func (w *GroupWrapper) Handoff(h v1alpha1.Handoff) *GroupWrapper {
	w.g.Spec.Handoff = h
	return w
}

// Broadcasting gives every member every queue.
func (w *GroupWrapper) Broadcasting() *GroupWrapper {
	w.g.Spec.MessageModel = v1alpha1.Broadcasting
	return w
}

// IdentityAnnotation makes the pod annotation key each member's id.
func (w *GroupWrapper) IdentityAnnotation(key string) *GroupWrapper {
	w.g.Spec.MemberIdentity = v1alpha1.MemberIdentity{Annotation: &key}
	return w
}

// Obj is the group built so far.
func (w *GroupWrapper) Obj() *v1alpha1.ConsumerGroup { return w.g.DeepCopy() }

// Create creates the group.
func (w *GroupWrapper) Create(t testing.TB, c client.Client) *v1alpha1.ConsumerGroup {
	t.Helper()
	g := w.Obj()
	if err := c.Create(context.Background(), g); err != nil {
		t.Fatalf("creating group %s: %v", g.Name, err)
	}
	return g
}

// Broker is one broker's share of a topic.
func Broker(name string, queues int32, zone string) v1alpha1.Broker {
	return v1alpha1.Broker{Name: name, Queues: queues, Zone: zone}
}

// PodWrapper builds a pod for a test. Test API servers run no kubelet: Create writes the status a kubelet
// would.
type PodWrapper struct {
	p     corev1.Pod
	ready bool
}

// Pod is a Ready pod labelled app=app.
func Pod(ns, name, app string) *PodWrapper {
	return &PodWrapper{p: corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: map[string]string{"app": app}},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "consumer", Image: "consumer:test"}}},
	}, ready: true}
}

// OnNode binds the pod to node.
func (w *PodWrapper) OnNode(node string) *PodWrapper {
	w.p.Spec.NodeName = node
	return w
}

// ServiceAccount runs the pod as service account sa, which must exist for tokens bound to the pod.
func (w *PodWrapper) ServiceAccount(sa string) *PodWrapper {
	w.p.Spec.ServiceAccountName = sa
	return w
}

// Annotate sets an annotation.
func (w *PodWrapper) Annotate(key, value string) *PodWrapper {
	if w.p.Annotations == nil {
		w.p.Annotations = map[string]string{}
	}
	w.p.Annotations[key] = value
	return w
}

// NotReady makes the pod Running but not Ready.
func (w *PodWrapper) NotReady() *PodWrapper {
	w.ready = false
	return w
}

// Obj is the pod built so far, Running and Ready (or not) as Create would write it.
func (w *PodWrapper) Obj() *corev1.Pod {
	p := w.p.DeepCopy()
	setRunning(p, w.ready)
	return p
}

// Create creates the pod and writes its status.
func (w *PodWrapper) Create(t testing.TB, c client.Client) *corev1.Pod {
	t.Helper()
	p := w.p.DeepCopy()
	if err := c.Create(context.Background(), p); err != nil {
		t.Fatalf("creating pod %s: %v", p.Name, err)
	}
	SetReady(t, c, p, w.ready)
	return p
}

// SetReady writes the status a kubelet would for a running pod, Ready or not.
func SetReady(t testing.TB, c client.Client, p *corev1.Pod, ready bool) {
	t.Helper()
	if err := MarkRunning(context.Background(), c, p, ready); err != nil {
		t.Fatalf("writing the status of pod %s: %v", p.Name, err)
	}
}

// MarkRunning writes, through the status subresource, that p is Running with its container running, and
// Ready or not.
func MarkRunning(ctx context.Context, c client.Client, p *corev1.Pod, ready bool) error {
	setRunning(p, ready)
	return c.Status().Update(ctx, p)
}

func setRunning(p *corev1.Pod, ready bool) {
	status := corev1.ConditionFalse
	if ready {
		status = corev1.ConditionTrue
	}
	p.Status.Phase = corev1.PodRunning
	p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: status, LastTransitionTime: metav1.Now()}}
	p.Status.ContainerStatuses = nil
	for _, c := range p.Spec.Containers {
		p.Status.ContainerStatuses = append(p.Status.ContainerStatuses, corev1.ContainerStatus{
			Name: c.Name, Image: c.Image, Ready: ready, State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: metav1.Now()}}})
	}
}

// MarkStopped writes, as a kubelet would after the pod's process exited, that its container terminated.
func MarkStopped(ctx context.Context, c client.Client, p *corev1.Pod) error {
	p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionFalse, LastTransitionTime: metav1.Now()}}
	for i := range p.Status.ContainerStatuses {
		p.Status.ContainerStatuses[i].Ready = false
		p.Status.ContainerStatuses[i].State = corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 137, FinishedAt: metav1.Now()}}
	}
	return c.Status().Update(ctx, p)
}

// Must fails t on err.
func Must(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
