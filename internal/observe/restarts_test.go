package observe

import (
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
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
