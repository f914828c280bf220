package protocol

import (
	"cmp"
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// This file holds the compact form of a set of queues that entries, claims and load reports share: per
// topic and broker, the ids as ascending ranges ("0-3,8"). Compact writes it; Expand (and Scope.Expand)
// reads it back.

// BrokerQueues is a set of queues on one broker of one topic.
type BrokerQueues struct {
	Topic  string `json:"topic"`
	Broker string `json:"broker"`
	// IDs are the queue ids as ascending ranges: "0-3,8" is 0, 1, 2, 3 and 8.
	IDs string `json:"ids"`
}

// maxIDLen is the most bytes one queue id takes in a list of ranges: five digits and a comma.
const maxIDLen = len("65535,")

// Compact groups queues per topic and broker with ranges of ids, in canonical order.
func Compact(queues []Queue) []BrokerQueues {
	// Already sorted without duplicates, as the operator hands them, the queues are read as they are;
	// otherwise a sorted copy is made, so the caller's list never changes.
	sorted := queues
	if !slices.IsSortedFunc(queues, func(a, b Queue) int { return cmp.Or(CompareCanonical(a, b), -1) }) {
		sorted = slices.Clone(queues)
		slices.SortFunc(sorted, CompareCanonical)
		sorted = slices.Compact(sorted)
	}
	groups := []BrokerQueues{}
	for start := 0; start < len(sorted); {
		end := start
		for end < len(sorted) && sorted[end].Topic == sorted[start].Topic && sorted[end].Broker == sorted[start].Broker {
			end++
		}
		groups = append(groups, BrokerQueues{Topic: sorted[start].Topic, Broker: sorted[start].Broker, IDs: formatRanges(sorted[start:end])})
		start = end
	}
	return groups
}

// Expand lists the queues of groups, sorted by topic, broker and id. It refuses groups out of canonical
// order or repeated, ranges that are not ascending and disjoint, ids past MaxQueueID and more than
// MaxQueues queues in all, so that whatever someone wrote, reading it is bounded. A reader that knows its
// group's queues bounds it further with Scope.Expand.
func Expand(groups []BrokerQueues) ([]Queue, error) {
	e, err := (*Scope)(nil).Expand(groups)
	return e.Queues, err
}

// formatRanges writes the ids of queues (sorted, distinct) as "a-b,c".
func formatRanges(queues []Queue) string {
	var b strings.Builder
	for i := 0; i < len(queues); {
		j := i
		for j+1 < len(queues) && queues[j+1].ID == queues[j].ID+1 {
			j++
		}
		if b.Len() > 0 {
			b.WriteByte(',')
		}
		b.WriteString(strconv.FormatInt(int64(queues[i].ID), 10))
		if j > i {
			b.WriteByte('-')
			b.WriteString(strconv.FormatInt(int64(queues[j].ID), 10))
		}
		i = j + 1
	}
	return b.String()
}

// eachRange calls f with the bounds of each range of s ("a" or "a-b", comma-separated), checking that
// the ranges ascend without overlapping and stay within 0..MaxQueueID.
func eachRange(s string, f func(first, last int32) error) error {
	if s == "" {
		return fmt.Errorf("no queue ids")
	}
	next := int64(0)
	for part := range strings.SplitSeq(s, ",") {
		lo, hi, isRange := strings.Cut(part, "-")
		first, err := strconv.ParseInt(lo, 10, 32)
		if err != nil || first < next || first > MaxQueueID {
			return fmt.Errorf("invalid or out-of-order queue id %q", lo)
		}
		last := first
		if isRange {
			last, err = strconv.ParseInt(hi, 10, 32)
			if err != nil || last < first || last > MaxQueueID {
				return fmt.Errorf("invalid queue id range %q", part)
			}
		}
		if err := f(int32(first), int32(last)); err != nil {
			return err
		}
		next = last + 1
	}
	return nil
}
