package plan

import (
	"k8s.io/utils/ptr"

	"github.com/consumergroup-operator/consumergroup-operator/api/v1alpha1"
	"github.com/consumergroup-operator/consumergroup-operator/pkg/allocate"
)

// strategyParams converts group's strategy parameters into pkg/allocate's, so that the API types know no
// algorithm and the reconciler hands the parameters on without knowing any strategy. strict asks for a
// plan the operator can publish (allocate.Params.Strict).
func strategyParams(group *v1alpha1.ConsumerGroup, strict bool) allocate.Params {
	s := &group.Spec.Strategy
	p := allocate.Params{Strict: strict}
	if s.ConsistentHash != nil {
		p.VirtualNodes = s.ConsistentHash.VirtualNodes
	}
	if m := s.MachineRoomNearby; m != nil || s.Type == v1alpha1.MachineRoomNearby {
		p.Inner, p.InnerParams = machineRoomInner(m)
	}
	if s.ByMachineRoom != nil {
		p.MachineRooms = s.ByMachineRoom.MachineRooms
	}
	if s.ByConfig != nil || s.Type == v1alpha1.ByConfig {
		p.Assignments = configuredAssignments(s.ByConfig)
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
	if p.ZoneRepairMoves == nil && KeepsQueuesForReturningPods(group) {
		// A group that keeps a departed pod's queues for it wants the pod to keep them once back, whatever
		// zone the scheduler put it in: a StatefulSet's rolling update then moves nothing.
		p.ZoneRepairMoves = ptr.To[int32](0)
	}
	return p
}

// KeepsQueuesForReturningPods reports whether group keeps a departed member's queues for it
// (spec.handoff.restartGraceSeconds above 0).
func KeepsQueuesForReturningPods(group *v1alpha1.ConsumerGroup) bool {
	grace := group.Spec.Handoff.RestartGraceSeconds
	return grace != nil && *grace > 0
}

// machineRoomInner is the strategy MachineRoomNearby applies inside each machine room, Averagely unless m
// names another.
func machineRoomInner(m *v1alpha1.MachineRoomNearbyParameters) (allocate.Name, *allocate.Params) {
	inner, params := allocate.Averagely, &allocate.Params{}
	if m != nil && m.Inner != "" {
		inner = allocate.Name(m.Inner)
	}
	if m != nil && m.ConsistentHash != nil {
		params.VirtualNodes = m.ConsistentHash.VirtualNodes
	}
	return inner, params
}

// configuredAssignments are ByConfig's queues by member id; empty, never nil, without parameters.
func configuredAssignments(c *v1alpha1.ByConfigParameters) map[string][]allocate.Queue {
	out := map[string][]allocate.Queue{}
	if c == nil {
		return out
	}
	for _, a := range c.Assignments {
		qs := make([]allocate.Queue, 0, len(a.Queues))
		for _, q := range a.Queues {
			qs = append(qs, allocate.Queue{Topic: q.Topic, Broker: q.Broker, ID: q.QueueID})
		}
		out[a.Member] = qs
	}
	return out
}

// NewStrategy builds group's strategy from its spec.
func NewStrategy(group *v1alpha1.ConsumerGroup) (allocate.Strategy, *Problem) {
	s := &group.Spec.Strategy
	// Strict: the operator publishes only partitions of the spec's queues (allocate.Params.Strict).
	strategy, err := allocate.New(allocate.Name(s.Type), strategyParams(group, true))
	if err != nil {
		return nil, strategyProblem(s, v1alpha1.ReasonInvalidStrategyParameters, err)
	}
	return strategy, nil
}
