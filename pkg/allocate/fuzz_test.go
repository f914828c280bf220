package allocate

import (
	"errors"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"unicode/utf8"
)

// fuzzRunes mixes ASCII with characters on both sides of the UTF-16 / UTF-8 order difference.
var fuzzRunes = []rune{'a', 'B', 'z', '0', '9', '-', '@', '.', 'é', 'ß', '中', '\uE000', '\uFF21', '\uFFFF', 0x10000, 0x1F600, 0x10FFFF}

// FuzzAllocate builds a random group from the fuzzer's numbers and text, runs a strategy chosen by the
// fuzzer, and checks the strategy's invariants, that shuffled input gives the same plan, and that
// ConsistentHash re-planning with what it remembers agrees with a freshly built one.
func FuzzAllocate(f *testing.F) {
	f.Add(uint64(1), uint16(10), uint8(3), uint8(0), int8(10), "")
	f.Add(uint64(2), uint16(100), uint8(7), uint8(2), int8(0), "é\U0001F600\uFF21")
	f.Add(uint64(3), uint16(3), uint8(9), uint8(3), int8(1), "room@x")
	f.Add(uint64(4), uint16(50), uint8(5), uint8(4), int8(-1), "@b@")
	f.Add(uint64(5), uint16(20), uint8(4), uint8(5), int8(3), "\xff\xfe")
	f.Fuzz(func(t *testing.T, seed uint64, nQueues uint16, nMembers uint8, which uint8, v int8, text string) {
		rng := rand.New(rand.NewPCG(seed, uint64(len(text))))
		name := func() string {
			var sb strings.Builder
			for range rng.IntN(4) {
				sb.WriteRune(fuzzRunes[rng.IntN(len(fuzzRunes))])
			}
			if text != "" && rng.IntN(2) == 0 {
				// The fuzzer's own bytes, possibly invalid UTF-8, spliced in.
				sb.WriteString(text[:rng.IntN(len(text)+1)])
			}
			return sb.String()
		}
		rooms := []string{"r1", "r2", name(), ""}
		room := func() string { return rooms[rng.IntN(len(rooms))] }

		in := Input{BrokerZones: map[string]string{}}
		var brokers, topics []string
		for range 1 + rng.IntN(4) {
			b := name()
			if rng.IntN(3) == 0 {
				b = room() + "@" + b
			}
			brokers = append(brokers, b)
			in.BrokerZones[b] = room()
		}
		for range 1 + rng.IntN(3) {
			topics = append(topics, name())
		}
		for range int(nQueues) % 400 {
			in.Queues = append(in.Queues, Queue{
				Topic:  topics[rng.IntN(len(topics))],
				Broker: brokers[rng.IntN(len(brokers))],
				ID:     rng.Int32N(64) - 2,
			})
		}
		for range int(nMembers) % 48 {
			in.Members = append(in.Members, Member{ID: name(), Zone: room()})
		}

		strategies := []Name{Averagely, AveragelyByCircle, ConsistentHash, MachineRoomNearby, ByMachineRoom, ByConfig}
		sname := strategies[int(which)%len(strategies)]
		// Strict changes nothing but ByConfig, whose configuration it checks.
		p := Params{VirtualNodes: vnodes(int32(v % 24)), MachineRooms: []string{room(), room()}, Strict: seed%2 == 1}
		inner := []Name{Averagely, AveragelyByCircle, ConsistentHash}[int(which/8)%3]
		if sname == MachineRoomNearby {
			p.Inner = inner
			p.InnerParams = &Params{VirtualNodes: vnodes(int32(v % 24))}
		}
		if sname == ByConfig {
			p.Assignments = map[string][]Queue{}
			for _, m := range in.Members {
				if m.ID == "" {
					continue // ByConfig rejects an empty member id in its configuration
				}
				for range rng.IntN(3) {
					q := Queue{Topic: name(), Broker: name(), ID: rng.Int32()}
					if len(in.Queues) > 0 && rng.IntN(2) == 0 {
						q = in.Queues[rng.IntN(len(in.Queues))]
					}
					p.Assignments[m.ID] = append(p.Assignments[m.ID], q)
				}
			}
		}
		invalid := v%24 < 0 && (sname == ConsistentHash || (sname == MachineRoomNearby && inner == ConsistentHash))
		if sname == ByMachineRoom && slices.ContainsFunc(p.MachineRooms, func(r string) bool { return strings.Contains(r, "@") }) {
			invalid = true
		}
		s, err := New(sname, p)
		if invalid != (err != nil) {
			t.Fatalf("New(%s, v=%d) error = %v", sname, v%24, err)
		}
		if err != nil {
			return
		}

		plan, err := s.Allocate(in)
		if sname == MachineRoomNearby && len(in.Queues) > 0 && len(in.Members) > 0 && missingRoom(in) {
			if err == nil {
				t.Fatal("MachineRoomNearby accepted a member or broker without a room")
			}
			return
		}
		if sname == ByConfig && p.Strict {
			// Strict refuses exactly the configurations that are no partition of (a subset of) the queues.
			var listed []Member
			for id := range p.Assignments {
				listed = append(listed, Member{ID: id})
			}
			refused := CheckPartition(in.Queues, listed, Plan(p.Assignments))
			var pe *ParamError
			if (refused != nil) != (err != nil) || (err != nil && !errors.As(err, &pe)) {
				t.Fatalf("strict ByConfig: error %v; CheckPartition of the configuration: %v", err, refused)
			}
			if err != nil {
				return
			}
		}
		if err != nil {
			t.Fatalf("%s: %v", sname, err)
		}
		again, err := s.Allocate(shuffled(in, rng))
		if err != nil {
			t.Fatalf("%s on shuffled input: %v", sname, err)
		}
		checkSamePlan(t, plan, again)
		checkEntryPerMember(t, in, plan)

		uniqueQueues := sortedQueues(slices.Clone(in.Queues))
		switch {
		case v%24 == 0 && (sname == ConsistentHash || (sname == MachineRoomNearby && inner == ConsistentHash)):
			for id, qs := range plan {
				if len(qs) != 0 {
					t.Fatalf("%s: ConsistentHash with no virtual nodes gave %q %v", sname, id, qs)
				}
			}
		case sname == ByMachineRoom:
			checkEveryQueueOwnedOnce(t, Input{Queues: filterQueues(uniqueQueues, p.MachineRooms), Members: in.Members}, plan)
			if len(in.Members) > 0 {
				checkSpread(t, plan, 1)
			}
		case sname == ByConfig:
			for _, m := range in.Members {
				if !slices.Equal(plan[m.ID], p.Assignments[m.ID]) {
					t.Fatalf("ByConfig gave %q %v, configured %v", m.ID, plan[m.ID], p.Assignments[m.ID])
				}
			}
		default:
			checkEveryQueueOwnedOnce(t, in, plan)
			if sname == Averagely || sname == AveragelyByCircle {
				checkSpread(t, plan, 1)
			}
		}

		if sname == ConsistentHash {
			// s has planned in (twice); a fresh strategy has seen nothing.
			changed := shuffled(in, rng)
			if len(changed.Members) > 0 {
				changed.Members = changed.Members[1:]
			}
			changed.Members = append(changed.Members, Member{ID: name()})
			if len(changed.Queues) > 0 {
				changed.Queues = changed.Queues[rng.IntN(len(changed.Queues)):]
			}
			cold, _ := mustNew(t, ConsistentHash, p).Allocate(changed)
			warm, _ := s.Allocate(changed)
			checkSamePlan(t, warm, cold)
			// The same queues again (a subset of in's when no member was added), then in's again.
			warm, _ = s.Allocate(shuffled(changed, rng))
			checkSamePlan(t, warm, cold)
			warm, _ = s.Allocate(in)
			checkSamePlan(t, warm, plan)
		}

		for _, m := range in.Members {
			if utf8.ValidString(m.ID) && utf8.ValidString(text) {
				other := name()
				if utf8.ValidString(other) && CompareUTF16(m.ID, other) != utf16Compare(m.ID, other) {
					t.Fatalf("CompareUTF16(%q, %q) disagrees with UTF-16 order", m.ID, other)
				}
			}
		}
	})
}

func missingRoom(in Input) bool {
	for _, m := range in.Members {
		if m.Zone == "" {
			return true
		}
	}
	for _, q := range in.Queues {
		if in.BrokerZones[q.Broker] == "" {
			return true
		}
	}
	return false
}

func filterQueues(qs []Queue, rooms []string) []Queue {
	var out []Queue
	for _, q := range qs {
		if r, ok := machineRoomOfBroker(q.Broker); ok && slices.Contains(rooms, r) {
			out = append(out, q)
		}
	}
	return out
}
