package v1alpha1

import (
	"strings"
	"time"

	"k8s.io/utils/ptr"

	"github.com/consumergroup-operator/consumergroup-operator/pkg/allocate"
)

// Params converts the strategy's API parameters into pkg/allocate's, so that the reconciler hands them on
// without knowing any strategy. strict asks for a plan the operator can publish (allocate.Params.Strict).
func (s *Strategy) Params(strict bool) allocate.Params {
	p := allocate.Params{Strict: strict}
	if s.ConsistentHash != nil {
		p.VirtualNodes = s.ConsistentHash.VirtualNodes
	}
	if m := s.MachineRoomNearby; m != nil || s.Type == MachineRoomNearby {
		p.Inner = allocate.Averagely
		p.InnerParams = &allocate.Params{}
		if m != nil && m.Inner != "" {
			p.Inner = allocate.Name(m.Inner)
		}
		if m != nil && m.ConsistentHash != nil {
			p.InnerParams.VirtualNodes = m.ConsistentHash.VirtualNodes
		}
	}
	if s.ByMachineRoom != nil {
		p.MachineRooms = s.ByMachineRoom.MachineRooms
	}
	if s.ByConfig != nil {
		p.Assignments = map[string][]allocate.Queue{}
		for _, a := range s.ByConfig.Assignments {
			qs := make([]allocate.Queue, 0, len(a.Queues))
			for _, q := range a.Queues {
				qs = append(qs, allocate.Queue{Topic: q.Topic, Broker: q.Broker, ID: q.QueueID})
			}
			p.Assignments[a.Member] = qs
		}
	} else if s.Type == ByConfig {
		p.Assignments = map[string][]allocate.Queue{}
	}
	if st := s.Sticky; st != nil {
		if st.MaxSkew != nil {
			p.MaxSkew = *st.MaxSkew
		}
		p.ZoneRepairMoves = st.ZoneRepairMoves
		p.BalanceBy = string(st.BalanceBy)
		if st.LoadTolerancePercent != nil {
			p.LoadTolerance = ptr.To(float64(*st.LoadTolerancePercent) / 100)
		}
	}
	return p
}

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
