package v1alpha1

import (
	"testing"
	"time"

	"k8s.io/utils/ptr"

	"github.com/consumergroup-operator/consumergroup-operator/pkg/allocate"
)

func TestLoadRebalanceInterval(t *testing.T) {
	for _, c := range []struct {
		name     string
		strategy Strategy
		want     time.Duration
	}{
		{"Sticky by count", Strategy{Type: Sticky}, 0},
		{"Sticky by count, explicitly", Strategy{Type: Sticky, Sticky: &StickyParameters{BalanceBy: BalanceByQueues}}, 0},
		{"Sticky by load, default interval", Strategy{Type: Sticky, Sticky: &StickyParameters{BalanceBy: BalanceByLoad}}, DefaultLoadRebalanceInterval},
		{"Sticky by load, 5 s", Strategy{Type: Sticky, Sticky: &StickyParameters{BalanceBy: BalanceByLoad, LoadRebalanceIntervalSeconds: ptr.To[int32](5)}}, 5 * time.Second},
		// Parameters of another type than the one chosen are ignored, as Params ignores them.
		{"Averagely beside Sticky's parameters", Strategy{Type: Averagely, Sticky: &StickyParameters{BalanceBy: BalanceByLoad}}, 0},
	} {
		if got := c.strategy.LoadRebalanceInterval(); got != c.want {
			t.Errorf("%s: LoadRebalanceInterval() = %s, want %s", c.name, got, c.want)
		}
	}
}

func TestParams(t *testing.T) {
	s := Strategy{Type: Sticky, Sticky: &StickyParameters{MaxSkew: ptr.To[int32](2), BalanceBy: BalanceByLoad, LoadTolerancePercent: ptr.To[int32](25)}}
	p := s.Params(true)
	if !p.Strict || p.MaxSkew != 2 || p.BalanceBy != allocate.BalanceByLoad || p.LoadTolerance == nil || *p.LoadTolerance != 0.25 {
		t.Errorf("Params(true) = %+v: want strict, maxSkew 2, by load, tolerance 0.25", p)
	}
	repair := Strategy{Type: Sticky, Sticky: &StickyParameters{ZoneRepairMoves: ptr.To[int32](3)}}
	if got := repair.Params(false); got.ZoneRepairMoves == nil || *got.ZoneRepairMoves != 3 {
		t.Errorf("zoneRepairMoves 3: Params().ZoneRepairMoves = %v, want 3", got.ZoneRepairMoves)
	}
	if got := (&Strategy{Type: Sticky, Sticky: &StickyParameters{}}).Params(false); got.ZoneRepairMoves != nil {
		t.Errorf("zoneRepairMoves unset: Params().ZoneRepairMoves = %v, want nil (the strategy's default)", *got.ZoneRepairMoves)
	}
	if got := (&Strategy{Type: MachineRoomNearby}).Params(false); got.Inner != allocate.Averagely {
		t.Errorf("MachineRoomNearby without parameters: inner %q, want Averagely", got.Inner)
	}
	if got := (&Strategy{Type: ByConfig}).ParamsField(); got != "spec.strategy.byConfig" {
		t.Errorf("ParamsField() = %q, want spec.strategy.byConfig", got)
	}
}
