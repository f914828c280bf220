package plan

import (
	"testing"

	"k8s.io/utils/ptr"

	"github.com/consumergroup-operator/consumergroup-operator/api/v1alpha1"
	"github.com/consumergroup-operator/consumergroup-operator/pkg/allocate"
)

func groupWithStrategy(s v1alpha1.Strategy) *v1alpha1.ConsumerGroup {
	return &v1alpha1.ConsumerGroup{Spec: v1alpha1.ConsumerGroupSpec{Strategy: s}}
}

func TestStrategyParams(t *testing.T) {
	p := strategyParams(groupWithStrategy(v1alpha1.Strategy{Type: v1alpha1.Sticky, Sticky: &v1alpha1.StickyParameters{
		MaxSkew: ptr.To[int32](2), BalanceBy: v1alpha1.BalanceByLoad, LoadTolerancePercent: ptr.To[int32](25)}}), true)
	if !p.Strict || p.MaxSkew != 2 || p.BalanceBy != allocate.BalanceByLoad || p.LoadTolerance == nil || *p.LoadTolerance != 0.25 {
		t.Errorf("strategyParams = %+v: want strict, maxSkew 2, by load, tolerance 0.25", p)
	}
	repair := groupWithStrategy(v1alpha1.Strategy{Type: v1alpha1.Sticky, Sticky: &v1alpha1.StickyParameters{ZoneRepairMoves: ptr.To[int32](3)}})
	if got := strategyParams(repair, false); got.ZoneRepairMoves == nil || *got.ZoneRepairMoves != 3 {
		t.Errorf("zoneRepairMoves 3: ZoneRepairMoves = %v, want 3", got.ZoneRepairMoves)
	}
	repair.Spec.Handoff.RestartGraceSeconds = ptr.To[int32](60)
	if got := strategyParams(repair, false); got.ZoneRepairMoves == nil || *got.ZoneRepairMoves != 3 {
		t.Errorf("zoneRepairMoves 3 with a restart grace: ZoneRepairMoves = %v, want 3 (as written)", got.ZoneRepairMoves)
	}
	unset := groupWithStrategy(v1alpha1.Strategy{Type: v1alpha1.Sticky})
	if got := strategyParams(unset, false); got.ZoneRepairMoves != nil {
		t.Errorf("zoneRepairMoves unset: ZoneRepairMoves = %v, want nil (the strategy's default)", *got.ZoneRepairMoves)
	}
	unset.Spec.Handoff.RestartGraceSeconds = ptr.To[int32](60)
	if got := strategyParams(unset, false); got.ZoneRepairMoves == nil || *got.ZoneRepairMoves != 0 {
		t.Errorf("zoneRepairMoves unset with a restart grace: ZoneRepairMoves = %v, want 0", got.ZoneRepairMoves)
	}
	if got := strategyParams(groupWithStrategy(v1alpha1.Strategy{Type: v1alpha1.MachineRoomNearby}), false); got.Inner != allocate.Averagely || got.InnerParams == nil {
		t.Errorf("MachineRoomNearby without parameters: inner %q (%v), want Averagely", got.Inner, got.InnerParams)
	}
	if got := strategyParams(groupWithStrategy(v1alpha1.Strategy{Type: v1alpha1.ByConfig}), false); got.Assignments == nil {
		t.Error("ByConfig without parameters: Assignments nil, want an empty map")
	}
}

// TestAPINamesAreAllocateNames checks that every strategy type and balanceBy value the API accepts is the
// name pkg/allocate knows it by: the API spells them out rather than importing the algorithms.
func TestAPINamesAreAllocateNames(t *testing.T) {
	for _, s := range []v1alpha1.StrategyType{v1alpha1.Averagely, v1alpha1.AveragelyByCircle, v1alpha1.ConsistentHash,
		v1alpha1.MachineRoomNearby, v1alpha1.ByMachineRoom, v1alpha1.ByConfig, v1alpha1.Sticky} {
		if _, err := allocate.New(allocate.Name(s), strategyParams(groupWithStrategy(v1alpha1.Strategy{Type: s}), true)); err != nil {
			t.Errorf("strategy type %s: %v", s, err)
		}
	}
	if string(v1alpha1.BalanceByQueues) != allocate.BalanceByQueues || string(v1alpha1.BalanceByLoad) != allocate.BalanceByLoad {
		t.Errorf("balanceBy values %q, %q; pkg/allocate's are %q, %q", v1alpha1.BalanceByQueues, v1alpha1.BalanceByLoad, allocate.BalanceByQueues, allocate.BalanceByLoad)
	}
}
