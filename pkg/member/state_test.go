package member

import (
	"errors"
	"reflect"
	"testing"

	"github.com/consumergroup-operator/consumergroup-operator/pkg/protocol"
)

// TestDecide walks decide through every phase and every way out of it, with no API server: what the
// member observes in, its next state and what the Client must do out.
func TestDecide(t *testing.T) {
	q0, q1 := Queue{Topic: "orders", Broker: "a", ID: 0}, Queue{Topic: "orders", Broker: "a", ID: 1}
	gen1 := Assignment{Generation: 1, Member: "consumer-0", Queues: []Queue{q0}}
	gen2 := Assignment{Generation: 2, Member: "consumer-0", Queues: []Queue{q0, q1}}
	release3 := Assignment{Generation: 3, Member: "consumer-0"}
	entry := func(a Assignment) protocol.EntryView {
		return protocol.EntryView{Exists: true, GroupUID: "g1", Generation: a.Generation, Queues: a.Queues}
	}
	// seen observes a, fresh, with the Lease claiming claimed.
	seen := func(a Assignment, claimed ...Queue) observation {
		return observation{synced: true, view: entry(a), fresh: true, claimed: claimed, configMap: "orders-assignment", memberID: "consumer-0"}
	}
	following := func(a Assignment) memberState {
		return memberState{phase: phaseFollowing, inForce: a, group: "g1", highest: a}
	}
	fenced := func(o observation) observation {
		o.fresh, o.notFresh = false, "Lease consumer-0: not renewed"
		return o
	}
	nothing := memberState{phase: phaseStarting, reason: "the assignment has not been read yet"}

	tests := []struct {
		name string
		from memberState
		ev   event
		seen observation
		want transition
	}{{
		name: "starting: nothing read yet",
		from: nothing,
		seen: observation{configMap: "orders-assignment"},
		want: transition{next: memberState{phase: phaseStarting, reason: "ConfigMap orders-assignment has not been read yet"}},
	}, {
		name: "unassigned: no ConfigMap",
		from: nothing,
		seen: observation{synced: true, configMap: "orders-assignment"},
		want: transition{next: memberState{phase: phaseUnassigned, reason: "ConfigMap orders-assignment does not exist: the group has published no assignment"}},
	}, {
		name: "unassigned: the entry cannot be read, and what was in force is taken back",
		from: following(gen1),
		seen: observation{synced: true, view: protocol.EntryView{Exists: true, GroupUID: "g1", Err: errors.New("entry is malformed")}, fresh: true},
		want: transition{next: memberState{phase: phaseUnassigned, reason: "entry is malformed", group: "g1", highest: gen1}, deliver: true},
	}, {
		name: "fenced: the Lease is not fresh, and what was in force is taken back",
		from: following(gen1),
		seen: fenced(seen(gen1, q0)),
		want: transition{next: memberState{phase: phaseFenced, reason: "Lease consumer-0: not renewed", group: "g1", highest: gen1}, deliver: true},
	}, {
		name: "fenced: still nothing in force, only the reason changes",
		from: memberState{phase: phaseUnassigned, reason: "entry is malformed", group: "g1"},
		seen: fenced(seen(gen1)),
		want: transition{next: memberState{phase: phaseFenced, reason: "Lease consumer-0: not renewed", group: "g1"}},
	}, {
		name: "claiming: the first group seen, its queues not yet claimed",
		from: memberState{phase: phaseFenced, reason: "Lease consumer-0: not renewed"},
		seen: seen(gen1),
		want: transition{next: memberState{phase: phaseClaiming, inForce: Assignment{}, pending: gen1, group: "g1"}, claim: true},
	}, {
		name: "claiming: the same assignment again asks for no second write",
		from: memberState{phase: phaseClaiming, pending: gen1, group: "g1"},
		seen: seen(gen1),
		want: transition{next: memberState{phase: phaseClaiming, pending: gen1, group: "g1"}},
	}, {
		name: "claiming: a newer generation while the last is pending is claimed in its place",
		from: memberState{phase: phaseClaiming, pending: gen1, group: "g1"},
		seen: seen(gen2, q0),
		want: transition{next: memberState{phase: phaseClaiming, pending: gen2, group: "g1"}, claim: true},
	}, {
		name: "following: the claim covers the pending assignment",
		from: memberState{phase: phaseClaiming, pending: gen1, group: "g1"},
		seen: seen(gen1, q0),
		want: transition{next: following(gen1), deliver: true},
	}, {
		name: "following: an assignment that takes queues away needs no claim",
		from: following(gen2),
		seen: seen(release3, q0, q1),
		want: transition{next: following(release3), deliver: true},
	}, {
		name: "following: back to what is in force drops what was pending",
		from: memberState{phase: phaseClaiming, inForce: gen1, pending: gen2, group: "g1", highest: gen1},
		seen: seen(gen1, q0),
		want: transition{next: following(gen1)},
	}, {
		name: "following: an older generation restored keeps what is in force",
		from: following(gen2),
		seen: seen(gen1, q0, q1),
		want: transition{next: following(gen2)},
	}, {
		name: "following: the same generation with other queues keeps what is in force",
		from: following(gen2),
		seen: seen(Assignment{Generation: 2, Member: "consumer-0", Queues: []Queue{q1}}, q0, q1),
		want: transition{next: following(gen2)},
	}, {
		name: "fenced, then an older copy: the member stays fenced, for the same reason",
		from: memberState{phase: phaseFenced, reason: "Lease consumer-0: not renewed", group: "g1", highest: gen2},
		seen: seen(gen1, q0, q1),
		want: transition{next: memberState{phase: phaseFenced, reason: "Lease consumer-0: not renewed", group: "g1", highest: gen2}},
	}, {
		name: "a group created anew starts its generations over",
		from: following(gen2),
		seen: func() observation { o := seen(gen1, q0, q1); o.view.GroupUID = "g2"; return o }(),
		want: transition{next: memberState{phase: phaseFollowing, inForce: gen1, group: "g2", highest: gen1}, newGroup: true, deliver: true},
	}, {
		name: "the entry's member id is the Lease's holder when it names none",
		from: nothing,
		seen: seen(Assignment{Generation: 1, Queues: []Queue{q0}}, q0),
		want: transition{next: following(gen1), deliver: true},
	}, {
		name: "stopped: drained takes back what is in force",
		from: memberState{phase: phaseClaiming, inForce: gen1, pending: gen2, group: "g1", highest: gen1},
		ev:   drained,
		want: transition{next: memberState{phase: phaseStopped, reason: drainedReason, group: "g1", highest: gen1}, deliver: true},
	}, {
		name: "stopped: drained with nothing in force hands nothing",
		from: memberState{phase: phaseFenced, reason: "Lease consumer-0: not renewed", group: "g1", highest: gen1},
		ev:   drained,
		want: transition{next: memberState{phase: phaseStopped, reason: drainedReason, group: "g1", highest: gen1}},
	}, {
		name: "stopped: nothing observed leaves it",
		from: memberState{phase: phaseStopped, reason: drainedReason, group: "g1", highest: gen1},
		seen: func() observation { o := seen(gen2, q0, q1); o.view.GroupUID = "g2"; return o }(),
		want: transition{next: memberState{phase: phaseStopped, reason: drainedReason, group: "g1", highest: gen1}},
	}, {
		name: "stopped: a second drain changes nothing",
		from: memberState{phase: phaseStopped, reason: drainedReason, group: "g1", highest: gen1},
		ev:   drained,
		want: transition{next: memberState{phase: phaseStopped, reason: drainedReason, group: "g1", highest: gen1}},
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := decide(tt.from, tt.ev, tt.seen)
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("from %v:\n got %+v\nwant %+v", tt.from.phase, got, tt.want)
			}
		})
	}
}

// TestDecideReachesEveryPhase keeps the table above honest: every phase is some case's destination.
func TestDecideReachesEveryPhase(t *testing.T) {
	q := Queue{Topic: "orders", Broker: "a", ID: 0}
	view := protocol.EntryView{Exists: true, GroupUID: "g1", Generation: 1, Queues: []Queue{q}}
	reached := map[phase]bool{}
	for _, c := range []struct {
		ev event
		o  observation
	}{
		{observed, observation{}},
		{observed, observation{synced: true}},
		{observed, observation{synced: true, view: view}},
		{observed, observation{synced: true, view: view, fresh: true}},
		{observed, observation{synced: true, view: view, fresh: true, claimed: []Queue{q}}},
		{drained, observation{}},
	} {
		reached[decide(memberState{}, c.ev, c.o).next.phase] = true
	}
	for p := range phaseNames {
		if !reached[phase(p)] {
			t.Errorf("no case reaches %v", phase(p))
		}
	}
}
