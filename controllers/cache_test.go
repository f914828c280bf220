package controllers

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/consumergroup-operator/consumergroup-operator/internal/plan"
)

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
