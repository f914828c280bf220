package controllers

import (
	"encoding/json"
	"fmt"
	"reflect"
	"runtime"
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
	if len(a.OwnerReferences) != 1 || a.OwnerReferences[0].Kind != "Pod" {
		t.Errorf("owners kept: %+v, want the pod's alone", a.OwnerReferences)
	}
	same("owner kind", a.OwnerReferences[0].Kind, b.OwnerReferences[0].Kind)
	same("acknowledged generation", a.Annotations[protocol.AckedGenerationAnnotation], b.Annotations[protocol.AckedGenerationAnnotation])
	same("promise", a.Annotations[protocol.StopsWithinAnnotation], b.Annotations[protocol.StopsWithinAnnotation])
	same("pod annotation and owner", a.Annotations[protocol.PodAnnotation], a.OwnerReferences[0].Name)
	same("holder and owner", *a.Spec.HolderIdentity, a.OwnerReferences[0].Name)
	tombstone := toolscache.DeletedFinalStateUnknown{Key: "k"}
	if out, err := cacheMemberLease(tombstone); err != nil || out != any(tombstone) {
		t.Errorf("a tombstone became %v, %v", out, err)
	}
}

// memberLeaseAsDecoded is the i-th of a run of member Leases as hack/scale's members write them (groups
// of ten, two queues claimed, a 10-minute Lease, a promise) and as the informer decodes them: each with
// its own copy of every string.
func memberLeaseAsDecoded(i int) *coordinationv1.Lease {
	group := fmt.Sprintf("group-%04d", i/10)
	pod := fmt.Sprintf("%s-%d", group, i%10)
	now := time.Now()
	m := protocol.MemberLease{Group: group, GroupUID: types.UID(fmt.Sprintf("6e1c6a3e-0000-4000-8000-%012d", i/10)),
		Pod: pod, PodUID: types.UID(fmt.Sprintf("7e1c6a3e-0000-4000-8000-%012d", i)), Member: pod, Duration: 10 * time.Minute,
		Acked: 3, Claim: []protocol.Queue{{Topic: "topic-a", Broker: "broker-a", ID: int32(i % 16)}, {Topic: "topic-a", Broker: "broker-a", ID: int32((i + 1) % 16)}},
		StopsWithin: 6 * time.Second}
	l := m.Apply(nil, fmt.Sprintf("scale-%03d", i/500), &now, &now)
	l.UID = types.UID(fmt.Sprintf("8e1c6a3e-0000-4000-8000-%012d", i))
	l.ResourceVersion = "1234567"
	data, err := l.Marshal()
	if err != nil {
		panic(err)
	}
	var decoded coordinationv1.Lease
	if err := decoded.Unmarshal(data); err != nil {
		panic(err)
	}
	return &decoded
}

// BenchmarkCachedLeaseMemory reports the heap one member Lease costs in the operator's cache, after its
// transform (cacheMemberLease):
//
//	go test ./controllers -run '^$' -bench CachedLeaseMemory -count 6
func BenchmarkCachedLeaseMemory(b *testing.B) {
	const n = 10000
	heap := func() uint64 {
		runtime.GC()
		var m runtime.MemStats
		runtime.ReadMemStats(&m)
		return m.HeapAlloc
	}
	var per float64
	for b.Loop() {
		kept := make([]any, n)
		before := heap()
		for i := range kept {
			kept[i], _ = cacheMemberLease(memberLeaseAsDecoded(i))
		}
		per = float64(heap()-before) / n
		runtime.KeepAlive(kept)
	}
	b.ReportMetric(per, "B/lease")
}
