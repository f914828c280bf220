package controllers

import (
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/consumergroup-operator/consumergroup-operator/api/v1alpha1"
)

func pod(name string, mods ...func(*corev1.Pod)) corev1.Pod {
	p := corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Status: corev1.PodStatus{Phase: corev1.PodRunning, Conditions: []corev1.PodCondition{
			{Type: corev1.PodScheduled, Status: corev1.ConditionTrue},
			{Type: corev1.PodReady, Status: corev1.ConditionTrue},
		}},
	}
	for _, m := range mods {
		m(&p)
	}
	return p
}

func withAnnotation(k, v string) func(*corev1.Pod) {
	return func(p *corev1.Pod) {
		if p.Annotations == nil {
			p.Annotations = map[string]string{}
		}
		p.Annotations[k] = v
	}
}

func onNode(n string) func(*corev1.Pod) { return func(p *corev1.Pod) { p.Spec.NodeName = n } }

func TestMembersFor(t *testing.T) {
	byPodName := &v1alpha1.ConsumerGroup{}
	byAnnotation := &v1alpha1.ConsumerGroup{Spec: v1alpha1.ConsumerGroupSpec{MemberIdentity: v1alpha1.MemberIdentity{Annotation: ptr.To("client-id")}}}
	zones := map[string]string{"n1": "zone-a", "n2": "zone-b"}
	cases := []struct {
		name       string
		group      *v1alpha1.ConsumerGroup
		pods       []corev1.Pod
		want       []member
		wantReason string
	}{
		{name: "no pods", group: byPodName, want: []member{}},
		{
			name:  "sorted by pod name, zone from node, weight default 1",
			group: byPodName,
			pods:  []corev1.Pod{pod("b", onNode("n2")), pod("a", onNode("n1")), pod("c")},
			want: []member{
				{Member: mem("a", "zone-a", 1), Pod: "a"},
				{Member: mem("b", "zone-b", 1), Pod: "b"},
				{Member: mem("c", "", 1), Pod: "c"},
			},
		},
		{
			name:  "not running, not ready, being deleted, no ready condition",
			group: byPodName,
			pods: []corev1.Pod{
				pod("pending", func(p *corev1.Pod) { p.Status.Phase = corev1.PodPending }),
				pod("unready", func(p *corev1.Pod) { p.Status.Conditions[1].Status = corev1.ConditionFalse }),
				pod("deleting", func(p *corev1.Pod) { p.DeletionTimestamp = &metav1.Time{Time: time.Unix(1, 0)} }),
				pod("nocondition", func(p *corev1.Pod) { p.Status.Conditions = nil }),
				pod("ok"),
			},
			want: []member{{Member: mem("ok", "", 1), Pod: "ok"}},
		},
		{
			name:  "zone and weight annotations",
			group: byPodName,
			pods:  []corev1.Pod{pod("a", onNode("n1"), withAnnotation(v1alpha1.ZoneAnnotation, "zone-x"), withAnnotation(v1alpha1.WeightAnnotation, " 3 "))},
			want:  []member{{Member: mem("a", "zone-x", 3), Pod: "a"}},
		},
		{
			name:       "weight not a number",
			group:      byPodName,
			pods:       []corev1.Pod{pod("a", withAnnotation(v1alpha1.WeightAnnotation, "heavy"))},
			wantReason: ReasonInvalidMemberAnnotation,
		},
		{
			name:       "weight zero",
			group:      byPodName,
			pods:       []corev1.Pod{pod("a", withAnnotation(v1alpha1.WeightAnnotation, "0"))},
			wantReason: ReasonInvalidMemberAnnotation,
		},
		{
			name:       "weight above the bound",
			group:      byPodName,
			pods:       []corev1.Pod{pod("a", withAnnotation(v1alpha1.WeightAnnotation, "1001"))},
			wantReason: ReasonInvalidMemberAnnotation,
		},
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
			want:  []member{{Member: mem("10.0.0.1@1", "", 1), Pod: "p1"}},
		},
		{
			name:       "identity annotation missing",
			group:      byAnnotation,
			pods:       []corev1.Pod{pod("p1")},
			wantReason: ReasonInvalidMemberAnnotation,
		},
		{
			name:       "duplicate identity",
			group:      byAnnotation,
			pods:       []corev1.Pod{pod("p1", withAnnotation("client-id", "x")), pod("p2", withAnnotation("client-id", "x"))},
			wantReason: ReasonDuplicateMemberID,
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, prob := membersFor(tc.group, tc.pods, zones)
			if tc.wantReason != "" {
				if prob == nil || prob.Reason != tc.wantReason {
					t.Fatalf("problem %v, want reason %s", prob, tc.wantReason)
				}
				if prob.Message == "" {
					t.Fatal("problem without a message")
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

func TestStripPodKeepsWhatMembershipReads(t *testing.T) {
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
	if s.Spec.NodeName != "n1" || s.Labels["app"] != "x" || s.Annotations["k"] != "v" || s.DeletionTimestamp == nil || s.Status.Phase != corev1.PodRunning {
		t.Errorf("stripped pod lost a field membership reads: %+v", s)
	}
	if isMember(s) != isMember(&full) {
		t.Errorf("membership differs after stripping")
	}
}
