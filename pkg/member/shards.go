package member

import (
	"context"
	"fmt"
	"strconv"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/tools/cache"

	"github.com/consumergroup-operator/consumergroup-operator/pkg/assignment"
)

// ShardsAnnotation on the assignment ConfigMap says over how many shard ConfigMaps the entries are spread
// when they do not fit in one (assignment.ShardsAnnotation). The pod then reads its entry from shard
// assignment.ShardName(group, assignment.ShardOf(pod, shards)).
const ShardsAnnotation = assignment.ShardsAnnotation

// shardWatch is the shard ConfigMap that holds the pod's entry, and what its informer has seen.
type shardWatch struct {
	// name is the shard's name; "" when the assignment is not sharded.
	name string
	// cm is the shard as last seen; nil when it does not exist.
	cm *corev1.ConfigMap
	// synced is set once the shard's informer has listed it.
	synced bool
	stop   context.CancelFunc
}

// shardCount reads the assignment ConfigMap's shard count: 1 when the annotation is absent.
func shardCount(index *corev1.ConfigMap) (int, error) {
	v, ok := index.Annotations[ShardsAnnotation]
	if !ok {
		return 1, nil
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 {
		return 0, fmt.Errorf("the ConfigMap %s has annotation %s=%q, which is not a shard count", index.Name, ShardsAnnotation, v)
	}
	return n, nil
}

// resolve is the pod's published entry given the assignment ConfigMap (index, nil when missing) and the
// shard it points to. ok is false while the shard lags behind the index: the operator writes the shards
// before the index, so the shard's update is on its way and the view so far stays in force.
func resolve(index *corev1.ConfigMap, shard shardWatch, pod string) (p published, ok bool) {
	if index == nil {
		return published{}, true
	}
	n, err := shardCount(index)
	if err != nil {
		return published{exists: true, resourceVersion: index.ResourceVersion, err: err}, true
	}
	if n <= 1 {
		return publishedFrom(index, pod), true
	}
	indexView := publishedFrom(&corev1.ConfigMap{ObjectMeta: index.ObjectMeta}, pod)
	switch {
	case indexView.err != nil:
		return indexView, true
	case !shard.synced:
		indexView.err = fmt.Errorf("the entry of pod %s is in shard %s, which has not been read yet", pod, shard.name)
		return indexView, true
	case shard.cm == nil:
		indexView.err = fmt.Errorf("the entry of pod %s should be in shard %s, which does not exist", pod, shard.name)
		return indexView, true
	}
	p = publishedFrom(shard.cm, pod)
	if p.err == nil && p.generation < indexView.generation {
		return published{}, false
	}
	p.resourceVersion = index.ResourceVersion
	return p, true
}

// followShardLocked starts watching the shard that holds the pod's entry, when the assignment is sharded
// and that shard is not already watched, and stops watching one no longer needed.
func (c *Client) followShardLocked() {
	want := ""
	if c.index != nil {
		if n, err := shardCount(c.index); err == nil && n > 1 {
			want = assignment.ShardName(c.cfg.Group, assignment.ShardOf(c.cfg.Pod, n))
		}
	}
	if want == c.shard.name {
		return
	}
	if c.shard.stop != nil {
		c.shard.stop()
	}
	c.shard = shardWatch{name: want}
	if want == "" || c.runCtx == nil {
		return
	}
	ctx, cancel := context.WithCancel(c.runCtx)
	c.shard.stop = cancel
	factory, informer, err := c.watchConfigMap(ctx, want, func(cm *corev1.ConfigMap) { c.setShard(want, cm) })
	if err != nil {
		// Only a stopped informer refuses a handler; this one was just made.
		c.shard.cm, c.shard.synced = nil, true
		return
	}
	c.shardFactories = append(c.shardFactories, factory)
	go func() {
		if cache.WaitForCacheSync(ctx.Done(), informer.HasSynced) {
			c.mu.Lock()
			defer c.mu.Unlock()
			if c.shard.name == want {
				c.shard.synced = true
				c.resolveLocked()
			}
		}
	}()
}
