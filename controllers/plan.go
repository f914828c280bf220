package controllers

import (
	"errors"
	"fmt"
	"slices"

	"github.com/consumergroup-operator/consumergroup-operator/api/v1alpha1"
	"github.com/consumergroup-operator/consumergroup-operator/pkg/allocate"
)

// queuesFor lists every queue the spec names, in RocketMQ's order (topic, then broker, by UTF-16 order,
// then id), with each broker's zone. Sorting the few topic and broker names here spares the strategies
// from sorting every queue: for 65,536 queues that sort costs more than most strategies' own work.
func queuesFor(spec *v1alpha1.ConsumerGroupSpec) ([]allocate.Queue, map[string]string) {
	n := 0
	topics := slices.Clone(spec.Topics)
	slices.SortFunc(topics, func(a, b v1alpha1.Topic) int { return allocate.CompareUTF16(a.Name, b.Name) })
	for i, t := range topics {
		topics[i].Brokers = slices.Clone(t.Brokers)
		slices.SortFunc(topics[i].Brokers, func(a, b v1alpha1.Broker) int { return allocate.CompareUTF16(a.Name, b.Name) })
		for _, b := range t.Brokers {
			n += int(b.Queues)
		}
	}
	queues := make([]allocate.Queue, 0, n)
	zones := map[string]string{}
	for _, t := range topics {
		for _, b := range t.Brokers {
			if b.Zone != "" {
				zones[b.Name] = b.Zone
			}
			for id := int32(0); id < b.Queues; id++ {
				queues = append(queues, allocate.Queue{Topic: t.Name, Broker: b.Name, ID: id})
			}
		}
	}
	return queues, zones
}

// strategyFor builds the strategy the spec chooses, with its parameters.
func strategyFor(s *v1alpha1.Strategy) (allocate.Strategy, *problem) {
	p := strategyParams(s)
	// A strategy's plan is published only in Clustering, where a queue has one owner: ByConfig refuses a
	// configuration that names a queue the spec does not list or lists a queue twice, whoever the members
	// are right now.
	p.Strict = true
	strategy, err := allocate.New(allocate.Name(s.Type), p)
	if err != nil {
		return nil, &problem{ReasonInvalidStrategyParameters, fmt.Sprintf("spec.strategy: %v", err)}
	}
	return strategy, nil
}

// strategyParams are the parameters of the spec's strategy, as pkg/allocate takes them.
func strategyParams(s *v1alpha1.Strategy) allocate.Params {
	var p allocate.Params
	switch s.Type {
	case v1alpha1.ConsistentHash:
		if s.ConsistentHash != nil {
			p.VirtualNodes = s.ConsistentHash.VirtualNodes
		}
	case v1alpha1.MachineRoomNearby:
		p.Inner = allocate.Averagely
		p.InnerParams = &allocate.Params{}
		if m := s.MachineRoomNearby; m != nil {
			if m.Inner != "" {
				p.Inner = allocate.Name(m.Inner)
			}
			if m.ConsistentHash != nil {
				p.InnerParams.VirtualNodes = m.ConsistentHash.VirtualNodes
			}
		}
	case v1alpha1.ByMachineRoom:
		if s.ByMachineRoom != nil {
			p.MachineRooms = s.ByMachineRoom.MachineRooms
		}
	case v1alpha1.ByConfig:
		p.Assignments = map[string][]allocate.Queue{}
		if s.ByConfig != nil {
			for _, a := range s.ByConfig.Assignments {
				qs := make([]allocate.Queue, 0, len(a.Queues))
				for _, q := range a.Queues {
					qs = append(qs, allocate.Queue{Topic: q.Topic, Broker: q.Broker, ID: q.QueueID})
				}
				p.Assignments[a.Member] = qs
			}
		}
	case v1alpha1.Sticky:
		if s.Sticky != nil && s.Sticky.MaxSkew != nil {
			p.MaxSkew = *s.Sticky.MaxSkew
		}
	}
	return p
}

// planFor computes the plan for members: every queue to every member in Broadcasting, the strategy's
// plan in Clustering. previous is the plan published now, for strategies that keep queues in place;
// strategies keeps the group's strategy between passes (nil builds it anew).
// A plan that leaves a member out, names a queue the spec does not list, or (in Clustering) gives a
// queue to two members is refused: publishing it would be ambiguous.
func planFor(group *v1alpha1.ConsumerGroup, members []member, previous allocate.Plan, strategies *strategyCache) (allocate.Plan, int, *problem) {
	queues, zones := queuesFor(&group.Spec)
	plan := make(allocate.Plan, len(members))
	if group.Spec.MessageModel == v1alpha1.Broadcasting {
		for _, m := range members {
			plan[m.ID] = queues
		}
		return plan, len(queues), nil
	}
	strategy, prob := strategies.get(group)
	if prob != nil {
		return nil, 0, prob
	}
	in := allocate.Input{Queues: queues, Members: make([]allocate.Member, len(members)), BrokerZones: zones, Previous: previous}
	for i, m := range members {
		in.Members[i] = m.Member
	}
	out, err := strategy.Allocate(in)
	var pe *allocate.ParamError
	if errors.As(err, &pe) {
		// Only ByConfig's strict check (Params.Strict) refuses a parameter while allocating.
		return nil, 0, &problem{ReasonInvalidStrategyParameters, "spec.strategy.byConfig." + pe.Error()}
	}
	if err != nil {
		return nil, 0, &problem{ReasonAllocationFailed, fmt.Sprintf("strategy %s: %v", group.Spec.Strategy.Type, err)}
	}
	if prob := checkPlan(queues, members, out); prob != nil {
		return nil, 0, prob
	}
	for _, m := range members {
		plan[m.ID] = out[m.ID]
	}
	return plan, len(queues), nil
}

// checkPlan refuses a plan that is not a partition of a subset of the queues over the members.
func checkPlan(queues []allocate.Queue, members []member, plan allocate.Plan) *problem {
	known := make(map[allocate.Queue]bool, len(queues))
	for _, q := range queues {
		known[q] = false
	}
	isMember := make(map[string]bool, len(members))
	for _, m := range members {
		isMember[m.ID] = true
	}
	for id, qs := range plan {
		if !isMember[id] && len(qs) > 0 {
			return &problem{ReasonAllocationFailed, fmt.Sprintf("the strategy gave queues to %q, which is not a member", id)}
		}
		for _, q := range qs {
			owned, ok := known[q]
			if !ok {
				return &problem{ReasonAllocationFailed, fmt.Sprintf("the strategy gave %s to %q, but spec.topics lists no such queue", q, id)}
			}
			if owned {
				return &problem{ReasonAllocationFailed, fmt.Sprintf("the strategy gave %s to more than one member", q)}
			}
			known[q] = true
		}
	}
	return nil
}
