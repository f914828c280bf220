// Package queue names a message queue. It is the one type the strategies (pkg/allocate), the
// operator↔member contract (pkg/protocol) and the members share, so that each depends on it and not on
// the others: a consumer that links pkg/member links no strategy.
package queue

import "strconv"

// Queue identifies one message queue, as RocketMQ's MessageQueue does: topic, broker name and queue id.
type Queue struct {
	Topic  string
	Broker string
	ID     int32
}

// String renders the queue as "<topic>/<broker>/<id>", the form the plan, the simulator and the docs use.
func (q Queue) String() string {
	return q.Topic + "/" + q.Broker + "/" + strconv.FormatInt(int64(q.ID), 10)
}
