package controllers

import (
	"encoding/json"
	"reflect"
	"testing"
	"time"
	"unsafe"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/utils/ptr"

	"github.com/consumergroup-operator/consumergroup-operator/internal/plan"
	"github.com/consumergroup-operator/consumergroup-operator/pkg/protocol"
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

func TestCacheMemberLeaseKeepsWhatTheProtocolReads(t *testing.T) {
	decoded := func(pod string) *coordinationv1.Lease {
		lease := protocol.MemberLease{Group: "orders", GroupUID: "uid-orders", Pod: pod, PodUID: types.UID("uid-" + pod), Member: pod,
			Acked: 3, Claim: []protocol.Queue{{Topic: "t", Broker: "b", ID: 1}}, StopsWithin: 6 * time.Second,
		}.Apply(nil, "shop", ptr.To(time.Unix(100, 0)), ptr.To(time.Unix(120, 0)))
		lease.ManagedFields = []metav1.ManagedFieldsEntry{{Manager: "member"}}
		data, err := json.Marshal(lease)
		if err != nil {
			t.Fatal(err)
		}
		var out coordinationv1.Lease
		if err := json.Unmarshal(data, &out); err != nil {
			t.Fatal(err)
		}
		return &out
	}
	a, b := decoded("a"), decoded("b")
	want := protocol.ReadLease(a)
	out, err := cacheMemberLease(a)
	if err != nil {
		t.Fatal(err)
	}
	cached := out.(*coordinationv1.Lease)
	if got := protocol.ReadLease(cached); !reflect.DeepEqual(got, want) {
		t.Errorf("the protocol reads the cached Lease as\n%+v\nwant\n%+v", got, want)
	}
	if cached.ManagedFields != nil {
		t.Errorf("managed fields kept: %v", cached.ManagedFields)
	}
	if _, err := cacheMemberLease(b); err != nil {
		t.Fatal(err)
	}
	same := func(what, x, y string) {
		if unsafe.StringData(x) != unsafe.StringData(y) {
			t.Errorf("%s: two copies of %q", what, x)
		}
	}
	same("namespace", a.Namespace, b.Namespace)
	same("group label", a.Labels[protocol.GroupLabel], b.Labels[protocol.GroupLabel])
	for i := range a.OwnerReferences {
		same("owner kind", a.OwnerReferences[i].Kind, b.OwnerReferences[i].Kind)
	}
	same("group owner's name", a.OwnerReferences[1].Name, b.OwnerReferences[1].Name)
	tombstone := toolscache.DeletedFinalStateUnknown{Key: "k"}
	if out, err := cacheMemberLease(tombstone); err != nil || out != any(tombstone) {
		t.Errorf("a tombstone became %v, %v", out, err)
	}
}
