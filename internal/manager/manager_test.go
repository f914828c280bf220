//go:build envtest

package manager

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/consumergroup-operator/consumergroup-operator/api/v1alpha1"
	"github.com/consumergroup-operator/consumergroup-operator/internal/testenv"
	"github.com/consumergroup-operator/consumergroup-operator/pkg/protocol"
)

var (
	restConfig *rest.Config
	k8s        client.Client
)

func TestMain(m *testing.M) {
	testenv.Main(m, []string{filepath.Join("..", "..", "config", "crd", "bases")}, func(_ *envtest.Environment, cfg *rest.Config) error {
		restConfig = cfg
		var err error
		k8s, err = client.New(cfg, client.Options{Scheme: Scheme()})
		return err
	})
}

// replica runs one operator replica as main.go does, with leader election in namespace ns.
type replica struct {
	mgr    ctrl.Manager
	cancel context.CancelFunc
	done   chan error
}

func startReplica(t *testing.T, ns string) *replica {
	t.Helper()
	opts := Options("0", "0", true, ns, ns)
	// Two replicas in one process register the same controller name; in a cluster each has its own process.
	opts.Controller.SkipNameValidation = ptr.To(true)
	opts.RetryPeriod = ptr.To(200 * time.Millisecond)
	opts.RenewDeadline = ptr.To(2 * time.Second)
	opts.LeaseDuration = ptr.To(3 * time.Second)
	mgr, err := ctrl.NewManager(restConfig, opts)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	if err := Setup(ctx, mgr, Settings{}); err != nil {
		t.Fatal(err)
	}
	r := &replica{mgr: mgr, cancel: cancel, done: make(chan error, 1)}
	go func() { r.done <- mgr.Start(ctx) }()
	t.Cleanup(func() { r.stop(t) })
	return r
}

func (r *replica) stop(t *testing.T) {
	if r.cancel != nil {
		r.cancel()
		if err := <-r.done; err != nil {
			t.Errorf("replica stopped with an error: %v", err)
		}
		r.cancel = nil
	}
}

func (r *replica) elected() bool {
	select {
	case <-r.mgr.Elected():
		return true
	default:
		return false
	}
}

func eventually(t *testing.T, what string, check func() bool) {
	t.Helper()
	testenv.Eventually(t, 30*time.Second, func() error {
		if !check() {
			return fmt.Errorf("waiting for %s", what)
		}
		return nil
	})
}

func readyPod(t *testing.T, ns, name string) {
	t.Helper()
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: map[string]string{"app": "g"}},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "consumer"}}},
	}
	if err := k8s.Create(context.Background(), p); err != nil {
		t.Fatal(err)
	}
	p.Status.Phase = corev1.PodRunning
	p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}
	if err := k8s.Status().Update(context.Background(), p); err != nil {
		t.Fatal(err)
	}
}

func members(ns string) int {
	var cm corev1.ConfigMap
	if err := k8s.Get(context.Background(), types.NamespacedName{Namespace: ns, Name: protocol.AssignmentName("g")}, &cm); err != nil {
		return -1
	}
	return len(cm.Data)
}

// TestLeaderElection runs two replicas: only the one holding the Lease reconciles, and when it stops the
// other takes over and goes on publishing.
func TestLeaderElection(t *testing.T) {
	ns := fmt.Sprintf("leader-election-%d", time.Now().UnixNano())
	if err := k8s.Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
		t.Fatal(err)
	}
	group := &v1alpha1.ConsumerGroup{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "g"},
		Spec: v1alpha1.ConsumerGroupSpec{
			Selector: metav1.LabelSelector{MatchLabels: map[string]string{"app": "g"}},
			Topics:   []v1alpha1.Topic{{Name: "t", Brokers: []v1alpha1.Broker{{Name: "b", Queues: 4}}}},
			Strategy: v1alpha1.Strategy{Type: v1alpha1.Averagely},
		},
	}
	if err := k8s.Create(context.Background(), group); err != nil {
		t.Fatal(err)
	}
	readyPod(t, ns, "p0")

	first := startReplica(t, ns)
	eventually(t, "the first replica to be elected", first.elected)
	second := startReplica(t, ns)
	eventually(t, "the first replica to publish", func() bool { return members(ns) == 1 })

	var lease coordinationv1.Lease
	if err := k8s.Get(context.Background(), types.NamespacedName{Namespace: ns, Name: LeaderElectionID}, &lease); err != nil {
		t.Fatalf("no leader election Lease: %v", err)
	}
	time.Sleep(time.Second)
	if second.elected() {
		t.Fatal("both replicas are leaders")
	}

	first.stop(t)
	eventually(t, "the second replica to take over", second.elected)
	readyPod(t, ns, "p1")
	eventually(t, "the second replica to publish the new member", func() bool { return members(ns) == 2 })
}

func TestLeaderElectionTimingsValidate(t *testing.T) {
	for _, tc := range []struct {
		l    LeaderElectionTimings
		fine bool
	}{
		{DefaultLeaderElection, true},
		{LeaderElectionTimings{LeaseDuration: 15 * time.Second, RenewDeadline: 10 * time.Second, RetryPeriod: 2 * time.Second}, true},
		{LeaderElectionTimings{LeaseDuration: 10 * time.Second, RenewDeadline: 10 * time.Second, RetryPeriod: 2 * time.Second}, false},
		{LeaderElectionTimings{LeaseDuration: 15 * time.Second, RenewDeadline: 2400 * time.Millisecond, RetryPeriod: 2 * time.Second}, false},
		{LeaderElectionTimings{LeaseDuration: 15 * time.Second, RenewDeadline: 10 * time.Second}, false},
	} {
		if err := tc.l.Validate(); (err == nil) != tc.fine {
			t.Errorf("%+v: Validate() = %v", tc.l, err)
		}
	}
}
