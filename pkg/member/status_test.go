package member_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/consumergroup-operator/consumergroup-operator/pkg/member"
)

// TestStatusUnhealthy checks what a liveness probe is told for each state a member can be in.
func TestStatusUnhealthy(t *testing.T) {
	renewed := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	healthy := member.Status{Synced: true, LeaseRenewedAt: renewed}
	with := func(change func(*member.Status)) member.Status {
		s := healthy
		change(&s)
		return s
	}
	cases := []struct {
		name   string
		status member.Status
		want   string // a phrase of the reason; "" for healthy
	}{
		{"healthy", healthy, ""},
		{"drained", with(func(s *member.Status) { s.Drained = true }), "drained"},
		{"not read yet", with(func(s *member.Status) { s.Synced = false }), "has not been read"},
		{"Lease never written", with(func(s *member.Status) { s.LeaseRenewedAt = time.Time{} }), "Lease has not been written"},
		{"Lease never written, and why", with(func(s *member.Status) { s.LeaseRenewedAt, s.LeaseError = time.Time{}, errors.New("forbidden") }), "written yet: forbidden"},
		{"renewal failing", with(func(s *member.Status) { s.LeaseError = errors.New("timeout") }), "renewing the Lease: timeout"},
		{"cut off", with(func(s *member.Status) { s.ContactLost = "no confirmation for 4s" }), "no confirmation for 4s"},
		{"drained wins over the rest", with(func(s *member.Status) { s.Drained, s.Synced, s.ContactLost = true, false, "x" }), "drained"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got := tc.status.Unhealthy()
			if (got == "") != (tc.want == "") || !strings.Contains(got, tc.want) {
				t.Fatalf("Unhealthy() = %q, want %q", got, tc.want)
			}
		})
	}
}
