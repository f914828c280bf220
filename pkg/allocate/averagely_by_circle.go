package allocate

// averagelyByCircle is RocketMQ's AllocateMessageQueueAveragelyByCircle: member i of n (sorted) gets the
// sorted queues i, i+n, i+2n, ... Neighbouring queues (often on the same broker) go to different members.
//
// Cost: O(m + n) after sorting, with one backing array shared by all shares.
type averagelyByCircle struct{}

func newAveragelyByCircle(Params) (Strategy, error) { return averagelyByCircle{}, nil }

func (averagelyByCircle) Allocate(in Input) (Plan, error) {
	queues, members := sortedQueues(in.Queues), sortedMembers(in.Members)
	m, n := len(queues), len(members)
	plan := make(Plan, n)
	backing := make([]Queue, m)
	off := 0
	for i, mem := range members {
		start := off
		for q := i; q < m; q += n {
			backing[off] = queues[q]
			off++
		}
		plan[mem.ID] = backing[start:off:off]
	}
	return plan, nil
}
