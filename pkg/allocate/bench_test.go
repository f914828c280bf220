package allocate

import (
	"fmt"
	"math"
	"math/rand/v2"
	"runtime"
	"testing"
)

var benchSizes = []struct{ queues, members int }{{1024, 64}, {8192, 512}, {65536, 2048}}

// benchInput is a realistic group: queues spread over 4 brokers in 2 zones, members named like RocketMQ
// client ids, half in each zone. Queues and members are listed in sorted order, as brokers report them.
func benchInput(queues, members int) Input {
	in := Input{BrokerZones: map[string]string{}}
	brokers := []string{"broker-a", "broker-b", "broker-c", "broker-d"}
	for i, b := range brokers {
		in.BrokerZones[b] = fmt.Sprintf("zone-%d", i%2)
	}
	perBroker := queues / len(brokers)
	for _, b := range brokers {
		for id := range perBroker {
			in.Queues = append(in.Queues, Queue{Topic: "TopicTest", Broker: b, ID: int32(id)})
		}
	}
	for i := range members {
		in.Members = append(in.Members, Member{
			ID:   fmt.Sprintf("10.0.%d.%d@consumer-%d", i/250, i%250, i),
			Zone: fmt.Sprintf("zone-%d", i%2),
		})
	}
	in.Queues, in.Members = sortedQueues(in.Queues), sortedMembers(in.Members)
	return in
}

// benchParams are parameters that make each strategy do real work on benchInput.
func benchParams(in Input) map[Name]Params {
	assignments := map[string][]Queue{}
	for i, q := range in.Queues {
		id := in.Members[i%len(in.Members)].ID
		assignments[id] = append(assignments[id], q)
	}
	params := map[Name]Params{
		Averagely:         {},
		AveragelyByCircle: {},
		ConsistentHash:    {},
		MachineRoomNearby: {Inner: Averagely},
		ByMachineRoom:     {MachineRooms: []string{"zone-0"}},
		ByConfig:          {Assignments: assignments},
		Sticky:            {},
	}
	return params
}

// BenchmarkAllocate measures a cold plan: each iteration builds the strategy anew, so nothing one
// iteration computed (Sticky's working arrays, say) serves the next.
func BenchmarkAllocate(b *testing.B) {
	names := []Name{Averagely, AveragelyByCircle, ConsistentHash, MachineRoomNearby, ByMachineRoom, ByConfig, Sticky}
	for _, name := range names {
		for _, size := range benchSizes {
			in := benchInput(size.queues, size.members)
			if name == ByMachineRoom {
				in.Queues = roomPrefixedBrokers(in)
			}
			params := benchParams(in)[name]
			b.Run(fmt.Sprintf("%s/%dx%d", name, size.queues, size.members), func(b *testing.B) {
				b.ReportAllocs()
				for b.Loop() {
					s, err := New(name, params)
					if err != nil {
						b.Fatal(err)
					}
					if _, err := s.Allocate(in); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}

// BenchmarkReplan measures a re-plan after one member joins, with what the strategy may reuse from the
// previous plan, as the operator keeps a group's strategy between passes: ConsistentHash's queue and ring
// hashes (a new strategy plans the group, untimed, before every iteration), and for Sticky the previous
// plan as input and its working arrays.
func BenchmarkReplan(b *testing.B) {
	const queues, members = 65536, 2048
	in := benchInput(queues, members)
	joined := in
	joined.Members = append(append([]Member{}, in.Members...), Member{ID: "10.0.99.1@consumer-joined", Zone: "zone-0"})
	b.Run(fmt.Sprintf("Sticky/%dx%d", queues, members), func(b *testing.B) {
		s, err := New(Sticky, Params{})
		if err != nil {
			b.Fatal(err)
		}
		prev, err := s.Allocate(in)
		if err != nil {
			b.Fatal(err)
		}
		joinedAfter := joined
		joinedAfter.Previous = prev
		b.ReportAllocs()
		for b.Loop() {
			if _, err := s.Allocate(joinedAfter); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run(fmt.Sprintf("ConsistentHash/%dx%d", queues, members), func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			b.StopTimer()
			c, err := New(ConsistentHash, Params{})
			if err != nil {
				b.Fatal(err)
			}
			if _, err := c.Allocate(in); err != nil {
				b.Fatal(err)
			}
			// The cold plan's garbage is not the re-plan's cost; collect it before the clock runs.
			runtime.GC()
			b.StartTimer()
			if _, err := c.Allocate(joined); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// BenchmarkSortInputs measures what a strategy pays when queues and members arrive in random order rather
// than sorted.
func BenchmarkSortInputs(b *testing.B) {
	in := benchInput(65536, 2048)
	rng := rand.New(rand.NewPCG(1, 2))
	rng.Shuffle(len(in.Queues), func(i, j int) { in.Queues[i], in.Queues[j] = in.Queues[j], in.Queues[i] })
	rng.Shuffle(len(in.Members), func(i, j int) { in.Members[i], in.Members[j] = in.Members[j], in.Members[i] })
	b.Run("shuffled/65536x2048", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			sortedQueues(in.Queues)
			sortedMembers(in.Members)
		}
	})
}

// BenchmarkStickyByLoad measures Sticky balancing by load at 65,536 queues and 2,048 members: a re-plan
// after every queue's load changed (by up to ±30%, enough to push members past the tolerance), and after
// a member joined.
func BenchmarkStickyByLoad(b *testing.B) {
	const queues, members = 65536, 2048
	rng := rand.New(rand.NewPCG(1, 2))
	in := benchInput(queues, members)
	in.QueueLoad = make(map[Queue]float64, queues)
	for _, q := range in.Queues {
		in.QueueLoad[q] = math.Exp(rng.NormFloat64())
	}
	s, err := New(Sticky, Params{BalanceBy: BalanceByLoad})
	if err != nil {
		b.Fatal(err)
	}
	prev, err := s.Allocate(in)
	if err != nil {
		b.Fatal(err)
	}
	changed := in
	changed.Previous = prev
	changed.QueueLoad = make(map[Queue]float64, queues)
	for _, q := range in.Queues { // in order, not the map's, so that every run replans the same loads
		changed.QueueLoad[q] = in.QueueLoad[q] * (0.7 + 0.6*rng.Float64())
	}
	joined := in
	joined.Previous = prev
	joined.Members = append(append([]Member{}, in.Members...), Member{ID: "10.0.99.1@consumer-joined", Zone: "zone-0"})
	for _, c := range []struct {
		name string
		in   Input
	}{{"load-change", changed}, {"join", joined}} {
		b.Run(fmt.Sprintf("%s/%dx%d", c.name, queues, members), func(b *testing.B) {
			plan, err := s.Allocate(c.in)
			if err != nil {
				b.Fatal(err)
			}
			b.ReportAllocs()
			for b.Loop() {
				if _, err := s.Allocate(c.in); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(Moved(prev, plan)), "moved")
		})
	}
}
