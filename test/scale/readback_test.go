//go:build scale

package scale

import (
	"context"
	"fmt"
	"sort"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/consumergroup-operator/consumergroup-operator/api/v1alpha1"
	"github.com/consumergroup-operator/consumergroup-operator/pkg/allocate"
	"github.com/consumergroup-operator/consumergroup-operator/pkg/assignment"
)

// published is a group's assignment as read back from every ConfigMap labelled with the group: the
// operator may split a large assignment over several, so the reader never assumes one name.
type published struct {
	configMaps int
	// bytes is the size of the ConfigMaps' data (keys and values).
	bytes int
	// entries maps a pod name (a data key) to its decoded entry and queues.
	entries map[string]readEntry
	// generation is the highest entry generation seen.
	generation int64
}

type readEntry struct {
	entry  assignment.Entry
	queues []allocate.Queue
}

// readPublished lists the group's ConfigMaps and decodes every entry in them.
func readPublished(ctx context.Context, c client.Client, ns, group string) (published, error) {
	var cms corev1.ConfigMapList
	if err := c.List(ctx, &cms, client.InNamespace(ns), client.MatchingLabels{v1alpha1.GroupLabel: group}); err != nil {
		return published{}, err
	}
	return decodePublished(cms.Items)
}

// decodePublished decodes every data key of cms as one member's entry. A key that does not decode is
// an error: the pod-side reader would not find its queues in it.
func decodePublished(cms []corev1.ConfigMap) (published, error) {
	p := published{configMaps: len(cms), entries: map[string]readEntry{}}
	for _, cm := range cms {
		for key, value := range cm.Data {
			p.bytes += len(key) + len(value)
			e, qs, err := assignment.Decode([]byte(value))
			if err != nil {
				return p, fmt.Errorf("ConfigMap %s, key %s: %w", cm.Name, key, err)
			}
			if _, dup := p.entries[key]; dup {
				return p, fmt.Errorf("pod %s has entries in two ConfigMaps (one is %s)", key, cm.Name)
			}
			p.entries[key] = readEntry{entry: e, queues: qs}
			p.generation = max(p.generation, e.Generation)
		}
	}
	return p, nil
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
