package controllers

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"math/rand/v2"
	"sort"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/consumergroup-operator/consumergroup-operator/api/v1alpha1"
	"github.com/consumergroup-operator/consumergroup-operator/pkg/allocate"
	podmember "github.com/consumergroup-operator/consumergroup-operator/pkg/member"
)

var handoffEvents = flag.Int("handoff-events", 150, "events TestRandomizedHandoff plays (make test-handoff plays 10,000)")

// ownership records which member pods read which queue, as the members' applications report it, and
// every instant at which a queue had two readers.
type ownership struct {
	mu      sync.Mutex
	holders map[allocate.Queue]map[string]bool
	// since is when each queue last lost its last reader; absent while it has one.
	since      map[allocate.Queue]time.Time
	violations []string
	// longestGap is the longest time a queue went without a reader while some member was live.
	longestGap time.Duration
}

func newOwnership() *ownership {
	return &ownership{holders: map[allocate.Queue]map[string]bool{}, since: map[allocate.Queue]time.Time{}}
}

// apply records that pod now reads exactly queues.
func (o *ownership) apply(pod string, queues []allocate.Queue) {
	o.mu.Lock()
	defer o.mu.Unlock()
	now := time.Now()
	want := map[allocate.Queue]bool{}
	for _, q := range queues {
		want[q] = true
	}
	for q, hs := range o.holders {
		if hs[pod] && !want[q] {
			delete(hs, pod)
			if len(hs) == 0 {
				o.since[q] = now
			}
		}
	}
	for q := range want {
		hs := o.holders[q]
		if hs == nil {
			hs = map[string]bool{}
			o.holders[q] = hs
		}
		if hs[pod] {
			continue
		}
		for other := range hs {
			o.violations = append(o.violations, fmt.Sprintf("%s: %s started reading while %s still read it", q, pod, other))
		}
		if t, ok := o.since[q]; ok {
			o.longestGap = max(o.longestGap, now.Sub(t))
			delete(o.since, q)
		}
		hs[pod] = true
	}
}

func (o *ownership) readers(q allocate.Queue) int {
	o.mu.Lock()
	defer o.mu.Unlock()
	return len(o.holders[q])
}

// simMember is a member pod's application: it runs the member package, reads what it is given, records
// it, and acknowledges it, unless told to stop acknowledging.
type simMember struct {
	pod      *corev1.Pod
	client   *podmember.Client
	cancel   context.CancelFunc
	done     chan struct{}
	acking   atomic.Bool
	own      *ownership
	lastSeen atomic.Int64
}

func startSimMember(t testing.TB, cs kubernetes.Interface, group string, pod *corev1.Pod, own *ownership) *simMember {
	t.Helper()
	c, err := podmember.New(cs, podmember.Config{
		Namespace: pod.Namespace, Group: group, Pod: pod.Name, PodUID: pod.UID,
		LeaseDuration: 3 * time.Second, DrainAckTimeout: time.Second,
	})
	must(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	m := &simMember{pod: pod, client: c, cancel: cancel, done: make(chan struct{}), own: own}
	m.acking.Store(true)
	go func() { _ = c.Run(ctx) }()
	// Every member ends with its test; stopping one that already stopped does nothing.
	t.Cleanup(m.stop)
	go func() {
		defer close(m.done)
		for {
			select {
			case <-ctx.Done():
				return
			case a := <-c.Updates():
				m.lastSeen.Store(a.Generation)
				if !m.acking.Load() {
					// A member that stopped acknowledging keeps reading what it had.
					continue
				}
				own.apply(pod.Name, a.Queues)
				if a.Generation > 0 {
					_ = c.Ack(ctx, a.Generation)
				}
			}
		}
	}()
	return m
}

// stop ends the member's process: it reads nothing from then on. Calling it again does nothing more.
func (m *simMember) stop() {
	m.cancel()
	<-m.done
	m.own.apply(m.pod.Name, nil)
}

func newClientset(t testing.TB) kubernetes.Interface {
	cs, err := kubernetes.NewForConfig(restConfig)
	must(t, err)
	return cs
}

func cooperativeGroup(ns, name string, queues int32, timeoutSeconds int32) *groupBuilder {
	return newGroup(ns, name).topic("t", broker("b", queues, "")).
		strategy(v1alpha1.Strategy{Type: v1alpha1.Sticky}).
		handoff(v1alpha1.Handoff{Mode: v1alpha1.Cooperative, RevokeTimeoutSeconds: ptr.To(timeoutSeconds)})
}

// waitForSettled waits until the group has members members, every queue has exactly one reader, each
// member reads its balanced share, and the group reports no handoff.
func waitForSettled(t *testing.T, ns, group string, own *ownership, queues int32, members int) {
	t.Helper()
	eventually(t, 30*time.Second, func() error {
		for id := range queues {
			if n := own.readers(allocate.Queue{Topic: "t", Broker: "b", ID: id}); n != 1 {
				return fmt.Errorf("queue %d has %d readers", id, n)
			}
		}
		g := getGroup(t, ns, group)
		if int(g.Status.MemberCount) != members {
			return fmt.Errorf("%d members published, want %d", g.Status.MemberCount, members)
		}
		for _, m := range g.Status.Members {
			if share := int(queues) / members; int(m.Queues) < share || int(m.Queues) > share+1 {
				return fmt.Errorf("member %s holds %d queues, want its share of %d over %d", m.Pod, m.Queues, queues, members)
			}
		}
		if c := meta.FindStatusCondition(g.Status.Conditions, ConditionProgressing); c == nil || c.Status != metav1.ConditionFalse {
			return fmt.Errorf("Progressing is %v", c)
		}
		return nil
	})
}

func TestCooperativeScaleOut(t *testing.T) {
	ns := newNamespace(t)
	startManager(t, ns)
	cs := newClientset(t)
	own := newOwnership()
	cooperativeGroup(ns, "c", 12, 30).create(t)
	for i := range 2 {
		startSimMember(t, cs, "c", newPod(ns, fmt.Sprintf("c-%d", i), "c").onNode("n").create(t), own)
	}
	waitForSettled(t, ns, "c", own, 12, 2)
	startSimMember(t, cs, "c", newPod(ns, "c-2", "c").onNode("n").create(t), own)
	waitForSettled(t, ns, "c", own, 12, 3)
	if len(own.violations) > 0 {
		t.Fatalf("queues had two readers at once: %v", own.violations)
	}
	// The last acknowledgements reach the status a pass after the group settled.
	eventually(t, waitFor, func() error {
		g := getGroup(t, ns, "c")
		for _, s := range g.Status.Members {
			if s.AckedGeneration == nil || *s.AckedGeneration != g.Status.AssignmentGeneration {
				return fmt.Errorf("member %s acknowledged %v, want generation %d", s.Pod, ptr.Deref(s.AckedGeneration, -1), g.Status.AssignmentGeneration)
			}
			if s.Queues != 4 {
				return fmt.Errorf("member %s holds %d queues, want 4", s.Pod, s.Queues)
			}
		}
		return nil
	})
}

func TestFencedWhenNoAcknowledgement(t *testing.T) {
	ns := newNamespace(t)
	startManager(t, ns)
	cs := newClientset(t)
	own := newOwnership()
	cooperativeGroup(ns, "f", 8, 2).create(t)
	stuck := startSimMember(t, cs, "f", newPod(ns, "f-0", "f").onNode("n").create(t), own)
	waitForSettled(t, ns, "f", own, 8, 1)
	stuck.acking.Store(false)

	other := startSimMember(t, cs, "f", newPod(ns, "f-1", "f").onNode("n").create(t), own)
	waitForCondition(t, ns, "f", ConditionFenced, metav1.ConditionTrue, ReasonRevokeTimeout)
	waitForEvent(t, ns, "f", EventMemberFenced)
	// After the fence the newcomer gets its share although f-0 never let go.
	eventually(t, waitFor, func() error {
		if n := len(other.client.Current().Queues); n != 4 {
			return fmt.Errorf("f-1 reads %d queues, want 4", n)
		}
		return nil
	})
}

func TestDrainReleasesQueuesBeforeDeletion(t *testing.T) {
	ns := newNamespace(t)
	startManager(t, ns)
	cs := newClientset(t)
	own := newOwnership()
	cooperativeGroup(ns, "d", 6, 30).create(t)
	startSimMember(t, cs, "d", newPod(ns, "d-0", "d").onNode("n").create(t), own)
	b := startSimMember(t, cs, "d", newPod(ns, "d-1", "d").onNode("n").create(t), own)
	waitForSettled(t, ns, "d", own, 6, 2)

	// A pod on a node is deleted gracefully: it stays, with a deletionTimestamp, until its kubelet (here,
	// the test) confirms. Meanwhile its preStop hook drains.
	must(t, k8s.Delete(context.Background(), b.pod))
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := b.client.Drain(ctx); err != nil {
		t.Fatalf("drain: %v", err)
	}
	b.stop()
	must(t, client.IgnoreNotFound(k8s.Delete(context.Background(), b.pod, client.GracePeriodSeconds(0))))
	waitForSettled(t, ns, "d", own, 6, 1)
	if len(own.violations) > 0 {
		t.Fatalf("queues had two readers at once: %v", own.violations)
	}
}

// TestRandomizedHandoff plays random scale-ups, drained scale-downs, restarts under the same name, kills,
// members that stop renewing, and operator restarts against a Cooperative group whose members run the
// member package, and checks from what the members read that no queue ever had two readers, that every
// queue is read again within the bound after its reader left, and that the group settles.
func TestRandomizedHandoff(t *testing.T) {
	const queues = 24
	const revokeTimeout = 4
	ns := newNamespace(t)
	stopOperator := startManager(t, ns)
	cs := newClientset(t)
	own := newOwnership()
	cooperativeGroup(ns, "r", queues, revokeTimeout).create(t)
	rng := rand.New(rand.NewPCG(7, uint64(*handoffEvents)))

	live := map[string]*simMember{}
	next := 0
	newMember := func(name string) {
		live[name] = startSimMember(t, cs, "r", newPod(ns, name, "r").onNode("n").create(t), own)
	}
	removePod := func(m *simMember) {
		err := k8s.Delete(context.Background(), m.pod, client.GracePeriodSeconds(0))
		must(t, client.IgnoreNotFound(err))
		eventually(t, waitFor, func() error {
			err := k8s.Get(context.Background(), client.ObjectKeyFromObject(m.pod), &corev1.Pod{})
			if apierrors.IsNotFound(err) {
				return nil
			}
			return errors.New("pod still exists")
		})
	}
	for range 3 {
		newMember(fmt.Sprintf("r-%d", next))
		next++
	}
	counts := map[string]int{}
	for i := 0; i < *handoffEvents; i++ {
		names := make([]string, 0, len(live))
		for n := range live {
			names = append(names, n)
		}
		sort.Strings(names)
		var victim *simMember
		if len(names) > 0 {
			victim = live[names[rng.IntN(len(names))]]
		}
		switch action := rng.IntN(10); {
		case action < 3 || len(live) < 2:
			counts["scale-up"]++
			newMember(fmt.Sprintf("r-%d", next))
			next++
		case action < 5:
			counts["drained scale-down"]++
			must(t, k8s.Delete(context.Background(), victim.pod))
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			err := victim.client.Drain(ctx)
			cancel()
			if err != nil {
				t.Fatalf("event %d: drain of %s: %v", i, victim.pod.Name, err)
			}
			victim.stop()
			removePod(victim)
			delete(live, victim.pod.Name)
		case action < 7:
			counts["restart under the same name"]++
			victim.stop()
			removePod(victim)
			newMember(victim.pod.Name)
		case action < 8:
			counts["kill"]++
			victim.stop()
			removePod(victim)
			delete(live, victim.pod.Name)
		case action < 9:
			// The process hangs: it reads nothing and stops renewing its Lease; its pod stays Ready.
			counts["member stops renewing"]++
			victim.stop()
			time.Sleep(time.Duration(rng.IntN(3000)) * time.Millisecond)
			removePod(victim)
			delete(live, victim.pod.Name)
		default:
			counts["operator restart"]++
			stopOperator()
			time.Sleep(time.Duration(rng.IntN(500)) * time.Millisecond)
			stopOperator = startManager(t, ns)
		}
		// Events come faster than handoffs finish, except now and then, when the group may settle.
		if rng.IntN(10) == 0 && len(live) > 0 {
			waitForSettled(t, ns, "r", own, queues, len(live))
		}
		if len(own.violations) > 0 {
			t.Fatalf("after event %d: %v", i, own.violations)
		}
	}
	if len(live) == 0 {
		newMember(fmt.Sprintf("r-%d", next))
	}
	waitForSettled(t, ns, "r", own, queues, len(live))
	for _, m := range live {
		m.stop()
	}
	t.Logf("events: %d %v; longest time a queue went unread: %s", *handoffEvents, counts, own.longestGap)
	if len(own.violations) > 0 {
		t.Fatalf("queues had two readers at once: %v", own.violations)
	}
	// A queue goes unread from its reader's release until the next reader picks it up: at most the revoke
	// timeout (an unresponsive old owner), plus twice the Lease duration (a hung member is noticed when its
	// Lease expires), plus time for the operator and the API server.
	if bound := time.Duration(revokeTimeout)*time.Second + 6*time.Second + 5*time.Second; own.longestGap > bound {
		t.Errorf("a queue went unread for %s, more than %s", own.longestGap, bound)
	}
}

// TestRestartGraceReturnsQueues restarts a member pod under the same name (as a StatefulSet does) within
// spec.handoff.restartGraceSeconds: it gets its own queues back, and meanwhile nobody else reads them.
func TestRestartGraceReturnsQueues(t *testing.T) {
	ns := newNamespace(t)
	startManager(t, ns)
	cs := newClientset(t)
	own := newOwnership()
	newGroup(ns, "g").topic("t", broker("b", 9, "")).strategy(v1alpha1.Strategy{Type: v1alpha1.Sticky}).
		handoff(v1alpha1.Handoff{Mode: v1alpha1.Cooperative, RevokeTimeoutSeconds: ptr.To[int32](30), RestartGraceSeconds: ptr.To[int32](60)}).create(t)
	var ms []*simMember
	for i := range 3 {
		ms = append(ms, startSimMember(t, cs, "g", newPod(ns, fmt.Sprintf("g-%d", i), "g").onNode("n").create(t), own))
	}
	waitForSettled(t, ns, "g", own, 9, 3)
	before := ms[1].client.Current().Queues

	// g-1 restarts: its process ends, its pod is deleted and created again with the same name.
	ms[1].stop()
	must(t, k8s.Delete(context.Background(), ms[1].pod, client.GracePeriodSeconds(0)))
	eventually(t, waitFor, func() error {
		if g := getGroup(t, ns, "g"); g.Status.MemberCount != 2 {
			return fmt.Errorf("%d members published, want 2 while g-1 is away", g.Status.MemberCount)
		}
		return nil
	})
	for _, q := range before {
		if n := own.readers(q); n != 0 {
			t.Fatalf("queue %s of the departed member has %d readers during its grace", q, n)
		}
	}
	ms[1] = startSimMember(t, cs, "g", newPod(ns, "g-1", "g").onNode("n").create(t), own)
	waitForSettled(t, ns, "g", own, 9, 3)
	if after := ms[1].client.Current().Queues; fmt.Sprint(after) != fmt.Sprint(before) {
		t.Fatalf("g-1 came back to %v, want its own queues %v", after, before)
	}
	if len(own.violations) > 0 {
		t.Fatalf("queues had two readers at once: %v", own.violations)
	}
}
