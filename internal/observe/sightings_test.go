package observe

import (
	"slices"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/consumergroup-operator/consumergroup-operator/internal/fixture"
	"github.com/consumergroup-operator/consumergroup-operator/pkg/protocol"
)

// rawLease is the Lease the member on pod (UID "uid-<pod>") writes, renewed at renewed with a 15 s
// duration, as the API server stores it, with the Lease UID uid.
func rawLease(pod, uid string, renewed time.Time) *coordinationv1.Lease {
	m := protocol.MemberLease{Group: "g", GroupUID: "group-uid", Pod: pod, PodUID: types.UID("uid-" + pod), Member: pod,
		Duration: 15 * time.Second, Acked: 1, Claim: fixture.Qs(0)}
	l := m.Apply(nil, "ns", &renewed, &renewed)
	l.ResourceVersion, l.UID = "1", types.UID(uid)
	return l
}

func TestSight(t *testing.T) {
	const skew = time.Second
	at := func(s int) time.Time { return fixture.T0.Add(time.Duration(s) * time.Second) }
	renewed := func(pod string, written time.Time) *coordinationv1.Lease { return rawLease(pod, "lease-"+pod, written) }
	type pass struct {
		// events are watch events seen before the pass, each at its own time.
		events []struct {
			at    time.Time
			lease *coordinationv1.Lease
		}
		now  time.Time
		read []*coordinationv1.Lease
		// want is each Lease counted, by name, with the renewal time the operator counts; vanished and
		// backwards name Leases.
		want      map[string]time.Time
		vanished  []string
		backwards []string
		// renewedBy, when set, is each Lease's RenewedBy, by name: what lateness counts from.
		renewedBy map[string]time.Time
	}
	event := func(at time.Time, l *coordinationv1.Lease) []struct {
		at    time.Time
		lease *coordinationv1.Lease
	} {
		return []struct {
			at    time.Time
			lease *coordinationv1.Lease
		}{{at, l}}
	}
	cases := []struct {
		name   string
		passes []pass
	}{
		{"first sight counts as renewed now, whatever the Lease says", []pass{
			{now: at(100), read: []*coordinationv1.Lease{renewed("a", at(-3600)), renewed("b", at(7200))},
				want: map[string]time.Time{"g.a": at(100), "g.b": at(100)}},
		}},
		{"an unchanged renewTime keeps its sighting; a new one is seen now", []pass{
			{now: at(0), read: []*coordinationv1.Lease{renewed("a", at(0))}, want: map[string]time.Time{"g.a": at(0)}},
			{now: at(10), read: []*coordinationv1.Lease{renewed("a", at(0))}, want: map[string]time.Time{"g.a": at(0)}},
			{now: at(12), read: []*coordinationv1.Lease{renewed("a", at(5))}, want: map[string]time.Time{"g.a": at(12)}},
		}},
		{"a renewal counts when its watch event arrived, not when the next pass reads it", []pass{
			{now: at(0), read: []*coordinationv1.Lease{renewed("a", at(0))}, want: map[string]time.Time{"g.a": at(0)}},
			{events: event(at(5), renewed("a", at(-1000))), now: at(14), read: []*coordinationv1.Lease{renewed("a", at(-1000))},
				want: map[string]time.Time{"g.a": at(5)}, backwards: []string{"g.a"}},
		}},
		{"a renewTime set back counts as a renewal and is reported", []pass{
			{now: at(0), read: []*coordinationv1.Lease{renewed("a", at(0))}, want: map[string]time.Time{"g.a": at(0)}},
			{now: at(10), read: []*coordinationv1.Lease{renewed("a", at(-3600))}, want: map[string]time.Time{"g.a": at(10)}, backwards: []string{"g.a"}},
		}},
		{"a vanished Lease stands until its duration passes on the operator's clock", []pass{
			{now: at(0), read: []*coordinationv1.Lease{renewed("a", at(0)), renewed("b", at(0))}, want: map[string]time.Time{"g.a": at(0), "g.b": at(0)}},
			{now: at(5), read: []*coordinationv1.Lease{renewed("b", at(0))}, want: map[string]time.Time{"g.a": at(0), "g.b": at(0)}, vanished: []string{"g.a"}},
			{now: at(15), read: []*coordinationv1.Lease{renewed("b", at(0))}, want: map[string]time.Time{"g.a": at(0), "g.b": at(0)}, vanished: []string{"g.a"}},
			{now: at(16), read: []*coordinationv1.Lease{renewed("b", at(0))}, want: map[string]time.Time{"g.b": at(0)}},
		}},
		{"a Lease seen only by its watch events stands after it vanishes", []pass{
			{events: event(at(2), renewed("a", at(2))), now: at(4), want: map[string]time.Time{"g.a": at(2)}, vanished: []string{"g.a"}},
			{now: at(18), want: map[string]time.Time{}},
		}},
		{"lateness counts a renewal seen after the fact from the time it states plus the skew, never later than seen", []pass{
			{now: at(100), read: []*coordinationv1.Lease{renewed("a", at(90)), renewed("b", at(7200)), renewed("c", at(100))},
				want:      map[string]time.Time{"g.a": at(100), "g.b": at(100), "g.c": at(100)},
				renewedBy: map[string]time.Time{"g.a": at(91), "g.b": at(100), "g.c": at(100)}},
			{now: at(105), read: []*coordinationv1.Lease{renewed("a", at(90)), renewed("b", at(7200)), renewed("c", at(100))},
				want:      map[string]time.Time{"g.a": at(100), "g.b": at(100), "g.c": at(100)},
				renewedBy: map[string]time.Time{"g.a": at(91), "g.b": at(100), "g.c": at(100)}},
		}},
		{"lateness counts a renewal seen as it happens from the sighting, whatever the Lease states", []pass{
			{now: at(0), read: []*coordinationv1.Lease{renewed("a", at(-50)), renewed("b", at(-50))},
				want: map[string]time.Time{"g.a": at(0), "g.b": at(0)}, renewedBy: map[string]time.Time{"g.a": at(-49), "g.b": at(-49)}},
			{events: event(at(5), renewed("a", at(-45))), now: at(10), read: []*coordinationv1.Lease{renewed("a", at(-45)), renewed("b", at(-40))},
				want: map[string]time.Time{"g.a": at(5), "g.b": at(10)}, renewedBy: map[string]time.Time{"g.a": at(5), "g.b": at(10)}},
		}},
		{"a vanished Lease seen after the fact keeps its lateness", []pass{
			{now: at(100), read: []*coordinationv1.Lease{renewed("a", at(95))}, want: map[string]time.Time{"g.a": at(100)}, renewedBy: map[string]time.Time{"g.a": at(96)}},
			{now: at(101), want: map[string]time.Time{"g.a": at(100)}, vanished: []string{"g.a"}, renewedBy: map[string]time.Time{"g.a": at(96)}},
		}},
		{"a Lease written again by the same incarnation replaces the vanished one", []pass{
			{now: at(0), read: []*coordinationv1.Lease{renewed("a", at(0))}, want: map[string]time.Time{"g.a": at(0)}},
			{now: at(3), read: []*coordinationv1.Lease{rawLease("a", "lease-a2", at(3))}, want: map[string]time.Time{"g.a": at(3)}},
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var mem SingleLook
			key := types.NamespacedName{Namespace: "ns", Name: "g"}
			for i, p := range c.passes {
				for _, e := range p.events {
					mem.WithSightings(key, e.at, func(s *Sightings) { s.Saw(e.lease, e.at) })
				}
				var out sightedLeases
				mem.WithSightings(key, p.now, func(s *Sightings) { out = s.observe(p.read, nil, p.now, skew) })
				got, gotBy := map[string]time.Time{}, map[string]time.Time{}
				var vanished []string
				for _, l := range out.leases {
					got[l.Name], gotBy[l.Name] = l.RenewTime, l.RenewedBy
					if out.vanished[l.UID] {
						vanished = append(vanished, l.Name)
					}
				}
				if len(got) != len(p.want) || len(out.leases) != len(p.want) {
					t.Fatalf("pass %d counts %v, want %v", i, got, p.want)
				}
				for name, w := range p.want {
					if !got[name].Equal(w) {
						t.Fatalf("pass %d counts %s renewed at %v, want %v", i, name, got[name].Sub(fixture.T0), w.Sub(fixture.T0))
					}
				}
				for name, w := range p.renewedBy {
					if !gotBy[name].Equal(w) {
						t.Fatalf("pass %d counts %s late from %v, want %v", i, name, gotBy[name].Sub(fixture.T0), w.Sub(fixture.T0))
					}
				}
				if !slices.Equal(vanished, p.vanished) || !slices.Equal(out.backwards, p.backwards) {
					t.Fatalf("pass %d: vanished %v, backwards %v; want %v, %v", i, vanished, out.backwards, p.vanished, p.backwards)
				}
			}
		})
	}
}

// TestSightKeepsNoPassesList: a sighting keeps the Lease it already had when the pass reads the same
// version (the informer's object, from its watch event), and a copy of a newer one, never a pointer into
// the pass's list, which would keep the whole list until the group's next pass.
func TestSightKeepsNoPassesList(t *testing.T) {
	fromEvent := rawLease("a", "lease-a", fixture.T0)
	g := &Sightings{leases: map[types.UID]sighting{}}
	g.Saw(fromEvent, fixture.T0)

	list := []coordinationv1.Lease{*fromEvent, *rawLease("b", "lease-b", fixture.T0)}
	g.observe([]*coordinationv1.Lease{&list[0], &list[1]}, nil, fixture.T0.Add(time.Second), time.Second)
	if got := g.leases["lease-a"].lease; got != fromEvent {
		t.Fatalf("the same version read by the pass: the sighting keeps %p, want the event's object %p", got, fromEvent)
	}
	if got := g.leases["lease-b"].lease; got == &list[1] || got.Name != "g.b" {
		t.Fatalf("a Lease first read by the pass: the sighting keeps %p (%s), want a copy, not the list's %p", got, got.Name, &list[1])
	}

	newer := *fromEvent
	newer.ResourceVersion = "2"
	list = []coordinationv1.Lease{newer}
	g.observe([]*coordinationv1.Lease{&list[0]}, nil, fixture.T0.Add(2*time.Second), time.Second)
	if got := g.leases["lease-a"].lease; got == &list[0] || got == fromEvent || got.ResourceVersion != "2" {
		t.Fatalf("a newer version read by the pass: the sighting keeps %p (version %s), want a copy of version 2", got, got.ResourceVersion)
	}
}

// TestNextMemberDeadline: the earliest of a group's members' own deadlines after a pass, on the operator's
// clock. A renewal moves its member's deadline on; a deadline at or before the pass was the pass's to act
// on; a restart no renewal answered ends a member sooner, one a renewal answered does not.
func TestNextMemberDeadline(t *testing.T) {
	const skew = time.Second
	at := func(s int) time.Time { return fixture.T0.Add(time.Duration(s) * time.Second) }
	// promising is the Lease of pod with a 60 s duration (a renewal every 20 s, overdue 30 s after the
	// last) and a promise; its renewTime is written, the operator's clock decides.
	promising := func(pod string, written time.Time) *coordinationv1.Lease {
		m := protocol.MemberLease{Group: "g", GroupUID: "group-uid", Pod: pod, PodUID: types.UID("uid-" + pod), Member: pod,
			Duration: time.Minute, StopsWithin: 6 * time.Second, Acked: 1, Claim: fixture.Qs(0)}
		l := m.Apply(nil, "ns", &written, &written)
		l.ResourceVersion, l.UID = "1", types.UID("lease-"+pod)
		return l
	}
	type seen struct {
		at    time.Time
		lease *coordinationv1.Lease
	}
	cases := []struct {
		name     string
		seen     []seen
		restart  map[types.UID]time.Time // unanswered restarts as the last pass saw them, by pod UID
		after    time.Time
		want     time.Time
		wantNone bool
	}{
		{name: "no Lease", after: at(0), wantNone: true},
		{name: "overdue half an interval after the renewal seen", seen: []seen{{at(10), promising("a", at(10))}, {at(12), promising("b", at(12))}},
			after: at(12), want: at(40)},
		{name: "a renewal seen since moves its member's deadline on", seen: []seen{{at(10), promising("a", at(10))}, {at(12), promising("b", at(12))}, {at(30), promising("a", at(30))}},
			after: at(12), want: at(42)},
		{name: "a renewal written in the future counts when seen", seen: []seen{{at(10), promising("a", at(3600))}},
			after: at(10), want: at(40)},
		{name: "deadlines at or before the pass are not the timer's", seen: []seen{{at(10), promising("a", at(10))}, {at(12), promising("b", at(12))}},
			after: at(40), want: at(42)},
		{name: "none left after the pass", seen: []seen{{at(10), promising("a", at(10))}},
			after: at(40), wantNone: true},
		{name: "a restart no renewal answered ends its member 3 s after it was seen", seen: []seen{{at(10), promising("a", at(10))}},
			restart: map[types.UID]time.Time{"uid-a": at(20)}, after: at(20), want: at(23)},
		{name: "a restart a renewal answered ends nothing", seen: []seen{{at(10), promising("a", at(10))}, {at(21), promising("a", at(21))}},
			restart: map[types.UID]time.Time{"uid-a": at(20)}, after: at(20), want: at(51)},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			g := NewSightings(at(0))
			for _, s := range tc.seen {
				g.Saw(s.lease, s.at)
			}
			for uid, restartedAt := range tc.restart {
				if g.restarts == nil {
					g.restarts = map[types.UID]restartSighting{}
				}
				g.restarts[uid] = restartSighting{count: 1, seenAt: restartedAt}
			}
			got := g.NextMemberDeadline(tc.after, skew)
			if tc.wantNone {
				if !got.IsZero() {
					t.Fatalf("deadline at %v, want none", got.Sub(fixture.T0))
				}
				return
			}
			if !got.Equal(tc.want) {
				t.Fatalf("deadline at %v, want %v", got.Sub(fixture.T0), tc.want.Sub(fixture.T0))
			}
		})
	}
}
