package controllers

import (
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/consumergroup-operator/consumergroup-operator/internal/plan"
	"github.com/consumergroup-operator/consumergroup-operator/pkg/protocol"
)

func restartedPod(uid types.UID, restarts ...int32) corev1.Pod {
	pod := corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: string(uid), UID: uid}}
	for i, n := range restarts {
		pod.Status.ContainerStatuses = append(pod.Status.ContainerStatuses, corev1.ContainerStatus{Name: string(rune('a' + i)), RestartCount: n})
	}
	return pod
}

// TestSightRestarts plays the restart sightings of one pod through a sequence of reads: what the kubelet
// reports, when the Lease was last renewed, and whether a restart is unanswered, and since when.
func TestSightRestarts(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	at := func(s float64) time.Time { return t0.Add(time.Duration(s * float64(time.Second))) }
	type read struct {
		at       time.Time
		restarts []int32
		// sidecarRestarts are the restarts of an init container that keeps running.
		sidecarRestarts int32
		renewedAt       time.Time
		// want is when the unanswered restart was first seen; zero for none.
		want time.Time
	}
	cases := []struct {
		name  string
		reads []read
	}{{
		name:  "restarts before the operator looked are not evidence",
		reads: []read{{at: at(0), restarts: []int32{3}, renewedAt: at(-50)}},
	}, {
		name: "a restart no renewal answers, counted over every container",
		reads: []read{
			{at: at(0), restarts: []int32{0, 1}, renewedAt: at(-5)},
			{at: at(10), restarts: []int32{1, 1}, renewedAt: at(-5), want: at(10)},
			{at: at(12), restarts: []int32{1, 1}, renewedAt: at(-5), want: at(10)},
		},
	}, {
		name: "a native sidecar's restart (the agent's) counts",
		reads: []read{
			{at: at(0), restarts: []int32{0}, renewedAt: at(-5)},
			{at: at(10), restarts: []int32{0}, sidecarRestarts: 1, renewedAt: at(-5), want: at(10)},
		},
	}, {
		name: "the restarted process renews: answered",
		reads: []read{
			{at: at(0), restarts: []int32{0}, renewedAt: at(-5)},
			{at: at(10), restarts: []int32{1}, renewedAt: at(-5), want: at(10)},
			{at: at(11), restarts: []int32{1}, renewedAt: at(10.5)},
		},
	}, {
		name: "a renewal just before the kubelet's report answers it",
		reads: []read{
			{at: at(0), restarts: []int32{0}, renewedAt: at(-5)},
			{at: at(10), restarts: []int32{1}, renewedAt: at(9.5)},
		},
	}, {
		name: "restarted again and again without a renewal: the first restart counts",
		reads: []read{
			{at: at(0), restarts: []int32{0}, renewedAt: at(-5)},
			{at: at(10), restarts: []int32{1}, renewedAt: at(-5), want: at(10)},
			{at: at(20), restarts: []int32{2}, renewedAt: at(-5), want: at(10)},
		},
	}, {
		name: "a restart after an answered one is new",
		reads: []read{
			{at: at(0), restarts: []int32{0}, renewedAt: at(-5)},
			{at: at(10), restarts: []int32{1}, renewedAt: at(11)},
			{at: at(30), restarts: []int32{2}, renewedAt: at(11), want: at(30)},
		},
	}, {
		name: "a count that goes down starts again from it",
		reads: []read{
			{at: at(0), restarts: []int32{2}, renewedAt: at(-5)},
			{at: at(10), restarts: []int32{3}, renewedAt: at(-5), want: at(10)},
			{at: at(20), restarts: []int32{0}, renewedAt: at(-5)},
		},
	}}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var prev map[types.UID]restartSighting
			for i, r := range tc.reads {
				pod := restartedPod("u", r.restarts...)
				pod.Status.InitContainerStatuses = []corev1.ContainerStatus{{Name: "agent", RestartCount: r.sidecarRestarts}}
				next, unanswered := sightRestarts(prev, []corev1.Pod{pod}, map[types.UID]time.Time{"u": r.renewedAt}, r.at)
				if got := unanswered["u"]; !got.Equal(r.want) {
					t.Fatalf("read %d: unanswered since %v, want %v", i, got, r.want)
				}
				prev = next
			}
		})
	}
	// Pods no longer read are forgotten.
	next, _ := sightRestarts(map[types.UID]restartSighting{"gone": {count: 1, seenAt: t0}}, nil, nil, t0)
	if len(next) != 0 {
		t.Fatalf("remembered %v of pods not read", next)
	}
}

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
		{name: "a restart no renewal answered", lease: promising, restartedAt: s(9), want: s(9).Add(plan.RestartRenewGrace)},
		{name: "the kubelet overdue before the restart's grace", lease: promising, nodeLate: s(10), restartedAt: s(9), want: s(10)},
		{name: "a restart the renewal answered", lease: promising, restartedAt: s(0.5), want: s(30)},
		{name: "a restart late enough changes nothing", lease: promising, restartedAt: s(29), want: s(30)},
		{name: "a renewal seen after the fact: overdue from when it can have been", lease: seenLate, want: s(30)},
		{name: "no promise, a renewal seen after the fact: the Lease's end from then too", lease: silentSeenLate, want: s(60)},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if got := plan.MembershipEnds(tc.lease, tc.nodeLate, tc.restartedAt); !got.Equal(tc.want) {
				t.Fatalf("membership ends %v after the renewal, want %v", got.Sub(renewed), tc.want.Sub(renewed))
			}
		})
	}
}
