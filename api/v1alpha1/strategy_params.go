package v1alpha1

import (
	"strings"
	"time"
)

// ParamsField is the path of the strategy's parameters in a ConsumerGroup, "spec.strategy.<type>" with
// the type's first letter in lower case (spec.strategy.byConfig), for messages that name a parameter.
func (s *Strategy) ParamsField() string {
	name := string(s.Type)
	if name == "" {
		return "spec.strategy"
	}
	return "spec.strategy." + strings.ToLower(name[:1]) + name[1:]
}

// DefaultLoadRebalanceInterval is spec.strategy.sticky.loadRebalanceIntervalSeconds' default.
const DefaultLoadRebalanceInterval = 60 * time.Second

// LoadRebalanceInterval is, for a strategy that balances the load members report, the least time between
// two rebalances that load changes alone cause; 0 for a strategy that does not read load. The reconciler
// gathers loads and paces load-only rebalances by it without knowing any strategy.
func (s *Strategy) LoadRebalanceInterval() time.Duration {
	st := s.Sticky
	if s.Type != Sticky || st == nil || st.BalanceBy != BalanceByLoad {
		return 0
	}
	if st.LoadRebalanceIntervalSeconds == nil {
		return DefaultLoadRebalanceInterval
	}
	return time.Duration(*st.LoadRebalanceIntervalSeconds) * time.Second
}
