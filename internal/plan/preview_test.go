package plan

import (
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"

	"github.com/consumergroup-operator/consumergroup-operator/api/v1alpha1"
	"github.com/consumergroup-operator/consumergroup-operator/internal/fixture"
)

// TestPreview: the preview of a group is computed from values alone, with no API server: the strategy's
// target when every step up to it passes, and the step's reason when one stops it.
func TestPreview(t *testing.T) {
	anno := "example.com/member"
	for _, tc := range []struct {
		name       string
		annotation *string
		pods       []corev1.Pod
		reason     string
		target     map[string][]int32
	}{
		{name: "two pods split six queues", pods: []corev1.Pod{fixture.Pod("p0"), fixture.Pod("p1")},
			target: map[string][]int32{"p0": {0, 1, 2}, "p1": {3, 4, 5}}},
		{name: "a pod without the member id the spec names stops the plan", annotation: &anno, pods: []corev1.Pod{fixture.Pod("p0")},
			reason: v1alpha1.ReasonInvalidMemberAnnotation},
	} {
		t.Run(tc.name, func(t *testing.T) {
			group := fixture.Group(averagely, 6)
			group.Spec.MemberIdentity.Annotation = tc.annotation
			pv := PreviewOf(group, world(tc.pods), env(group, fixture.T0))
			if pv.Reason != tc.reason {
				t.Fatalf("reason %q (%s), want %q", pv.Reason, pv.Message, tc.reason)
			}
			if tc.reason != "" {
				if pv.Target != nil {
					t.Fatalf("a stopped plan has a target: %v", pv.Target)
				}
				return
			}
			if len(pv.Target) != len(tc.target) || len(pv.Members) != len(tc.target) {
				t.Fatalf("target %v for members %v, want %v", pv.Target, pv.Members, tc.target)
			}
			for p, ids := range tc.target {
				if got := pv.Target[p]; !slices.Equal(got, fixture.Qs(ids...)) {
					t.Fatalf("%s's target is %v, want queues %v", p, got, ids)
				}
			}
		})
	}
}
