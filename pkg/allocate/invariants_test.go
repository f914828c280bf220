package allocate

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"testing"
)

// checkEveryQueueOwnedOnce fails unless plan has an entry for every member, CheckPartition accepts it
// and, when there are members, every queue of in has an owner.
func checkEveryQueueOwnedOnce(t testing.TB, in Input, plan Plan) {
	t.Helper()
	checkEntryPerMember(t, in, plan)
	if err := CheckPartition(in.Queues, in.Members, plan); err != nil {
		t.Fatal(err)
	}
	distinct := map[Queue]bool{}
	for _, q := range in.Queues {
		distinct[q] = true
	}
	owned := 0
	for _, qs := range plan {
		owned += len(qs)
	}
	if len(in.Members) > 0 && owned != len(distinct) {
		t.Fatalf("%d of %d queues have an owner", owned, len(distinct))
	}
}

// checkEntryPerMember fails unless every member, and nobody else, has an entry in plan.
func checkEntryPerMember(t testing.TB, in Input, plan Plan) {
	t.Helper()
	ids := map[string]bool{}
	for _, m := range in.Members {
		ids[m.ID] = true
		if _, ok := plan[m.ID]; !ok {
			t.Fatalf("member %q has no entry in the plan", m.ID)
		}
	}
	if len(plan) != len(ids) {
		t.Fatalf("plan has %d entries for %d members", len(plan), len(ids))
	}
}

// checkSpread fails unless the largest and smallest shares differ by at most limit.
func checkSpread(t testing.TB, plan Plan, limit int) {
	t.Helper()
	lo, hi := -1, 0
	for _, qs := range plan {
		if lo < 0 || len(qs) < lo {
			lo = len(qs)
		}
		hi = max(hi, len(qs))
	}
	if len(plan) > 0 && hi-lo > limit {
		t.Fatalf("shares range from %d to %d queues, want a spread of at most %d", lo, hi, limit)
	}
}

// checkSamePlan fails unless a and b give every member the same list, treating nil and empty alike.
func checkSamePlan(t testing.TB, a, b Plan) {
	t.Helper()
	if d := planDiff(a, b); d != "" {
		t.Fatal(d)
	}
}

// planDiff describes the first difference between a and b, or returns "" when they give every member the
// same list, treating nil and empty alike.
func planDiff(a, b Plan) string {
	if len(a) != len(b) {
		return fmt.Sprintf("plans have %d and %d entries", len(a), len(b))
	}
	for id, qs := range a {
		other, ok := b[id]
		if !ok || !slices.Equal(qs, other) {
			return fmt.Sprintf("member %q: %v vs %v", id, qs, other)
		}
	}
	return ""
}

func shuffled(in Input, rng *rand.Rand) Input {
	out := in
	out.Queues = slices.Clone(in.Queues)
	out.Members = slices.Clone(in.Members)
	rng.Shuffle(len(out.Queues), func(i, j int) { out.Queues[i], out.Queues[j] = out.Queues[j], out.Queues[i] })
	rng.Shuffle(len(out.Members), func(i, j int) { out.Members[i], out.Members[j] = out.Members[j], out.Members[i] })
	return out
}

func mustNew(t testing.TB, name Name, p Params) Strategy {
	t.Helper()
	s, err := New(name, p)
	if err != nil {
		t.Fatalf("New(%s): %v", name, err)
	}
	return s
}

func vnodes(v int32) *int32 { return &v }

// balancedStrategies are the strategies that, in clustering, give every queue exactly one owner.
func balancedStrategies() map[string]struct {
	name Name
	p    Params
} {
	return map[string]struct {
		name Name
		p    Params
	}{
		"Averagely":              {Averagely, Params{}},
		"AveragelyByCircle":      {AveragelyByCircle, Params{}},
		"ConsistentHash":         {ConsistentHash, Params{}},
		"ConsistentHash/v1":      {ConsistentHash, Params{VirtualNodes: vnodes(1)}},
		"ConsistentHash/v100":    {ConsistentHash, Params{VirtualNodes: vnodes(100)}},
		"MachineRoomNearby/Avg":  {MachineRoomNearby, Params{Inner: Averagely}},
		"MachineRoomNearby/Circ": {MachineRoomNearby, Params{Inner: AveragelyByCircle}},
		"MachineRoomNearby/CH":   {MachineRoomNearby, Params{Inner: ConsistentHash, InnerParams: &Params{VirtualNodes: vnodes(3)}}},
	}
}

func TestInvariantsOnSeededGroups(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 11))
	sizes := []struct{ queues, members int }{{0, 3}, {5, 0}, {1, 1}, {3, 7}, {16, 3}, {100, 7}, {1000, 37}, {4096, 300}}
	for label, sc := range balancedStrategies() {
		s := mustNew(t, sc.name, sc.p)
		for _, size := range sizes {
			t.Run(fmt.Sprintf("%s/%dx%d", label, size.queues, size.members), func(t *testing.T) {
				in := benchInput(size.queues, size.members)
				in.Queues = in.Queues[:min(size.queues, len(in.Queues))]
				for len(in.Queues) < size.queues {
					in.Queues = append(in.Queues, Queue{Topic: "Extra", Broker: "broker-a", ID: int32(len(in.Queues))})
				}
				plan, err := s.Allocate(in)
				if err != nil {
					t.Fatal(err)
				}
				checkEveryQueueOwnedOnce(t, in, plan)
				if sc.name == Averagely || sc.name == AveragelyByCircle {
					checkSpread(t, plan, 1)
				}
				again, err := s.Allocate(shuffled(in, rng))
				if err != nil {
					t.Fatal(err)
				}
				checkSamePlan(t, plan, again)
			})
		}
	}
}

func TestCompareUTF16(t *testing.T) {
	// Expected orders are Java's String.compareTo results.
	// Java order puts U+1F600 (D83D DE00) and U+10FFFF (DBFF DFFF) before U+E000.
	ordered := []string{"", "10.0.0.12@1", "10.0.0.2@1", "Z", "a", "ab", "é", "\U0001F600", "\U0010FFFF", "\uE000", "\uFF21", "\uFFFF"}
	for i, a := range ordered {
		for j, b := range ordered {
			want := 0
			if i < j {
				want = -1
			} else if i > j {
				want = 1
			}
			if got := CompareUTF16(a, b); got != want {
				t.Errorf("CompareUTF16(%q, %q) = %d, want %d", a, b, got, want)
			}
		}
	}
}

// utf16Compare is the definition: compare the strings' UTF-16 code units.
func utf16Compare(a, b string) int {
	var ea, eb []uint16
	for _, r := range a {
		ea = appendUTF16(ea, r)
	}
	for _, r := range b {
		eb = appendUTF16(eb, r)
	}
	return slices.Compare(ea, eb)
}

func appendUTF16(s []uint16, r rune) []uint16 {
	if r >= 0x10000 {
		r -= 0x10000
		return append(s, uint16(0xD800+(r>>10)), uint16(0xDC00+(r&0x3FF)))
	}
	return append(s, uint16(r))
}

func TestCompareUTF16MatchesDefinition(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 5))
	alphabet := []rune{'a', 'b', 'é', 'ß', '\u07FF', '\u0800', '\uD7FF', '\uE000', '\uFF21', '\uFFFF', 0x10000, 0x1F600, 0x10FFFF}
	word := func() string {
		var sb strings.Builder
		for range rng.IntN(4) {
			sb.WriteRune(alphabet[rng.IntN(len(alphabet))])
		}
		return sb.String()
	}
	for range 20000 {
		a, b := word(), word()
		if got, want := CompareUTF16(a, b), utf16Compare(a, b); got != want {
			t.Fatalf("CompareUTF16(%q, %q) = %d, want %d", a, b, got, want)
		}
	}
}

func TestEmptyInputsGiveEmptyPlans(t *testing.T) {
	members := []Member{{ID: "b", Zone: "z"}, {ID: "a", Zone: "z"}}
	queues := []Queue{{Topic: "T", Broker: "z-b", ID: 0}}
	cases := []struct {
		name string
		in   Input
	}{
		{"members, no queues", Input{Members: members}},
		{"queues, no members", Input{Queues: queues}},
		{"neither", Input{}},
	}
	for _, name := range []Name{Averagely, AveragelyByCircle, ConsistentHash, MachineRoomNearby, ByMachineRoom, ByConfig} {
		t.Run(string(name), func(t *testing.T) {
			s := mustNew(t, name, Params{})
			for _, c := range cases {
				t.Run(c.name, func(t *testing.T) {
					plan, err := s.Allocate(c.in)
					if err != nil {
						t.Fatal(err)
					}
					checkEntryPerMember(t, c.in, plan)
					for id, qs := range plan {
						if qs == nil || len(qs) != 0 {
							t.Fatalf("member %q got %v, want an empty non-nil list", id, qs)
						}
					}
				})
			}
		})
	}
}

func TestParameterErrors(t *testing.T) {
	cases := []struct {
		name           string
		strategy       Name
		p              Params
		field, message string
	}{
		{"ConsistentHash, negative virtual nodes", ConsistentHash, Params{VirtualNodes: vnodes(-3)}, "virtualNodes", "must be >= 0, got -3"},
		{"MachineRoomNearby, unknown inner strategy", MachineRoomNearby, Params{Inner: "X"}, "inner", `unknown strategy "X"`},
		{"MachineRoomNearby wrapping itself", MachineRoomNearby, Params{Inner: MachineRoomNearby}, "inner", "MachineRoomNearby cannot wrap itself"},
		{"MachineRoomNearby, inner ConsistentHash with negative virtual nodes", MachineRoomNearby, Params{Inner: ConsistentHash, InnerParams: &Params{VirtualNodes: vnodes(-1)}}, "innerParams.virtualNodes", "must be >= 0, got -1"},
		{"MachineRoomNearby, inner Sticky with negative skew", MachineRoomNearby, Params{Inner: Sticky, InnerParams: &Params{MaxSkew: -1}}, "innerParams.maxSkew", "must be 0 or more, got -1"},
		{"ByMachineRoom, a room containing @", ByMachineRoom, Params{MachineRooms: []string{"ok", "a@b"}}, "machineRooms[1]", `"a@b" contains '@', which separates room from broker`},
		{"ByConfig, an empty member id", ByConfig, Params{Assignments: map[string][]Queue{"": nil}}, `assignments[""]`, "member id must not be empty"},
		{"Sticky, negative skew", Sticky, Params{MaxSkew: -2}, "maxSkew", "must be 0 or more, got -2"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := New(c.strategy, c.p)
			var pe *ParamError
			if !errors.As(err, &pe) {
				t.Fatalf("New(%s, %+v) error = %v, want a *ParamError", c.strategy, c.p, err)
			}
			if pe.Field != c.field || pe.Message != c.message || err.Error() != c.field+": "+c.message {
				t.Errorf("New(%s, %+v) error = %#v (%q), want field %q, message %q", c.strategy, c.p, pe, err, c.field, c.message)
			}
		})
	}
	_, err := New("Nope", Params{})
	var pe *ParamError
	if !errors.Is(err, ErrUnknownStrategy) || errors.As(err, &pe) {
		t.Errorf("New of an unknown strategy: error = %v, want ErrUnknownStrategy and no *ParamError", err)
	}
}

func TestMachineRoomNearbyMissingRooms(t *testing.T) {
	s := mustNew(t, MachineRoomNearby, Params{})
	queues := []Queue{{Topic: "T", Broker: "b1", ID: 0}, {Topic: "T", Broker: "b2", ID: 0}}
	_, err := s.Allocate(Input{Queues: queues, Members: []Member{{ID: "m", Zone: "z"}}, BrokerZones: map[string]string{"b1": "z"}})
	if err == nil || !strings.Contains(err.Error(), `broker "b2"`) {
		t.Errorf("missing broker room: error = %v, want it to name broker b2", err)
	}
	_, err = s.Allocate(Input{Queues: queues, Members: []Member{{ID: "m", Zone: "z"}, {ID: "n"}}, BrokerZones: map[string]string{"b1": "z", "b2": "z"}})
	if err == nil || !strings.Contains(err.Error(), `member "n"`) {
		t.Errorf("missing member room: error = %v, want it to name member n", err)
	}
}

func TestMachineRoomNearbyOrphanRoomsAmongEveryone(t *testing.T) {
	// Room z1 has members, rooms z2 and z3 have brokers only: each is dealt out among all members from the
	// first member again.
	s := mustNew(t, MachineRoomNearby, Params{Inner: Averagely})
	in := Input{
		Queues: []Queue{{Topic: "T", Broker: "b1", ID: 0}, {Topic: "T", Broker: "b1", ID: 1}, {Topic: "T", Broker: "b2", ID: 0}, {Topic: "T", Broker: "b3", ID: 0}},
		Members: []Member{
			{ID: "a", Zone: "z1"}, {ID: "b", Zone: "z1"}, {ID: "c", Zone: "z9"},
		},
		BrokerZones: map[string]string{"b1": "z1", "b3": "z2", "b2": "z3"},
	}
	plan, err := s.Allocate(in)
	if err != nil {
		t.Fatal(err)
	}
	want := Plan{
		"a": {{Topic: "T", Broker: "b1", ID: 0}, {Topic: "T", Broker: "b3", ID: 0}, {Topic: "T", Broker: "b2", ID: 0}},
		"b": {{Topic: "T", Broker: "b1", ID: 1}},
		"c": {},
	}
	checkSamePlan(t, plan, want)
}

func TestByConfig(t *testing.T) {
	queues := []Queue{{Topic: "T", Broker: "b", ID: 0}, {Topic: "T", Broker: "b", ID: 1}, {Topic: "T", Broker: "b", ID: 2}}
	assignments := map[string][]Queue{"m1": {queues[2], queues[0]}, "ghost": {queues[1]}}
	s := mustNew(t, ByConfig, Params{Assignments: assignments})
	plan, err := s.Allocate(Input{Queues: queues, Members: []Member{{ID: "m2"}, {ID: "m1"}}})
	if err != nil {
		t.Fatal(err)
	}
	checkSamePlan(t, plan, Plan{"m1": {queues[2], queues[0]}, "m2": {}})
	plan["m1"][0] = Queue{}
	if assignments["m1"][0] != queues[2] {
		t.Fatal("modifying the plan changed the strategy's configuration")
	}

}

// TestByConfigStrict checks that with Params.Strict ByConfig refuses a configuration that names a queue
// not in the input or lists one twice, whoever the members are, and that without it the same
// configuration is handed out verbatim, as RocketMQ does.
func TestByConfigStrict(t *testing.T) {
	q := func(b string, id int32) Queue { return Queue{Topic: "T", Broker: b, ID: id} }
	queues := []Queue{q("b", 0), q("b", 1), q("b", 2)}
	members := []Member{{ID: "a"}, {ID: "b"}}
	cases := []struct {
		name           string
		assignments    map[string][]Queue
		members        []Member
		field, message string // empty: accepted
	}{
		{"valid", map[string][]Queue{"a": {q("b", 2), q("b", 0)}, "ghost": {q("b", 1)}}, members, "", ""},
		{"foreign queue", map[string][]Queue{"a": {q("b", 0), q("b", 1), q("B", 9)}}, members,
			`assignments["a"][2]`, "queue T/B/9 does not exist"},
		{"foreign queue of a non-member", map[string][]Queue{"a": {q("b", 0)}, "gone": {q("b", 9)}}, members,
			`assignments["gone"][0]`, "queue T/b/9 does not exist"},
		{"foreign queue with no members", map[string][]Queue{"a": {q("b", 9)}}, nil,
			`assignments["a"][0]`, "queue T/b/9 does not exist"},
		{"queue for two members", map[string][]Queue{"a": {q("b", 0)}, "b": {q("b", 1), q("b", 0)}}, members,
			`assignments["b"][1]`, `queue T/b/0 is already assigned at assignments["a"][0]`},
		{"queue twice for one member", map[string][]Queue{"b": {q("b", 1), q("b", 2), q("b", 1)}}, members,
			`assignments["b"][2]`, `queue T/b/1 is already assigned at assignments["b"][0]`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			in := Input{Queues: queues, Members: c.members}
			loose, err := mustNew(t, ByConfig, Params{Assignments: c.assignments}).Allocate(in)
			if err != nil {
				t.Fatalf("without Strict: %v", err)
			}
			for _, m := range c.members {
				if !slices.Equal(loose[m.ID], c.assignments[m.ID]) {
					t.Fatalf("without Strict %q got %v, configured %v", m.ID, loose[m.ID], c.assignments[m.ID])
				}
			}

			plan, err := mustNew(t, ByConfig, Params{Assignments: c.assignments, Strict: true}).Allocate(in)
			if c.field == "" {
				if err != nil {
					t.Fatalf("valid configuration refused: %v", err)
				}
				checkSamePlan(t, plan, loose)
				return
			}
			var pe *ParamError
			if !errors.As(err, &pe) || pe.Field != c.field || pe.Message != c.message {
				t.Fatalf("error = %v, want a *ParamError %q: %q", err, c.field, c.message)
			}
		})
	}
}

func TestByMachineRoomSplitSemantics(t *testing.T) {
	cases := []struct {
		name   string
		broker string
		room   string
		ok     bool
	}{
		{"room and broker", "idc@b", "idc", true},
		{"a trailing @", "idc@b@", "idc", true},
		{"two trailing @", "idc@b@@", "idc", true},
		{"an empty room", "@b", "", true},
		{"no broker after the @", "idc@", "", false},
		{"two separators", "a@b@c", "", false},
		{"no separator", "plain", "", false},
		{"an empty name", "", "", false},
		{"a lone @", "@", "", false},
		{"only @s", "@@", "", false},
		{"a doubled separator", "idc@@b", "", false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			room, ok := machineRoomOfBroker(c.broker)
			if room != c.room || ok != c.ok {
				t.Errorf("machineRoomOfBroker(%q) = %q, %v; want %q, %v", c.broker, room, ok, c.room, c.ok)
			}
		})
	}
}

// TestConsistentHashReplanMatchesCold checks that the ConsistentHash New returns, which remembers hashes
// between calls, gives the plan a freshly built one gives, through a sequence of changes.
func TestConsistentHashReplanMatchesCold(t *testing.T) {
	rng := rand.New(rand.NewPCG(21, 42))
	for _, v := range []int32{0, 1, 10} {
		p := Params{VirtualNodes: vnodes(v)}
		kept := mustNew(t, ConsistentHash, p)
		in := benchInput(8192, 64)
		all := in.Queues
		// A sequence of changes: members join and leave, queues appear and vanish, input order changes.
		for step := range 18 {
			switch step % 6 {
			case 1:
				in.Members = append(slices.Clone(in.Members), Member{ID: fmt.Sprintf("joiner-%d", step)})
			case 2:
				in.Members = slices.Delete(slices.Clone(in.Members), 3, 5)
			case 3:
				in.Queues = append(slices.Clone(in.Queues[100:]), Queue{Topic: "New", Broker: "broker-z", ID: int32(step)})
			case 4:
				// Half the queues vanish, at random places in sorted order, and none appears; the next step
				// plans the same queues again.
				in.Queues = slices.Clone(in.Queues[len(in.Queues)/2:])
			case 0:
				in.Queues = all
			}
			in = shuffled(in, rng)
			want, _ := mustNew(t, ConsistentHash, p).Allocate(in)
			got, err := kept.Allocate(in)
			if err != nil {
				t.Fatal(err)
			}
			checkSamePlan(t, got, want)
		}
	}
}

func TestConsistentHashCustomHashAndCollisions(t *testing.T) {
	// A hash with few values forces collisions between members' points and queues: RocketMQ keeps the
	// point inserted last (the later member in sorted order), and a queue on a point's hash goes to it.
	hash := func(key string) uint32 { return uint32(len(key) % 3) }
	s := mustNew(t, ConsistentHash, Params{Hash: hash, VirtualNodes: vnodes(2)})
	in := Input{
		Queues:  []Queue{{Topic: "T", Broker: "b", ID: 1}, {Topic: "T", Broker: "b", ID: 10}, {Topic: "T", Broker: "bb", ID: 100}},
		Members: []Member{{ID: "x"}, {ID: "yy"}, {ID: "zzz"}},
	}
	plan, err := s.Allocate(in)
	if err != nil {
		t.Fatal(err)
	}
	// Ring keys: "x-0","x-1" (len 3 → 0), "yy-0","yy-1" (len 4 → 1), "zzz-0","zzz-1" (len 5 → 2).
	// "MessageQueue [topic=T, brokerName=B, queueId=N]" is 45+len(B)+len(N) long:
	// b/1 → 47 → 2 (zzz), b/10 → 48 → 0 (x), bb/100 → 50 → 2 (zzz). Nothing hashes to yy's 1.
	want := Plan{"x": {{Topic: "T", Broker: "b", ID: 10}}, "yy": {}, "zzz": {{Topic: "T", Broker: "b", ID: 1}, {Topic: "T", Broker: "bb", ID: 100}}}
	checkSamePlan(t, plan, want)

	everyoneSame := mustNew(t, ConsistentHash, Params{Hash: func(string) uint32 { return 7 }})
	plan, _ = everyoneSame.Allocate(in)
	checkSamePlan(t, plan, Plan{"x": {}, "yy": {}, "zzz": in.Queues})
}

// TestStrategiesAreSafeForConcurrentUse plans two different groups with one strategy value from several
// goroutines at once (run with -race): every plan must be the one a freshly built strategy gives, whatever
// the other calls left behind.
func TestStrategiesAreSafeForConcurrentUse(t *testing.T) {
	small, large := benchInput(256, 16), benchInput(1024, 40)
	for _, name := range Names() {
		t.Run(string(name), func(t *testing.T) {
			a, b := small, large
			if name == ByMachineRoom {
				a.Queues, b.Queues = roomPrefixedBrokers(a), roomPrefixedBrokers(b)
			}
			p := benchParams(b)[name]
			want := []Plan{}
			for _, in := range []Input{a, b} {
				plan, err := mustNew(t, name, p).Allocate(in)
				if err != nil {
					t.Fatal(err)
				}
				want = append(want, plan)
			}
			s := mustNew(t, name, p)
			var wg sync.WaitGroup
			for g := range 4 {
				wg.Go(func() {
					for i := range 6 {
						k := (g + i) % 2
						plan, err := s.Allocate([]Input{a, b}[k])
						if err != nil {
							t.Error(err)
							return
						}
						if d := planDiff(plan, want[k]); d != "" {
							t.Error(d)
							return
						}
					}
				})
			}
			wg.Wait()
		})
	}
}
