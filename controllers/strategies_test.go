package controllers

import (
	"testing"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	"github.com/consumergroup-operator/consumergroup-operator/api/v1alpha1"
)

func TestStrategyCacheKeepsAStrategyWhileItsSpecStays(t *testing.T) {
	var c strategyCache
	g := testGroup(v1alpha1.Strategy{Type: v1alpha1.ConsistentHash, ConsistentHash: &v1alpha1.ConsistentHashParameters{VirtualNodes: ptr.To[int32](10)}})
	first, prob := c.get(g)
	if prob != nil {
		t.Fatal(prob)
	}
	if again, _ := c.get(g.DeepCopy()); again != first {
		t.Error("the same spec built a new strategy")
	}
	changed := g.DeepCopy()
	changed.Spec.Strategy.ConsistentHash.VirtualNodes = ptr.To[int32](20)
	if other, _ := c.get(changed); other == first {
		t.Error("a changed spec kept the old strategy")
	}
	recreated := changed.DeepCopy()
	recreated.UID = "uid-2"
	second, _ := c.get(recreated)
	if again, _ := c.get(recreated); again != second {
		t.Error("the recreated group's strategy was not kept")
	}
	c.forget(types.NamespacedName{Namespace: g.Namespace, Name: g.Name})
	if again, _ := c.get(recreated); again == second {
		t.Error("a forgotten group kept its strategy")
	}
	if _, prob := c.get(testGroup(v1alpha1.Strategy{Type: "Unknown"})); prob == nil || prob.Reason != ReasonInvalidStrategyParameters {
		t.Errorf("an unknown strategy gave %v", prob)
	}
}
