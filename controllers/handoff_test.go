//go:build envtest

package controllers

import (
	"cmp"
	"context"
	"errors"
	"flag"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/consumergroup-operator/consumergroup-operator/api/v1alpha1"
	"github.com/consumergroup-operator/consumergroup-operator/internal/testenv"
	"github.com/consumergroup-operator/consumergroup-operator/pkg/allocate"
	"github.com/consumergroup-operator/consumergroup-operator/pkg/protocol"
)

var handoffEvents = flag.Int("handoff-events", 150, "events TestRandomizedHandoff plays (make test-handoff plays 10,000)")

// memberOptions are the simulated members' settings: short Leases, so that expiries come within a test.
var memberOptions = testenv.MemberOptions{LeaseDuration: 3 * time.Second, MaxClockSkew: testClockSkew, DrainAckTimeout: time.Second}

// startSimMember runs a member of group for pod (testenv.SimMember).
func startSimMember(t testing.TB, group string, pod *corev1.Pod, own *testenv.Ownership) *testenv.SimMember {
	t.Helper()
	return testenv.StartMember(t, restConfig, group, pod, own, memberOptions)
}

func newClientset(t testing.TB) kubernetes.Interface {
	cs, err := kubernetes.NewForConfig(restConfig)
	must(t, err)
	return cs
}

func cooperativeGroup(ns, name string, queues int32, timeoutSeconds int32) *testenv.GroupWrapper {
	return testenv.Group(ns, name).Topic("t", testenv.Broker("b", queues, "")).
		Strategy(v1alpha1.Strategy{Type: v1alpha1.Sticky}).
		Handoff(v1alpha1.Handoff{Mode: v1alpha1.Cooperative, RevokeTimeoutSeconds: ptr.To(timeoutSeconds)})
}

// settledGroup runs an operator and a Cooperative group of queues queues (revoke timeout timeoutSeconds)
// in a namespace of its own, with members simulated members pods "<group>-<i>" started with opts, and
// waits until it settles.
func settledGroup(t *testing.T, group string, queues, timeoutSeconds int32, members int, opts testenv.MemberOptions) (string, *testenv.Ownership, []*testenv.SimMember) {
	t.Helper()
	ns := newNamespace(t)
	startManager(t, ns)
	own := testenv.NewOwnership()
	cooperativeGroup(ns, group, queues, timeoutSeconds).Create(t, k8s)
	ms := make([]*testenv.SimMember, members)
	for i := range ms {
		ms[i] = testenv.StartMember(t, restConfig, group, testenv.Pod(ns, fmt.Sprintf("%s-%d", group, i), group).Create(t, k8s), own, opts)
	}
	waitForSettled(t, ns, group, own, queues, members)
	return ns, own, ms
}

// waitForSettled waits until the group has members members, every queue has exactly one reader, each
// member reads its balanced share, and the group reports no handoff.
func waitForSettled(t *testing.T, ns, group string, own *testenv.Ownership, queues int32, members int) {
	t.Helper()
	eventually(t, 30*time.Second, func() error {
		for id := range queues {
			if n := own.Readers(allocate.Queue{Topic: "t", Broker: "b", ID: id}); n != 1 {
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
			// What the member's application reads, not only what is published for it.
			if n := own.ReadingByPod(m.Pod); n != int(m.Queues) {
				return fmt.Errorf("member %s reads %d queues, its entry lists %d", m.Pod, n, m.Queues)
			}
		}
		if c := meta.FindStatusCondition(g.Status.Conditions, v1alpha1.ConditionProgressing); c == nil || c.Status != metav1.ConditionFalse {
			return fmt.Errorf("Progressing is %v", c)
		}
		return nil
	})
}

func TestCooperativeScaleOut(t *testing.T) {
	ns, own, _ := settledGroup(t, "c", 12, 30, 2, memberOptions)
	startSimMember(t, "c", testenv.Pod(ns, "c-2", "c").OnNode("n").Create(t, k8s), own)
	waitForSettled(t, ns, "c", own, 12, 3)
	if len(own.Violations()) > 0 {
		t.Fatalf("queues had two readers at once: %v", own.Violations())
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
	own := testenv.NewOwnership()
	cooperativeGroup(ns, "f", 8, 2).Create(t, k8s)
	stuck := startSimMember(t, "f", testenv.Pod(ns, "f-0", "f").OnNode("n").Create(t, k8s), own)
	waitForSettled(t, ns, "f", own, 8, 1)
	stuck.Acking.Store(false)

	other := startSimMember(t, "f", testenv.Pod(ns, "f-1", "f").OnNode("n").Create(t, k8s), own)
	waitForCondition(t, ns, "f", v1alpha1.ConditionFenced, metav1.ConditionTrue, v1alpha1.ReasonRevokeTimeout)
	waitForEvent(t, ns, "f", EventMemberFenced)
	// After the fence the newcomer gets its share although f-0 never let go.
	eventually(t, waitFor, func() error {
		if n := len(other.Client.Current().Queues); n != 4 {
			return fmt.Errorf("f-1 reads %d queues, want 4", n)
		}
		return nil
	})
}

func TestDrainReleasesQueuesBeforeDeletion(t *testing.T) {
	ns := newNamespace(t)
	startManager(t, ns)
	own := testenv.NewOwnership()
	cooperativeGroup(ns, "d", 6, 30).Create(t, k8s)
	startSimMember(t, "d", testenv.Pod(ns, "d-0", "d").OnNode("n").Create(t, k8s), own)
	b := startSimMember(t, "d", testenv.Pod(ns, "d-1", "d").OnNode("n").Create(t, k8s), own)
	waitForSettled(t, ns, "d", own, 6, 2)

	// A pod on a node is deleted gracefully: it stays, with a deletionTimestamp, until its kubelet (here,
	// the test) confirms. Meanwhile its preStop hook drains.
	must(t, k8s.Delete(context.Background(), b.Pod))
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := b.Client.Drain(ctx); err != nil {
		t.Fatalf("drain: %v", err)
	}
	b.Stop()
	must(t, client.IgnoreNotFound(k8s.Delete(context.Background(), b.Pod, client.GracePeriodSeconds(0))))
	waitForSettled(t, ns, "d", own, 6, 1)
	if len(own.Violations()) > 0 {
		t.Fatalf("queues had two readers at once: %v", own.Violations())
	}
}

// randomizedMemberOptions are TestRandomizedHandoff's members: a 6 s Lease (renewed every 2 s, overdue
// after 3 s) and a promise of 2 s (1 s contact timeout, 1 s stop timeout), so that revocations lapse by
// the promise well before Leases run out, and both ways for a claim to let go are played.
var randomizedMemberOptions = testenv.MemberOptions{LeaseDuration: 6 * time.Second, MaxClockSkew: testClockSkew, DrainAckTimeout: time.Second,
	ContactTimeout: time.Second, StopTimeout: time.Second}

// TestRandomizedHandoff plays random scale-ups, drained scale-downs, restarts under the same name, kills,
// members that stop renewing, operator restarts, the assignment deleted or corrupted, claims corrupted,
// partitioned members force-deleted (and replaced under their name), Lease deletions, hostile Leases and
// slow applications against a Cooperative group whose members run the member package. Most events come
// faster than handoffs finish; one in isolatedEvery is a single failure, played on a settled group with
// the operator restarting up to twice during its handoff. It checks from what the members read that no
// queue ever had two readers, that a single failure leaves no queue unread for more than 20 s, that no
// queue waits more than 20 s after the last event, and that the group settles.
func TestRandomizedHandoff(t *testing.T) {
	const queues = 24
	const revokeTimeout = 4
	ns := newNamespace(t)
	stopOperator := startManager(t, ns)
	own := testenv.NewOwnership()
	cooperativeGroup(ns, "r", queues, revokeTimeout).Create(t, k8s)
	rng := rand.New(rand.NewPCG(7, uint64(*handoffEvents)))

	live := map[string]*testenv.SimMember{}
	next := 0
	newMember := func(name string) {
		live[name] = testenv.StartMember(t, restConfig, "r", testenv.Pod(ns, name, "r").OnNode("n").Create(t, k8s), own, randomizedMemberOptions)
	}
	removePod := func(m *testenv.SimMember) {
		err := k8s.Delete(context.Background(), m.Pod, client.GracePeriodSeconds(0))
		must(t, client.IgnoreNotFound(err))
		eventually(t, waitFor, func() error {
			err := k8s.Get(context.Background(), client.ObjectKeyFromObject(m.Pod), &corev1.Pod{})
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
	var history, kinds []string
	var historyAt []time.Time
	var alone []isolatedFailure
	errorsBefore := len(loggedReconcilerErrors())
	for i := 0; i < *handoffEvents; i++ {
		// One event in isolatedEvery is a single failure: played on a settled group, with nothing else
		// until the group has settled again, except the operator restarting at any point of its handoff.
		isolated := i%isolatedEvery == isolatedEvery/2 && len(live) >= 2
		if isolated {
			waitForSettled(t, ns, "r", own, queues, len(live))
		}
		names := make([]string, 0, len(live))
		for n := range live {
			names = append(names, n)
		}
		sort.Strings(names)
		var victim *testenv.SimMember
		if len(names) > 0 {
			victim = live[names[rng.IntN(len(names))]]
		}
		action := rng.IntN(18)
		if isolated {
			action = isolatedActions[rng.IntN(len(isolatedActions))]
		}
		victimName := ""
		if victim != nil {
			victimName = victim.Reader()
		}
		before := maps.Clone(counts)
		historyAt = append(historyAt, time.Now())
		history = append(history, fmt.Sprintf("%s event %d: action %d, victim %s", historyAt[i].Format("15:04:05.000"), i, action, victimName))
		switch {
		case action < 3 || len(live) < 2:
			counts["scale-up"]++
			newMember(fmt.Sprintf("r-%d", next))
			next++
		case action < 5:
			counts["drained scale-down"]++
			must(t, k8s.Delete(context.Background(), victim.Pod))
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			err := victim.Client.Drain(ctx)
			cancel()
			if err != nil {
				t.Fatalf("event %d: drain of %s: %v", i, victim.Pod.Name, err)
			}
			victim.Stop()
			removePod(victim)
			delete(live, victim.Pod.Name)
		case action < 7:
			counts["restart under the same name"]++
			victim.Stop()
			removePod(victim)
			newMember(victim.Pod.Name)
		case action < 8:
			counts["kill"]++
			victim.Stop()
			removePod(victim)
			delete(live, victim.Pod.Name)
		case action < 9:
			// The process hangs: it reads nothing and stops renewing its Lease; its pod stays Ready a while.
			counts["member stops renewing"]++
			victim.Stop()
			time.Sleep(time.Duration(rng.IntN(3000)) * time.Millisecond)
			removePod(victim)
			delete(live, victim.Pod.Name)
		case action < 10:
			counts["operator restart"]++
			stopOperator()
			time.Sleep(time.Duration(rng.IntN(500)) * time.Millisecond)
			stopOperator = startManager(t, ns)
		case action < 11:
			counts["assignment deleted"]++
			if cm := getAssignment(t, ns, "r"); cm != nil {
				must(t, client.IgnoreNotFound(k8s.Delete(context.Background(), cm)))
			}
		case action < 12:
			counts["assignment corrupted"]++
			corruptAssignment(t, ns, "r", rng)
		case action < 13:
			counts["claim corrupted"]++
			corruptClaim(t, ns, "r", victim.Pod.Name, rng)
		case action < 14:
			// The pod's node stops answering; the pod is force-deleted, its process runs on, cut off, and a
			// pod of the same name may take its place at once.
			counts["partitioned member force-deleted"]++
			victim.Partition(true)
			removePod(victim)
			delete(live, victim.Pod.Name)
			if rng.IntN(2) == 0 {
				counts["same-name replacement"]++
				newMember(victim.Pod.Name)
			}
		case action == 15:
			// Someone deletes a live member's Lease; the member writes it again at its next renewal.
			counts["Lease deleted"]++
			deleteLease(t, ns, "r", victim.Pod.Name)
		case action == 16:
			// The member is cut off, its Lease deleted and its pod force-deleted: neither absence proves that
			// its process stopped reading.
			counts["partitioned member's Lease deleted, pod force-deleted"]++
			victim.Partition(true)
			deleteLease(t, ns, "r", victim.Pod.Name)
			removePod(victim)
			delete(live, victim.Pod.Name)
		case action == 17:
			// A Lease for a pod that does not exist claims some queues, renewed an hour ahead.
			counts["hostile Lease"]++
			createForgedLease(t, ns, "r", fmt.Sprintf("forged-%d", i), rng, queues)
		default:
			// It takes up to 0.45 s to apply an assignment: with one more on its way meanwhile, it stops
			// reading a queue within 0.9 s of being told, inside its 1 s stop timeout.
			counts["slow application"]++
			victim.ApplyDelay.Store(int64(time.Duration(rng.IntN(450)) * time.Millisecond))
		}
		var kind []string
		for k, n := range counts {
			if n != before[k] {
				kind = append(kind, k)
			}
		}
		sort.Strings(kind)
		kinds = append(kinds, strings.Join(kind, ", "))
		for _, k := range kind {
			history[i] += " (" + k + ")"
		}
		if isolated {
			// The operator is restarted up to twice at a random point of the handoff the failure began.
			for range rng.IntN(3) {
				time.Sleep(time.Duration(rng.IntN(4000)) * time.Millisecond)
				stopOperator()
				stopOperator = startManager(t, ns)
				history[i] += fmt.Sprintf(", operator restarted %s after", time.Since(historyAt[i]).Round(time.Millisecond))
			}
		}
		t.Logf("%s", history[i])
		if isolated {
			waitForSettled(t, ns, "r", own, queues, len(live))
			alone = append(alone, isolatedFailure{kind: kinds[i], from: historyAt[i], to: time.Now()})
		}
		// Events come faster than handoffs finish, except now and then, when the group may settle.
		if rng.IntN(10) == 0 && len(live) > 0 {
			waitForSettled(t, ns, "r", own, queues, len(live))
		}
		if len(own.Violations()) > 0 {
			t.Fatalf("after event %d: %v\nlast events:\n%s", i, own.Violations(), strings.Join(history, "\n"))
		}
	}
	if len(live) == 0 {
		newMember(fmt.Sprintf("r-%d", next))
	}
	waitForSettled(t, ns, "r", own, queues, len(live))
	for _, m := range live {
		m.Stop()
	}
	t.Logf("events: %d %v; %d holdings; longest time a queue went unread: %s", *handoffEvents, counts, own.Holdings(), own.LongestGap())
	gaps := own.Gaps()
	for _, g := range gaps {
		if g.Length() > 12*time.Second {
			t.Logf("long gap: %s; %s", g, eventsDuring(g, historyAt, kinds))
		}
	}
	// A single failure leaves no queue unread for more than 20 s, the operator restarting during its
	// handoff or not.
	for _, k := range unreadAfterIsolated(gaps, alone) {
		t.Logf("single %-55s %3d gaps, p99 %8s, longest %8s", k.kind, k.n, k.p99.Round(time.Millisecond), k.longest().Round(time.Millisecond))
		if k.longest() > 20*time.Second {
			t.Errorf("after a single %s a queue went unread for %s, more than 20 s: %s", k.kind, k.longest(), k.longestGap)
		}
	}
	// Faults that come faster than handoffs finish add up: each may begin a wait before the last one ends
	// (a hostile Lease renewed for ever holds back the queues it claims for ever, as docs/threat-model.md
	// says). What is bounded is the wait after the last of them.
	for _, k := range unreadByKind(gaps, historyAt, kinds) {
		t.Logf("unread after %-55s %5d times, p99 %8s, longest %8s", k.kind, k.n, k.p99.Round(time.Millisecond), k.longest().Round(time.Millisecond))
	}
	for _, k := range unreadAfterLastEvent(gaps, historyAt, kinds) {
		t.Logf("unread once the last event was %-40s %5d times, p99 %8s, longest %8s", k.kind, k.n, k.p99.Round(time.Millisecond), k.longest().Round(time.Millisecond))
		if k.longest() > 20*time.Second {
			t.Errorf("a queue went unread for %s after the last event, %s, more than 20 s: %s", k.longest(), k.kind, k.longestGap)
		}
	}
	// Conflicts, objects deleted under the operator and restarts are normal: none of them is an error.
	if logged := loggedReconcilerErrors()[errorsBefore:]; len(logged) > 0 {
		t.Errorf("the operator logged %d reconciler errors; first: %q", len(logged), logged[0])
	}
	if len(own.Violations()) > 0 {
		t.Fatalf("queues had two readers at once: %v", own.Violations())
	}
}

// isolatedEvery is how often TestRandomizedHandoff plays a single failure: 100 times in 10,000 events.
const isolatedEvery = 100

// isolatedActions are the actions TestRandomizedHandoff plays as single failures: a scale-up and a drained
// scale-down (a handoff for the operator restarts to fall into), a restart under the same name, a kill, a
// member that stops renewing, and a partitioned member force-deleted, with its Lease deleted or not.
var isolatedActions = []int{0, 3, 5, 7, 8, 13, 16}

// isolatedFailure is one failure played on a settled group, from its event until the group settled again.
type isolatedFailure struct {
	kind     string
	from, to time.Time
}

// A gap over the bound names the events that fell within it and counts each gap for the event before it.
func TestUnreadByKindNamesTheEventsWithinTheLongestGap(t *testing.T) {
	t0 := time.Date(2026, 12, 3, 7, 41, 0, 0, time.UTC)
	at := func(s float64) time.Time { return t0.Add(time.Duration(s * float64(time.Second))) }
	historyAt := []time.Time{at(0), at(1), at(2), at(3), at(5), at(6)}
	kinds := []string{"member stops renewing", "hostile Lease", "kill", "kill", "operator restart", "scale-up"}
	long := testenv.Gap{From: at(1), To: at(5)}
	short := testenv.Gap{From: at(0.5), To: at(1.5)}
	stats := unreadByKind([]testenv.Gap{short, long}, historyAt, kinds)
	if len(stats) != 2 || stats[0].kind != "hostile Lease" || stats[1].kind != "member stops renewing" {
		t.Fatalf("unreadByKind = %+v; want one gap counted for the hostile Lease and one for the member that stopped renewing", stats)
	}
	if got := stats[0].longestGap; got != long || stats[0].longest() != 4*time.Second {
		t.Errorf("longest gap after the hostile Lease = %s (%s); want %s", got, stats[0].longest(), long)
	}
	want := "3 events fell within it: 2 kill; 1 operator restart"
	if got := eventsDuring(long, historyAt, kinds); got != want {
		t.Errorf("eventsDuring = %q; want %q", got, want)
	}
}

// A gap counts from the last event within it, and within a single failure only when it fell inside that
// failure's window.
func TestUnreadAfterLastEventAndAfterIsolated(t *testing.T) {
	t0 := time.Date(2026, 12, 3, 7, 41, 0, 0, time.UTC)
	at := func(s float64) time.Time { return t0.Add(time.Duration(s * float64(time.Second))) }
	historyAt := []time.Time{at(0), at(1), at(4), at(30), at(40)}
	kinds := []string{"kill", "hostile Lease", "operator restart", "kill", "member stops renewing"}
	// 0.5 s to 25 s: the last event within it is the operator restart at 4 s, 21 s before its end.
	chained := testenv.Gap{From: at(0.5), To: at(25)}
	// 31 s to 33 s: no event within it; it counts from its start, for the kill at 30 s.
	quiet := testenv.Gap{From: at(31), To: at(33)}
	// 41 s to 52 s: inside the single failure at 40 s.
	single := testenv.Gap{From: at(41), To: at(52)}
	gaps := []testenv.Gap{chained, quiet, single}

	after := unreadAfterLastEvent(gaps, historyAt, kinds)
	if len(after) != 3 || after[0].kind != "kill" || after[1].kind != "member stops renewing" || after[2].kind != "operator restart" {
		t.Fatalf("unreadAfterLastEvent = %+v; want kill, member stops renewing, operator restart", after)
	}
	for i, want := range []time.Duration{2 * time.Second, 11 * time.Second, 21 * time.Second} {
		if got := after[i].longest(); got != want {
			t.Errorf("after the last event, %s: longest %s; want %s", after[i].kind, got, want)
		}
	}

	alone := []isolatedFailure{
		{kind: "member stops renewing", from: at(40), to: at(53)},
		{kind: "kill", from: at(30), to: at(32)},                  // the quiet gap ends after this window: not counted
		{kind: "member stops renewing", from: at(60), to: at(70)}, // a later one of the same kind, with no gap
	}
	single1 := unreadAfterIsolated(gaps, alone)
	if len(single1) != 2 || single1[0].kind != "kill" || single1[0].n != 0 ||
		single1[1].kind != "member stops renewing" || single1[1].n != 1 || single1[1].longestGap != single {
		t.Fatalf("unreadAfterIsolated = %+v; want no gap for the kill and the 11 s gap for the member that stopped renewing", single1)
	}
}

// unreadStats are the times queues went unread after one kind of event.
type unreadStats struct {
	kind string
	n    int
	p99  time.Duration
	// longestGap is the gap that lasted longest.
	longestGap testenv.Gap
}

// longest is how long the longest gap lasted.
func (s unreadStats) longest() time.Duration { return s.longestGap.Length() }

// eventsDuring says how many events (kinds, at historyAt) fell within gap, and of which kinds, to tell
// one failure from faults that stacked up while a queue waited.
func eventsDuring(gap testenv.Gap, historyAt []time.Time, kinds []string) string {
	byKind := map[string]int{}
	n := 0
	for i, at := range historyAt {
		if i < len(kinds) && at.After(gap.From) && !at.After(gap.To) {
			n++
			byKind[kinds[i]]++
		}
	}
	var each []string
	for _, kind := range slices.Sorted(maps.Keys(byKind)) {
		each = append(each, fmt.Sprintf("%d %s", byKind[kind], kind))
	}
	return fmt.Sprintf("%d events fell within it: %s", n, strings.Join(each, "; "))
}

// unreadByKind counts each gap for the kind of the last event (kinds, at historyAt) at or before its start,
// by kind.
func unreadByKind(gaps []testenv.Gap, historyAt []time.Time, kinds []string) []unreadStats {
	byKind := map[string][]testenv.Gap{}
	for _, g := range gaps {
		kind := kindBefore(g.From, historyAt, kinds)
		byKind[kind] = append(byKind[kind], g)
	}
	return statsByKind(byKind)
}

// unreadAfterLastEvent counts each gap from the last event (kinds, at historyAt) at or before its end, or
// from its start when no event fell within it, for the kind of that event: how long the queue still waited
// once nothing else happened.
func unreadAfterLastEvent(gaps []testenv.Gap, historyAt []time.Time, kinds []string) []unreadStats {
	byKind := map[string][]testenv.Gap{}
	for _, g := range gaps {
		kind := kindBefore(g.From, historyAt, kinds)
		if i := lastEventAt(g.To, historyAt, kinds); i >= 0 && historyAt[i].After(g.From) {
			g.From, kind = historyAt[i], kinds[i]
		}
		byKind[kind] = append(byKind[kind], g)
	}
	return statsByKind(byKind)
}

// unreadAfterIsolated counts the gaps that fell within each single failure (alone), by its kind.
func unreadAfterIsolated(gaps []testenv.Gap, alone []isolatedFailure) []unreadStats {
	byKind := map[string][]testenv.Gap{}
	for _, f := range alone {
		if _, ok := byKind[f.kind]; !ok {
			byKind[f.kind] = nil // a failure that left every queue read counts too
		}
		for _, g := range gaps {
			if !g.From.Before(f.from) && !g.To.After(f.to) {
				byKind[f.kind] = append(byKind[f.kind], g)
			}
		}
	}
	return statsByKind(byKind)
}

// lastEventAt is the index of the last event (kinds, at historyAt) at or before t; -1 for none, or for an
// event whose kind is not known yet.
func lastEventAt(t time.Time, historyAt []time.Time, kinds []string) int {
	if i := sort.Search(len(historyAt), func(i int) bool { return historyAt[i].After(t) }) - 1; i < len(kinds) {
		return i
	}
	return -1
}

// kindBefore is the kind of the last event (kinds, at historyAt) at or before t.
func kindBefore(t time.Time, historyAt []time.Time, kinds []string) string {
	if i := lastEventAt(t, historyAt, kinds); i >= 0 {
		return kinds[i]
	}
	return "the start"
}

// statsByKind sums up gaps by kind, sorted by kind.
func statsByKind(byKind map[string][]testenv.Gap) []unreadStats {
	var out []unreadStats
	for _, kind := range slices.Sorted(maps.Keys(byKind)) {
		gaps := slices.SortedFunc(slices.Values(byKind[kind]), func(a, b testenv.Gap) int { return cmp.Compare(a.Length(), b.Length()) })
		s := unreadStats{kind: kind, n: len(gaps)}
		if len(gaps) > 0 {
			s.p99, s.longestGap = gaps[len(gaps)*99/100].Length(), gaps[len(gaps)-1]
		}
		out = append(out, s)
	}
	return out
}

// corruptAssignment changes the assignment ConfigMap as someone else might: junk in an annotation, an
// entry or all of them, a key removed or added.
func corruptAssignment(t *testing.T, ns, group string, rng *rand.Rand) {
	t.Helper()
	must(t, retry.RetryOnConflict(retry.DefaultRetry, func() error {
		cm := getAssignment(t, ns, group)
		if cm == nil {
			return nil
		}
		keys := slices.Sorted(maps.Keys(cm.Data))
		switch rng.IntN(4) {
		case 0:
			annotations := slices.Sorted(maps.Keys(cm.Annotations))
			cm.Annotations[annotations[rng.IntN(len(annotations))]] = "junk"
		case 1:
			if len(keys) > 0 {
				cm.Data[keys[rng.IntN(len(keys))]] = `{"version":1,"generation":1,"member":"x","queues":[{"topic":"t","broker":"b","ids":"0-23"}]}`
			}
		case 2:
			if len(keys) > 0 {
				delete(cm.Data, keys[rng.IntN(len(keys))])
			}
		default:
			for k := range cm.Annotations {
				cm.Annotations[k] = "{"
			}
			for k := range cm.Data {
				cm.Data[k] = "junk"
			}
		}
		return k8s.Update(context.Background(), cm)
	}))
}

// corruptClaim writes junk into the claim or the acknowledged generation of pod's Lease.
func corruptClaim(t *testing.T, ns, group, pod string, rng *rand.Rand) {
	t.Helper()
	must(t, retry.RetryOnConflict(retry.DefaultRetry, func() error {
		var lease coordinationv1.Lease
		err := k8s.Get(context.Background(), types.NamespacedName{Namespace: ns, Name: protocol.LeaseName(group, pod)}, &lease)
		if apierrors.IsNotFound(err) {
			return nil
		}
		must(t, err)
		if rng.IntN(2) == 0 {
			lease.Annotations[protocol.ClaimAnnotation] = "junk"
		} else {
			lease.Annotations[protocol.AckedGenerationAnnotation] = "999999"
		}
		return k8s.Update(context.Background(), &lease)
	}))
}

// deleteLease deletes pod's member Lease of group, if it exists.
func deleteLease(t *testing.T, ns, group, pod string) {
	t.Helper()
	lease := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: protocol.LeaseName(group, pod)}}
	must(t, client.IgnoreNotFound(k8s.Delete(context.Background(), lease)))
}

// createForgedLease creates a member Lease of group for pod, which does not exist, claiming a random half
// of the group's queues (of broker b, topic t), with a renewTime an hour ahead and a 3 s duration, never
// renewed.
func createForgedLease(t *testing.T, ns, group, pod string, rng *rand.Rand, queues int32) {
	t.Helper()
	var claim []protocol.Queue
	for id := range queues {
		if rng.IntN(2) == 0 {
			claim = append(claim, protocol.Queue{Topic: "t", Broker: "b", ID: id})
		}
	}
	ahead := metav1.NewMicroTime(time.Now().Add(time.Hour))
	must(t, k8s.Create(context.Background(), &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{
			Name: protocol.LeaseName(group, pod), Namespace: ns, Labels: map[string]string{protocol.GroupLabel: group},
			Annotations: map[string]string{protocol.PodAnnotation: pod, protocol.AckedGenerationAnnotation: "1",
				protocol.ClaimAnnotation: protocol.NewClaim("uid-"+pod, 1, claim).Encode()},
		},
		Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To(pod), LeaseDurationSeconds: ptr.To[int32](3), RenewTime: &ahead},
	}))
}

// TestRestartGraceReturnsQueues restarts a member pod under the same name (as a StatefulSet does) within
// spec.handoff.restartGraceSeconds: it gets its own queues back, and meanwhile nobody else reads them.
func TestRestartGraceReturnsQueues(t *testing.T) {
	ns := newNamespace(t)
	startManager(t, ns)
	own := testenv.NewOwnership()
	testenv.Group(ns, "g").Topic("t", testenv.Broker("b", 9, "")).Strategy(v1alpha1.Strategy{Type: v1alpha1.Sticky}).
		Handoff(v1alpha1.Handoff{Mode: v1alpha1.Cooperative, RevokeTimeoutSeconds: ptr.To[int32](30), RestartGraceSeconds: ptr.To[int32](60)}).Create(t, k8s)
	var ms []*testenv.SimMember
	for i := range 3 {
		ms = append(ms, startSimMember(t, "g", testenv.Pod(ns, fmt.Sprintf("g-%d", i), "g").OnNode("n").Create(t, k8s), own))
	}
	waitForSettled(t, ns, "g", own, 9, 3)
	before := ms[1].Client.Current().Queues

	// g-1 restarts: its process ends, its pod is deleted and created again with the same name.
	ms[1].Stop()
	must(t, k8s.Delete(context.Background(), ms[1].Pod, client.GracePeriodSeconds(0)))
	eventually(t, waitFor, func() error {
		if g := getGroup(t, ns, "g"); g.Status.MemberCount != 2 {
			return fmt.Errorf("%d members published, want 2 while g-1 is away", g.Status.MemberCount)
		}
		return nil
	})
	for _, q := range before {
		if n := own.Readers(q); n != 0 {
			t.Fatalf("queue %s of the departed member has %d readers during its grace", q, n)
		}
	}
	ms[1] = startSimMember(t, "g", testenv.Pod(ns, "g-1", "g").OnNode("n").Create(t, k8s), own)
	waitForSettled(t, ns, "g", own, 9, 3)
	if after := ms[1].Client.Current().Queues; fmt.Sprint(after) != fmt.Sprint(before) {
		t.Fatalf("g-1 came back to %v, want its own queues %v", after, before)
	}
	if len(own.Violations()) > 0 {
		t.Fatalf("queues had two readers at once: %v", own.Violations())
	}
}
