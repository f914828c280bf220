package plan

import (
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/types"

	"github.com/consumergroup-operator/consumergroup-operator/pkg/allocate"
	"github.com/consumergroup-operator/consumergroup-operator/pkg/protocol"
)

// handoffStateVersion is the format version of handoffState.
const handoffStateVersion = 2

// HandoffState is the operator's bookkeeping of queues in flight, kept in the assignment ConfigMap's
// protocol.HandoffAnnotation beside the entries it belongs to, so that a restarted operator resumes a
// handoff where the last one stopped. It is a hint: when it is missing or cannot be trusted, the operator
// works from the members' claims alone (see handoff).
type HandoffState struct {
	// Version is handoffStateVersion; a state of another version is not trusted.
	Version int `json:"version"`
	// Revocations are queues taken from a pod incarnation that has not yet acknowledged it. One with All
	// set is a recovery: the operator lost track of what it had published, so until the incarnation
	// acknowledges Generation it may be reading any queue.
	Revocations []Revocation `json:"revocations,omitempty"`
	// Reserved are queues kept, unread, for a member that left, in case it returns (restart grace).
	Reserved []reservation `json:"reserved,omitempty"`
	// Fenced are revocations that timed out while their incarnation kept renewing its Lease.
	Fenced []Revocation `json:"fenced,omitempty"`
	// HoldUnclaimedUntil is set by an operator that started, found nothing it could trust and so cannot
	// name the pods whose Leases vanished before: until then, a queue nobody claims goes to nobody.
	HoldUnclaimedUntil *time.Time `json:"holdUnclaimedUntil,omitempty"`
}

// Revocation is a set of queues (or all of them) an incarnation releases by acknowledging Generation.
type Revocation struct {
	Pod string    `json:"pod"`
	UID types.UID `json:"uid"`
	// Generation is the first generation that no longer gives the queues to the incarnation; 0 in a
	// revocation handoff returns, for decide to stamp with the generation it publishes.
	Generation int64                   `json:"generation"`
	At         time.Time               `json:"at"`
	Queues     []protocol.BrokerQueues `json:"queues,omitempty"`
	All        bool                    `json:"all,omitempty"`
	// Lapsed is set once the incarnation's promise ran out for it: its queues no longer count in the
	// incarnation's claim, for this operator and for one that restarts and knows no earlier publication.
	Lapsed bool `json:"lapsed,omitempty"`
}

type reservation struct {
	Member     string                  `json:"member"`
	DepartedAt time.Time               `json:"departedAt"`
	Queues     []protocol.BrokerQueues `json:"queues"`
}

func (s HandoffState) empty() bool {
	return len(s.Revocations) == 0 && len(s.Reserved) == 0 && len(s.Fenced) == 0 && s.HoldUnclaimedUntil == nil
}

func (s HandoffState) encode() string {
	if s.empty() {
		return ""
	}
	s.Version = handoffStateVersion
	b, err := json.Marshal(s)
	if err != nil {
		panic(err)
	}
	return string(b)
}

// decodeHandoff reads the handoff annotation; queues outside scope (the spec's) are not read. Anything it
// cannot read fully is an error: the caller then trusts nothing the operator published.
func decodeHandoff(raw string, scope *protocol.Scope) (HandoffState, error) {
	var s HandoffState
	if raw == "" {
		return s, nil
	}
	if err := json.Unmarshal([]byte(raw), &s); err != nil {
		return HandoffState{}, fmt.Errorf("annotation %s: %w", protocol.HandoffAnnotation, err)
	}
	if s.Version != handoffStateVersion {
		return HandoffState{}, fmt.Errorf("annotation %s has version %d; this operator knows version %d", protocol.HandoffAnnotation, s.Version, handoffStateVersion)
	}
	var errs []error
	for _, list := range [][]Revocation{s.Revocations, s.Fenced} {
		for _, r := range list {
			if _, err := scope.Expand(r.Queues); err != nil || r.Pod == "" || r.UID == "" || r.Generation <= 0 || r.Generation > protocol.MaxGeneration {
				errs = append(errs, fmt.Errorf("annotation %s: revocation of pod %q is malformed", protocol.HandoffAnnotation, r.Pod))
			}
		}
	}
	for _, r := range s.Reserved {
		if _, err := scope.Expand(r.Queues); err != nil || r.Member == "" {
			errs = append(errs, fmt.Errorf("annotation %s: reservation for member %q is malformed", protocol.HandoffAnnotation, r.Member))
		}
	}
	if err := errors.Join(errs...); err != nil {
		return HandoffState{}, err
	}
	return s, nil
}

// sortState orders the state so that the same state always encodes to the same annotation.
func sortState(s *HandoffState) {
	byPod := func(a, b Revocation) int {
		return cmp.Or(cmp.Compare(a.Generation, b.Generation), strings.Compare(a.Pod, b.Pod), strings.Compare(string(a.UID), string(b.UID)))
	}
	slices.SortFunc(s.Revocations, byPod)
	slices.SortFunc(s.Fenced, byPod)
	slices.SortFunc(s.Reserved, func(a, b reservation) int { return strings.Compare(a.Member, b.Member) })
}

// queueSet is a set of queues, or every queue.
type queueSet struct {
	all    bool
	queues map[allocate.Queue]struct{}
}

func (s *queueSet) add(qs []allocate.Queue) {
	if s.queues == nil {
		s.queues = make(map[allocate.Queue]struct{}, len(qs))
	}
	for _, q := range qs {
		s.queues[q] = struct{}{}
	}
}

// remove takes qs out of a set of listed queues; a set of every queue stays so.
func (s *queueSet) remove(qs []allocate.Queue) {
	for _, q := range qs {
		delete(s.queues, q)
	}
}

func (s *queueSet) addGroups(groups []protocol.BrokerQueues, scope *protocol.Scope) {
	qs, _ := scope.Expand(groups) // decodeHandoff checked them
	s.add(qs.Queues)
}

func (s *queueSet) has(q allocate.Queue) bool {
	if s == nil {
		return false
	}
	if s.all {
		return true
	}
	_, ok := s.queues[q]
	return ok
}
