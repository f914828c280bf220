//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"maps"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/consumergroup-operator/consumergroup-operator/api/v1alpha1"
	"github.com/consumergroup-operator/consumergroup-operator/internal/cluster"
	"github.com/consumergroup-operator/consumergroup-operator/internal/testenv"
	"github.com/consumergroup-operator/consumergroup-operator/pkg/protocol"
)

// namespace creates a namespace for the test; the test's end deletes it.
func namespace(t *testing.T) string {
	t.Helper()
	ns := strings.ToLower(fmt.Sprintf("e2e-%s-%d", t.Name(), time.Now().UnixNano()%100000))
	testenv.Must(t, admin.Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}))
	t.Cleanup(func() {
		_ = admin.Delete(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}})
	})
	return ns
}

// fleet runs a simulated member for every running pod of app in ns, as the pods' containers would, and
// keeps what the members' applications read and how their drains ended.
type fleet struct {
	own       *testenv.Ownership
	consumers *cluster.Consumers
	// stop stops every consumer process at once, as a node losing power would.
	stop func()

	mu sync.Mutex
	// drains is, for each pod incarnation that drained, when its drain ended and its error.
	drains map[string]drainResult
	// members are the members started, by reader.
	members map[string]*testenv.SimMember
}

type drainResult struct {
	at  time.Time
	err error
}

// runFleet starts the fleet of app's pods in ns for group; the test's end stops it.
func runFleet(t *testing.T, ns, group, app string) *fleet {
	t.Helper()
	f := &fleet{own: testenv.NewOwnership(), drains: map[string]drainResult{}, members: map[string]*testenv.SimMember{}}
	ctx, cancel := context.WithCancel(context.Background())
	f.consumers = cluster.RunConsumers(ctx, adminCS, ns, "app="+app, func(pod *corev1.Pod) (cluster.Process, error) {
		m := testenv.StartMember(t, adminRest, group, pod, f.own, testenv.MemberOptions{})
		f.mu.Lock()
		f.members[m.Reader()] = m
		f.mu.Unlock()
		return &process{f: f, m: m}, nil
	})
	f.stop = func() { cancel(); f.consumers.Wait() }
	t.Cleanup(f.stop)
	return f
}

// process is a pod's consumer: a simulated member whose preStop hook drains it.
type process struct {
	f *fleet
	m *testenv.SimMember
}

func (p *process) Drain(ctx context.Context) error {
	err := p.m.Client.Drain(ctx)
	p.f.mu.Lock()
	p.f.drains[p.m.Reader()] = drainResult{at: time.Now(), err: err}
	p.f.mu.Unlock()
	return err
}

func (p *process) Stop() { p.m.Stop() }

// drained returns the drains recorded so far.
func (f *fleet) drained() map[string]drainResult {
	f.mu.Lock()
	defer f.mu.Unlock()
	return maps.Clone(f.drains)
}

// checkNoDoubleReaders fails t with every instant at which a queue had two readers.
func (f *fleet) checkNoDoubleReaders(t *testing.T) {
	t.Helper()
	if v := f.own.Violations(); len(v) > 0 {
		t.Fatalf("%d times a queue had two readers:\n%s", len(v), strings.Join(v[:min(len(v), 20)], "\n"))
	}
}

// group is a Sticky group named app with Cooperative handoff over queues queues of one topic on three
// brokers, one per zone, that selects app=app.
func group(ns, app string, queues int32) *v1alpha1.ConsumerGroup {
	per := queues / 3
	return testenv.Group(ns, app).
		Topic("orders", testenv.Broker("broker-a", per, "zone-a"), testenv.Broker("broker-b", per, "zone-b"),
			testenv.Broker("broker-c", queues-2*per, "zone-c")).
		Strategy(v1alpha1.Strategy{Type: v1alpha1.Sticky}).Handoff(v1alpha1.Handoff{Mode: v1alpha1.Cooperative}).Obj()
}

// podTemplate is a consumer pod of app on the kwok nodes: the image is never pulled.
func podTemplate(app string, grace int64) corev1.PodTemplateSpec {
	return corev1.PodTemplateSpec{
		ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": app}},
		Spec: corev1.PodSpec{
			NodeSelector:                  cluster.NodeSelector,
			TerminationGracePeriodSeconds: &grace,
			Containers:                    []corev1.Container{{Name: "consumer", Image: "consumer:e2e"}},
		},
	}
}

// deployment is a Deployment of replicas consumer pods of app with the default rolling update (25%
// maxSurge and maxUnavailable).
func deployment(ns, app string, replicas int32) *appsv1.Deployment {
	quarter := intstr.FromString("25%")
	return &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: app},
		Spec: appsv1.DeploymentSpec{
			Replicas: &replicas,
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": app}},
			Template: podTemplate(app, 10),
			Strategy: appsv1.DeploymentStrategy{Type: appsv1.RollingUpdateDeploymentStrategyType,
				RollingUpdate: &appsv1.RollingUpdateDeployment{MaxSurge: &quarter, MaxUnavailable: &quarter}},
		},
	}
}

// settled waits until the group has want members, the status has caught up with the spec, no handoff is
// in progress, every queue has exactly one reader and each member's application reads what its entry
// lists, and returns the group.
func settled(t *testing.T, ns, name string, want int, timeout time.Duration, f *fleet) *v1alpha1.ConsumerGroup {
	t.Helper()
	var g v1alpha1.ConsumerGroup
	testenv.Poll(t, timeout, 100*time.Millisecond, func() string { return fmt.Sprintf("status: %+v", g.Status) }, func() error {
		if err := admin.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name}, &g); err != nil {
			return err
		}
		if g.Status.ObservedGeneration != g.Generation {
			return fmt.Errorf("status at generation %d of %d", g.Status.ObservedGeneration, g.Generation)
		}
		if int(g.Status.MemberCount) != want {
			return fmt.Errorf("%d members, want %d", g.Status.MemberCount, want)
		}
		if c := meta.FindStatusCondition(g.Status.Conditions, v1alpha1.ConditionProgressing); c == nil || c.Status != metav1.ConditionFalse {
			return fmt.Errorf("Progressing is %v", c)
		}
		read := 0
		for _, m := range g.Status.Members {
			n := f.own.ReadingByPod(m.Pod)
			if n != int(m.Queues) {
				return fmt.Errorf("member %s reads %d queues, its entry lists %d", m.Pod, n, m.Queues)
			}
			read += n
		}
		if read != int(g.Status.QueueCount) {
			return fmt.Errorf("members read %d queues, the group has %d", read, g.Status.QueueCount)
		}
		return nil
	})
	return &g
}

// settledDeployment runs the fleet of app's pods in ns, creates the group app over queues queues and a
// Deployment of replicas pods that it selects, and waits until the group has settled on them.
func settledDeployment(t *testing.T, ns, app string, replicas, queues int32) (*fleet, *appsv1.Deployment) {
	t.Helper()
	f := runFleet(t, ns, app, app)
	testenv.Must(t, admin.Create(context.Background(), group(ns, app, queues)))
	dep := deployment(ns, app, replicas)
	testenv.Must(t, admin.Create(context.Background(), dep))
	settled(t, ns, app, int(replicas), 2*time.Minute, f)
	return f, dep
}

// generation is the assignment's published generation.
func generation(t *testing.T, ns, group string) int64 {
	t.Helper()
	var cm corev1.ConfigMap
	testenv.Must(t, admin.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: protocol.AssignmentName(group)}, &cm))
	gen, err := strconv.ParseInt(cm.Annotations[protocol.GenerationAnnotation], 10, 64)
	testenv.Must(t, err)
	return gen
}
