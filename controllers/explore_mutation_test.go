//go:build handoffmutations

package controllers

import (
	"testing"
	"time"
)

// TestExploreFindsEachMutation turns off each rule of the handoff in turn (handoffMutation) and checks
// that the explorer finds a counterexample: a second reader of a queue, or a dead member's queues not
// moving on within the documented bound. Each runs in the smallest world that shows it, breadth first,
// so the counterexample is a shortest one in that world. Run it with
//
//	go test -tags handoffmutations ./controllers -run TestExplore
//
// It is not yet green, and make test does not run it: within these bounds it finds the lateness
// mutation, but no counterexample yet for acknowledgement, lapse, fence, restart or giveback (the
// acknowledgement world alone explores 8.8 million states in 5 minutes). Those need longer
// interleavings, or adversaries aimed at each rule, than the search reaches; docs/protocol.md, "The
// rules explored", says so.
func TestExploreFindsEachMutation(t *testing.T) {
	defer func() { handoffMutation = "" }()
	for _, tc := range []struct {
		mutation        string
		members, queues int
		faults, depth   int
	}{
		{"acknowledgement", 2, 1, 1, 8},
		{"lapse", 2, 1, 1, 8},
		{"fence", 2, 1, 1, 8},
		{"lateness", 2, 1, 1, 2},
		{"restart", 2, 1, 1, 8},
		{"giveback", 2, 1, 1, 12},
	} {
		handoffMutation = tc.mutation
		faults := *exploreFaults
		*exploreFaults = tc.faults
		began := time.Now()
		res := explore(exSettled(tc.members, tc.queues), tc.depth)
		*exploreFaults = faults
		t.Logf("mutation %s: %d states, %d events deep, in %v", tc.mutation, res.states, res.depth, time.Since(began).Round(time.Millisecond))
		if len(res.timeline) == 0 {
			t.Errorf("mutation %s: no counterexample within %d events (%d members, %d queues, %d faults)", tc.mutation, tc.depth, tc.members, tc.queues, tc.faults)
			continue
		}
		t.Logf("mutation %s:\n%s", tc.mutation, res.table())
		handoffMutation = ""
		*exploreFaults = tc.faults
		base := explore(exSettled(tc.members, tc.queues), res.depth)
		*exploreFaults = faults
		if len(base.timeline) > 0 {
			t.Errorf("mutation %s: the rules without a mutation fail too in this world, so this counterexample shows nothing about the mutation:\n%s", tc.mutation, base.table())
		}
	}
}
