package member

import (
	"fmt"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestPublishedFrom(t *testing.T) {
	configMap := func(generation string, data map[string]string) *corev1.ConfigMap {
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "orders-assignment", ResourceVersion: "42"}, Data: data}
		if generation != "" {
			cm.Annotations = map[string]string{GenerationAnnotation: generation}
		}
		return cm
	}
	entry := `{"version":1,"generation":%d,"member":"10.0.0.7@consumer-0","queues":[{"topic":"orders","broker":"broker-a","ids":"0-1,5"}]}`
	tests := []struct {
		name       string
		cm         *corev1.ConfigMap
		exists     bool
		generation int64
		queues     string
		member     string
		err        string
	}{
		{name: "no ConfigMap", cm: nil},
		{name: "own entry", cm: configMap("3", map[string]string{"consumer-0": fmt.Sprintf(entry, 3)}),
			exists: true, generation: 3, queues: "[orders/broker-a/0 orders/broker-a/1 orders/broker-a/5]", member: "10.0.0.7@consumer-0"},
		{name: "no key: no queues at the ConfigMap's generation", cm: configMap("4", map[string]string{"consumer-1": fmt.Sprintf(entry, 4)}),
			exists: true, generation: 4, queues: "[]"},
		{name: "entry ahead of the annotation", cm: configMap("2", map[string]string{"consumer-0": fmt.Sprintf(entry, 3)}),
			exists: true, generation: 3, queues: "[orders/broker-a/0 orders/broker-a/1 orders/broker-a/5]", member: "10.0.0.7@consumer-0"},
		{name: "no annotation", cm: configMap("", map[string]string{"consumer-0": fmt.Sprintf(entry, 6)}),
			exists: true, generation: 6, queues: "[orders/broker-a/0 orders/broker-a/1 orders/broker-a/5]", member: "10.0.0.7@consumer-0"},
		{name: "unreadable annotation", cm: configMap("seven", nil), exists: true, queues: "[]", err: "not a generation"},
		{name: "unknown entry version", cm: configMap("3", map[string]string{"consumer-0": `{"version":2,"generation":3}`}),
			exists: true, generation: 3, queues: "[]", err: "version 2"},
		{name: "bad ranges", cm: configMap("3", map[string]string{"consumer-0": `{"version":1,"generation":3,"queues":[{"topic":"t","broker":"b","ids":"5-1"}]}`}),
			exists: true, generation: 3, queues: "[]", err: "5-1"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p := publishedFrom(tc.cm, "consumer-0")
			if p.exists != tc.exists || p.generation != tc.generation || p.member != tc.member {
				t.Errorf("exists %v, generation %d, member %q; want %v, %d, %q", p.exists, p.generation, p.member, tc.exists, tc.generation, tc.member)
			}
			if tc.exists && fmt.Sprint(p.queues) != tc.queues {
				t.Errorf("queues %v, want %s", p.queues, tc.queues)
			}
			if (p.err == nil) != (tc.err == "") || (p.err != nil && !strings.Contains(p.err.Error(), tc.err)) {
				t.Errorf("error %v, want one containing %q", p.err, tc.err)
			}
			if tc.exists && p.resourceVersion != "42" {
				t.Errorf("resourceVersion %q, want 42", p.resourceVersion)
			}
		})
	}
}

func TestResolveFollowsTheShard(t *testing.T) {
	index := func(generation, shards string) *corev1.ConfigMap {
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "orders-assignment", ResourceVersion: "7",
			Annotations: map[string]string{GenerationAnnotation: generation}}}
		if shards != "" {
			cm.Annotations[ShardsAnnotation] = shards
		}
		return cm
	}
	shardCM := func(generation int64) *corev1.ConfigMap {
		return &corev1.ConfigMap{
			ObjectMeta: metav1.ObjectMeta{Name: "orders-assignment-1", Annotations: map[string]string{GenerationAnnotation: fmt.Sprint(generation)}},
			Data:       map[string]string{"consumer-0": fmt.Sprintf(`{"version":1,"generation":%d,"member":"consumer-0","queues":[{"topic":"orders","broker":"broker-a","ids":"3"}]}`, generation)},
		}
	}
	tests := []struct {
		name       string
		index      *corev1.ConfigMap
		shard      shardWatch
		ok         bool
		generation int64
		queues     string
		err        string
	}{
		{name: "no index", ok: true, queues: "[]"},
		{name: "shard at the index's generation", index: index("5", "4"), shard: shardWatch{name: "orders-assignment-1", cm: shardCM(5), synced: true},
			ok: true, generation: 5, queues: "[orders/broker-a/3]"},
		{name: "shard ahead of the index", index: index("5", "4"), shard: shardWatch{name: "orders-assignment-1", cm: shardCM(6), synced: true},
			ok: true, generation: 6, queues: "[orders/broker-a/3]"},
		{name: "shard behind the index: keep the view", index: index("5", "4"), shard: shardWatch{name: "orders-assignment-1", cm: shardCM(4), synced: true}},
		{name: "shard not read yet", index: index("5", "4"), shard: shardWatch{name: "orders-assignment-1"},
			ok: true, generation: 5, queues: "[]", err: "not been read yet"},
		{name: "shard missing", index: index("5", "4"), shard: shardWatch{name: "orders-assignment-1", synced: true},
			ok: true, generation: 5, queues: "[]", err: "does not exist"},
		{name: "unreadable shard count", index: index("5", "many"), ok: true, queues: "[]", err: "not a shard count"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p, ok := resolve(tc.index, tc.shard, "consumer-0")
			if ok != tc.ok {
				t.Fatalf("ok %v, want %v", ok, tc.ok)
			}
			if !ok {
				return
			}
			if p.generation != tc.generation || fmt.Sprint(p.queues) != tc.queues {
				t.Errorf("generation %d, queues %v; want %d, %s", p.generation, p.queues, tc.generation, tc.queues)
			}
			if (p.err == nil) != (tc.err == "") || (p.err != nil && !strings.Contains(p.err.Error(), tc.err)) {
				t.Errorf("error %v, want one containing %q", p.err, tc.err)
			}
		})
	}
}
