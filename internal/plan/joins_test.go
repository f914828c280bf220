package plan

import (
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/consumergroup-operator/consumergroup-operator/internal/fixture"
	"github.com/consumergroup-operator/consumergroup-operator/pkg/allocate"
)

func TestJoinsToHold(t *testing.T) {
	queues := fixture.Qs(0, 1, 2, 3)
	member := func(id string) Member { return Member{Member: allocate.Member{ID: id}, Pod: id} }
	whole := allocate.Plan{"a": fixture.Qs(0, 1), "b": fixture.Qs(2, 3)}
	rebalanced := fixture.T0
	within, after := fixture.T0.Add(1500*time.Millisecond), fixture.T0.Add(2*time.Second)
	const window = 2 * time.Second
	for _, tc := range []struct {
		name      string
		published allocate.Plan
		members   []Member
		queues    []allocate.Queue
		now       time.Time
		window    time.Duration
		held      []string
		wait      time.Duration
	}{
		{name: "newcomers within the window wait for its end", published: whole, members: []Member{member("a"), member("b"), member("c"), member("d")},
			queues: queues, now: within, window: window, held: []string{"c", "d"}, wait: 500 * time.Millisecond},
		{name: "the window closed", published: whole, members: []Member{member("a"), member("b"), member("c")}, queues: queues, now: after, window: window},
		{name: "no window", published: whole, members: []Member{member("a"), member("b"), member("c")}, queues: queues, now: within},
		{name: "nobody new", published: whole, members: []Member{member("a"), member("b")}, queues: queues, now: within, window: window},
		{name: "a member left: its queues need readers now", published: whole, members: []Member{member("a"), member("c")}, queues: queues, now: within, window: window},
		{name: "a queue has no reader (a handoff in flight)", published: allocate.Plan{"a": fixture.Qs(0, 1), "b": fixture.Qs(2)},
			members: []Member{member("a"), member("b"), member("c")}, queues: queues, now: within, window: window},
		{name: "a queue was added", published: whole, members: []Member{member("a"), member("b"), member("c")}, queues: fixture.Qs(0, 1, 2, 3, 4), now: within, window: window},
		{name: "nothing published", published: allocate.Plan{}, members: []Member{member("a")}, queues: queues, now: within, window: window},
	} {
		t.Run(tc.name, func(t *testing.T) {
			held, wait := joinsToHold(tc.published, tc.members, tc.queues, rebalanced, tc.now, tc.window)
			var got []string
			for id := range held {
				got = append(got, id)
			}
			slices.Sort(got)
			if !slices.Equal(got, tc.held) || wait != tc.wait {
				t.Fatalf("held %v for %v, want %v for %v", got, wait, tc.held, tc.wait)
			}
		})
	}
}

// TestDecideJoinsWithinTheWindowJoinTogether: pods that become members one after another within the
// window after a generation are published together, in one generation, when it closes; until then
// nothing is written and the pass looks again at its end.
func TestDecideJoinsWithinTheWindowJoinTogether(t *testing.T) {
	group := fixture.Group(averagely, 6)
	pods := []corev1.Pod{fixture.Pod("p0"), fixture.Pod("p1")}
	e := env(group, fixture.T0)
	e.JoinWindow = 2 * time.Second
	first := Decide(group, world(pods), e)
	if first.Report.Generation != 1 || len(first.Report.HeldJoins) != 0 {
		t.Fatalf("the first generation is %d, held %v: with nothing published, nothing is held", first.Report.Generation, first.Report.HeldJoins)
	}
	obs := applied(group, world(pods), first)

	for i, pod := range []string{"p2", "p3"} {
		obs.Pods = append(obs.Pods, fixture.Pod(pod))
		e.Now = fixture.T0.Add(time.Duration(i+1) * 500 * time.Millisecond)
		d := Decide(group, obs, e)
		if len(d.Write.ConfigMaps) != 0 || d.Report.Generation != 1 {
			t.Fatalf("%s joined within the window: wrote %d objects at generation %d", pod, len(d.Write.ConfigMaps), d.Report.Generation)
		}
		if want := 2*time.Second - e.Now.Sub(fixture.T0); d.RequeueAfter != want {
			t.Fatalf("%s joined within the window: looks again after %v, want %v, the window's end", pod, d.RequeueAfter, want)
		}
		if len(d.Report.Members) != 2 || len(d.Report.HeldJoins) != i+1 {
			t.Fatalf("%s joined within the window: members %d, held %v", pod, len(d.Report.Members), d.Report.HeldJoins)
		}
	}

	e.Now = fixture.T0.Add(2 * time.Second)
	closed := Decide(group, obs, e)
	if closed.Report.Generation != 2 || len(closed.Report.Members) != 4 || len(closed.Report.HeldJoins) != 0 {
		t.Fatalf("the window closed: generation %d, members %d, held %v; want both newcomers in generation 2",
			closed.Report.Generation, len(closed.Report.Members), closed.Report.HeldJoins)
	}
	if _, ok := closed.Report.Entries["p3"]; !ok || closed.Report.Rebalance.Moved == 0 {
		t.Fatalf("the window closed: p3 has no entry or no queue moves (%d)", closed.Report.Rebalance.Moved)
	}

	// A member that leaves is published at once, with the newcomers that waited.
	obs.Pods = obs.Pods[1:]
	e.Now = fixture.T0.Add(time.Second)
	left := Decide(group, obs, e)
	if left.Report.Generation != 2 || len(left.Report.Members) != 3 || len(left.Report.HeldJoins) != 0 {
		t.Fatalf("p0 left within the window: generation %d, members %d, held %v; want a generation at once with p1, p2, p3",
			left.Report.Generation, len(left.Report.Members), left.Report.HeldJoins)
	}
}
