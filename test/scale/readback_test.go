//go:build scale

package scale

import (
	"context"
	"fmt"
	"sort"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/consumergroup-operator/consumergroup-operator/api/v1alpha1"
	"github.com/consumergroup-operator/consumergroup-operator/pkg/allocate"
	"github.com/consumergroup-operator/consumergroup-operator/pkg/protocol"
)

// published is a group's assignment as read back the way any reader may: the assignment ConfigMap
// "<group>-assignment" (the index) and, when its shards annotation says the entries are spread over N
// shards, the shard ConfigMaps 0..N-1, each pod's entry in the shard protocol.ShardOf names.
type published struct {
	// configMaps is how many ConfigMaps hold the assignment: the index and its shards.
	configMaps int
	// shards is the index's shard count; 1 when the index holds the entries itself.
	shards int
	// bytes is the size of the data (keys and values) of all of them.
	bytes int
	// indexGeneration is the generation annotation of the index.
	indexGeneration int64
	// entries maps a pod name (a data key) to its decoded entry and queues.
	entries map[string]readEntry
	// generation is the highest entry generation seen.
	generation int64
}

type readEntry struct {
	entry  protocol.Entry
	queues []allocate.Queue
}

// readPublished lists every ConfigMap labelled with the group and decodes the assignment they publish.
func readPublished(ctx context.Context, c client.Client, ns, group string) (published, error) {
	var cms corev1.ConfigMapList
	if err := c.List(ctx, &cms, client.InNamespace(ns), client.MatchingLabels{protocol.GroupLabel: group}); err != nil {
		return published{}, err
	}
	return decodePublished(group, cms.Items)
}

// decodePublished decodes group's assignment from cms, all the ConfigMaps labelled with the group, as
// protocol.ReadPublished reads it. It is an error when anything does not read back as the operator wrote
// it, and when a labelled ConfigMap is neither the index nor one of its shards: a leftover shard would be
// a second, stale copy of some entries.
func decodePublished(group string, cms []corev1.ConfigMap) (published, error) {
	byName := map[string]*corev1.ConfigMap{}
	for i := range cms {
		byName[cms[i].Name] = &cms[i]
	}
	indexName := protocol.AssignmentName(group)
	index := byName[indexName]
	if index == nil {
		return published{}, fmt.Errorf("no ConfigMap %s", indexName)
	}
	read := protocol.ReadPublished(group, index, byName)
	if len(read.Tampered) > 0 {
		return published{}, fmt.Errorf("the assignment does not read back: %v", read.Tampered)
	}
	p := published{entries: map[string]readEntry{}, shards: read.Shards, indexGeneration: read.Generation, configMaps: len(byName)}
	for name := range byName {
		if name == indexName {
			continue
		}
		if _, k, ok := strings.Cut(name, indexName+"-"); !ok || read.Shards <= 1 || protocol.ShardName(group, atoi(k)) != name || atoi(k) >= read.Shards {
			return p, fmt.Errorf("ConfigMap %s is labelled with the group but is not one of the %d shards the index names", name, read.Shards)
		}
	}
	for _, cm := range byName {
		for key, value := range cm.Data {
			p.bytes += len(key) + len(value)
		}
	}
	for pod, e := range read.Entries {
		p.entries[pod] = readEntry{entry: e.Entry, queues: e.Queues}
		p.generation = max(p.generation, e.Generation)
	}
	return p, nil
}

func atoi(s string) int {
	n, err := strconv.Atoi(s)
	if err != nil {
		return -1
	}
	return n
}

// queueSpace is the set of queues a group names: topic → broker → queue count.
type queueSpace map[string]map[string]int32

func spaceOf(g *v1alpha1.ConsumerGroup) queueSpace {
	s := queueSpace{}
	for _, t := range g.Spec.Topics {
		s[t.Name] = map[string]int32{}
		for _, b := range t.Brokers {
			s[t.Name][b.Name] = b.Queues
		}
	}
	return s
}

func (s queueSpace) total() int {
	n := 0
	for _, brokers := range s {
		for _, q := range brokers {
			n += int(q)
		}
	}
	return n
}

// checkComplete says why p is not the complete assignment of space to exactly the pods in members: each
// member's entry present under its pod name, all at one generation, and every queue owned exactly once.
// nil when it is.
func (p published) checkComplete(space queueSpace, members []string) error {
	if p.indexGeneration != p.generation {
		return fmt.Errorf("the index is at generation %d, the entries at %d", p.indexGeneration, p.generation)
	}
	if len(p.entries) != len(members) {
		return fmt.Errorf("%d entries published, want %d members", len(p.entries), len(members))
	}
	for _, pod := range members {
		e, ok := p.entries[pod]
		if !ok {
			return fmt.Errorf("pod %s has no entry", pod)
		}
		// The group's memberIdentity is the default, the pod name.
		if e.entry.Member != pod {
			return fmt.Errorf("pod %s's entry names member %q", pod, e.entry.Member)
		}
		if e.entry.Generation != p.generation {
			return fmt.Errorf("pod %s's entry is at generation %d, others at %d", pod, e.entry.Generation, p.generation)
		}
	}
	owner := map[allocate.Queue]string{}
	for pod, e := range p.entries {
		for _, q := range e.queues {
			if n, ok := space[q.Topic][q.Broker]; !ok || q.ID < 0 || q.ID >= n {
				return fmt.Errorf("pod %s holds %s, which the group does not name", pod, q)
			}
			if other, dup := owner[q]; dup {
				return fmt.Errorf("queue %s is held by both %s and %s", q, other, pod)
			}
			owner[q] = pod
		}
	}
	if len(owner) != space.total() {
		return fmt.Errorf("%d of %d queues are assigned", len(owner), space.total())
	}
	return nil
}

// conditions renders a group's status conditions, one per line, for failure messages.
func conditions(g *v1alpha1.ConsumerGroup) string {
	if len(g.Status.Conditions) == 0 {
		return "  (no conditions)"
	}
	var lines []string
	for _, c := range g.Status.Conditions {
		lines = append(lines, fmt.Sprintf("  %s=%s reason=%s: %s", c.Type, c.Status, c.Reason, c.Message))
	}
	sort.Strings(lines)
	return strings.Join(lines, "\n")
}

// isReady reports whether the group's Ready condition is True for its current generation.
func isReady(g *v1alpha1.ConsumerGroup) bool {
	c := meta.FindStatusCondition(g.Status.Conditions, "Ready")
	return c != nil && c.Status == "True" && c.ObservedGeneration == g.Generation
}
