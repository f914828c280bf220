package member

import (
	"fmt"

	"k8s.io/apimachinery/pkg/types"

	"github.com/consumergroup-operator/consumergroup-operator/pkg/protocol"
)

// phase is where a member is in its life (the package doc draws how it moves). Every phase but
// phaseStopped is decided anew from what the member observes each time anything it observes changes;
// phaseStopped is entered by Drain only, and never left.
type phase uint8

const (
	// phaseStarting: the assignment ConfigMap has not been read yet. Nothing is in force.
	phaseStarting phase = iota
	// phaseUnassigned: there is no assignment to read for the pod: the ConfigMap does not exist, or the
	// pod's entry in it cannot be read. Nothing is in force.
	phaseUnassigned
	// phaseFenced: the pod's entry can be read, but the member may not act on it: its Lease is not held
	// (not taken yet, held by an earlier pod of the same name, or taken over), or was not renewed in time,
	// or, with contact fencing, the member has not confirmed its view for the contact timeout. Nothing is
	// in force.
	phaseFenced
	// phaseClaiming: a new assignment (pending) waits until the Lease claims its queues; the one in force
	// stays until then.
	phaseClaiming
	// phaseFollowing: the assignment in force is the newest the member may act on.
	phaseFollowing
	// phaseStopped: Drain stopped the member. Nothing is in force, claimed or newly acknowledged until its
	// process restarts.
	phaseStopped
)

var phaseNames = [...]string{
	phaseStarting:   "Starting",
	phaseUnassigned: "Unassigned",
	phaseFenced:     "Fenced",
	phaseClaiming:   "Claiming",
	phaseFollowing:  "Following",
	phaseStopped:    "Stopped",
}

func (p phase) String() string {
	if int(p) < len(phaseNames) {
		return phaseNames[p]
	}
	return fmt.Sprintf("phase(%d)", uint8(p))
}

// event is what makes the member decide where it goes next.
type event uint8

const (
	// observed: something the member observes changed (its view of the assignment, its Lease, its contact
	// fence, or the claim the Lease holds); the decision reads them all again.
	observed event = iota
	// drained: Drain stops the member.
	drained
)

// memberState is what the member has decided: its phase, and the assignments that go with it.
type memberState struct {
	phase phase
	// reason says why nothing is in force; "" when the view offers an assignment (following or claiming).
	reason string
	// inForce is the assignment delivered last.
	inForce Assignment
	// pending is the assignment held back until the Lease claims its queues (phaseClaiming); zero in every
	// other phase. The application may read a queue only once the Lease says it may: otherwise a claim the
	// operator or a new pod of the same name reads as released could hide a queue being read.
	pending Assignment
	// group and highest are the group incarnation whose generations the member follows and the highest
	// generation it delivered: it never goes back to a lower one, nor delivers other queues under the same
	// one, so an old copy of the ConfigMap someone restores is not acted on.
	group   types.UID
	highest Assignment
}

// observation is what the member sees when it decides.
type observation struct {
	// synced is set once the assignment ConfigMap has been read; view is the pod's entry in it.
	synced bool
	view   protocol.EntryView
	// fresh is set while the member may act on its view: its Lease is held and fresh and, with contact
	// fencing, its view confirmed; notFresh says why not.
	fresh    bool
	notFresh string
	// claimed are the queues the Lease claims, as last written.
	claimed []Queue
	// configMap is the assignment ConfigMap's name and memberID the member id, from the Config.
	configMap, memberID string
}

// transition is a decision: the member's next state, and what the Client does to get there.
type transition struct {
	next memberState
	// newGroup: the group was created anew. Its generations start over and no acknowledgement of the old
	// one counts for it; the Lease must say so.
	newGroup bool
	// claim: next.pending is new; the Lease must be written to claim its queues.
	claim bool
	// deliver: next.inForce is new; it is handed to the application.
	deliver bool
}

// decide is the one place that says where the member goes from s on ev, given what it observes. It
// changes nothing; the Client carries out the transition it returns.
func decide(s memberState, ev event, o observation) transition {
	t := transition{next: s}
	switch {
	case s.phase == phaseStopped:
		return t // the application was told to read nothing, and Drain waited for it
	case ev == drained:
		t.next = memberState{phase: phaseStopped, reason: drainedReason, group: s.group, highest: s.highest}
		t.deliver = !s.inForce.equal(Assignment{})
		return t
	}
	n := &t.next
	if g := o.view.GroupUID; g != "" && g != s.group {
		// A group created anew (or first seen): its generations start over. The queues read so far stay
		// claimed.
		if s.group != "" {
			t.newGroup, n.highest = true, Assignment{}
		}
		n.group = g
	}
	to, a, reason := offer(o)
	if to == phaseFollowing && !supersedes(a, n.highest) {
		return t // keep what is in force, and why
	}
	n.phase, n.reason = to, reason
	switch {
	case a.equal(n.inForce):
		n.pending = Assignment{}
	case protocol.SubtractQueues(a.Queues, o.claimed) != nil:
		// Claim first, deliver once the Lease says so; the write is a renewal.
		n.phase = phaseClaiming
		t.claim = !a.equal(n.pending)
		n.pending = a
	default:
		n.inForce, n.pending, t.deliver = a, Assignment{}, true
		if a.Generation > 0 {
			n.highest = a
		}
	}
	return t
}

// offer is the phase what the member observes puts it in, short of the claim: the assignment its view
// offers when it may act on it (phaseFollowing), else none and why.
func offer(o observation) (phase, Assignment, string) {
	switch {
	case !o.synced:
		return phaseStarting, Assignment{}, fmt.Sprintf("ConfigMap %s has not been read yet", o.configMap)
	case !o.view.Exists:
		return phaseUnassigned, Assignment{}, fmt.Sprintf("ConfigMap %s does not exist: the group has published no assignment", o.configMap)
	case o.view.Err != nil:
		return phaseUnassigned, Assignment{}, o.view.Err.Error()
	case !o.fresh:
		return phaseFenced, Assignment{}, o.notFresh
	}
	a := Assignment{Generation: o.view.Generation, Member: o.view.Member, Queues: o.view.Queues}
	if a.Member == "" {
		a.Member = o.memberID
	}
	return phaseFollowing, a, ""
}

// supersedes reports whether a may be delivered after highest, the highest generation delivered: a later
// generation, or highest itself. An older copy of the assignment, or one edited under the same generation,
// is not acted on.
func supersedes(a, highest Assignment) bool {
	return a.Generation > highest.Generation || a.equal(highest)
}
