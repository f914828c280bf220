package protocol

import (
	"fmt"
	"strings"
)

// Scope is the set of queues a reader expands: for each topic and broker of a group's spec, the ids below
// that broker's queue count. Claims, entries, load reports and the operator's bookkeeping are written by
// others; reading them through the group's Scope bounds the work and memory they can cause by what the
// group's own spec implies, whatever they say. Ids outside the Scope are counted, never listed: nobody is
// given them, so nothing that keeps a queue from two readers depends on them.
//
// The nil *Scope is the unbounded reader: every id up to MaxQueueID, at most MaxQueues in all (what a
// member, which reads only its own entry, uses).
type Scope struct {
	counts map[topicBroker]int32
	total  int
	// names is the bytes the topic and broker names take, for the bound on encoded sizes.
	names int
}

type topicBroker struct{ topic, broker string }

// NewScope returns an empty Scope; Add grows it.
func NewScope() *Scope { return &Scope{counts: map[topicBroker]int32{}} }

// ScopeOf is the Scope that holds queues, taking each broker's queue count as its highest id plus one
// (the spec numbers a broker's queues from 0).
func ScopeOf(queues []Queue) *Scope {
	s := NewScope()
	for _, q := range queues {
		k := topicBroker{q.Topic, q.Broker}
		if n := s.counts[k]; q.ID >= n {
			s.add(k, q.ID+1-n)
		}
	}
	return s
}

// Add adds the queues 0 to n-1 of topic on broker. Adding a broker twice keeps the larger count.
func (s *Scope) Add(topic, broker string, n int32) {
	k := topicBroker{topic, broker}
	if old := s.counts[k]; n > old {
		s.add(k, n-old)
	}
}

func (s *Scope) add(k topicBroker, more int32) {
	if _, known := s.counts[k]; !known {
		s.names += len(k.topic) + len(k.broker)
	}
	s.counts[k] += more
	s.total += int(more)
}

// Len is the number of queues in the Scope; MaxQueues for the nil Scope.
func (s *Scope) Len() int {
	if s == nil {
		return MaxQueues
	}
	return s.total
}

// count is how many ids the Scope holds on topic's broker: ids 0 to count-1.
func (s *Scope) count(topic, broker string) int32 {
	if s == nil {
		return MaxQueueID + 1
	}
	return s.counts[topicBroker{topic, broker}]
}

// maxEncodedLen bounds the length of a decoded (inflated) JSON document that lists queues of the Scope
// with perQueue bytes each at most: the most a reader decodes before it refuses the input. A document
// that lists every queue of the Scope one by one, named per broker, fits.
func (s *Scope) maxEncodedLen(perQueue int) int {
	if s == nil {
		return maxInflatedLen
	}
	const slack = 4 << 10 // version, pod UID, generation, member id
	perBroker := 2*len(`{"topic":"","broker":"","ids":""},`) + 64
	return min(maxInflatedLen, slack+s.names+perBroker*len(s.counts)+perQueue*s.total)
}

// Expanded is what a reader keeps of a list of queues: those in its Scope, and how many others it listed.
type Expanded struct {
	// Queues are the listed queues that are in the Scope, sorted by CompareCanonical.
	Queues []Queue
	// Outside counts the listed queues outside the Scope.
	Outside int
}

// Expand lists the queues of groups that are in the Scope, sorted by topic, broker and id, and counts the
// others without listing them. It refuses what Expand refuses; with a nil Scope it is Expand.
func (s *Scope) Expand(groups []BrokerQueues) (Expanded, error) {
	var out Expanded
	for i, g := range groups {
		if i > 0 {
			prev := groups[i-1]
			if c := strings.Compare(prev.Topic, g.Topic); c > 0 || c == 0 && strings.Compare(prev.Broker, g.Broker) >= 0 {
				return Expanded{}, fmt.Errorf("queues[%d] (%s/%s) is out of order or repeated", i, g.Topic, g.Broker)
			}
		}
		n := s.count(g.Topic, g.Broker)
		err := eachRange(g.IDs, func(first, last int32) error {
			in := min(last, n-1)
			if first <= in {
				if len(out.Queues)+int(in-first)+1 > MaxQueues {
					return fmt.Errorf("more than %d queues", MaxQueues)
				}
				for id := first; id <= in; id++ {
					out.Queues = append(out.Queues, Queue{Topic: g.Topic, Broker: g.Broker, ID: id})
				}
			}
			out.Outside += int(last - max(first, in+1) + 1)
			return nil
		})
		if err != nil {
			return Expanded{}, fmt.Errorf("queues[%d] (%s/%s): %w", i, g.Topic, g.Broker, err)
		}
	}
	return out, nil
}
