//go:build envtest

package member_test

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/consumergroup-operator/consumergroup-operator/internal/testenv"
	"github.com/consumergroup-operator/consumergroup-operator/pkg/member"
	"github.com/consumergroup-operator/consumergroup-operator/pkg/protocol"
)

// The package shares one real API server across its tests; each test works in a namespace of its own.
var (
	testEnv    *envtest.Environment
	restConfig *rest.Config
	cs         kubernetes.Interface
	nsCounter  atomic.Int64
)

func TestMain(m *testing.M) {
	testenv.Main(m, nil, func(env *envtest.Environment, cfg *rest.Config) error {
		testEnv, restConfig = env, cfg
		var err error
		cs, err = kubernetes.NewForConfig(cfg)
		return err
	})
}

// eventually polls check until it succeeds, failing the test with check's last error after timeout.
// The bounds are generous: they catch a delivery that never comes, not a slow one.
func eventually(t testing.TB, timeout time.Duration, check func() error) {
	t.Helper()
	testenv.Eventually(t, timeout, check)
}

// newNamespace creates a namespace for one test.
func newNamespace(t testing.TB) string {
	t.Helper()
	name := fmt.Sprintf("member-%d", nsCounter.Add(1))
	_, err := cs.CoreV1().Namespaces().Create(context.Background(),
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("creating namespace: %v", err)
	}
	return name
}

// newPod creates a pod object (no kubelet runs it) so that the Lease has a real owner UID.
func newPod(t testing.TB, ns, name string) *corev1.Pod {
	t.Helper()
	pod, err := cs.CoreV1().Pods(ns).Create(context.Background(), &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "consumer", Image: "consumer"}}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("creating pod: %v", err)
	}
	return pod
}

// member is one member pod and its running client.
type testMember struct {
	pod    *corev1.Pod
	client *member.Client
	cfg    member.Config
}

// Every test runs one member pod of one group, in a namespace of its own.
const (
	group   = "orders"
	podName = "consumer-0"
)

// startMember creates the pod podName and runs a client for it, in group, until the test ends. tweak adjusts the
// configuration; clientset overrides the admin client when not nil.
func startMember(t testing.TB, ns string, tweak func(*member.Config), clientset kubernetes.Interface) testMember {
	t.Helper()
	return startMemberOf(t, newPod(t, ns, podName), tweak, clientset)
}

// startMemberOf runs a client for pod, in group, until the test ends.
func startMemberOf(t testing.TB, pod *corev1.Pod, tweak func(*member.Config), clientset kubernetes.Interface) testMember {
	t.Helper()
	ns := pod.Namespace
	cfg := member.Config{
		Namespace:     ns,
		Group:         group,
		Pod:           pod.Name,
		PodUID:        pod.UID,
		LeaseDuration: 3 * time.Second,
	}
	if tweak != nil {
		tweak(&cfg)
	}
	if clientset == nil {
		clientset = cs
	}
	c, err := member.New(clientset, cfg)
	if err != nil {
		t.Fatalf("member.New: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	})
	return testMember{pod: pod, client: c, cfg: c.Config()}
}

// groupUID is the UID the tests' group has; a test that deletes and creates the group again uses another.
const groupUID = "group-uid-1"

// publish writes the assignment of group as the operator would, with one entry per pod: an existing pod's
// entry names its UID.
func publish(t testing.TB, ns string, generation int64, entries map[string][]member.Queue) {
	t.Helper()
	publishAs(t, ns, groupUID, generation, 1, entries)
}

// publishAs publishes for the group incarnation uid, over shards ConfigMaps when shards is above 1.
func publishAs(t testing.TB, ns string, uid types.UID, generation int64, shards int, entries map[string][]member.Queue) {
	t.Helper()
	uids := map[string]types.UID{}
	for pod := range entries {
		if p, err := cs.CoreV1().Pods(ns).Get(context.Background(), pod, metav1.GetOptions{}); err == nil {
			uids[pod] = p.UID
		}
	}
	publishShards(t, ns, uid, generation, shards, uids, entries)
}

// publishWithUIDs publishes entries naming the given pod UIDs.
func publishWithUIDs(t testing.TB, ns string, generation int64, uids map[string]types.UID, entries map[string][]member.Queue) {
	t.Helper()
	publishShards(t, ns, groupUID, generation, 1, uids, entries)
}

func publishShards(t testing.TB, ns string, uid types.UID, generation int64, shards int, uids map[string]types.UID, entries map[string][]member.Queue) {
	t.Helper()
	a := testenv.Assignment{Namespace: ns, Group: group, GroupUID: uid, Generation: generation, Shards: shards, Entries: map[string]testenv.PodQueues{}}
	for pod, qs := range entries {
		a.Entries[pod] = testenv.PodQueues{UID: uids[pod], Queues: qs}
	}
	testenv.Publish(t, cs, a)
}

// queues builds queues of topic "orders" on broker-a with the given ids.
func queues(ids ...int32) []member.Queue {
	out := make([]member.Queue, len(ids))
	for i, id := range ids {
		out[i] = member.Queue{Topic: "orders", Broker: "broker-a", ID: id}
	}
	return out
}

// inForce checks that c's assignment in force has generation gen and exactly want.
func inForce(c *member.Client, gen int64, want []member.Queue) func() error {
	return func() error {
		a := c.Current()
		if a.Generation != gen || fmt.Sprint(a.Queues) != fmt.Sprint(want) {
			return fmt.Errorf("assignment in force is generation %d with %v, want generation %d with %v (status %+v)",
				a.Generation, a.Queues, gen, want, c.Status())
		}
		return nil
	}
}

// ackedInLease checks the acknowledged generation the member's Lease holds.
func ackedInLease(ns string, m testMember, want int64) func() error {
	return func() error {
		lease, err := cs.CoordinationV1().Leases(ns).Get(context.Background(), m.client.LeaseName(), metav1.GetOptions{})
		if err != nil {
			return err
		}
		if got := lease.Annotations[protocol.AckedGenerationAnnotation]; got != fmt.Sprint(want) {
			return fmt.Errorf("Lease annotation %s = %q, want %q", protocol.AckedGenerationAnnotation, got, fmt.Sprint(want))
		}
		return nil
	}
}

func isDeadline(err error) bool { return errors.Is(err, context.DeadlineExceeded) }
