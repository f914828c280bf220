package main

import (
	"fmt"
	"slices"
	"strings"

	"github.com/consumergroup-operator/consumergroup-operator/pkg/allocate"
	"github.com/consumergroup-operator/consumergroup-operator/pkg/protocol"
)

// options are the parameters the simulator gives Sticky.
type options struct {
	maxSkew int32
	// zoneRepair is Sticky's ZoneRepairMoves; nil means its default.
	zoneRepair *int32
	// balanceBy is Sticky's BalanceBy; tolerance its LoadTolerance, also the bound WithinLoadBound checks.
	balanceBy string
	tolerance float64
}

// label is the name a strategy's results go under: Sticky balancing by load says so.
func (o options) label(name allocate.Name) string {
	if name == allocate.Sticky && o.balanceBy == allocate.BalanceByLoad {
		return string(name) + " (by load)"
	}
	return string(name)
}

// byConfigSkipped explains why ByConfig is never simulated.
const byConfigSkipped = "ByConfig: not a rebalancing strategy, it replays a fixed assignment"

// strategyNames resolves the -strategies flag: empty means every registered strategy but ByConfig,
// Sticky first.
func strategyNames(flag string) ([]allocate.Name, []string, error) {
	var skipped []string
	if flag == "" {
		names := []allocate.Name{allocate.Sticky}
		for _, n := range allocate.Names() {
			if n != allocate.Sticky && n != allocate.ByConfig {
				names = append(names, n)
			}
		}
		return names, []string{byConfigSkipped}, nil
	}
	known := allocate.Names()
	var names []allocate.Name
	for _, s := range strings.Split(flag, ",") {
		n := allocate.Name(strings.TrimSpace(s))
		switch {
		case n == allocate.ByConfig:
			skipped = append(skipped, byConfigSkipped)
		case !slices.Contains(known, n):
			return nil, nil, fmt.Errorf("unknown strategy %q (known: %v)", n, known)
		case !slices.Contains(names, n):
			names = append(names, n)
		}
	}
	return names, skipped, nil
}

// strategyFor builds the named strategy with the parameters the simulator gives it.
func strategyFor(name allocate.Name, sc Scenario, o options) (allocate.Strategy, error) {
	p := allocate.Params{MaxSkew: o.maxSkew, BalanceBy: o.balanceBy, LoadTolerance: &o.tolerance, ZoneRepairMoves: o.zoneRepair}
	switch name {
	case allocate.MachineRoomNearby:
		p.Inner = allocate.Averagely
	case allocate.ByMachineRoom:
		p.MachineRooms = scenarioZones(sc)
	}
	return allocate.New(name, p)
}

// scenarioZones lists every broker zone the scenario mentions, sorted.
func scenarioZones(sc Scenario) []string {
	var zs []string
	add := func(ts []Topic) {
		for _, t := range ts {
			for _, b := range t.Brokers {
				if b.Zone != "" && !slices.Contains(zs, b.Zone) {
					zs = append(zs, b.Zone)
				}
			}
		}
	}
	add(sc.Topics)
	for _, st := range sc.Steps {
		add(st.Topics)
	}
	slices.Sort(zs)
	return zs
}

// Output is the simulator's JSON document: the scenario, its step labels, one Result per strategy, and
// the strategies left out of the comparison, each with the reason.
type Output struct {
	Scenario string   `json:"scenario"`
	Labels   []string `json:"labels"`
	Results  []Result `json:"results"`
	Skipped  []string `json:"skipped,omitempty"`
}

// run replays sc through every named strategy, feeding each plan back as the next previous plan.
func run(sc Scenario, names []allocate.Name, o options) (Output, error) {
	out := Output{Scenario: sc.Name}
	for i, st := range sc.Steps {
		label := st.Label
		if label == "" {
			label = fmt.Sprintf("step %d", i)
		}
		out.Labels = append(out.Labels, label)
	}
	for _, name := range names {
		s, err := strategyFor(name, sc, o)
		if err != nil {
			return Output{}, fmt.Errorf("strategy %s: %w", name, err)
		}
		res := Result{Strategy: o.label(name)}
		topics := sc.Topics
		var prev allocate.Plan
		var loads map[string]float64
		for _, st := range sc.Steps {
			if st.Topics != nil {
				topics = st.Topics
			}
			if st.QueueLoad != nil {
				loads = st.QueueLoad
			}
			in, err := input(topics, st.Members, prev, loads)
			if err != nil {
				return Output{}, err
			}
			plan, step := planStep(s, name, in, o.tolerance)
			plan = settle(s, name, in, plan, &step)
			res.Steps = append(res.Steps, step)
			prev = plan
		}
		out.Results = append(out.Results, res)
	}
	return out, nil
}

// planStep plans one step with strategy s from in.Previous and measures the plan.
func planStep(s allocate.Strategy, name allocate.Name, in allocate.Input, tolerance float64) (allocate.Plan, StepResult) {
	plan, err := allocateWith(s, name, in)
	step := StepResult{LowerBound: allocate.LowerBound(in)}
	if err != nil {
		step.Error = err.Error()
		plan = allocate.Plan{}
	}
	measure(&step, in, plan, tolerance)
	return plan, step
}

// allocateWith runs Sticky on the whole group and a RocketMQ strategy per topic.
func allocateWith(s allocate.Strategy, name allocate.Name, in allocate.Input) (allocate.Plan, error) {
	if name == allocate.Sticky {
		return s.Allocate(in)
	}
	return perTopic(s, in, name == allocate.ByMachineRoom)
}

// maxSettleRounds bounds the replans settle makes.
const maxSettleRounds = 100

// settle replans the unchanged group from plan until nothing moves, as the operator's passes do when the
// group stops changing for a while (Sticky's repair moves spread over them), and records the moves
// and the settled plan's cross-zone count in step. It returns the settled plan, which the next step
// starts from.
func settle(s allocate.Strategy, name allocate.Name, in allocate.Input, plan allocate.Plan, step *StepResult) allocate.Plan {
	step.SettledCrossZone = step.CrossZone
	if step.Error != "" {
		return plan
	}
	for range maxSettleRounds {
		in.Previous = plan
		next, err := allocateWith(s, name, in)
		if err != nil {
			step.Error = err.Error()
			return plan
		}
		moved := allocate.Moved(plan, next)
		if moved == 0 {
			break
		}
		step.SettleMoves += moved
		step.SettleRounds++
		plan = next
	}
	step.SettledCrossZone = allocate.CrossZone(in, plan)
	return plan
}

// input is the strategies' input at one step; loads, when not nil, give every queue its load (0 when
// unlisted).
func input(topics []Topic, members []Member, prev allocate.Plan, loads map[string]float64) (allocate.Input, error) {
	in := allocate.Input{BrokerZones: map[string]string{}, Previous: prev}
	for _, t := range topics {
		for _, b := range t.Brokers {
			in.BrokerZones[b.Name] = b.Zone
			for id := range b.Queues {
				in.Queues = append(in.Queues, allocate.Queue{Topic: t.Name, Broker: b.Name, ID: id})
			}
		}
	}
	for _, m := range members {
		in.Members = append(in.Members, allocate.Member{ID: m.ID, Zone: m.Zone, Weight: max(m.Weight, 1)})
	}
	if loads != nil {
		in.QueueLoad = make(map[allocate.Queue]float64, len(in.Queues))
		for _, q := range in.Queues {
			in.QueueLoad[q] = 0
		}
		for key, v := range loads {
			q, err := protocol.ParseQueue(key)
			if err != nil {
				return allocate.Input{}, fmt.Errorf("queueLoad: %w", err)
			}
			in.QueueLoad[q] = v
		}
		if err := protocol.CheckLoad(in.QueueLoad); err != nil {
			return allocate.Input{}, fmt.Errorf("queueLoad: %w", err)
		}
	}
	return in, nil
}

// perTopic runs a RocketMQ strategy as a RocketMQ client does: once per subscribed topic, over that
// topic's queues only. ByMachineRoom reads a queue's room from its broker name, "<room>@<broker>", so
// it sees the brokers renamed that way and its plan is mapped back.
func perTopic(s allocate.Strategy, in allocate.Input, roomInBrokerName bool) (allocate.Plan, error) {
	var topics []string
	byTopic := map[string][]allocate.Queue{}
	for _, q := range in.Queues {
		if _, ok := byTopic[q.Topic]; !ok {
			topics = append(topics, q.Topic)
		}
		if roomInBrokerName {
			q.Broker = in.BrokerZones[q.Broker] + "@" + q.Broker
		}
		byTopic[q.Topic] = append(byTopic[q.Topic], q)
	}
	plan := allocate.Plan{}
	for _, m := range in.Members {
		plan[m.ID] = nil
	}
	for _, t := range topics {
		sub := in
		sub.Queues = byTopic[t]
		p, err := s.Allocate(sub)
		if err != nil {
			return nil, err
		}
		for id, qs := range p {
			for _, q := range qs {
				if roomInBrokerName {
					_, q.Broker, _ = strings.Cut(q.Broker, "@")
				}
				plan[id] = append(plan[id], q)
			}
		}
	}
	return plan, nil
}

// Result is one strategy's run through the scenario: a StepResult per step.
type Result struct {
	Strategy string       `json:"strategy"`
	Steps    []StepResult `json:"steps"`
}

// StepResult measures one step's plan.
type StepResult struct {
	// Moved counts queues whose previous owner is still a member and whose owner changed (allocate.Moved).
	Moved int `json:"moved"`
	// LowerBound is the fewest moves any balanced plan needs from this strategy's previous plan
	// (allocate.LowerBound).
	LowerBound int `json:"lowerBound"`
	// BalanceMoves and LocalityMoves split Moved (allocate.CountMoves): the moves balance forces, at most
	// LowerBound, and the moves beyond it. Sticky balancing by queue count makes the latter only to read
	// fewer queues across zones, at most its zoneRepairMoves a step; for a strategy that does not keep
	// queues where they were, they are simply its moves beyond the bound.
	BalanceMoves  int `json:"balanceMoves"`
	LocalityMoves int `json:"localityMoves"`

	MaxLoad int `json:"maxLoad"`
	MinLoad int `json:"minLoad"`
	// CrossZone counts queues whose owner is not in the broker's zone (allocate.CrossZone).
	CrossZone int `json:"crossZone"`
	// MinCrossZone is the fewest cross-zone queues any balanced plan of this step allows
	// (allocate.MinCrossZone).
	MinCrossZone int `json:"minCrossZone"`
	// SettleMoves counts the queues moved by replanning the unchanged group until nothing moves, over
	// SettleRounds replans (Sticky's repair moves, at most its budget per replan); SettledCrossZone is the
	// settled plan's cross-zone count. The next step starts from the settled plan.
	SettleMoves      int `json:"settleMoves"`
	SettleRounds     int `json:"settleRounds"`
	SettledCrossZone int `json:"settledCrossZone"`
	// Balanced is true when every queue has one owner and every member holds floor or ceil of its weighted
	// share (allocate.Balanced).
	Balanced bool `json:"balanced"`
	// MaxMemberLoad and MeanMemberLoad are the busiest member's load and the members' mean; MovedLoad is the
	// load of the queues Moved counts. WithinLoadBound is true when every member carries at most
	// max((1+t) times its weighted fair share, that share plus its hottest queue), t the tolerance (the
	// bound Sticky guarantees when it balances by load); WithinLoadAim when every member carries at most
	// max((1+t) times its share, its hottest queue) (what Sticky aims for: allocate.MemberLoad.Aim).
	// PreviousWithinTolerance is true when the previous plan, under this step's loads and members, left
	// Sticky by load no reason to move: every queue held by a member, every member within its aim and none
	// idle (allocate.WithinLoadTolerance). All are zero or false in a scenario without loads.
	MaxMemberLoad           float64 `json:"maxMemberLoad"`
	MeanMemberLoad          float64 `json:"meanMemberLoad"`
	MovedLoad               float64 `json:"movedLoad"`
	WithinLoadBound         bool    `json:"withinLoadBound"`
	WithinLoadAim           bool    `json:"withinLoadAim"`
	PreviousWithinTolerance bool    `json:"previousWithinTolerance"`

	Error string              `json:"error,omitempty"`
	Plan  map[string][]string `json:"plan"`
}

// measure fills step's counters and plan from in and plan, with pkg/allocate's definitions, and the load
// measures against tolerance.
func measure(step *StepResult, in allocate.Input, plan allocate.Plan, tolerance float64) {
	step.Moved = allocate.Moved(in.Previous, plan)
	moves := allocate.CountMoves(in, plan)
	step.BalanceMoves, step.LocalityMoves = moves.Balance, moves.Locality
	step.CrossZone = allocate.CrossZone(in, plan)
	step.MinCrossZone = allocate.MinCrossZone(in)
	step.Balanced = allocate.Balanced(in, plan)
	step.Plan = map[string][]string{}
	for _, m := range in.Members {
		step.Plan[m.ID] = []string{}
	}
	for id, qs := range plan {
		for _, q := range qs {
			step.Plan[id] = append(step.Plan[id], q.String())
		}
	}
	for i, m := range in.Members {
		n := len(plan[m.ID])
		if i == 0 || n > step.MaxLoad {
			step.MaxLoad = n
		}
		if i == 0 || n < step.MinLoad {
			step.MinLoad = n
		}
	}
	if in.QueueLoad != nil {
		measureLoad(step, in, plan, tolerance)
	}
}

// measureLoad fills step's load measures with pkg/allocate's definitions; every queue of in has a load.
func measureLoad(step *StepResult, in allocate.Input, plan allocate.Plan, tolerance float64) {
	loads := allocate.QueueLoads(in)
	members := allocate.MemberLoads(in, plan, loads)
	for _, ml := range members {
		step.MaxMemberLoad = max(step.MaxMemberLoad, ml.Load)
	}
	if len(in.Members) > 0 {
		step.MeanMemberLoad = allocate.TotalLoad(in, loads) / float64(len(in.Members))
	}
	step.WithinLoadBound = allocate.WithinLoadBound(members, tolerance)
	step.WithinLoadAim = allocate.WithinLoadAim(members, tolerance)
	step.MovedLoad = allocate.MovedLoad(in.Previous, plan, loads)
	if in.Previous != nil && ownsEvery(in, in.Previous) {
		step.PreviousWithinTolerance = allocate.WithinLoadTolerance(allocate.MemberLoads(in, in.Previous, loads), tolerance)
	}
}

// ownsEvery reports whether plan gives every queue of in to one of in's members: no queue is new or was
// left by a member that has gone, so a strategy has nothing to place.
func ownsEvery(in allocate.Input, plan allocate.Plan) bool {
	owned := map[allocate.Queue]bool{}
	for _, m := range in.Members {
		for _, q := range plan[m.ID] {
			owned[q] = true
		}
	}
	for _, q := range in.Queues {
		if !owned[q] {
			return false
		}
	}
	return true
}
