package controllers

import (
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/types"

	"github.com/consumergroup-operator/consumergroup-operator/api/v1alpha1"
	"github.com/consumergroup-operator/consumergroup-operator/internal/plan"
	"github.com/consumergroup-operator/consumergroup-operator/pkg/allocate"
)

// cachedStrategy is a group's strategy as memory keeps it between passes, so that a strategy that can
// reuse work from its last plan does (pkg/allocate says which: ConsistentHash keeps its ring hashes). It
// holds nothing a plan depends on: a restarted operator computes the same plans, only the first one
// slower. The work queue never runs two passes of one group at once, so each kept strategy is used by one
// pass at a time.
type cachedStrategy struct {
	uid  types.UID
	spec v1alpha1.Strategy
	// keepsReturning is keepsQueuesForReturningPods of the group it was built for, which a default of the
	// strategy's parameters depends on (strategyParams).
	keepsReturning bool
	strategy       allocate.Strategy
}

// strategyFor returns group's strategy: the one kept, unless the spec's strategy changed, else one built
// anew (outside the lock) and kept.
func (m *memory) strategyFor(group *v1alpha1.ConsumerGroup) (allocate.Strategy, *plan.Problem) {
	key := types.NamespacedName{Namespace: group.Namespace, Name: group.Name}
	keepsReturning := plan.KeepsQueuesForReturningPods(group)
	var cached cachedStrategy
	m.with(key, func(g *groupMemory) { cached = g.strategy })
	if cached.strategy != nil && cached.uid == group.UID && cached.keepsReturning == keepsReturning &&
		equality.Semantic.DeepEqual(cached.spec, group.Spec.Strategy) {
		return cached.strategy, nil
	}
	strategy, prob := plan.NewStrategy(group)
	if prob != nil {
		return nil, prob
	}
	kept := cachedStrategy{uid: group.UID, spec: *group.Spec.Strategy.DeepCopy(), keepsReturning: keepsReturning, strategy: strategy}
	m.with(key, func(g *groupMemory) { g.strategy = kept })
	return strategy, nil
}
