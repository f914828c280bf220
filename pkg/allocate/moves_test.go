package allocate

import (
	"fmt"
	"testing"
)

// TestMovesWhenOneMemberJoins measures how many queues change owner (Moved, the operator's count) when one
// member joins a group, the figure docs/strategies.md quotes (run with -v). For ConsistentHash it also
// checks the property that makes it worth having: every queue that moves, moves to the newcomer, so the
// count equals the newcomer's share (every queue it gets had an owner that stays).
func TestMovesWhenOneMemberJoins(t *testing.T) {
	for _, size := range []struct{ queues, members int }{{1024, 64}, {8192, 512}} {
		in := benchInput(size.queues, size.members)
		joined := in
		// A joiner whose id sorts in the middle of the others, as a new pod's generated name usually does.
		joiner := Member{ID: fmt.Sprintf("10.0.0.%d@consumer-new", size.members/2), Zone: "zone-0"}
		joined.Members = append(append([]Member{}, in.Members...), joiner)
		for _, name := range []Name{Averagely, AveragelyByCircle, ConsistentHash, MachineRoomNearby, ByMachineRoom} {
			t.Run(fmt.Sprintf("%s/%d queues, %d members", name, size.queues, size.members), func(t *testing.T) {
				s := mustNew(t, name, Params{MachineRooms: []string{"zone-0", "zone-1"}})
				in, joined := in, joined
				if name == ByMachineRoom {
					in.Queues, joined.Queues = roomPrefixedBrokers(in), roomPrefixedBrokers(in)
				}
				before, err := s.Allocate(in)
				if err != nil {
					t.Fatal(err)
				}
				after, err := s.Allocate(joined)
				if err != nil {
					t.Fatal(err)
				}
				moved := Moved(before, after)
				t.Logf("%s %dx%d +1 member: %d of %d queues moved (%.1f%%), the newcomer got %d",
					name, size.queues, size.members, moved, size.queues, 100*float64(moved)/float64(size.queues), len(after[joiner.ID]))
				if name == ConsistentHash && moved != len(after[joiner.ID]) {
					t.Errorf("ConsistentHash moved %d queues but only %d went to the newcomer", moved, len(after[joiner.ID]))
				}
			})
		}
	}
}

// roomPrefixedBrokers renames each broker "<zone>@<broker>", the form ByMachineRoom reads rooms from, and
// returns the queues sorted again.
func roomPrefixedBrokers(in Input) []Queue {
	out := make([]Queue, len(in.Queues))
	for i, q := range in.Queues {
		q.Broker = in.BrokerZones[q.Broker] + "@" + q.Broker
		out[i] = q
	}
	return sortedQueues(out)
}
