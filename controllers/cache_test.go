package controllers

import (
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/consumergroup-operator/consumergroup-operator/internal/fixture"
	"github.com/consumergroup-operator/consumergroup-operator/internal/plan"
)

func TestStripPodKeepsWhatMembershipAndHandoffRead(t *testing.T) {
	full := fixture.Pod("a", fixture.OnNode("n1"), fixture.WithAnnotation("k", "v"), func(p *corev1.Pod) {
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
	if plan.IsRunningAndReady(s) != plan.IsRunningAndReady(&full) {
		t.Errorf("membership differs after stripping")
	}
	// Whether the kubelet stopped a pod reads its containers' states, which the cache keeps.
	crashLooping := func(p *corev1.Pod) {
		p.Status.ContainerStatuses[0].State = corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "CrashLoopBackOff"}}
		p.Status.ContainerStatuses[0].LastTerminationState = corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 1}}
	}
	for _, pod := range []corev1.Pod{fixture.Pod("a"), fixture.Pod("a", fixture.Stopped), fixture.Pod("a", crashLooping)} {
		stripped, err := StripPod(&pod)
		if err != nil {
			t.Fatal(err)
		}
		if got, want := plan.StoppedByKubelet(stripped.(*corev1.Pod)), plan.StoppedByKubelet(&pod); got != want {
			t.Errorf("pod %+v: StoppedByKubelet = %v once stripped, %v before", pod.Status, got, want)
		}
	}
}

func TestStripNodeKeepsItsZoneAlone(t *testing.T) {
	for _, tc := range []struct {
		name   string
		labels map[string]string
		want   map[string]string
	}{
		{"zone and others", map[string]string{plan.ZoneLabel: "z1", "kubernetes.io/hostname": "n1"}, map[string]string{plan.ZoneLabel: "z1"}},
		{"empty zone", map[string]string{plan.ZoneLabel: ""}, map[string]string{plan.ZoneLabel: ""}},
		{"no zone", map[string]string{"kubernetes.io/hostname": "n1"}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			full := &corev1.Node{
				ObjectMeta: metav1.ObjectMeta{Name: "n1", UID: "u1", ResourceVersion: "7", Labels: tc.labels,
					Annotations: map[string]string{"a": "b"}, ManagedFields: []metav1.ManagedFieldsEntry{{Manager: "kubelet"}}},
				Status: corev1.NodeStatus{Images: []corev1.ContainerImage{{Names: []string{"i"}, SizeBytes: 1}}},
			}
			out, err := stripNode(full)
			if err != nil {
				t.Fatal(err)
			}
			got := out.(*corev1.Node)
			want := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1", UID: "u1", ResourceVersion: "7", Labels: tc.want}}
			if !equality.Semantic.DeepEqual(got, want) {
				t.Errorf("stripped node %+v, want %+v", got, want)
			}
		})
	}
}
