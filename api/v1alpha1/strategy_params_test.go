package v1alpha1

import (
	"testing"
	"time"

	"k8s.io/utils/ptr"
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

func TestParamsField(t *testing.T) {
	if got := (&Strategy{Type: ByConfig}).ParamsField(); got != "spec.strategy.byConfig" {
		t.Errorf("ParamsField() = %q, want spec.strategy.byConfig", got)
	}
}
