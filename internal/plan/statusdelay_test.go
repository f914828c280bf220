package plan

import (
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/consumergroup-operator/consumergroup-operator/api/v1alpha1"
)

func TestStatusWriteWait(t *testing.T) {
	now := time.Date(2026, 12, 7, 5, 0, 0, 0, time.UTC)
	status := func(acked ...int64) *v1alpha1.ConsumerGroupStatus {
		s := &v1alpha1.ConsumerGroupStatus{ObservedGeneration: 3, AssignmentGeneration: 7, MemberCount: int32(len(acked)),
			Conditions: []metav1.Condition{{Type: "Ready", Status: metav1.ConditionTrue, Reason: "Assigned", ObservedGeneration: 3}}}
		for i, a := range acked {
			line := v1alpha1.MemberStatus{ID: string(rune('a' + i)), Pod: "pod-" + string(rune('a'+i)), Queues: 2}
			if a >= 0 {
				line.AckedGeneration = ptr.To(a)
			}
			s.Members = append(s.Members, line)
		}
		return s
	}
	with := func(s *v1alpha1.ConsumerGroupStatus, f func(*v1alpha1.ConsumerGroupStatus)) *v1alpha1.ConsumerGroupStatus {
		f(s)
		return s
	}
	const interval = 10 * time.Second
	for _, tc := range []struct {
		name        string
		prev, next  *v1alpha1.ConsumerGroupStatus
		lastWritten time.Time
		interval    time.Duration
		want        time.Duration
	}{
		{name: "an acknowledgement within the interval waits for its end",
			prev: status(6, 6), next: status(7, 6), lastWritten: now.Add(-3 * time.Second), interval: interval, want: 7 * time.Second},
		{name: "a first acknowledgement, from a member without one", prev: status(-1, 6), next: status(7, 6),
			lastWritten: now.Add(-3 * time.Second), interval: interval, want: 7 * time.Second},
		{name: "the interval is over", prev: status(6, 6), next: status(7, 6), lastWritten: now.Add(-interval), interval: interval, want: 0},
		{name: "nothing written yet since the operator started", prev: status(6, 6), next: status(7, 6), interval: interval, want: 0},
		{name: "no interval", prev: status(6, 6), next: status(7, 6), lastWritten: now.Add(-time.Second), want: 0},
		{name: "a member joined", prev: status(6), next: status(6, -1), lastWritten: now.Add(-time.Second), interval: interval, want: 0},
		{name: "a member's queues changed with its acknowledgement", prev: status(6, 6),
			next: with(status(7, 6), func(s *v1alpha1.ConsumerGroupStatus) { s.Members[0].Queues = 3 }), lastWritten: now.Add(-time.Second), interval: interval, want: 0},
		{name: "a condition changed with it", prev: status(6, 6),
			next: with(status(7, 7), func(s *v1alpha1.ConsumerGroupStatus) { s.Conditions[0].Reason = "HandoffComplete" }), lastWritten: now.Add(-time.Second), interval: interval, want: 0},
		{name: "a new generation", prev: status(6, 6),
			next: with(status(7, 6), func(s *v1alpha1.ConsumerGroupStatus) { s.AssignmentGeneration = 8 }), lastWritten: now.Add(-time.Second), interval: interval, want: 0},
		{name: "nothing changed", prev: status(6, 6), next: status(6, 6), lastWritten: now.Add(-time.Second), interval: interval, want: 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := StatusWriteWait(tc.prev, tc.next, tc.lastWritten, now, tc.interval); got != tc.want {
				t.Fatalf("StatusWriteWait = %v, want %v", got, tc.want)
			}
		})
	}
}
