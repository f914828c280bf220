package allocate

// averagely is RocketMQ's AllocateMessageQueueAveragely: the sorted queue list is cut into contiguous
// shares, one per member in sorted order; the first m%n members get one queue more than the rest, and with
// more members than queues the last members get nothing.
//
// Cost: O(m) to check (or O(m log m) to establish) the sort order, then O(n). The shares are capacity-capped
// slices of the sorted queue list, so appending to one cannot overwrite another; when in.Queues was
// already sorted they share its memory, which is why a caller must not modify in.Queues while it uses the
// plan. Copying 64k queues would cost more than the whole allocation.
type averagely struct{}

func newAveragely(Params) (Strategy, error) { return averagely{}, nil }

func (averagely) Allocate(in Input) (Plan, error) {
	queues, members := sortedQueues(in.Queues), sortedMembers(in.Members)
	plan := make(Plan, len(members))
	m, n := len(queues), len(members)
	for i, mem := range members {
		start, size := averageShare(m, n, i)
		plan[mem.ID] = queues[start : start+size : start+size]
	}
	return plan, nil
}

// averageShare returns where member i's share starts in the sorted queue list and how long it is, with
// RocketMQ's arithmetic.
func averageShare(m, n, i int) (start, size int) {
	if m == 0 || n == 0 {
		return 0, 0
	}
	mod := m % n
	size = m / n
	if m <= n {
		size = 1
	} else if i < mod {
		size++
	}
	if mod > 0 && i < mod {
		start = i * size
	} else {
		start = i*size + mod
	}
	if start >= m {
		return 0, 0
	}
	return start, min(size, m-start)
}
