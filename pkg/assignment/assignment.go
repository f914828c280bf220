// Package assignment is the wire format of a published assignment: what the operator writes for each
// member and what the pod-side package and the agent read back. It is documented for other languages in
// docs/protocol.md.
//
// One member's entry is a JSON object:
//
//	{"version":1,"generation":7,"member":"10.0.3.17@consumer-17",
//	 "queues":[{"topic":"orders","broker":"broker-a","ids":"0-3,8"}]}
//
// Queues are grouped by topic and broker, groups sorted by topic then broker (byte order), and each
// group's queue ids written as ascending, comma-separated ranges, so an entry for thousands of queues
// stays a few bytes per broker and the same set of queues always encodes to the same string.
package assignment

import (
	"encoding/json"
	"fmt"
	"hash/fnv"
	"slices"
	"strconv"
	"strings"

	"github.com/consumergroup-operator/consumergroup-operator/pkg/allocate"
)

// Version is the encoding version this package writes and reads.
const Version = 1

// Entry is one member's published assignment.
type Entry struct {
	// Version is the encoding version; readers reject versions they do not know.
	Version int `json:"version"`
	// Generation is the assignment generation this entry belongs to.
	Generation int64 `json:"generation"`
	// Member is the member id.
	Member string `json:"member"`
	// Queues are the member's queues, grouped per topic and broker.
	Queues []BrokerQueues `json:"queues"`
}

// BrokerQueues is a member's queues on one broker of one topic.
type BrokerQueues struct {
	Topic  string `json:"topic"`
	Broker string `json:"broker"`
	// IDs are the queue ids as ascending ranges: "0-3,8" is 0, 1, 2, 3 and 8.
	IDs string `json:"ids"`
}

// Encode returns the canonical entry for member holding queues at generation.
// Duplicate queues are written once.
func Encode(member string, generation int64, queues []allocate.Queue) ([]byte, error) {
	return json.Marshal(NewEntry(member, generation, queues))
}

// NewEntry builds the canonical entry for member holding queues at generation.
func NewEntry(member string, generation int64, queues []allocate.Queue) Entry {
	sorted := slices.Clone(queues)
	slices.SortFunc(sorted, compareQueues)
	sorted = slices.Compact(sorted)
	e := Entry{Version: Version, Generation: generation, Member: member, Queues: []BrokerQueues{}}
	for start := 0; start < len(sorted); {
		end := start
		for end < len(sorted) && sorted[end].Topic == sorted[start].Topic && sorted[end].Broker == sorted[start].Broker {
			end++
		}
		e.Queues = append(e.Queues, BrokerQueues{
			Topic:  sorted[start].Topic,
			Broker: sorted[start].Broker,
			IDs:    formatRanges(sorted[start:end]),
		})
		start = end
	}
	return e
}

// Decode parses an entry and expands its queues, sorted by topic, broker and id.
func Decode(data []byte) (Entry, []allocate.Queue, error) {
	var e Entry
	if err := json.Unmarshal(data, &e); err != nil {
		return Entry{}, nil, fmt.Errorf("decoding assignment entry: %w", err)
	}
	if e.Version != Version {
		return Entry{}, nil, fmt.Errorf("assignment entry has version %d; this reader knows version %d", e.Version, Version)
	}
	queues, err := e.Expand()
	if err != nil {
		return Entry{}, nil, err
	}
	return e, queues, nil
}

// Expand lists the entry's queues, sorted by topic, broker and id.
func (e Entry) Expand() ([]allocate.Queue, error) {
	var queues []allocate.Queue
	for i, g := range e.Queues {
		ids, err := parseRanges(g.IDs)
		if err != nil {
			return nil, fmt.Errorf("queues[%d] (%s/%s): %w", i, g.Topic, g.Broker, err)
		}
		for _, id := range ids {
			queues = append(queues, allocate.Queue{Topic: g.Topic, Broker: g.Broker, ID: id})
		}
	}
	slices.SortFunc(queues, compareQueues)
	return queues, nil
}

// Count is the number of queues in the entry, without expanding them.
func (e Entry) Count() (int, error) {
	n := 0
	for i, g := range e.Queues {
		c, err := countRanges(g.IDs)
		if err != nil {
			return 0, fmt.Errorf("queues[%d] (%s/%s): %w", i, g.Topic, g.Broker, err)
		}
		n += c
	}
	return n, nil
}

func compareQueues(a, b allocate.Queue) int {
	if c := strings.Compare(a.Topic, b.Topic); c != 0 {
		return c
	}
	if c := strings.Compare(a.Broker, b.Broker); c != 0 {
		return c
	}
	return int(a.ID) - int(b.ID)
}

// formatRanges writes the ids of queues (sorted, distinct) as "a-b,c".
func formatRanges(queues []allocate.Queue) string {
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

// rangeBounds parses "a" or "a-b" into its bounds.
func rangeBounds(part string) (int32, int32, error) {
	lo, hi, isRange := strings.Cut(part, "-")
	first, err := strconv.ParseInt(lo, 10, 32)
	if err != nil || first < 0 {
		return 0, 0, fmt.Errorf("invalid queue id %q", lo)
	}
	last := first
	if isRange {
		last, err = strconv.ParseInt(hi, 10, 32)
		if err != nil || last < first {
			return 0, 0, fmt.Errorf("invalid queue id range %q", part)
		}
	}
	return int32(first), int32(last), nil
}

func parseRanges(s string) ([]int32, error) {
	if s == "" {
		return nil, nil
	}
	var ids []int32
	for part := range strings.SplitSeq(s, ",") {
		first, last, err := rangeBounds(part)
		if err != nil {
			return nil, err
		}
		for id := first; id <= last; id++ {
			ids = append(ids, id)
		}
	}
	return ids, nil
}

func countRanges(s string) (int, error) {
	if s == "" {
		return 0, nil
	}
	n := 0
	for part := range strings.SplitSeq(s, ",") {
		first, last, err := rangeBounds(part)
		if err != nil {
			return 0, err
		}
		n += int(last-first) + 1
	}
	return n, nil
}

// Compact groups queues per topic and broker with ranges of ids, as an entry holds them.
func Compact(queues []allocate.Queue) []BrokerQueues {
	return NewEntry("", 0, queues).Queues
}

// ExpandAll lists the queues of groups, sorted by topic, broker and id.
func ExpandAll(groups []BrokerQueues) ([]allocate.Queue, error) {
	return Entry{Queues: groups}.Expand()
}

// ShardsAnnotation on a group's assignment ConfigMap ("<group>-assignment") says over how many shard
// ConfigMaps the entries are spread. Absent or "1": the entries are in that ConfigMap itself. Otherwise
// the ConfigMap holds no entries, and the entry of pod P is in ShardName(group, ShardOf(P, shards)).
const ShardsAnnotation = "messaging.consumergroup.io/shards"

// ShardName is the name of a group's shard ConfigMap number shard.
func ShardName(group string, shard int) string {
	return group + "-assignment-" + strconv.Itoa(shard)
}

// ShardOf says which of shards shard ConfigMaps holds pod's entry: FNV-1a (32 bit) of the pod name,
// modulo shards. Any reader can compute it.
func ShardOf(pod string, shards int) int {
	if shards <= 1 {
		return 0
	}
	h := fnv.New32a()
	_, _ = h.Write([]byte(pod))
	return int(h.Sum32() % uint32(shards))
}
