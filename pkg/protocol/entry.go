package protocol

import (
	"cmp"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/consumergroup-operator/consumergroup-operator/pkg/allocate"
)

// Queue is one message queue: topic, broker name and queue id.
type Queue = allocate.Queue

// EntryVersion is the format version of an Entry. Protocol 2 added PodUID and Sum, which version-1
// readers ignore, so the version stayed 1.
const EntryVersion = 1

// Limits every decoder enforces, so that an entry or a claim someone else wrote cannot make a reader
// allocate without bound.
const (
	// MaxQueueID is the largest queue id (the API's bound on spec.topics[].brokers[].queues is 65536).
	MaxQueueID = 65535
	// MaxQueues is the most queues one entry or claim may list, and the most a group may have.
	MaxQueues = 1 << 20
	// MaxGeneration is the highest assignment generation a reader accepts, far below where adding to it
	// could overflow: a generation counts assignments, a few a second at the most.
	MaxGeneration = 1 << 53
)

// Entry is one member pod's published assignment: the value of the pod's key in the assignment.
//
//	{"version":1,"generation":7,"member":"10.0.3.17@consumer-17","podUID":"6f1c…",
//	 "queues":[{"topic":"orders","broker":"broker-a","ids":"0-3,8"}],"sum":"9b0e…"}
//
// Queues are grouped by topic and broker, groups sorted by topic then broker (byte order), each group's
// ids written as ascending ranges, so an entry for thousands of queues stays a few bytes per broker and
// the same set of queues always encodes to the same string.
type Entry struct {
	// Version is the format version; readers refuse versions they do not know.
	Version int `json:"version"`
	// Generation is the assignment generation the entry belongs to.
	Generation int64 `json:"generation"`
	// Member is the member id.
	Member string `json:"member"`
	// PodUID is the pod incarnation the entry is for: a pod of the same name with another UID must not act
	// on it. Empty in entries of protocol-1 operators.
	PodUID string `json:"podUID,omitempty"`
	// Queues are the member's queues, grouped per topic and broker.
	Queues []BrokerQueues `json:"queues"`
	// Sum is a checksum of the other fields (Entry.checksum): an entry edited by hand no longer matches
	// it. Empty in entries of protocol-1 operators.
	Sum string `json:"sum,omitempty"`
}

// BrokerQueues is a set of queues on one broker of one topic.
type BrokerQueues struct {
	Topic  string `json:"topic"`
	Broker string `json:"broker"`
	// IDs are the queue ids as ascending ranges: "0-3,8" is 0, 1, 2, 3 and 8.
	IDs string `json:"ids"`
}

// NewEntry builds the canonical entry, checksum included. Duplicate queues are listed once.
func NewEntry(member, podUID string, generation int64, queues []Queue) Entry {
	e := Entry{Version: EntryVersion, Generation: generation, Member: member, PodUID: podUID, Queues: Compact(queues)}
	e.Sum = e.checksum()
	return e
}

// Encode returns the canonical JSON of the entry.
func (e Entry) Encode() []byte {
	b, err := json.Marshal(e)
	if err != nil {
		panic(err) // strings and integers only: cannot fail
	}
	return b
}

// checksum is the first 16 hex digits of the SHA-256 of the entry's canonical JSON without its sum.
func (e Entry) checksum() string {
	e.Sum = ""
	sum := sha256.Sum256(e.Encode())
	return hex.EncodeToString(sum[:8])
}

// DecodeEntry parses an entry, checks its version, its ranges and its checksum (when it has one), and
// expands its queues, sorted by topic, broker and id.
func DecodeEntry(data []byte) (Entry, []Queue, error) {
	e, queues, err := DecodeEntryIn(data, nil)
	return e, queues.Queues, err
}

// DecodeEntryIn is DecodeEntry for a reader that expands only the queues of scope (Scope.Expand).
func DecodeEntryIn(data []byte, scope *Scope) (Entry, Expanded, error) {
	var e Entry
	if limit := scope.maxEncodedLen(maxIDLen); len(data) > limit {
		return Entry{}, Expanded{}, fmt.Errorf("assignment entry is %d bytes, more than its group's queues take (%d)", len(data), limit)
	}
	if err := json.Unmarshal(data, &e); err != nil {
		return Entry{}, Expanded{}, fmt.Errorf("decoding assignment entry: %w", err)
	}
	if e.Version != EntryVersion {
		return Entry{}, Expanded{}, fmt.Errorf("assignment entry has format version %d; this reader knows version %d", e.Version, EntryVersion)
	}
	if e.Generation < 0 || e.Generation > MaxGeneration {
		return Entry{}, Expanded{}, fmt.Errorf("assignment entry has generation %d, outside 0 to %d", e.Generation, MaxGeneration)
	}
	if e.Sum != "" && e.Sum != e.checksum() {
		return Entry{}, Expanded{}, fmt.Errorf("assignment entry does not match its checksum: it was edited")
	}
	queues, err := scope.Expand(e.Queues)
	if err != nil {
		return Entry{}, Expanded{}, fmt.Errorf("assignment entry: %w", err)
	}
	return e, queues, nil
}

// maxIDLen is the most bytes one queue id takes in a list of ranges: five digits and a comma.
const maxIDLen = len("65535,")

// Compact groups queues per topic and broker with ranges of ids, in canonical order.
func Compact(queues []Queue) []BrokerQueues {
	// Already sorted without duplicates, as the operator hands them, the queues are read as they are;
	// otherwise a sorted copy is made, so the caller's list never changes.
	sorted := queues
	if !slices.IsSortedFunc(queues, func(a, b Queue) int { return cmp.Or(CompareQueues(a, b), -1) }) {
		sorted = slices.Clone(queues)
		slices.SortFunc(sorted, CompareQueues)
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

// CompareQueues orders queues by topic, broker (byte order) and id: the order of entries and claims.
func CompareQueues(a, b Queue) int {
	if c := strings.Compare(a.Topic, b.Topic); c != 0 {
		return c
	}
	if c := strings.Compare(a.Broker, b.Broker); c != 0 {
		return c
	}
	return int(a.ID) - int(b.ID)
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
