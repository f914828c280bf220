package controllers

import (
	"sync"

	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/types"

	"github.com/consumergroup-operator/consumergroup-operator/api/v1alpha1"
	"github.com/consumergroup-operator/consumergroup-operator/internal/plan"
	"github.com/consumergroup-operator/consumergroup-operator/pkg/allocate"
)

// strategyCache keeps each group's strategy between passes, so that a strategy that can reuse work from
// its last plan does (pkg/allocate says which: ConsistentHash keeps its ring hashes). It holds nothing a
// plan depends on: a restarted operator computes the same plans, only the first one slower. The work queue
// never runs two passes of one group at once, so each cached strategy is used by one pass at a time.
type strategyCache struct {
	mu      sync.Mutex
	byGroup map[types.NamespacedName]cachedStrategy
}

type cachedStrategy struct {
	uid  types.UID
	spec v1alpha1.Strategy
	// keepsReturning is keepsQueuesForReturningPods of the group it was built for, which a default of the
	// strategy's parameters depends on (strategyParams).
	keepsReturning bool
	strategy       allocate.Strategy
}

// get returns group's strategy, built anew when the spec's strategy changed.
func (c *strategyCache) get(group *v1alpha1.ConsumerGroup) (allocate.Strategy, *plan.Problem) {
	c.mu.Lock()
	defer c.mu.Unlock()
	key := types.NamespacedName{Namespace: group.Namespace, Name: group.Name}
	if cached, ok := c.byGroup[key]; ok && cached.uid == group.UID && cached.keepsReturning == plan.KeepsQueuesForReturningPods(group) &&
		equality.Semantic.DeepEqual(cached.spec, group.Spec.Strategy) {
		return cached.strategy, nil
	}
	strategy, prob := plan.NewStrategy(group)
	if prob != nil {
		return nil, prob
	}
	if c.byGroup == nil {
		c.byGroup = map[types.NamespacedName]cachedStrategy{}
	}
	c.byGroup[key] = cachedStrategy{uid: group.UID, spec: *group.Spec.Strategy.DeepCopy(), keepsReturning: plan.KeepsQueuesForReturningPods(group), strategy: strategy}
	return strategy, nil
}

// forget drops a deleted group's strategy.
func (c *strategyCache) forget(group types.NamespacedName) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.byGroup, group)
}
