package protocol

import (
	"fmt"
	"maps"
	"slices"
	"strconv"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// This file reads an assignment back from its ConfigMaps, as Layout (layout.go) writes it: the operator
// all of it (ReadPublished), a member pod its own entry (ShardFor, ViewEntry).

// PublishedEntry is one decoded entry of a published assignment.
type PublishedEntry struct {
	Entry
	Queues []Queue
}

// Published is a group's assignment as read back from its ConfigMaps.
type Published struct {
	// Exists is false when there is no assignment ConfigMap.
	Exists bool
	// Generation is the index's generation annotation (when unreadable, the highest of its entries').
	Generation int64
	// Shards is the number of shard ConfigMaps; 1 when the index holds the entries.
	Shards int
	// Entries are the readable entries, by pod name.
	Entries map[string]PublishedEntry
	// Outside counts the queues the entries list outside the reader's Scope (ReadPublishedIn): an
	// assignment published before the spec dropped them.
	Outside int
	// RebalancedAt and Handoff are the operator's own annotations on the index, as read.
	RebalancedAt time.Time
	Handoff      string
	// Tampered says, one line per finding, what does not match what the operator wrote: a ConfigMap whose
	// content no longer matches its digest, an entry that cannot be read. Empty when all matches.
	Tampered []string
}

// ReadPublished reads group's assignment from its index ConfigMap (nil when there is none) and its
// shard ConfigMaps by name, and checks each against its digest and each entry against its checksum and
// generation.
func ReadPublished(group string, index *corev1.ConfigMap, shards map[string]*corev1.ConfigMap) Published {
	return ReadPublishedIn(group, index, shards, nil, 0)
}

// ReadPublishedIn is ReadPublished for a reader that lists only the queues of scope (Scope.Expand) and
// at most budget of them over all entries (no bound when budget is 0): an operator publishes each queue
// of a Clustering group once, so entries that list more were not written by it. Entries past the budget
// are not read, and the finding is in Tampered.
func ReadPublishedIn(group string, index *corev1.ConfigMap, shards map[string]*corev1.ConfigMap, scope *Scope, budget int) Published {
	p := Published{Shards: 1, Entries: map[string]PublishedEntry{}}
	if index == nil {
		return p
	}
	p.Exists = true
	gen, n := p.readIndex(index)
	sources := []*corev1.ConfigMap{index}
	if n > 1 {
		p.Shards = n
		sources = p.readShards(group, index, shards, n)
	}
	p.readEntries(sources, gen, n, scope, budget)
	return p
}

// readIndex reads the index's annotations: it checks its digest, records its generation, rebalance time
// and handoff, and returns its generation (-1 when unreadable) and shard count.
func (p *Published) readIndex(index *corev1.ConfigMap) (gen int64, shards int) {
	p.checkDigest(index)
	gen, err := strconv.ParseInt(index.Annotations[GenerationAnnotation], 10, 64)
	if err != nil || gen < 0 || gen > MaxGeneration {
		p.Tampered = append(p.Tampered, fmt.Sprintf("ConfigMap %s: annotation %s=%q is not a generation", index.Name, GenerationAnnotation, index.Annotations[GenerationAnnotation]))
		gen = -1
	}
	p.Generation = max(gen, 0)
	p.RebalancedAt, _ = time.Parse(time.RFC3339, index.Annotations[RebalancedAtAnnotation])
	p.Handoff = index.Annotations[HandoffAnnotation]
	shards, err = shardsOf(index)
	if err != nil {
		p.Tampered = append(p.Tampered, err.Error())
	}
	return gen, shards
}

// readShards returns the group's n shard ConfigMaps that exist, in shard order, each checked against its
// digest and the index's generation.
func (p *Published) readShards(group string, index *corev1.ConfigMap, shards map[string]*corev1.ConfigMap, n int) []*corev1.ConfigMap {
	var sources []*corev1.ConfigMap
	for k := range n {
		name := ShardName(group, k)
		shard := shards[name]
		if shard == nil {
			p.Tampered = append(p.Tampered, fmt.Sprintf("shard ConfigMap %s is missing", name))
			continue
		}
		p.checkDigest(shard)
		if shard.Annotations[GenerationAnnotation] != index.Annotations[GenerationAnnotation] {
			p.Tampered = append(p.Tampered, fmt.Sprintf("shard ConfigMap %s has generation %q, the index %q",
				name, shard.Annotations[GenerationAnnotation], index.Annotations[GenerationAnnotation]))
		}
		sources = append(sources, shard)
	}
	return sources
}

// checkDigest records in Tampered when cm's digest annotation is missing or no longer matches it.
func (p *Published) checkDigest(cm *corev1.ConfigMap) {
	want, ok := cm.Annotations[DigestAnnotation]
	switch {
	case !ok:
		p.Tampered = append(p.Tampered, fmt.Sprintf("ConfigMap %s: annotation %s was removed", cm.Name, DigestAnnotation))
	case want != Digest(cm.Name, cm.Annotations, cm.Data):
		p.Tampered = append(p.Tampered, fmt.Sprintf("ConfigMap %s: its data or annotations were changed (they no longer match annotation %s)", cm.Name, DigestAnnotation))
	}
}

// readEntries decodes the entries of sources (the index, or the shards in order) pod by pod, checking each
// against the generation gen (-1: unknown, the highest entry's is taken) and, with n > 1 shards, that it
// sits in its pod's shard; it stops reading once the entries list more than budget queues (budget > 0).
func (p *Published) readEntries(sources []*corev1.ConfigMap, gen int64, n int, scope *Scope, budget int) {
	listed := 0
	for k, src := range sources {
		for _, pod := range slices.Sorted(maps.Keys(src.Data)) {
			if budget > 0 && listed > budget {
				p.Tampered = append(p.Tampered, fmt.Sprintf("ConfigMap %s: its entries list more than the group's %d queues; entries from key %s on are not read", src.Name, budget, pod))
				break
			}
			e, expanded, err := DecodeEntryIn([]byte(src.Data[pod]), scope)
			queues := expanded.Queues
			listed += len(queues)
			switch {
			case err != nil:
				p.Tampered = append(p.Tampered, fmt.Sprintf("ConfigMap %s, key %s: %v", src.Name, pod, err))
				continue
			case gen >= 0 && e.Generation != gen:
				p.Tampered = append(p.Tampered, fmt.Sprintf("ConfigMap %s, key %s: the entry has generation %d, the ConfigMap %d", src.Name, pod, e.Generation, gen))
			case n > 1 && ShardOf(pod, n) != k:
				p.Tampered = append(p.Tampered, fmt.Sprintf("ConfigMap %s, key %s: the entry belongs in shard %d", src.Name, pod, ShardOf(pod, n)))
			}
			if gen < 0 {
				p.Generation = max(p.Generation, e.Generation)
			}
			p.Entries[pod] = PublishedEntry{Entry: e, Queues: queues}
			p.Outside += expanded.Outside
		}
	}
}

// shardsOf reads the index's shard count: 1 when the annotation is absent.
func shardsOf(index *corev1.ConfigMap) (int, error) {
	v, ok := index.Annotations[ShardsAnnotation]
	if !ok {
		return 1, nil
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 || n > MaxShards {
		return 1, fmt.Errorf("ConfigMap %s: annotation %s=%q is not a shard count", index.Name, ShardsAnnotation, v)
	}
	return n, nil
}

// ShardFor names the shard ConfigMap a member pod watches for its entry: "" when the index holds the
// entries, or when there is no index.
func ShardFor(group string, index *corev1.ConfigMap, pod string) (string, error) {
	if index == nil {
		return "", nil
	}
	n, err := shardsOf(index)
	if err != nil || n <= 1 {
		return "", err
	}
	return ShardName(group, ShardOf(pod, n)), nil
}

// GroupUIDOf is the UID of the ConsumerGroup that controls an assignment ConfigMap; "" when none does.
func GroupUIDOf(cm *corev1.ConfigMap) types.UID {
	if cm == nil {
		return ""
	}
	if ref := metav1.GetControllerOf(cm); ref != nil && ref.Kind == GroupKind && ref.APIVersion == GroupAPIVersion {
		return ref.UID
	}
	return ""
}

// EntryView is what one member pod reads of its group's assignment.
type EntryView struct {
	// Exists is false while there is no assignment ConfigMap.
	Exists bool
	// ResourceVersion is the index's; it tells whether the view is current.
	ResourceVersion string
	// GroupUID is the ConsumerGroup's UID, from the index's controller; generations only compare within it.
	GroupUID types.UID
	// Generation is the generation published. The pod's Member, and its Queues, are those of its entry; a
	// pod without an entry (no key, or an entry for another incarnation) has no queues.
	Generation int64
	Member     string
	Queues     []Queue
	// Err says why the pod's entry cannot be read; the pod then holds nothing.
	Err error
}

// ViewEntry is the view of the pod incarnation (pod, podUID) of group given the index (nil when missing) and, when
// the index names a shard (ShardFor), that shard: shardRead says whether it has been read, shard is nil
// when it does not exist. ok is false while the shard is behind the index: the operator writes shards
// before the index, so the shard's update is on its way and the view so far stays in force.
func ViewEntry(group string, index, shard *corev1.ConfigMap, shardRead bool, pod string, podUID types.UID) (v EntryView, ok bool) {
	if index == nil {
		return EntryView{}, true
	}
	v = EntryView{Exists: true, ResourceVersion: index.ResourceVersion, GroupUID: GroupUIDOf(index)}
	gen, err := strconv.ParseInt(index.Annotations[GenerationAnnotation], 10, 64)
	if err != nil || gen < 0 {
		v.Err = fmt.Errorf("the ConfigMap %s has annotation %s=%q, which is not a generation", index.Name, GenerationAnnotation, index.Annotations[GenerationAnnotation])
		return v, true
	}
	v.Generation = gen
	src := index
	n, err := shardsOf(index)
	switch {
	case err != nil:
		v.Err = err
		return v, true
	case n > 1 && !shardRead:
		v.Err = fmt.Errorf("the entry of pod %s is in shard %s, which has not been read yet", pod, ShardName(group, ShardOf(pod, n)))
		return v, true
	case n > 1 && shard == nil:
		v.Err = fmt.Errorf("the entry of pod %s should be in shard %s, which does not exist", pod, ShardName(group, ShardOf(pod, n)))
		return v, true
	case n > 1:
		shardGen, err := strconv.ParseInt(shard.Annotations[GenerationAnnotation], 10, 64)
		if err == nil && shardGen < gen {
			return EntryView{}, false
		}
		src = shard
	}
	value, ok := src.Data[pod]
	if !ok {
		return v, true
	}
	e, queues, err := DecodeEntry([]byte(value))
	switch {
	case err != nil:
		v.Err = fmt.Errorf("the ConfigMap %s, key %s: %w", src.Name, pod, err)
	case e.Generation != gen:
		v.Err = fmt.Errorf("the ConfigMap %s, key %s: the entry has generation %d, the assignment %d", src.Name, pod, e.Generation, gen)
	case e.PodUID != "" && types.UID(e.PodUID) != podUID:
		// The entry is for an earlier (or later) pod of the same name: this one has none.
	default:
		v.Member, v.Queues = e.Member, queues
	}
	return v, true
}
