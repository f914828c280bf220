package plan

import (
	"testing"
	"time"

	"github.com/consumergroup-operator/consumergroup-operator/pkg/protocol"
)

// TestMembershipEnds checks when a member stops being one: with a promise, at the first of a renewal
// overdue by half an interval, its kubelet overdue, and an unanswered restart's grace; without, when its
// Lease runs out, whatever the kubelets say. Both count from RenewedBy, not from when the renewal was seen.
func TestMembershipEnds(t *testing.T) {
	renewed := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	promising := &protocol.LeaseState{RenewTime: renewed, RenewedBy: renewed, Duration: 60 * time.Second, StopsWithin: 6 * time.Second}
	silent := &protocol.LeaseState{RenewTime: renewed, RenewedBy: renewed, Duration: 60 * time.Second}
	// Seen 20 s after the renewal it states, by an operator that had just started.
	seenLate := &protocol.LeaseState{RenewTime: renewed.Add(20 * time.Second), RenewedBy: renewed, Duration: 60 * time.Second, StopsWithin: 6 * time.Second}
	silentSeenLate := &protocol.LeaseState{RenewTime: renewed.Add(20 * time.Second), RenewedBy: renewed, Duration: 60 * time.Second}
	s := func(n float64) time.Time { return renewed.Add(time.Duration(n * float64(time.Second))) }
	cases := []struct {
		name                  string
		lease                 *protocol.LeaseState
		nodeLate, restartedAt time.Time
		want                  time.Time
	}{
		{name: "no promise: the Lease's end", lease: silent, nodeLate: s(5), restartedAt: s(5), want: s(60)},
		{name: "a renewal overdue by half an interval", lease: promising, want: s(30)},
		{name: "the kubelet overdue", lease: promising, nodeLate: s(12), want: s(12)},
		{name: "a restart no renewal answered", lease: promising, restartedAt: s(9), want: s(9).Add(RestartRenewGrace)},
		{name: "the kubelet overdue before the restart's grace", lease: promising, nodeLate: s(10), restartedAt: s(9), want: s(10)},
		{name: "a restart the renewal answered", lease: promising, restartedAt: s(0.5), want: s(30)},
		{name: "a restart late enough changes nothing", lease: promising, restartedAt: s(29), want: s(30)},
		{name: "a renewal seen after the fact: overdue from when it can have been", lease: seenLate, want: s(30)},
		{name: "no promise, a renewal seen after the fact: the Lease's end from then too", lease: silentSeenLate, want: s(60)},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if got := membershipEnds(tc.lease, tc.nodeLate, tc.restartedAt); !got.Equal(tc.want) {
				t.Fatalf("membership ends %v after the renewal, want %v", got.Sub(renewed), tc.want.Sub(renewed))
			}
		})
	}
}
