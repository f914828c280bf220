package controllers

import (
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/consumergroup-operator/consumergroup-operator/pkg/allocate"
	"github.com/consumergroup-operator/consumergroup-operator/pkg/protocol"
)

// Defaults of spec.handoff, for groups written before the API server applied them.
const defaultRevokeTimeout = 30 * time.Second

// handoffStateVersion is the format version of handoffState.
const handoffStateVersion = 2

// handoffState is the operator's bookkeeping of queues in flight, kept in the assignment ConfigMap's
// protocol.HandoffAnnotation beside the entries it belongs to, so that a restarted operator resumes a
// handoff where the last one stopped. It is a hint: when it is missing or cannot be trusted, the operator
// works from the members' claims alone (see handoff).
type handoffState struct {
	// Version is handoffStateVersion; a state of another version is not trusted.
	Version int `json:"version"`
	// Revocations are queues taken from a pod incarnation that has not yet acknowledged it. One with All
	// set is a recovery: the operator lost track of what it had published, so until the incarnation
	// acknowledges Generation it may be reading any queue.
	Revocations []revocation `json:"revocations,omitempty"`
	// Reserved are queues kept, unread, for a member that left, in case it returns (restart grace).
	Reserved []reservation `json:"reserved,omitempty"`
	// Fenced are revocations that timed out while their incarnation kept renewing its Lease.
	Fenced []revocation `json:"fenced,omitempty"`
	// HoldUnclaimedUntil is set by an operator that started, found nothing it could trust and so cannot
	// name the pods whose Leases vanished before: until then, a queue nobody claims goes to nobody.
	HoldUnclaimedUntil *time.Time `json:"holdUnclaimedUntil,omitempty"`
}

// revocation is a set of queues (or all of them) an incarnation releases by acknowledging Generation.
type revocation struct {
	Pod string    `json:"pod"`
	UID types.UID `json:"uid"`
	// Generation is the first generation that no longer gives the queues to the incarnation; 0 in a
	// revocation handoff returns, for decide to stamp with the generation it publishes.
	Generation int64                   `json:"generation"`
	At         time.Time               `json:"at"`
	Queues     []protocol.BrokerQueues `json:"queues,omitempty"`
	All        bool                    `json:"all,omitempty"`
}

type reservation struct {
	Member     string                  `json:"member"`
	DepartedAt time.Time               `json:"departedAt"`
	Queues     []protocol.BrokerQueues `json:"queues"`
}

func (s handoffState) empty() bool {
	return len(s.Revocations) == 0 && len(s.Reserved) == 0 && len(s.Fenced) == 0 && s.HoldUnclaimedUntil == nil
}

func (s handoffState) encode() string {
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
func decodeHandoff(raw string, scope *protocol.Scope) (handoffState, error) {
	var s handoffState
	if raw == "" {
		return s, nil
	}
	if err := json.Unmarshal([]byte(raw), &s); err != nil {
		return handoffState{}, fmt.Errorf("annotation %s: %w", protocol.HandoffAnnotation, err)
	}
	if s.Version != handoffStateVersion {
		return handoffState{}, fmt.Errorf("annotation %s has version %d; this operator knows version %d", protocol.HandoffAnnotation, s.Version, handoffStateVersion)
	}
	var errs []error
	for _, list := range [][]revocation{s.Revocations, s.Fenced} {
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
		return handoffState{}, err
	}
	return s, nil
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

// incarnation is one pod incarnation (pod name and UID) that may be reading queues: a member, a pod that
// was one, or the holder of a Lease whose pod is gone.
type incarnation struct {
	pod string
	uid types.UID
	// exists is set while a pod of this name and UID exists; stopped when the kubelet reports that every
	// container of it has terminated: evidence that no process of it reads anything.
	exists, stopped bool
	// lease is the Lease this incarnation holds; nil when it holds none.
	lease *protocol.LeaseState
	// unseenUntil is, for an incarnation the operator published an entry for but that has neither a pod
	// nor a Lease, until when it may still be reading: its Lease may have vanished before this operator
	// started, and a vanished Lease proves nothing.
	unseenUntil time.Time
}

// incarnationKey identifies an incarnation in maps.
func incarnationKey(pod string, uid types.UID) string { return pod + "\x00" + string(uid) }

// stands reports whether the incarnation may still be reading: not stopped, and its Lease has not expired
// by the operator's count (protocol.LeaseState.Stands). An incarnation without a Lease does not follow
// the member protocol; it is taken to read while its pod exists.
func (i *incarnation) stands(now time.Time, maxSkew time.Duration) bool {
	if i.stopped {
		return false
	}
	if i.lease != nil {
		return i.lease.Stands(now, maxSkew)
	}
	return i.exists || now.Before(i.unseenUntil)
}

func (i *incarnation) acked() int64 {
	if i.lease == nil {
		return 0
	}
	return i.lease.AckedGeneration
}

// aliveAt reports whether the incarnation showed it was alive at or after t: its Lease was renewed then, or,
// without a Lease, its pod still exists.
func (i *incarnation) aliveAt(t time.Time) bool {
	if i.lease != nil {
		return !i.lease.RenewTime.Before(t)
	}
	return i.exists
}

// stoppedByKubelet reports whether the kubelet says no container of pod runs and each has terminated at
// least once: no process of the pod can be reading. A pod that is only NotReady, or gone, proves nothing.
func stoppedByKubelet(pod *corev1.Pod) bool {
	if pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed {
		return true
	}
	statuses := append(slices.Clone(pod.Status.InitContainerStatuses), pod.Status.ContainerStatuses...)
	if len(pod.Status.ContainerStatuses) == 0 {
		return false
	}
	for _, c := range statuses {
		if c.State.Running != nil || c.State.Terminated == nil && c.LastTerminationState.Terminated == nil {
			return false
		}
	}
	return true
}

// handoffInput is everything the handoff decision depends on.
type handoffInput struct {
	cooperative                          bool
	revokeTimeout, restartGrace, maxSkew time.Duration
	now                                  time.Time
	// members are the incarnations that take part, sorted by pod; target is the strategy's plan for them.
	members []member
	target  allocate.Plan
	// published are the entries in force, by pod name, and state the bookkeeping beside them; both count
	// only when trusted.
	published map[string]protocol.PublishedEntry
	state     handoffState
	trusted   bool
	// incarnations are every incarnation that may be reading.
	incarnations []*incarnation
	// scope is the spec's queues; the bookkeeping's queues are read through it.
	scope *protocol.Scope
	// publications say since when this operator knows each generation was published: a revocation from
	// an incarnation whose Lease promises contact fencing ends that promise after (promiseKept).
	publications publications
	// unseenUntil is when a pod that this operator never saw, its Lease gone before it started, has
	// stopped reading. Until then, when the bookkeeping cannot be trusted (it may have named that pod), a
	// queue nobody claims goes to nobody; the bookkeeping then carries the deadline on
	// (handoffState.HoldUnclaimedUntil).
	unseenUntil time.Time
}

// handoffResult is what each member may read now and what the operator keeps in mind.
type handoffResult struct {
	// entries are the queues each member may read, by pod name, sorted by protocol.CompareQueues.
	entries map[string][]allocate.Queue
	// state is the bookkeeping to publish. Its new revocations have generation 0, for decide to stamp.
	state handoffState
	// fenced are the revocations fenced in this pass, for events.
	fenced []revocation
	// withheld counts queues the target gives to a member that must wait for them; recovering counts the
	// incarnations that have not yet acknowledged a recovery.
	withheld, recovering int
	// revokedFromMembers are the queues taken from pods that stay members: each is a move that completes
	// with the grant that follows.
	revokedFromMembers []allocate.Queue
	// unreadableClaims name the Leases whose claims cannot be read.
	unreadableClaims []string
	// requeueAfter is when the next deadline falls; 0 when nothing waits on time.
	requeueAfter time.Duration
}

// contactMargin is added to a member's contact-fencing promise before the operator counts on it: both
// ends measure the promise as an interval on their own clocks, whose rates differ by far less, and the
// member hands a generation to its application a moment after its view holds it.
const contactMargin = time.Second

// promiseKept is when incarnation i has stopped reading what r revoked by its own promise
// (protocol.StopsWithinAnnotation): the promise after the operator first knew that r's generation, or a
// later one, was published. False when its Lease makes no promise or the publication is not known.
func promiseKept(i *incarnation, r revocation, pubs publications) (time.Time, bool) {
	if i.lease == nil || i.lease.StopsWithin <= 0 || r.Generation <= 0 {
		return time.Time{}, false
	}
	since, ok := pubs.knownSince(r.Generation)
	if !ok {
		return time.Time{}, false
	}
	return since.Add(i.lease.StopsWithin + contactMargin), true
}

// fencePoll is how often a revocation past its timeout is looked at again while its incarnation has not
// yet shown it is alive, which renewals, not passes, tell.
const fencePoll = time.Second

// handoff turns the strategy's target into what may be published now. In Cooperative mode a queue goes to
// a member only when no other incarnation that stands may be reading it: none claims it in its Lease, none
// was given it in an entry it has not acknowledged away, none is in a recovery it has not acknowledged.
// Queues leave their reader in one generation (a revocation) and reach the next in a later one. A
// revocation ends when its incarnation acknowledges a generation without the queues, its claim stops
// standing (stopped containers, or a Lease expired by the operator's count), or, while the incarnation
// keeps renewing its Lease past revokeTimeout, when the operator fences it. When the published entries and
// bookkeeping cannot be trusted, the operator knows only the claims: each incarnation keeps what it claims
// and the target leaves it, and a queue nobody claims goes to a member only once every other incarnation
// acknowledged the generation published then (a recovery). Queues kept for a departed member (restart grace) go to nobody
// until it returns or the grace ends. Every result lists each queue at most once.
func handoff(in handoffInput) handoffResult {
	res := handoffResult{entries: make(map[string][]allocate.Queue, len(in.members))}
	var deadlines []time.Time
	key := incarnationKey
	byKey := make(map[string]*incarnation, len(in.incarnations))
	for _, i := range in.incarnations {
		byKey[key(i.pod, i.uid)] = i
	}
	standing := func(pod string, uid types.UID) *incarnation {
		if i := byKey[key(pod, uid)]; i != nil && i.stands(in.now, in.maxSkew) {
			return i
		}
		return nil
	}
	state := in.state
	if !in.trusted {
		state = handoffState{}
	}

	// Phase 1: settle earlier revocations; what is still pending holds its queues back. A revocation whose
	// incarnation's promise has run out is kept, unacknowledged, but holds nothing back: what it revoked
	// no longer counts in that incarnation's claim (lapsed), and a recovery no longer makes it unknown.
	pending := map[string]*queueSet{}
	fencedQueues := map[string]*queueSet{}
	lapsed := map[string]*queueSet{}
	var kept []revocation
	for _, r := range state.Revocations {
		i := standing(r.Pod, r.UID)
		if i == nil || i.acked() >= r.Generation {
			continue
		}
		if at, ok := promiseKept(i, r, in.publications); ok {
			if !in.now.Before(at) {
				kept = append(kept, r)
				if !r.All {
					k := key(r.Pod, r.UID)
					if lapsed[k] == nil {
						lapsed[k] = &queueSet{}
					}
					lapsed[k].addGroups(r.Queues, in.scope)
				}
				continue
			}
			deadlines = append(deadlines, at)
		}
		deadline := r.At.Add(in.revokeTimeout)
		if !in.now.Before(deadline) {
			if i.aliveAt(deadline) {
				// It kept renewing past the deadline without acknowledging: a stuck application. A member that
				// stopped renewing instead stops reading on its own once its Lease expires, so it is waited for.
				res.fenced = append(res.fenced, r)
				res.state.Fenced = append(res.state.Fenced, revocation{Pod: r.Pod, UID: r.UID, Generation: r.Generation, At: in.now, Queues: r.Queues, All: r.All})
				continue
			}
			deadlines = append(deadlines, in.now.Add(fencePoll))
		} else {
			deadlines = append(deadlines, deadline)
		}
		res.state.Revocations = append(res.state.Revocations, r)
		if i.lease != nil {
			deadlines = append(deadlines, i.lease.Expiry(in.maxSkew))
		}
	}
	// A fenced incarnation stays listed until it catches up with a later generation or goes.
	for _, f := range state.Fenced {
		if i := standing(f.Pod, f.UID); i != nil && i.acked() < f.Generation {
			res.state.Fenced = append(res.state.Fenced, f)
		}
	}
	for _, list := range []struct {
		revs []revocation
		into map[string]*queueSet
	}{{res.state.Revocations, pending}, {res.state.Fenced, fencedQueues}} {
		for _, r := range list.revs {
			k := key(r.Pod, r.UID)
			if list.into[k] == nil {
				list.into[k] = &queueSet{}
			}
			if r.All {
				list.into[k].all = true
			} else {
				list.into[k].addGroups(r.Queues, in.scope)
			}
		}
	}
	for _, r := range res.state.Revocations {
		if r.All {
			res.recovering++
		}
	}
	// Lapsed revocations stay in the bookkeeping until acknowledged, so that later passes, and a restarted
	// operator, still know what the incarnation was told.
	res.state.Revocations = append(res.state.Revocations, kept...)

	// Phase 2: reservations for departed members, kept until they return or the grace ends.
	isMember := make(map[string]bool, len(in.members))
	for _, m := range in.members {
		isMember[m.ID] = true
	}
	reservedFor := map[allocate.Queue]string{}
	if in.restartGrace > 0 && in.trusted {
		reserved := map[string]bool{}
		for _, r := range state.Reserved {
			if isMember[r.Member] || !in.now.Before(r.DepartedAt.Add(in.restartGrace)) {
				continue
			}
			reserved[r.Member] = true
			res.state.Reserved = append(res.state.Reserved, r)
			deadlines = append(deadlines, r.DepartedAt.Add(in.restartGrace))
		}
		for _, pod := range slices.Sorted(maps.Keys(in.published)) {
			p := in.published[pod]
			if isMember[p.Member] || reserved[p.Member] || len(p.Queues) == 0 {
				continue
			}
			reserved[p.Member] = true
			res.state.Reserved = append(res.state.Reserved, reservation{Member: p.Member, DepartedAt: in.now, Queues: protocol.Compact(p.Queues)})
			deadlines = append(deadlines, in.now.Add(in.restartGrace))
		}
		for _, r := range res.state.Reserved {
			qs, _ := in.scope.Expand(r.Queues)
			for _, q := range qs.Queues {
				reservedFor[q] = r.Member
			}
		}
	}

	// Phase 3: what each incarnation that stands may be reading (held: its claim, and what it was
	// published), what it was published and has not acknowledged away (pending), and whether the operator
	// cannot know (unknown: a recovery it has not acknowledged, or a claim that cannot be read). Fenced
	// queues no longer count. Readers are numbered; holders maps a queue to the readers that hold it.
	type reader struct {
		inc *incarnation
		key string
		// held is what the incarnation is known to hold, sorted: never every queue, since an unreadable
		// claim proves nothing about any one queue; that incarnation is unknown instead.
		held               []allocate.Queue
		claimUnreadable    bool
		unknown, fencedAll bool
	}
	// holding is who holds a queue: how many readers, and one of them.
	type holding struct{ first, count int32 }
	var readers []reader
	readerOf := map[string]int32{}
	queues := 0
	for _, qs := range in.target {
		queues += len(qs)
	}
	holders := make(map[allocate.Queue]holding, queues)
	unknownCount, unknownReader := 0, int32(-1)
	hold := state.HoldUnclaimedUntil
	if !in.trusted && in.now.Before(in.unseenUntil) {
		hold = &in.unseenUntil
	}
	if hold != nil && in.now.Before(*hold) {
		// A reader nobody can name may hold any queue: as one more unknown reader, never a member.
		unknownCount, unknownReader = 1, -2
		deadlines = append(deadlines, *hold)
		until := hold.UTC()
		res.state.HoldUnclaimedUntil = &until
	}
	for _, i := range in.incarnations {
		if !i.stands(in.now, in.maxSkew) {
			continue
		}
		idx := int32(len(readers))
		r := reader{inc: i, key: key(i.pod, i.uid)}
		var claim []allocate.Queue
		switch {
		case i.lease == nil || !i.lease.HasClaim:
		case i.lease.ClaimErr != nil:
			res.unreadableClaims = append(res.unreadableClaims, i.lease.Name)
			r.claimUnreadable, r.unknown = true, true
		default:
			claim = i.lease.Claim
			if l := lapsed[r.key]; l != nil {
				claim = slices.DeleteFunc(slices.Clone(claim), l.has)
			}
		}
		var entry []allocate.Queue
		if e, ok := in.published[i.pod]; in.trusted && ok && (types.UID(e.PodUID) == i.uid || e.PodUID == "" && i.exists) {
			entry = e.Queues
		}
		r.held = protocol.UnionQueues(claim, entry)
		fenced := fencedQueues[r.key]
		r.fencedAll = fenced != nil && fenced.all
		r.unknown = !r.fencedAll && (r.unknown || !in.trusted || pending[r.key] != nil && pending[r.key].all)
		readers = append(readers, r)
		readerOf[r.key] = idx
		if r.fencedAll {
			continue
		}
		if r.unknown {
			unknownCount, unknownReader = unknownCount+1, idx
		}
		hold := func(q allocate.Queue) {
			if fenced != nil && fenced.has(q) {
				return
			}
			h, ok := holders[q]
			if !ok {
				h.first = idx
			}
			h.count++
			holders[q] = h
		}
		for _, q := range r.held {
			hold(q)
		}
		if p := pending[r.key]; p != nil {
			for q := range p.queues {
				if _, held := slices.BinarySearchFunc(r.held, q, protocol.CompareQueues); !held {
					hold(q)
				}
			}
		}
	}
	// A queue is blocked for a member while another incarnation holds it, or, unless the member itself is
	// known to hold it, while another one may hold anything: a queue someone claims cannot have been given
	// to anyone else, since it was given only once its previous reader's claim let go of it. A claim that
	// cannot be read shows nothing of the kind, for anyone.
	// A member keeps what its own claim says it may be reading, whoever else claims it too: keeping the
	// queue adds no reader, and taking it away would not stop the other claimant from reading it.
	blocked := func(q allocate.Queue, self int32) bool {
		if self >= 0 && claims(readers[self].inc, fencedQueues[readers[self].key], q) && !lapsed[readers[self].key].has(q) {
			return false
		}
		if h, held := holders[q]; held {
			return h.count > 1 || h.first != self
		}
		return unknownCount > 1 || unknownCount == 1 && unknownReader != self
	}

	// Phase 4: each member gets what its target gives it and nobody else may be reading.
	for _, m := range in.members {
		self, ok := readerOf[key(m.Pod, m.UID)]
		if !ok {
			self = -1
		}
		var qs []allocate.Queue
		for _, q := range in.target[m.ID] {
			if r := reservedFor[q]; r != "" && r != m.ID || in.cooperative && blocked(q, self) {
				res.withheld++
				continue
			}
			qs = append(qs, q)
		}
		// In the order entries and claims list queues, once for every later use.
		slices.SortFunc(qs, protocol.CompareQueues)
		res.entries[m.Pod] = qs
	}

	// Phase 5: what incarnations that stand lose now is revoked, to be released by their acknowledgement.
	// Without trusted bookkeeping every one of them is in a recovery until it acknowledges this generation.
	if in.cooperative {
		memberPods := make(map[string]types.UID, len(in.members))
		for _, m := range in.members {
			memberPods[m.Pod] = m.UID
		}
		for _, r := range readers {
			i := r.inc
			switch {
			case r.fencedAll:
				continue
			case !in.trusted:
				res.state.Revocations = append(res.state.Revocations, revocation{Pod: i.pod, UID: i.uid, At: in.now, All: true})
				res.recovering++
				deadlines = append(deadlines, in.now.Add(in.revokeTimeout))
				continue
			case r.claimUnreadable:
				// Nothing is known of what it lost; it holds everything back until it writes its claim again.
				continue
			}
			isMember := memberPods[i.pod] == i.uid
			var kept []allocate.Queue
			if isMember {
				kept = res.entries[i.pod]
			}
			var lost []allocate.Queue
			for _, q := range protocol.SubtractQueues(r.held, kept) {
				if (pending[r.key] == nil || !pending[r.key].has(q)) && (fencedQueues[r.key] == nil || !fencedQueues[r.key].has(q)) {
					lost = append(lost, q)
				}
			}
			if len(lost) == 0 {
				continue
			}
			if isMember {
				res.revokedFromMembers = append(res.revokedFromMembers, lost...)
			}
			res.state.Revocations = append(res.state.Revocations, revocation{Pod: i.pod, UID: i.uid, At: in.now, Queues: protocol.Compact(lost)})
			deadlines = append(deadlines, in.now.Add(in.revokeTimeout))
		}
	}

	sortState(&res.state)
	if len(deadlines) > 0 {
		next := slices.MinFunc(deadlines, func(a, b time.Time) int { return a.Compare(b) })
		res.requeueAfter = max(next.Sub(in.now), 100*time.Millisecond)
	}
	return res
}

// claims reports whether inc's readable claim lists q, and q is not fenced from it.
func claims(inc *incarnation, fenced *queueSet, q allocate.Queue) bool {
	if inc.lease == nil || inc.lease.ClaimErr != nil || fenced != nil && fenced.has(q) {
		return false
	}
	_, ok := slices.BinarySearchFunc(inc.lease.Claim, q, protocol.CompareQueues)
	return ok
}

// sortState orders the state so that the same state always encodes to the same annotation.
func sortState(s *handoffState) {
	byPod := func(a, b revocation) int {
		return cmp.Or(cmp.Compare(a.Generation, b.Generation), strings.Compare(a.Pod, b.Pod), strings.Compare(string(a.UID), string(b.UID)))
	}
	slices.SortFunc(s.Revocations, byPod)
	slices.SortFunc(s.Fenced, byPod)
	slices.SortFunc(s.Reserved, func(a, b reservation) int { return strings.Compare(a.Member, b.Member) })
}

func durationOr(seconds *int32, def time.Duration) time.Duration {
	if seconds == nil {
		return def
	}
	return time.Duration(*seconds) * time.Second
}
