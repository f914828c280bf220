package protocol

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// entries encodes one entry per pod at generation, each with queues ids.
func entries(generation int64, pods map[string][]int32) map[string]string {
	out := map[string]string{}
	for pod, ids := range pods {
		var qs []Queue
		for _, id := range ids {
			qs = append(qs, q("orders", "broker-a", id))
		}
		out[pod] = string(NewEntry(pod, "uid-"+pod, generation, qs).Encode())
	}
	return out
}

// configMaps turns parts into the ConfigMaps the operator writes, by name.
func configMaps(parts []Part) map[string]*corev1.ConfigMap {
	out := map[string]*corev1.ConfigMap{}
	for _, p := range parts {
		out[p.Name] = &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: p.Name, Annotations: p.Annotations,
			OwnerReferences: []metav1.OwnerReference{{APIVersion: GroupAPIVersion, Kind: GroupKind, Name: "orders", UID: "group-uid", Controller: new(bool)}}},
			Data: p.Data}
		*out[p.Name].OwnerReferences[0].Controller = true
	}
	return out
}

// bigEntries are 2000 entries of about 1 KiB each: more than one ConfigMap holds.
func bigEntries(generation int64) map[string]string {
	const n = 2000
	pods := map[string][]int32{}
	for i := range n {
		var ids []int32
		for id := int32(0); id < 400; id += 2 {
			ids = append(ids, id)
		}
		pods[fmt.Sprintf("consumer-%d", i)] = ids
	}
	return entries(generation, pods)
}

func TestLayoutWritesShardsBeforeTheIndex(t *testing.T) {
	small, err := Layout("orders", 4, entries(4, map[string][]int32{"a": {0, 1}, "b": {2}}), map[string]string{HandoffAnnotation: "{}"})
	if err != nil {
		t.Fatal(err)
	}
	if len(small) != 1 || small[0].Name != "orders-assignment" || len(small[0].Data) != 2 || small[0].Annotations[GenerationAnnotation] != "4" {
		t.Fatalf("a small assignment is laid out as %+v", small)
	}
	large, err := Layout("orders", 4, bigEntries(4), nil)
	if err != nil {
		t.Fatal(err)
	}
	last := large[len(large)-1]
	if last.Name != "orders-assignment" || len(last.Data) != 0 || last.Annotations[ShardsAnnotation] != fmt.Sprint(len(large)-1) {
		t.Fatalf("the last part is %s with %d keys and shards=%q; want the index, empty, naming %d shards",
			last.Name, len(last.Data), last.Annotations[ShardsAnnotation], len(large)-1)
	}
	total := 0
	for k, p := range large[:len(large)-1] {
		if p.Name != ShardName("orders", k) {
			t.Fatalf("part %d is %s", k, p.Name)
		}
		for pod := range p.Data {
			if ShardOf(pod, len(large)-1) != k {
				t.Fatalf("pod %s is in shard %d, ShardOf says %d", pod, k, ShardOf(pod, len(large)-1))
			}
		}
		total += len(p.Data)
	}
	if total != 2000 {
		t.Fatalf("the shards hold %d entries, want 2000", total)
	}
	huge := map[string]string{}
	for i := range 2 * MaxShards {
		huge[fmt.Sprint("consumer-", i)] = strings.Repeat("x", MaxConfigMapBytes/2+1)
	}
	if _, err := Layout("orders", 4, huge, nil); !errors.Is(err, ErrTooLarge) {
		t.Fatal("an assignment larger than 64 ConfigMaps was laid out")
	}
}

func TestReadPublishedFindsEveryEdit(t *testing.T) {
	for _, tc := range []struct {
		name   string
		shards bool
		edit   func(map[string]*corev1.ConfigMap)
		want   string // in one Tampered line; "" for none
	}{
		{"untouched", false, func(map[string]*corev1.ConfigMap) {}, ""},
		{"untouched, sharded", true, func(map[string]*corev1.ConfigMap) {}, ""},
		{"entry changed", false, func(cms map[string]*corev1.ConfigMap) {
			cms["orders-assignment"].Data["a"] = strings.Replace(cms["orders-assignment"].Data["a"], `"ids":"0-1"`, `"ids":"0-2"`, 1)
		}, "key a"},
		{"key removed", false, func(cms map[string]*corev1.ConfigMap) { delete(cms["orders-assignment"].Data, "b") }, "no longer match"},
		{"key added", false, func(cms map[string]*corev1.ConfigMap) {
			cms["orders-assignment"].Data["c"] = entries(4, map[string][]int32{"c": {9}})["c"]
		}, "no longer match"},
		{"junk handoff", false, func(cms map[string]*corev1.ConfigMap) {
			cms["orders-assignment"].Annotations[HandoffAnnotation] = "junk"
		}, "no longer match"},
		{"generation junk", false, func(cms map[string]*corev1.ConfigMap) {
			cms["orders-assignment"].Annotations[GenerationAnnotation] = "x"
		}, "not a generation"},
		{"digest removed", false, func(cms map[string]*corev1.ConfigMap) { delete(cms["orders-assignment"].Annotations, DigestAnnotation) }, "was removed"},
		{"shard removed", true, func(cms map[string]*corev1.ConfigMap) { delete(cms, "orders-assignment-0") }, "is missing"},
		{"shard behind", true, func(cms map[string]*corev1.ConfigMap) {
			old, _ := Layout("orders", 3, bigEntries(3), nil)
			cms["orders-assignment-1"] = configMaps(old)["orders-assignment-1"]
		}, "generation"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			data := entries(4, map[string][]int32{"a": {0, 1}, "b": {2}})
			if tc.shards {
				data = bigEntries(4)
			}
			parts, err := Layout("orders", 4, data, map[string]string{HandoffAnnotation: `{"revocations":[]}`})
			if err != nil {
				t.Fatal(err)
			}
			cms := configMaps(parts)
			tc.edit(cms)
			p := ReadPublished("orders", cms["orders-assignment"], cms)
			found := strings.Join(p.Tampered, "\n")
			if tc.want == "" && found != "" || tc.want != "" && !strings.Contains(found, tc.want) {
				t.Fatalf("Tampered = %q, want a line containing %q", found, tc.want)
			}
			if tc.want == "" && (p.Generation != 4 || len(p.Entries) != len(data)) {
				t.Fatalf("read generation %d with %d entries, want 4 with %d", p.Generation, len(p.Entries), len(data))
			}
		})
	}
}

func TestViewEntry(t *testing.T) {
	parts, _ := Layout("orders", 4, entries(4, map[string][]int32{"a": {0, 1}, "b": {2}}), nil)
	index := configMaps(parts)["orders-assignment"]
	view := func(pod string, uid types.UID) EntryView {
		v, ok := ViewEntry("orders", index, nil, false, pod, uid)
		if !ok {
			t.Fatal("an unsharded view is not ready")
		}
		return v
	}
	if v := view("a", "uid-a"); v.Err != nil || v.Generation != 4 || len(v.Queues) != 2 || v.GroupUID != "group-uid" {
		t.Errorf("pod a reads %+v", v)
	}
	if v := view("a", "uid-of-a-new-pod"); v.Err != nil || v.Generation != 4 || len(v.Queues) != 0 {
		t.Errorf("a new pod under the name a reads %+v; want generation 4 and no queues", v)
	}
	if v := view("c", "uid-c"); v.Err != nil || v.Generation != 4 || len(v.Queues) != 0 {
		t.Errorf("a pod without a key reads %+v; want no queues", v)
	}
	index.Data["a"] = strings.Replace(index.Data["a"], `"ids":"0-1"`, `"ids":"0-2"`, 1)
	if v := view("a", "uid-a"); v.Err == nil || len(v.Queues) != 0 {
		t.Errorf("pod a reads an edited entry as %+v; want an error and no queues", v)
	}

	sharded, _ := Layout("orders", 5, bigEntries(5), nil)
	cms := configMaps(sharded)
	index = cms["orders-assignment"]
	shardName, err := ShardFor("orders", index, "consumer-7")
	if err != nil || shardName == "" {
		t.Fatalf("ShardFor = %q, %v", shardName, err)
	}
	if v, ok := ViewEntry("orders", index, cms[shardName], true, "consumer-7", "uid-consumer-7"); !ok || v.Err != nil || v.Generation != 5 || len(v.Queues) != 200 {
		t.Errorf("a sharded entry reads %+v, %v", v, ok)
	}
	if v, _ := ViewEntry("orders", index, nil, false, "consumer-7", "uid-consumer-7"); v.Err == nil {
		t.Error("an entry in a shard not read yet reads without an error")
	}
	older, _ := Layout("orders", 4, bigEntries(4), nil)
	if _, ok := ViewEntry("orders", index, configMaps(older)[shardName], true, "consumer-7", "uid-consumer-7"); ok {
		t.Error("a shard behind the index gives a view")
	}
}
