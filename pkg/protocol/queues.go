package protocol

import (
	"fmt"
	"strconv"
	"strings"
)

// UnionQueues is the union of a and b, each sorted by CompareCanonical without repeats, in that order. When
// one is empty it returns the other itself: the result may share memory with the inputs, so callers must
// not modify it.
func UnionQueues(a, b []Queue) []Queue {
	if len(b) == 0 {
		return a
	}
	if len(a) == 0 {
		return b
	}
	out := make([]Queue, 0, max(len(a), len(b)))
	i, j := 0, 0
	for i < len(a) || j < len(b) {
		switch {
		case j == len(b) || i < len(a) && CompareCanonical(a[i], b[j]) < 0:
			out = append(out, a[i])
			i++
		case i == len(a) || CompareCanonical(a[i], b[j]) > 0:
			out = append(out, b[j])
			j++
		default:
			out = append(out, a[i])
			i, j = i+1, j+1
		}
	}
	return out
}

// SubtractQueues is the queues of a that are not in b, each sorted by CompareCanonical; nil when b holds
// every queue of a.
func SubtractQueues(a, b []Queue) []Queue {
	var out []Queue
	j := 0
	for _, q := range a {
		for j < len(b) && CompareCanonical(b[j], q) < 0 {
			j++
		}
		if j == len(b) || b[j] != q {
			out = append(out, q)
		}
	}
	return out
}

// ParseQueue reads a queue as Queue.String writes it, TOPIC/BROKER/ID. The last two slashes split it, as
// a broker name has none.
func ParseQueue(s string) (Queue, error) {
	i := strings.LastIndex(s, "/")
	if i <= 0 {
		return Queue{}, fmt.Errorf("queue %q: want TOPIC/BROKER/ID", s)
	}
	j := strings.LastIndex(s[:i], "/")
	if j <= 0 || j == i-1 {
		return Queue{}, fmt.Errorf("queue %q: want TOPIC/BROKER/ID", s)
	}
	id, err := strconv.ParseInt(s[i+1:], 10, 32)
	if err != nil || id < 0 {
		return Queue{}, fmt.Errorf("queue %q: the id %q is not a whole number", s, s[i+1:])
	}
	return Queue{Topic: s[:j], Broker: s[j+1 : i], ID: int32(id)}, nil
}

// CompareCanonical orders queues by topic, broker (byte order) and id: the canonical order of entries,
// claims and load reports. The strategies work in RocketMQ's order instead (allocate.CompareRocketMQ,
// names in UTF-16 order); the two differ only for names beyond the Basic Multilingual Plane.
func CompareCanonical(a, b Queue) int {
	if c := strings.Compare(a.Topic, b.Topic); c != 0 {
		return c
	}
	if c := strings.Compare(a.Broker, b.Broker); c != 0 {
		return c
	}
	return int(a.ID) - int(b.ID)
}
