//go:build handoffmutations

package plan

import (
	"testing"
	"time"
)

// TestExploreFindsEachMutation turns off each rule of the handoff in turn (handoffMutation) and checks
// that the explorer finds a counterexample: a second reader of a queue, or a dead member's queues not
// moving on within the documented bound. Each runs in a world narrowed to the events that rule is about
// (the adversary's kinds of event and time steps), searched exhaustively and breadth first, so the
// counterexample is a shortest one in that world; the same world with every rule on must hold. Run it
// with
//
//	go test -tags handoffmutations ./controllers -run TestExploreFindsEachMutation -v
func TestExploreFindsEachMutation(t *testing.T) {
	defer func() { handoffMutation = "" }()
	for _, tc := range exMutationWorlds {
		t.Run(tc.mutation, func(t *testing.T) {
			handoffMutation = tc.mutation
			defer func() { handoffMutation = "" }()
			began := time.Now()
			settled := exSettled
			if start, ok := exMutationStarts[tc.mutation]; ok {
				settled = start
			}
			res := explore(settled(tc.members, tc.queues), tc.adversary, tc.depth)
			t.Logf("%d states, %d events deep, in %v", res.states, res.depth, time.Since(began).Round(time.Millisecond))
			if len(res.timeline) == 0 {
				t.Fatalf("no counterexample within %d events (%d members, %d queues)", tc.depth, tc.members, tc.queues)
			}
			t.Logf("\n%s", res.table())
			handoffMutation = ""
			if base := explore(settled(tc.members, tc.queues), tc.adversary, res.depth); len(base.timeline) > 0 {
				t.Errorf("the rules without a mutation fail too in this world, so this counterexample shows nothing about the mutation:\n%s", base.table())
			}
		})
	}
}

// exMutationStarts are the settled worlds of the mutations that do not start from exSettled.
var exMutationStarts = map[string]func(members, queues int) *exWorld{"nodeviews": exSettledNodeViews}

// exOnly is the set of kinds.
func exOnly(kinds ...exKind) map[exKind]bool {
	out := map[exKind]bool{}
	for _, k := range kinds {
		out[k] = true
	}
	return out
}

// exMutationWorlds are, for each rule of docs/protocol.md, the smallest world the explorer shows it
// needed in: the settled members and queues, the adversary, and the depth searched.
var exMutationWorlds = []struct {
	mutation        string
	members, queues int
	adversary       exAdversary
	depth           int
}{
	// A revocation holds its queues back until acknowledged: a member whose acknowledgement of a
	// revocation lands after a give-back has a Lease that claims nothing while it reads the queue again.
	{"acknowledgement", 2, 1, exAdversary{kinds: exOnly(exKindTarget, exKindPass, exKindObserve, exKindAckSlow, exKindLandsLate)}, 10},
	// A promise counts from when the publication was known: the operator's slow write.
	{"lapse", 2, 1, exAdversary{faults: 1, steps: []time.Duration{time.Second, 3 * time.Second},
		kinds: exOnly(exKindTime, exKindTarget, exKindPass, exKindObserve, exKindOpSlow, exKindOpLands)}, 10},
	// Only a member that keeps renewing is fenced: one cut off reads on until its Lease goes stale.
	{"fence", 2, 2, exAdversary{faults: 1, steps: []time.Duration{30 * time.Second},
		kinds: exOnly(exKindTime, exKindTarget, exKindPass, exKindObserve, exKindCutOff)}, 6},
	// A member is late by its renewals, counted after the fact from their stated times.
	{"lateness", 2, 1, exAdversary{faults: 1, steps: exSteps}, 2},
	// Bookkeeping that cannot be trusted puts every reader in a recovery.
	{"restart", 2, 1, exAdversary{faults: 1,
		kinds: exOnly(exKindTarget, exKindPass, exKindObserve, exKindAckSlow, exKindLandsLate, exKindEdit)}, 10},
	// A queue given back ends its earlier revocation (issue 43's timeline).
	{"giveback", 2, 1, exAdversary{faults: 1, steps: []time.Duration{time.Second, 3 * time.Second},
		kinds: exOnly(exKindTime, exKindTarget, exKindPass, exKindObserve, exKindWritesFail)}, 13},
	// Node mode: a promise counts only once the node views' line asks for the revoking generation, or a
	// node agent confirms a cut-off member's stale view past it.
	{"nodeviews", 2, 1, exAdversary{faults: 1, steps: []time.Duration{time.Second, 3 * time.Second},
		kinds: exOnly(exKindTime, exKindTarget, exKindPass, exKindObserve, exKindCutOff, exKindAgent, exKindRaise)}, 12},
}
