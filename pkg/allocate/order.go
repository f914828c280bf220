package allocate

import (
	"cmp"
	"slices"
)

// CompareUTF16 orders strings as Java's String.compareTo does: by UTF-16 code units. RocketMQ sorts client
// ids, topics and broker names this way before allocating, and a plan only matches RocketMQ's if the
// order does.
//
// UTF-8 byte order (Go's <) equals code point order, and UTF-16 order differs from it in one place only: a
// character at or above U+10000 (a surrogate pair, D800..DBFF) sorts before one in U+E000..U+FFFF. In UTF-8
// those are the characters with lead bytes F0..F4 and EE..EF, so the compare is a byte compare that swaps
// the two groups when the first difference falls on such a pair of lead bytes. Invalid UTF-8 still gets a
// consistent total order: it is byte order with EE and EF ranked after F0..F4.
func CompareUTF16(a, b string) int {
	if a == b {
		return 0
	}
	n := min(len(a), len(b))
	i := 0
	for i < n && a[i] == b[i] {
		i++
	}
	if i == n {
		return cmp.Compare(len(a), len(b))
	}
	x, y := a[i], b[i]
	if x >= 0xEE && y >= 0xEE && x <= 0xF4 && y <= 0xF4 && (x >= 0xF0) != (y >= 0xF0) {
		// One is a BMP character from U+E000 up, the other is supplementary: UTF-16 puts the
		// supplementary one (its high surrogate) first.
		if x >= 0xF0 {
			return -1
		}
		return 1
	}
	return cmp.Compare(x, y)
}

// CompareRocketMQ orders queues as RocketMQ's MessageQueue.compareTo does: topic, then broker name (both
// in UTF-16 order), then queue id. What the operator publishes is in the canonical order instead
// (protocol.CompareCanonical, byte order).
func CompareRocketMQ(a, b Queue) int {
	if c := CompareUTF16(a.Topic, b.Topic); c != 0 {
		return c
	}
	if c := CompareUTF16(a.Broker, b.Broker); c != 0 {
		return c
	}
	return cmp.Compare(a.ID, b.ID)
}

// sortedQueues returns qs sorted and without duplicates. A list that is already sorted (the usual case:
// brokers report their queues in order) is returned as it is, after one linear check; anything else is
// sorted in a copy. Either way the result is read-only: it may be qs itself, and plans may share it.
func sortedQueues(qs []Queue) []Queue {
	if isSortedStrict(qs) {
		if qs == nil {
			return []Queue{}
		}
		return qs
	}
	out := slices.Clone(qs)
	slices.SortFunc(out, CompareRocketMQ)
	return slices.CompactFunc(out, func(a, b Queue) bool { return a == b })
}

// isSortedStrict reports whether qs is strictly increasing, so neither sorting nor removing duplicates
// is needed.
func isSortedStrict(qs []Queue) bool {
	for i := 1; i < len(qs); i++ {
		a, b := &qs[i-1], &qs[i]
		if a.Topic == b.Topic && a.Broker == b.Broker {
			// Consecutive queues of one broker are the common case; skip the string compares.
			if a.ID >= b.ID {
				return false
			}
			continue
		}
		if CompareRocketMQ(*a, *b) >= 0 {
			return false
		}
	}
	return true
}

// sortedMembers returns the members sorted by id in UTF-16 order, one per id. When an id is listed more
// than once the copy that sorts first by zone and weight is kept, so the result does not depend on the
// input order. A member list with duplicate ids is a caller's mistake, but RocketMQ's per-client
// allocation would leave gaps for it, and one owner per queue is the stronger promise.
func sortedMembers(ms []Member) []Member {
	out := slices.Clone(ms)
	slices.SortFunc(out, compareMembers)
	out = slices.CompactFunc(out, func(a, b Member) bool { return a.ID == b.ID })
	if out == nil {
		out = []Member{}
	}
	return out
}

func compareMembers(a, b Member) int {
	return cmp.Or(CompareUTF16(a.ID, b.ID), CompareUTF16(a.Zone, b.Zone), cmp.Compare(a.Weight, b.Weight))
}

// emptyPlan returns a plan in which every member has an empty, non-nil list.
func emptyPlan(members []Member) Plan {
	p := make(Plan, len(members))
	for _, m := range members {
		p[m.ID] = []Queue{}
	}
	return p
}
