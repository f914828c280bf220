package allocate

import (
	"fmt"
	"strings"
)

// byMachineRoom is RocketMQ's AllocateMessageQueueByMachineRoom. It keeps the queues whose broker name has
// the form "<room>@<broker>" with room in Params.MachineRooms, and deals those p queues out: member i of n
// gets the block [i*(p/n), (i+1)*(p/n)) plus queue (p/n)*n + i when i < p%n. Members' zones are not read.
type byMachineRoom struct {
	rooms map[string]bool
}

func newByMachineRoom(p Params) (Strategy, error) {
	rooms := make(map[string]bool, len(p.MachineRooms))
	for i, r := range p.MachineRooms {
		if strings.Contains(r, "@") {
			// A room with '@' can never equal the first part of a broker name split on '@'.
			return nil, paramErrorf(fmt.Sprintf("machineRooms[%d]", i), "%q contains '@', which separates room from broker", r)
		}
		rooms[r] = true
	}
	return byMachineRoom{rooms: rooms}, nil
}

func (s byMachineRoom) Allocate(in Input) (Plan, error) {
	queues, members := sortedQueues(in.Queues), sortedMembers(in.Members)
	kept := make([]Queue, 0, len(queues))
	for _, q := range queues {
		if room, ok := machineRoomOfBroker(q.Broker); ok && s.rooms[room] {
			kept = append(kept, q)
		}
	}
	plan := make(Plan, len(members))
	p, n := len(kept), len(members)
	if n == 0 {
		return plan, nil
	}
	block, rem := p/n, p%n
	for i, m := range members {
		share := make([]Queue, 0, block+1)
		share = append(share, kept[i*block:(i+1)*block]...)
		if i < rem {
			share = append(share, kept[block*n+i])
		}
		plan[m.ID] = share
	}
	return plan, nil
}

// machineRoomOfBroker returns the room of a broker named "<room>@<broker>" with Java's split("@") rules:
// trailing empty parts are dropped, so "idc@b@" has a room and "idc@" or "a@b@c" do not. Dropping trailing
// empty parts is trimming trailing '@'s; what remains must then hold exactly one '@'. It allocates nothing,
// unlike strings.Split, because it runs once per queue.
func machineRoomOfBroker(broker string) (string, bool) {
	trimmed := strings.TrimRight(broker, "@")
	if strings.Count(trimmed, "@") != 1 {
		return "", false
	}
	room, _, _ := strings.Cut(trimmed, "@")
	return room, true
}
