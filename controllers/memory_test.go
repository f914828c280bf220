package controllers

import (
	"sync"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/types"

	"github.com/consumergroup-operator/consumergroup-operator/api/v1alpha1"
	"github.com/consumergroup-operator/consumergroup-operator/internal/fixture"
	"github.com/consumergroup-operator/consumergroup-operator/internal/observe"
)

// A group's strategy is reused while its spec's strategy and its group are the same, and built anew when
// either changed.
func TestStrategyForReusesOnlyAnUnchangedStrategy(t *testing.T) {
	var mem memory
	group := fixture.Group(v1alpha1.Strategy{Type: v1alpha1.ConsistentHash}, 4)
	first, prob := mem.strategyFor(group)
	if prob != nil {
		t.Fatal(prob)
	}
	for _, tc := range []struct {
		name   string
		change func(*v1alpha1.ConsumerGroup)
		reused bool
	}{
		{"unchanged", func(*v1alpha1.ConsumerGroup) {}, true},
		{"another strategy", func(g *v1alpha1.ConsumerGroup) { g.Spec.Strategy.Type = v1alpha1.Averagely }, false},
		{"a group of the same name created again", func(g *v1alpha1.ConsumerGroup) { g.UID = "another-uid" }, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := group.DeepCopy()
			tc.change(g)
			got, prob := mem.strategyFor(g)
			if prob != nil {
				t.Fatal(prob)
			}
			if reused := got == first; reused != tc.reused {
				t.Errorf("strategy reused: %v, want %v", reused, tc.reused)
			}
			first, _ = mem.strategyFor(group) // the first group's spec again, for the next case
		})
	}
}

// Each group has its own memory, begun at its first use; forgetting one group leaves the others, and its
// next use begins anew. Passes and watch events use it at once (run with -race).
func TestMemoryKeepsGroupsApart(t *testing.T) {
	var mem memory
	a, b := types.NamespacedName{Namespace: "ns", Name: "a"}, types.NamespacedName{Namespace: "ns", Name: "b"}
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			key := a
			if i%2 == 1 {
				key = b
			}
			mem.WithSightings(key, fixture.T0, func(s *observe.Sightings) { s.Wrote(int64(i), fixture.T0) })
			mem.addRetry(key)
		}()
	}
	wg.Wait()
	if n := mem.addRetry(a); n != 5 {
		t.Errorf("group a counts %d retries after 4 and one more, want 5", n)
	}
	mem.forget(a)
	if n := mem.addRetry(a); n != 1 {
		t.Errorf("a forgotten group counts %d retries after one, want 1", n)
	}
	if n := mem.addRetry(b); n != 5 {
		t.Errorf("group b counts %d retries, want 5: forgetting a lost b's", n)
	}
	later := fixture.T0.Add(time.Minute)
	var kept, begun *observe.Sightings
	mem.WithSightings(b, later, func(s *observe.Sightings) { kept = s })
	mem.WithSightings(a, later, func(s *observe.Sightings) { begun = s })
	if kept == nil || begun == nil || kept == begun {
		t.Fatalf("sightings of b %p and of a %p: want two of their own", kept, begun)
	}
}
