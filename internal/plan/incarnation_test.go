package plan

import (
	"testing"
	"time"

	"github.com/consumergroup-operator/consumergroup-operator/internal/fixture"
	"github.com/consumergroup-operator/consumergroup-operator/pkg/protocol"
)

// TestIncarnationState: every combination of evidence the operator can hold of an incarnation gives one
// state, and only a running, departed or unseen incarnation may read.
func TestIncarnationState(t *testing.T) {
	now := fixture.T0
	const skew = 5 * time.Second
	standing := func() *protocol.LeaseState {
		return &protocol.LeaseState{Name: "g.p", Pod: "p", PodUID: "uid-p", RenewTime: now.Add(-time.Second), Duration: 15 * time.Second}
	}
	expired := func() *protocol.LeaseState {
		l := standing()
		l.RenewTime = now.Add(-(15*time.Second + skew)) // Expiry is now: no longer stands
		return l
	}
	drained := func(l *protocol.LeaseState) *protocol.LeaseState { l.Stopped = true; return l }
	for _, tc := range []struct {
		name string
		inc  incarnation
		want incarnationState
	}{
		{"a pod without a Lease", incarnation{exists: true}, incarnationRunning},
		{"a pod with a standing Lease", incarnation{exists: true, lease: standing()}, incarnationRunning},
		{"a pod whose Lease expired", incarnation{exists: true, lease: expired()}, incarnationLapsed},
		{"a gone pod's standing Lease", incarnation{lease: standing()}, incarnationDeparted},
		{"a gone pod's expired Lease", incarnation{lease: expired()}, incarnationGone},
		{"named by the assignment only, within the unseen window", incarnation{unseenUntil: now.Add(time.Second)}, incarnationUnseen},
		{"named by the assignment only, the window over", incarnation{unseenUntil: now}, incarnationGone},
		{"named by nothing at all", incarnation{}, incarnationGone},
		{"the kubelet reports it stopped", incarnation{exists: true, stopped: true}, incarnationStopped},
		{"the kubelet reports it stopped, its Lease standing", incarnation{exists: true, stopped: true, lease: standing()}, incarnationStopped},
		{"its Lease says it stopped, its pod running", incarnation{exists: true, lease: drained(standing())}, incarnationDrained},
		{"its Lease says it stopped, its pod gone, the Lease standing", incarnation{lease: drained(standing())}, incarnationDrained},
		{"its Lease says it stopped, its pod gone, the Lease expired", incarnation{lease: drained(expired())}, incarnationGone},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := tc.inc.state(now, skew)
			if got != tc.want {
				t.Fatalf("state %d, want %d", got, tc.want)
			}
			reads := tc.want == incarnationRunning || tc.want == incarnationDeparted || tc.want == incarnationUnseen
			if tc.inc.stands(now, skew) != reads {
				t.Fatalf("stands %v, want %v", !reads, reads)
			}
		})
	}
}
