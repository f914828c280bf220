package protocol

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"

	"github.com/consumergroup-operator/consumergroup-operator/pkg/queue"
)

// Queue is one message queue: topic, broker name and queue id.
type Queue = queue.Queue

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
