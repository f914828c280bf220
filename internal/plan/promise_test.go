package plan

import (
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/consumergroup-operator/consumergroup-operator/internal/fixture"
	"github.com/consumergroup-operator/consumergroup-operator/pkg/allocate"
	"github.com/consumergroup-operator/consumergroup-operator/pkg/protocol"
)

// promisingLease is lease with a 60 s duration and the member's contact-fencing promise (0 for none).
func promisingLease(pod string, acked int64, claim []allocate.Queue, renewed time.Time, promise time.Duration) protocol.LeaseState {
	m := protocol.MemberLease{Group: "g", GroupUID: "group-uid", Pod: pod, PodUID: types.UID("uid-" + pod), Member: pod,
		Duration: time.Minute, Acked: acked, Claim: claim, StopsWithin: promise}
	l := m.Apply(nil, "ns", &renewed, &renewed)
	l.ResourceVersion, l.UID = "1", types.UID("lease-"+pod)
	return protocol.ReadLease(l)
}

// TestDecideCutOffMembersQueuesMoveWhenItsPromiseRunsOut: p1 stops renewing, its pod Ready and nothing
// from its kubelet (a lost node, a partition). With a promise of 6 s in its Lease, it stops being a member
// once a renewal is 1.5 intervals overdue (30 s of a 60 s Lease), its queues are revoked, and they go to
// p0 6 s plus the margin after that generation was published: 37 s, where its Lease would have made them
// wait 61 s. Without a promise they wait for the Lease.
func TestDecideCutOffMembersQueuesMoveWhenItsPromiseRunsOut(t *testing.T) {
	for _, tc := range []struct {
		name    string
		promise time.Duration
		movedBy time.Duration
	}{
		{"promise of 6s", 6 * time.Second, 37 * time.Second},
		{"no promise", 0, 61 * time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) {
			group := fixture.Group(averagely, 4)
			obs := world([]corev1.Pod{fixture.Pod("p0"), fixture.Pod("p1")},
				promisingLease("p0", 0, nil, fixture.T0, tc.promise), promisingLease("p1", 0, nil, fixture.T0, tc.promise))
			d := Decide(group, obs, env(group, fixture.T0))
			obs = applied(group, obs, d)
			obs.Publications = obs.Publications.Add(d.Report.Generation, fixture.T0)
			p1Lease := promisingLease("p1", d.Report.Generation, fixture.Qs(2, 3), fixture.T0, tc.promise)
			// p0 renews whenever asked; p1 never again.
			at := func(after time.Duration) *Decision {
				obs.Leases = []protocol.LeaseState{promisingLease("p0", obs.Published.Generation, entryOf(d, "p0"), fixture.T0.Add(after), tc.promise), p1Lease}
				d = Decide(group, obs, env(group, fixture.T0.Add(after)))
				assertPartition(t, d)
				if len(d.Write.ConfigMaps) > 0 {
					obs = applied(group, obs, d)
					obs.Publications = obs.Publications.Add(d.Report.Generation, fixture.T0.Add(after))
				}
				return d
			}
			if d := at(29 * time.Second); len(entryOf(d, "p0")) != 2 || len(entryOf(d, "p1")) != 2 {
				t.Fatalf("29 s after p1's last renewal: p0 %v, p1 %v; want 2 each", entryOf(d, "p0"), entryOf(d, "p1"))
			}
			revokedAt := 30 * time.Second
			if tc.promise == 0 {
				revokedAt = 60 * time.Second
			}
			for after := 30 * time.Second; after < tc.movedBy; after += 500 * time.Millisecond {
				d := at(after)
				if got := len(entryOf(d, "p0")); got != 2 {
					t.Fatalf("%v after p1's last renewal p0 reads %d queues; p1's may still be read until %v", after, got, tc.movedBy)
				}
				if _, member := d.Report.Entries["p1"]; member == (after >= revokedAt) {
					t.Fatalf("%v after p1's last renewal p1 is a member: %v", after, member)
				}
			}
			if d := at(tc.movedBy); len(entryOf(d, "p0")) != 4 {
				t.Fatalf("%v after p1's last renewal p0 reads %v; want all 4", tc.movedBy, entryOf(d, "p0"))
			}
		})
	}
}

func TestPublicationsKnownSince(t *testing.T) {
	var ps Publications
	ps = ps.Add(3, fixture.T0)
	ps = ps.Add(5, fixture.T0.Add(time.Second))
	ps = ps.Add(4, fixture.T0.Add(2*time.Second)) // an older copy read back later: known already
	ps = ps.Add(5, fixture.T0.Add(3*time.Second))
	for _, tc := range []struct {
		generation int64
		want       time.Time
		known      bool
	}{
		{1, fixture.T0, true}, // older than any remembered: from the oldest remembered, which is later
		{3, fixture.T0, true},
		{4, fixture.T0.Add(time.Second), true},
		{5, fixture.T0.Add(time.Second), true},
		{6, time.Time{}, false},
	} {
		if got, ok := ps.KnownSince(tc.generation); ok != tc.known || !got.Equal(tc.want) {
			t.Errorf("knownSince(%d) = %v, %v; want %v, %v", tc.generation, got, ok, tc.want, tc.known)
		}
	}
	for g := range int64(200) {
		ps = ps.Add(g+10, fixture.T0.Add(time.Duration(g)*time.Second))
	}
	if len(ps) != maxPublications {
		t.Fatalf("%d publications remembered, want at most %d", len(ps), maxPublications)
	}
	if got, _ := ps.KnownSince(10); !got.Equal(ps[0].knownAt) || !got.After(fixture.T0) {
		t.Fatalf("a forgotten generation counts from %v, want the oldest remembered (%v)", got, ps[0].knownAt)
	}
}

// TestDecidePromiseWaitsForTheNodeViews: as above, with node views. p1's promise counts only from when
// every line of the group in the node views asks for the generation that revoked its queues: a node agent
// may confirm p1's view until then. The revocation is published at 30 s; the line is known to ask for it
// from 40 s, so the queues move at 47 s, not 37 s. A line not known, or asking for less, holds them.
func TestDecidePromiseWaitsForTheNodeViews(t *testing.T) {
	const promise = 6 * time.Second
	group := fixture.Group(averagely, 4)
	obs := world([]corev1.Pod{fixture.Pod("p0"), fixture.Pod("p1")},
		promisingLease("p0", 0, nil, fixture.T0, promise), promisingLease("p1", 0, nil, fixture.T0, promise))
	obs.NodeViews = NodeViews{Enabled: true, Lines: map[string]LineHistory{"n1": LineHistory{}.Add(fixture.T0, 1)}}
	d := Decide(group, obs, env(group, fixture.T0))
	obs = applied(group, obs, d)
	obs.Publications = obs.Publications.Add(d.Report.Generation, fixture.T0)
	p1Lease := promisingLease("p1", d.Report.Generation, fixture.Qs(2, 3), fixture.T0, promise)
	var revokedIn int64
	at := func(after time.Duration) *Decision {
		obs.Leases = []protocol.LeaseState{promisingLease("p0", obs.Published.Generation, entryOf(d, "p0"), fixture.T0.Add(after), promise), p1Lease}
		d = Decide(group, obs, env(group, fixture.T0.Add(after)))
		assertPartition(t, d)
		if len(d.Write.ConfigMaps) > 0 {
			obs = applied(group, obs, d)
			obs.Publications = obs.Publications.Add(d.Report.Generation, fixture.T0.Add(after))
			if _, member := d.Report.Entries["p1"]; !member && revokedIn == 0 {
				revokedIn = d.Report.Generation
			}
		}
		return d
	}
	for after := 30 * time.Second; after < 47*time.Second; after += 500 * time.Millisecond {
		if after == 35*time.Second {
			// Raised, but not to the revocation's generation: it still holds the queues.
			obs.NodeViews.Lines["n1"] = obs.NodeViews.Lines["n1"].Add(fixture.T0.Add(after), revokedIn-1)
		}
		if after == 40*time.Second {
			obs.NodeViews.Lines["n1"] = obs.NodeViews.Lines["n1"].Add(fixture.T0.Add(after), revokedIn)
		}
		if got := len(entryOf(at(after), "p0")); got != 2 {
			t.Fatalf("%v after p1's last renewal p0 reads %d queues; the node view asks for generation %d only from 40 s", after, got, revokedIn)
		}
	}
	if revokedIn == 0 {
		t.Fatal("p1's queues were never revoked")
	}
	if d := at(47 * time.Second); len(entryOf(d, "p0")) != 4 {
		t.Fatalf("47 s after p1's last renewal p0 reads %v; want all 4", entryOf(d, "p0"))
	}
}
