// Package allocate decides which member of a consumer group reads which message queue.
//
// A strategy sees the whole group at once: every queue and every member. It returns the plan for every
// member in one pass, where RocketMQ's client-side strategies make each client compute its own share.
// The package imports nothing from Kubernetes, so every decision can be table-tested as data in, data out.
//
// Files: allocate.go the types and New, registry.go the constructors by name, order.go RocketMQ's sort
// orders, one file per RocketMQ strategy (averagely.go, averagely_by_circle.go, by_config.go,
// by_machine_room.go, consistent_hash.go, machine_room_nearby.go), measures.go and crosszone.go the
// measures of a plan. Sticky is in steps: sticky.go the strategy and its pipeline, sticky_index.go the canonical
// indexing of members, queues and the previous plan, sticky_balance.go balancing by count, sticky_zones.go
// the locality repair after it, sticky_load.go balancing by load and sticky_swap.go its last exchange.
package allocate

import (
	"errors"
	"fmt"
	"sort"

	"github.com/consumergroup-operator/consumergroup-operator/pkg/queue"
)

// Queue identifies one message queue (pkg/queue).
type Queue = queue.Queue

// Member is one consumer of the group.
type Member struct {
	// ID identifies the member: a pod name, or a RocketMQ client id such as "10.0.3.17@consumer-17".
	ID string
	// Zone is the member's machine room (the node's topology zone); "" when unknown.
	Zone string
	// Weight is the member's relative capacity for weight-aware strategies; values below 1 count as 1.
	Weight int32
}

// Plan maps each member id to its queues, in the order the member should consume them. Every member of
// the input has an entry, possibly empty. A plan's lists may share memory with Input.Queues (Averagely
// hands out slices of an already sorted queue list rather than copying it), so treat both as read-only.
type Plan map[string][]Queue

// Input is everything a strategy decides from. Queues and members may come in any order; a strategy sorts
// them as RocketMQ does before allocating, so the plan does not depend on input order.
type Input struct {
	Queues  []Queue
	Members []Member
	// BrokerZones maps a broker name to its zone (machine room). Zone-aware strategies read it.
	BrokerZones map[string]string
	// Previous is the plan currently in force, for strategies that keep queues where they are.
	// Strategies that do not read it ignore it.
	Previous Plan
	// QueueLoad is the load members report per queue, in the group's unit, for Sticky balancing by load.
	// A queue missing from it counts at the mean of those present. Other strategies ignore it.
	QueueLoad map[Queue]float64
}

// Strategy computes a plan for a whole group.
//
// A strategy value may keep reusable work between calls (ConsistentHash the ring positions of the queues
// and members it last saw, Sticky its working arrays), so a caller keeps one per group and re-plans with
// it. It holds nothing a plan depends on: a freshly built strategy returns the same plan for the same
// input, only perhaps more slowly. Every strategy New returns is safe for concurrent use.
type Strategy interface {
	// Allocate returns the plan for every member of in. An empty queue list or an empty member list is a
	// normal state: every member gets nothing and the error is nil.
	Allocate(in Input) (Plan, error)
}

// Name is a strategy's name as the ConsumerGroup API spells it.
type Name string

// The strategies this package offers.
const (
	Averagely         Name = "Averagely"
	AveragelyByCircle Name = "AveragelyByCircle"
	ConsistentHash    Name = "ConsistentHash"
	MachineRoomNearby Name = "MachineRoomNearby"
	ByMachineRoom     Name = "ByMachineRoom"
	ByConfig          Name = "ByConfig"
	Sticky            Name = "Sticky"
)

// Params carries the parameters of every strategy; each strategy reads only its own fields and ignores
// the others. The zero value selects every default.
type Params struct {
	// VirtualNodes is ConsistentHash's number of ring points per member; nil means 10. Negative is invalid.
	VirtualNodes *int32
	// Hash is ConsistentHash's hash function; nil means RocketMQ's (MD5, first 4 bytes big-endian).
	Hash HashFunc

	// Inner names the strategy MachineRoomNearby applies inside each room, and InnerParams its parameters.
	Inner       Name
	InnerParams *Params

	// MachineRooms is ByMachineRoom's set of data-centre names (RocketMQ's consumeridcs).
	MachineRooms []string

	// Assignments is ByConfig's explicit list of queues per member id.
	Assignments map[string][]Queue

	// MaxSkew lets Sticky keep a queue in its broker's zone at the cost of balance: a member may hold up
	// to MaxSkew queues more than its fair share. 0 means strict balance.
	MaxSkew int32

	// ZoneRepairMoves is the most queues one Sticky rebalance moves beyond those balance forces, to bring
	// the queues read outside their broker's zone down to the fewest a balanced plan allows
	// (MinCrossZone); nil means DefaultZoneRepairMoves, 0 moves none. Queues that move anyway are sent
	// home whatever it is. It applies with MaxSkew 0 and balancing by queue count.
	ZoneRepairMoves *int32

	// BalanceBy is what Sticky balances: BalanceByQueues ("" too), queue counts, or BalanceByLoad, the
	// load in Input.QueueLoad. MaxSkew applies to counts only.
	BalanceBy string
	// LoadTolerance is how far above its fair share of the load Sticky lets a member go before it moves
	// queues, as a fraction (0.1 is 10%); nil means DefaultLoadTolerance.
	LoadTolerance *float64

	// Strict asks for a plan the operator can publish: every queue handed out is one of Input.Queues and
	// none goes to two members. Strategies that always satisfy this ignore it; ByConfig, which hands out
	// its configuration verbatim as RocketMQ does, refuses a configuration that breaks it.
	//
	// MachineRoomNearby passes InnerParams, not this, to its inner strategy.
	Strict bool
}

// DefaultZoneRepairMoves is Params.ZoneRepairMoves when nil: enough for a swap or a cycle through every
// zone of a group with up to eight zones in one rebalance, few enough that a rebalance stays small.
const DefaultZoneRepairMoves = 8

// HashFunc maps a key to a point on ConsistentHash's ring.
type HashFunc func(key string) uint32

// Constructor builds a strategy from its parameters, validating them.
type Constructor func(Params) (Strategy, error)

// ErrUnknownStrategy is returned by New for a name the registry does not hold.
var ErrUnknownStrategy = errors.New("unknown strategy")

// ParamError is a strategy parameter that New, or a strategy's Allocate, refuses.
type ParamError struct {
	// Field is the parameter's path relative to the strategy's parameters, e.g. `assignments["m"][2]`,
	// `virtualNodes`, `inner`. A caller prefixes its own path, e.g. "spec.strategy.byConfig." + Field.
	Field string
	// Message says what is wrong with it, e.g. "must be >= 0, got -3".
	Message string
}

// Error returns Field + ": " + Message.
func (e *ParamError) Error() string { return e.Field + ": " + e.Message }

// paramErrorf returns a *ParamError for field with a formatted message.
func paramErrorf(field, format string, args ...any) *ParamError {
	return &ParamError{Field: field, Message: fmt.Sprintf(format, args...)}
}

// New returns the named strategy built from p. An error in p is a *ParamError naming the parameter; an
// unknown name is ErrUnknownStrategy.
func New(name Name, p Params) (Strategy, error) {
	c, ok := registry[name]
	if !ok {
		return nil, fmt.Errorf("%w %q (known: %v)", ErrUnknownStrategy, name, Names())
	}
	return c(p)
}

// Names lists the registered strategy names, sorted.
func Names() []Name {
	names := make([]Name, 0, len(registry))
	for n := range registry {
		names = append(names, n)
	}
	sort.Slice(names, func(i, j int) bool { return names[i] < names[j] })
	return names
}
