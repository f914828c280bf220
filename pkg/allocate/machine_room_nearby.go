package allocate

import (
	"errors"
	"fmt"
	"slices"
)

// machineRoomNearby is RocketMQ's AllocateMachineRoomNearby around any other strategy of the registry. A
// member gets, in this order:
//  1. the inner strategy's share of the queues of its own room (Member.Zone), among the members of that room;
//  2. for each broker room that has no members at all, in UTF-16 order of room name, the inner strategy's
//     share of that room's queues among all members, each such room allocated on its own.
//
// A broker's room is Input.BrokerZones[broker]. An empty member or broker room fails the whole group,
// because a plan that silently moves a room's queues elsewhere is worse than no new plan.
type machineRoomNearby struct {
	inner Strategy
}

// innerConstructor finds the constructor of the strategy MachineRoomNearby wraps. It is a variable wired in
// registry.go because a function that reads the registry cannot itself be listed in it: Go rejects the
// initialization cycle.
var innerConstructor func(Name) (Constructor, bool)

func newMachineRoomNearby(p Params) (Strategy, error) {
	name := p.Inner
	if name == "" {
		name = Averagely
	}
	if name == MachineRoomNearby {
		return nil, paramErrorf("inner", "MachineRoomNearby cannot wrap itself")
	}
	c, ok := innerConstructor(name)
	if !ok {
		return nil, paramErrorf("inner", "unknown strategy %q", name)
	}
	var ip Params
	if p.InnerParams != nil {
		ip = *p.InnerParams
	}
	inner, err := c(ip)
	if err != nil {
		// The inner parameter's path, relative to MachineRoomNearby's own.
		var pe *ParamError
		if errors.As(err, &pe) {
			return nil, &ParamError{Field: "innerParams." + pe.Field, Message: pe.Message}
		}
		return nil, &ParamError{Field: "innerParams", Message: err.Error()}
	}
	return machineRoomNearby{inner: inner}, nil
}

func (s machineRoomNearby) Allocate(in Input) (Plan, error) {
	queues, members := sortedQueues(in.Queues), sortedMembers(in.Members)
	if len(queues) == 0 || len(members) == 0 {
		return emptyPlan(members), nil
	}

	// Phase 1: group queues and members by room, keeping sorted order inside each room. RocketMQ checks
	// every queue before any member, so the first error reported is the same as RocketMQ's.
	// Queues are counted per room first so that each room's list is allocated once, at its size.
	queuesPerRoom := map[string]int{}
	var broker, room string
	for _, q := range queues {
		if q.Broker != broker || room == "" {
			broker, room = q.Broker, in.BrokerZones[q.Broker]
		}
		if room == "" {
			return nil, fmt.Errorf("brokerZones: no machine room for broker %q (queue %s)", q.Broker, q)
		}
		queuesPerRoom[room]++
	}
	queuesByRoom := make(map[string][]Queue, len(queuesPerRoom))
	for r, n := range queuesPerRoom {
		queuesByRoom[r] = make([]Queue, 0, n)
	}
	for _, q := range queues {
		r := in.BrokerZones[q.Broker]
		queuesByRoom[r] = append(queuesByRoom[r], q)
	}
	membersByRoom := map[string][]Member{}
	for _, m := range members {
		if m.Zone == "" {
			return nil, fmt.Errorf("members: no machine room (zone) for member %q", m.ID)
		}
		membersByRoom[m.Zone] = append(membersByRoom[m.Zone], m)
	}

	// Phase 2: each room's own queues among its own members.
	plan := emptyPlan(members)
	for room, roomMembers := range membersByRoom {
		roomQueues := queuesByRoom[room]
		if len(roomQueues) == 0 {
			continue
		}
		if err := s.appendShares(plan, in, roomQueues, roomMembers); err != nil {
			return nil, fmt.Errorf("room %q: %w", room, err)
		}
	}

	// Phase 3: rooms with brokers but no members, in RocketMQ's (UTF-16) room order, each among everyone.
	var orphans []string
	for room := range queuesByRoom {
		if _, ok := membersByRoom[room]; !ok {
			orphans = append(orphans, room)
		}
	}
	slices.SortFunc(orphans, CompareUTF16)
	for _, room := range orphans {
		if err := s.appendShares(plan, in, queuesByRoom[room], members); err != nil {
			return nil, fmt.Errorf("room %q: %w", room, err)
		}
	}
	return plan, nil
}

// appendShares runs the inner strategy on one room's queues and members and appends each member's share
// to its list in plan.
func (s machineRoomNearby) appendShares(plan Plan, in Input, queues []Queue, members []Member) error {
	sub, err := s.inner.Allocate(Input{
		Queues:      queues,
		Members:     members,
		BrokerZones: in.BrokerZones,
		Previous:    in.Previous,
	})
	if err != nil {
		return err
	}
	for _, m := range members {
		share := sub[m.ID]
		if len(share) == 0 {
			continue
		}
		if len(plan[m.ID]) == 0 {
			// Most members get queues from one room only: take the inner list itself, capped so that a
			// later room's append copies it rather than writing into memory another list may share.
			plan[m.ID] = share[:len(share):len(share)]
			continue
		}
		plan[m.ID] = append(plan[m.ID], share...)
	}
	return nil
}
