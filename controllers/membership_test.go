package controllers

import (
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/consumergroup-operator/consumergroup-operator/api/v1alpha1"
	"github.com/consumergroup-operator/consumergroup-operator/pkg/protocol"
)

func TestMembersFor(t *testing.T) {
	byPodName := &v1alpha1.ConsumerGroup{}
	byAnnotation := &v1alpha1.ConsumerGroup{Spec: v1alpha1.ConsumerGroupSpec{MemberIdentity: v1alpha1.MemberIdentity{Annotation: ptr.To("client-id")}}}
	zones := map[string]string{"n1": "zone-a", "n2": "zone-b"}
	fresh, expired := lease("a", 0, nil, t0.Add(-time.Second)), lease("a", 0, nil, t0.Add(-20*time.Second))
	m := func(id, zone string, weight int32, pod string) member {
		return member{Member: mem(id, zone, weight), Pod: pod, UID: pod0(pod).UID}
	}
	cases := []struct {
		name       string
		group      *v1alpha1.ConsumerGroup
		pods       []corev1.Pod
		leases     map[string]*protocol.LeaseState
		want       []member
		wantReason string
	}{
		{name: "no pods", group: byPodName, want: []member{}},
		{
			name:  "sorted by pod name, zone from node, weight default 1",
			group: byPodName,
			pods:  []corev1.Pod{pod("b", onNode("n2")), pod("a", onNode("n1")), pod("c")},
			want:  []member{m("a", "zone-a", 1, "a"), m("b", "zone-b", 1, "b"), m("c", "", 1, "c")},
		},
		{
			name:  "not running, not ready, being deleted, no ready condition",
			group: byPodName,
			pods: []corev1.Pod{
				pod("pending", func(p *corev1.Pod) { p.Status.Phase = corev1.PodPending }),
				pod("unready", notReady),
				pod("deleting", func(p *corev1.Pod) { p.DeletionTimestamp = &metav1.Time{Time: time.Unix(1, 0)} }),
				pod("nocondition", func(p *corev1.Pod) { p.Status.Conditions = nil }),
				pod("ok"),
			},
			want: []member{m("ok", "", 1, "ok")},
		},
		{
			name:   "own fresh Lease",
			group:  byPodName,
			pods:   []corev1.Pod{pod("a")},
			leases: map[string]*protocol.LeaseState{"a": &fresh},
			want:   []member{m("a", "", 1, "a")},
		},
		{
			name:   "own Lease not renewed for its duration: the member has stopped",
			group:  byPodName,
			pods:   []corev1.Pod{pod("a")},
			leases: map[string]*protocol.LeaseState{"a": &expired},
			want:   []member{},
		},
		{
			name:   "a pod under a name whose Lease an earlier pod holds waits",
			group:  byPodName,
			pods:   []corev1.Pod{pod("a", withUID("uid-a-new"))},
			leases: map[string]*protocol.LeaseState{"a": &fresh},
			want:   []member{},
		},
		{
			name:  "zone and weight annotations",
			group: byPodName,
			pods:  []corev1.Pod{pod("a", onNode("n1"), withAnnotation(v1alpha1.ZoneAnnotation, "zone-x"), withAnnotation(v1alpha1.WeightAnnotation, " 3 "))},
			want:  []member{m("a", "zone-x", 3, "a")},
		},
		{name: "weight not a number", group: byPodName, pods: []corev1.Pod{pod("a", withAnnotation(v1alpha1.WeightAnnotation, "heavy"))}, wantReason: v1alpha1.ReasonInvalidMemberAnnotation},
		{name: "weight zero", group: byPodName, pods: []corev1.Pod{pod("a", withAnnotation(v1alpha1.WeightAnnotation, "0"))}, wantReason: v1alpha1.ReasonInvalidMemberAnnotation},
		{name: "weight above the bound", group: byPodName, pods: []corev1.Pod{pod("a", withAnnotation(v1alpha1.WeightAnnotation, "1001"))}, wantReason: v1alpha1.ReasonInvalidMemberAnnotation},
		{
			name:  "invalid annotation on a pod that is not a member is ignored",
			group: byPodName,
			pods:  []corev1.Pod{pod("a", withAnnotation(v1alpha1.WeightAnnotation, "x"), func(p *corev1.Pod) { p.Status.Phase = corev1.PodPending })},
			want:  []member{},
		},
		{
			name:  "identity from annotation",
			group: byAnnotation,
			pods:  []corev1.Pod{pod("p1", withAnnotation("client-id", "10.0.0.1@1"))},
			want:  []member{m("10.0.0.1@1", "", 1, "p1")},
		},
		{name: "identity annotation missing", group: byAnnotation, pods: []corev1.Pod{pod("p1")}, wantReason: v1alpha1.ReasonInvalidMemberAnnotation},
		{
			name:       "duplicate identity",
			group:      byAnnotation,
			pods:       []corev1.Pod{pod("p1", withAnnotation("client-id", "x")), pod("p2", withAnnotation("client-id", "x"))},
			wantReason: v1alpha1.ReasonDuplicateMemberID,
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, _, prob := membersFor(tc.group, tc.pods, zones, kubeletSignals{}, tc.leases, t0)
			if tc.wantReason != "" {
				if prob == nil || prob.Reason != tc.wantReason || prob.Message == "" {
					t.Fatalf("problem %v, want reason %s with a message", prob, tc.wantReason)
				}
				return
			}
			if prob != nil {
				t.Fatalf("unexpected problem %v", prob)
			}
			if len(got) != len(tc.want) {
				t.Fatalf("got %d members %v, want %v", len(got), got, tc.want)
			}
			for i := range got {
				if got[i] != tc.want[i] {
					t.Errorf("member %d is %+v, want %+v", i, got[i], tc.want[i])
				}
			}
		})
	}
}

func pod0(name string) corev1.Pod { return pod(name) }

func TestStoppedByKubelet(t *testing.T) {
	restarted := func(p *corev1.Pod) {
		p.Status.ContainerStatuses[0].State = corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "CrashLoopBackOff"}}
		p.Status.ContainerStatuses[0].LastTerminationState = corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 1}}
	}
	sidecar := func(p *corev1.Pod) {
		p.Status.InitContainerStatuses = []corev1.ContainerStatus{{Name: "agent", State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{}}}}
	}
	cases := []struct {
		name string
		pod  corev1.Pod
		want bool
	}{
		{"running", pod("a"), false},
		{"only NotReady", pod("a", notReady), false},
		{"no container status yet: a kubelet cut off may have started it", pod("a", func(p *corev1.Pod) { p.Status.ContainerStatuses = nil }), false},
		{"terminated", pod("a", stopped), true},
		{"crash-looping, not running now", pod("a", restarted), true},
		{"terminated, but its sidecar runs", pod("a", stopped, sidecar), false},
		{"failed", pod("a", func(p *corev1.Pod) { p.Status.Phase = corev1.PodFailed }), true},
	}
	for _, tc := range cases {
		stripped, _ := StripPod(&tc.pod)
		for _, p := range []*corev1.Pod{&tc.pod, stripped.(*corev1.Pod)} {
			if got := stoppedByKubelet(p); got != tc.want {
				t.Errorf("%s: stoppedByKubelet = %v, want %v", tc.name, got, tc.want)
			}
		}
	}
}

func TestStripPodKeepsWhatMembershipAndHandoffRead(t *testing.T) {
	full := pod("a", onNode("n1"), withAnnotation("k", "v"), func(p *corev1.Pod) {
		p.Labels = map[string]string{"app": "x"}
		p.Spec.Containers = []corev1.Container{{Name: "c", Image: "i"}}
		p.ManagedFields = []metav1.ManagedFieldsEntry{{Manager: "m"}}
		p.DeletionTimestamp = &metav1.Time{Time: time.Unix(5, 0)}
	})
	out, err := StripPod(&full)
	if err != nil {
		t.Fatal(err)
	}
	s := out.(*corev1.Pod)
	if len(s.Spec.Containers) != 0 || s.ManagedFields != nil || len(s.Status.Conditions) != 1 {
		t.Errorf("stripped pod still holds containers=%d managedFields=%v conditions=%v", len(s.Spec.Containers), s.ManagedFields, s.Status.Conditions)
	}
	if s.Spec.NodeName != "n1" || s.Labels["app"] != "x" || s.Annotations["k"] != "v" || s.DeletionTimestamp == nil ||
		s.Status.Phase != corev1.PodRunning || s.UID != full.UID || len(s.Status.ContainerStatuses) != 1 {
		t.Errorf("stripped pod lost a field membership or the handoff reads: %+v", s)
	}
	if isRunningAndReady(s) != isRunningAndReady(&full) {
		t.Errorf("membership differs after stripping")
	}
}
