package plan

import (
	"fmt"
	"maps"
	"slices"
	"time"

	"k8s.io/apimachinery/pkg/types"

	"github.com/consumergroup-operator/consumergroup-operator/pkg/allocate"
	"github.com/consumergroup-operator/consumergroup-operator/pkg/protocol"
)

// handoffInput is everything the handoff decision depends on.
type handoffInput struct {
	cooperative                          bool
	revokeTimeout, restartGrace, maxSkew time.Duration
	now                                  time.Time
	// members are the incarnations that take part, sorted by pod; target is the strategy's plan for them.
	members []Member
	target  allocate.Plan
	// published are the entries in force, by pod name, and state the bookkeeping beside them; both count
	// only when trusted.
	published map[string]protocol.PublishedEntry
	state     HandoffState
	trusted   bool
	// incarnations are every incarnation that may be reading.
	incarnations []*incarnation
	// scope is the spec's queues; the bookkeeping's queues are read through it.
	scope *protocol.Scope
	// publications say since when this operator knows each generation was published: a revocation from
	// an incarnation whose Lease promises contact fencing ends that promise after (promiseKept).
	publications Publications
	// nodeViews say since when the group's lines in the node views ask for each generation: with node
	// views, a promise counts from then too (promiseKept).
	nodeViews NodeViews
	// unseenUntil is when a pod that this operator never saw, its Lease gone before it started, has
	// stopped reading. Until then, when the bookkeeping cannot be trusted (it may have named that pod), a
	// queue nobody claims goes to nobody; the bookkeeping then carries the deadline on
	// (handoffState.HoldUnclaimedUntil).
	unseenUntil time.Time
}

// handoffResult is what each member may read now and what the operator keeps in mind.
type handoffResult struct {
	// entries are the queues each member may read, by pod name, sorted by protocol.CompareCanonical.
	entries map[string][]allocate.Queue
	// state is the bookkeeping to publish. Its new revocations have generation 0, for decide to stamp.
	state HandoffState
	// fenced are the revocations fenced in this pass, for events.
	fenced []Revocation
	// withheld counts queues the target gives to a member that must wait for them; recovering counts the
	// incarnations that have not yet acknowledged a recovery.
	withheld, recovering int
	// firstWithheld says, for the log, which queue waited first in this pass and what held it back.
	firstWithheld string
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
// later one, was published, and, with node views, that every line of the group asks for it: a member a
// node agent confirms after then holds the generation. False when its Lease makes no promise or either
// is not known.
func promiseKept(i *incarnation, r Revocation, pubs Publications, nodeViews NodeViews) (time.Time, bool) {
	if i.lease == nil || i.lease.StopsWithin <= 0 || r.Generation <= 0 {
		return time.Time{}, false
	}
	since, ok := pubs.KnownSince(r.Generation)
	asked, linesOK := nodeViews.KnownSince(i.node, r.Generation)
	if handoffMutation == "lapse" {
		since, ok, asked, linesOK = r.At, true, r.At, true
	}
	if handoffMutation == "nodeviews" {
		asked, linesOK = time.Time{}, true
	}
	if !ok || !linesOK {
		return time.Time{}, false
	}
	return latest(since, asked).Add(i.lease.StopsWithin + contactMargin), true
}

// latest is the later of a and b.
func latest(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
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
// acknowledged the generation published then (a recovery). Queues kept for a departed member (restart
// grace) go to nobody until it returns or the grace ends. Every result lists each queue at most once.
//
// It runs in six steps, each a method of handoffPass: settleRevocations, keepReservations,
// countHoldings, grant, endReturnedRevocations and revokeLost.
func handoff(in handoffInput) handoffResult {
	p := newHandoffPass(in)
	revoked := p.settleRevocations()
	reservedFor := p.keepReservations()
	held := p.countHoldings(revoked)
	p.grant(held, reservedFor)
	if handoffMutation != "giveback" {
		p.endReturnedRevocations(held)
	}
	if in.cooperative {
		p.revokeLost(held)
	}
	sortState(&p.res.state)
	return p.res
}

// handoffPass is one run of handoff: its input, the bookkeeping it starts from and the result it builds.
type handoffPass struct {
	in handoffInput
	// state is the bookkeeping the pass starts from: in.state when trusted, none otherwise.
	state HandoffState
	// incarnations are in.incarnations by incarnationKey.
	incarnations map[string]*incarnation
	res          handoffResult
}

func newHandoffPass(in handoffInput) *handoffPass {
	p := &handoffPass{
		in:           in,
		incarnations: make(map[string]*incarnation, len(in.incarnations)),
		res:          handoffResult{entries: make(map[string][]allocate.Queue, len(in.members))},
	}
	if in.trusted {
		p.state = in.state
	}
	for _, i := range in.incarnations {
		p.incarnations[IncarnationKey(i.pod, i.uid)] = i
	}
	return p
}

// lookAgainAt makes the pass that runs the handoff run again at t at the latest.
func (p *handoffPass) lookAgainAt(t time.Time) {
	p.res.requeueAfter = soonerRequeue(p.res.requeueAfter, p.in.now, t)
}

// standing is the incarnation pod, uid when it may still be reading; nil otherwise.
func (p *handoffPass) standing(pod string, uid types.UID) *incarnation {
	if i := p.incarnations[IncarnationKey(pod, uid)]; i != nil && i.stands(p.in.now, p.in.maxSkew) {
		return i
	}
	return nil
}

// queueSets are sets of queues by incarnationKey.
type queueSets map[string]*queueSet

// of is the set of key, made empty when there is none.
func (s queueSets) of(key string) *queueSet {
	if s[key] == nil {
		s[key] = &queueSet{}
	}
	return s[key]
}

// revokedQueues are what the revocations in force take from each incarnation, by incarnationKey.
type revokedQueues struct {
	// pending are the queues of revocations not yet acknowledged: they stay with their incarnation.
	pending queueSets
	// fenced are the queues of fenced revocations: they no longer count as read by their incarnation.
	fenced queueSets
	// lapsed are the queues of revocations whose incarnation's promise ran out: they no longer count in
	// its claim.
	lapsed queueSets
}

// revocationOutcome is what becomes of a revocation its incarnation has not acknowledged.
type revocationOutcome int

const (
	// revocationPending: it still holds its queues back.
	revocationPending revocationOutcome = iota
	// revocationLapsed: the incarnation's promise ran out, so it has stopped reading them.
	revocationLapsed
	// revocationFenced: the incarnation kept renewing its Lease past the revoke timeout.
	revocationFenced
)

// settleRevocation says what becomes of r, which i (standing) has not acknowledged, at in.now, and the
// times at which that may change.
func settleRevocation(i *incarnation, r Revocation, in *handoffInput) (revocationOutcome, []time.Time) {
	if r.Lapsed && handoffMutation != "restart" {
		// An earlier pass, perhaps of an earlier operator, saw the promise run out: time only goes on.
		return revocationLapsed, nil
	}
	var wakeAt []time.Time
	if at, ok := promiseKept(i, r, in.publications, in.nodeViews); ok {
		if !in.now.Before(at) {
			return revocationLapsed, nil
		}
		wakeAt = append(wakeAt, at)
	}
	deadline := r.At.Add(in.revokeTimeout)
	switch {
	case in.now.Before(deadline):
		wakeAt = append(wakeAt, deadline)
	case i.aliveAt(deadline) || handoffMutation == "fence":
		// It kept renewing past the deadline without acknowledging: a stuck application. A member that
		// stopped renewing instead stops reading on its own once its Lease expires, so it is waited for.
		return revocationFenced, wakeAt
	default:
		wakeAt = append(wakeAt, in.now.Add(fencePoll))
	}
	if i.lease != nil {
		wakeAt = append(wakeAt, i.lease.Expiry(in.maxSkew))
	}
	return revocationPending, wakeAt
}

// settleRevocations is the first step: it settles the revocations of earlier passes and returns the queues
// of those that stand. A revocation whose incarnation's promise has run out is kept, unacknowledged, but
// holds nothing back: what it revoked no longer counts in that incarnation's claim (lapsed), and a recovery
// no longer makes it unknown. A fenced incarnation stays listed until it catches up with a later
// generation or goes.
func (p *handoffPass) settleRevocations() revokedQueues {
	revoked := revokedQueues{pending: queueSets{}, fenced: queueSets{}, lapsed: queueSets{}}
	var lapsed []Revocation
	for _, r := range p.state.Revocations {
		i := p.standing(r.Pod, r.UID)
		if i == nil || i.acked() >= r.Generation {
			continue
		}
		outcome, wakeAt := settleRevocation(i, r, &p.in)
		for _, t := range wakeAt {
			p.lookAgainAt(t)
		}
		switch outcome {
		case revocationLapsed:
			r.Lapsed = true
			lapsed = append(lapsed, r)
			if !r.All {
				revoked.lapsed.of(IncarnationKey(r.Pod, r.UID)).addGroups(r.Queues, p.in.scope)
			}
		case revocationFenced:
			p.res.fenced = append(p.res.fenced, r)
			fenced := r
			fenced.At = p.in.now
			p.res.state.Fenced = append(p.res.state.Fenced, fenced)
		case revocationPending:
			p.res.state.Revocations = append(p.res.state.Revocations, r)
		}
	}
	for _, f := range p.state.Fenced {
		if i := p.standing(f.Pod, f.UID); i != nil && i.acked() < f.Generation {
			p.res.state.Fenced = append(p.res.state.Fenced, f)
		}
	}
	p.revokedSets(p.res.state.Revocations, revoked.pending)
	p.revokedSets(p.res.state.Fenced, revoked.fenced)
	for _, r := range p.res.state.Revocations {
		if r.All {
			p.res.recovering++
		}
	}
	// Lapsed revocations stay in the bookkeeping until acknowledged, so that later passes, and a restarted
	// operator, still know what the incarnation was told.
	p.res.state.Revocations = append(p.res.state.Revocations, lapsed...)
	return revoked
}

// revokedSets adds the queues of revs to into, by incarnation.
func (p *handoffPass) revokedSets(revs []Revocation, into queueSets) {
	for _, r := range revs {
		set := into.of(IncarnationKey(r.Pod, r.UID))
		if r.All {
			set.all = true
		} else {
			set.addGroups(r.Queues, p.in.scope)
		}
	}
}

// keepReservations is the second step: with a restart grace, the queues of a departed member are kept,
// read by nobody, until it returns or the grace ends. It returns the member each reserved queue is kept
// for.
func (p *handoffPass) keepReservations() map[allocate.Queue]string {
	if p.in.restartGrace <= 0 || !p.in.trusted {
		return nil
	}
	isMember := make(map[string]bool, len(p.in.members))
	for _, m := range p.in.members {
		isMember[m.ID] = true
	}
	reserved := map[string]bool{}
	for _, r := range p.state.Reserved {
		if isMember[r.Member] || !p.in.now.Before(r.DepartedAt.Add(p.in.restartGrace)) {
			continue
		}
		reserved[r.Member] = true
		p.res.state.Reserved = append(p.res.state.Reserved, r)
		p.lookAgainAt(r.DepartedAt.Add(p.in.restartGrace))
	}
	for _, pod := range slices.Sorted(maps.Keys(p.in.published)) {
		e := p.in.published[pod]
		if isMember[e.Member] || reserved[e.Member] || len(e.Queues) == 0 {
			continue
		}
		reserved[e.Member] = true
		p.res.state.Reserved = append(p.res.state.Reserved, reservation{Member: e.Member, DepartedAt: p.in.now, Queues: protocol.Compact(e.Queues)})
		p.lookAgainAt(p.in.now.Add(p.in.restartGrace))
	}
	reservedFor := map[allocate.Queue]string{}
	for _, r := range p.res.state.Reserved {
		qs, _ := p.in.scope.Expand(r.Queues)
		for _, q := range qs.Queues {
			reservedFor[q] = r.Member
		}
	}
	return reservedFor
}

// reader is an incarnation that stands, as the handoff counts what it may be reading.
type reader struct {
	inc *incarnation
	key string
	// held is what the incarnation is known to hold (its claim, and what it was published), sorted: never
	// every queue, since an unreadable claim proves nothing about any one queue; that incarnation is
	// unknown instead.
	held            []allocate.Queue
	claimUnreadable bool
	// unknown is set when the operator cannot know what it reads: a recovery it has not acknowledged, or
	// a claim that cannot be read. fencedAll when everything it read was fenced.
	unknown, fencedAll bool
}

// holding is who holds a queue: how many readers, and one of them.
type holding struct{ first, count int32 }

// holdings are who may be reading what: the readers, numbered, and the readers of each queue.
type holdings struct {
	readers  []reader
	readerOf map[string]int32
	holders  map[allocate.Queue]holding
	// unknowns counts the readers that may hold any queue; unknownReader is one of them (unnamedReader
	// for a reader nobody can name).
	unknowns      int
	unknownReader int32
	revoked       revokedQueues
	// trusted is whether the bookkeeping was: only then are lapses known, so that a claim shows what its
	// incarnation may be reading beside another's.
	trusted bool
}

// unnamedReader stands for a reader nobody can name (handoffState.HoldUnclaimedUntil).
const unnamedReader = -2

// countHoldings is the third step: what each incarnation that stands may be reading (held: its claim, and
// what it was published), what it was published and has not acknowledged away (pending), and whether the
// operator cannot know (unknown). Fenced queues no longer count.
func (p *handoffPass) countHoldings(revoked revokedQueues) *holdings {
	queues := 0
	for _, qs := range p.in.target {
		queues += len(qs)
	}
	h := &holdings{readerOf: map[string]int32{}, holders: make(map[allocate.Queue]holding, queues), unknownReader: -1, revoked: revoked,
		trusted: p.in.trusted}
	if hold := p.unclaimedHeldUntil(); hold != nil {
		// A reader nobody can name may hold any queue: as one more unknown reader, never a member.
		h.unknowns, h.unknownReader = 1, unnamedReader
		p.lookAgainAt(*hold)
		p.res.state.HoldUnclaimedUntil = hold
	}
	for _, i := range p.in.incarnations {
		if i.stands(p.in.now, p.in.maxSkew) {
			h.add(p.readerOf(i, revoked))
		}
	}
	return h
}

// unclaimedHeldUntil is until when a queue nobody claims goes to nobody, in UTC; nil when it may go.
func (p *handoffPass) unclaimedHeldUntil() *time.Time {
	hold := p.state.HoldUnclaimedUntil
	if !p.in.trusted && p.in.now.Before(p.in.unseenUntil) {
		hold = &p.in.unseenUntil
	}
	// A hold an earlier operator recorded is for a pod that vanished before it started, earlier still
	// than this one: this operator's own bound holds for it too.
	if hold != nil && !p.in.unseenUntil.IsZero() && p.in.unseenUntil.Before(*hold) {
		hold = &p.in.unseenUntil
	}
	if hold == nil || !p.in.now.Before(*hold) {
		return nil
	}
	until := hold.UTC()
	return &until
}

// readerOf is what incarnation i may be reading.
func (p *handoffPass) readerOf(i *incarnation, revoked revokedQueues) reader {
	r := reader{inc: i, key: IncarnationKey(i.pod, i.uid)}
	var claim []allocate.Queue
	switch {
	case i.lease == nil || !i.lease.HasClaim:
	case i.lease.ClaimErr != nil:
		p.res.unreadableClaims = append(p.res.unreadableClaims, i.lease.Name)
		r.claimUnreadable, r.unknown = true, true
	default:
		claim = i.lease.Claim
		if l := revoked.lapsed[r.key]; l != nil {
			claim = slices.DeleteFunc(slices.Clone(claim), l.has)
		}
	}
	var entry []allocate.Queue
	if e, ok := p.in.published[i.pod]; p.in.trusted && ok && (types.UID(e.PodUID) == i.uid || e.PodUID == "" && i.exists) {
		entry = e.Queues
	}
	r.held = protocol.UnionQueues(claim, entry)
	fenced := revoked.fenced[r.key]
	r.fencedAll = fenced != nil && fenced.all
	r.unknown = !r.fencedAll && (r.unknown || !p.in.trusted && handoffMutation != "restart" || revoked.pending[r.key] != nil && revoked.pending[r.key].all)
	return r
}

// add numbers r and counts it as a holder of what it holds and of what it was given and has not yet
// acknowledged away, except what was fenced from it.
func (h *holdings) add(r reader) {
	idx := int32(len(h.readers))
	h.readers = append(h.readers, r)
	h.readerOf[r.key] = idx
	if r.fencedAll {
		return
	}
	if r.unknown {
		h.unknowns, h.unknownReader = h.unknowns+1, idx
	}
	fenced := h.revoked.fenced[r.key]
	for _, q := range r.held {
		h.hold(q, idx, fenced)
	}
	if pending := h.revoked.pending[r.key]; pending != nil && handoffMutation != "acknowledgement" {
		for q := range pending.queues {
			if _, held := slices.BinarySearchFunc(r.held, q, protocol.CompareCanonical); !held {
				h.hold(q, idx, fenced)
			}
		}
	}
}

// hold counts reader idx as a holder of q, unless q was fenced from it.
func (h *holdings) hold(q allocate.Queue, idx int32, fenced *queueSet) {
	if fenced.has(q) {
		return
	}
	held, ok := h.holders[q]
	if !ok {
		held.first = idx
	}
	held.count++
	h.holders[q] = held
}

// indexOf is the number of the reader of pod, uid; -1 when it is none.
func (h *holdings) indexOf(pod string, uid types.UID) int32 {
	if idx, ok := h.readerOf[IncarnationKey(pod, uid)]; ok {
		return idx
	}
	return -1
}

// blocked reports whether q must wait before it goes to reader self (-1: a member that reads nothing). A
// queue is blocked while another incarnation holds it, or, unless the member itself is known to hold it,
// while another one may hold anything: a queue someone claims cannot have been given to anyone else, since
// it was given only once its previous reader's claim let go of it. A claim that cannot be read shows
// nothing of the kind, for anyone. A member keeps what its own claim says it may be reading, whoever else
// claims it too: keeping the queue adds no reader, and taking it away would not stop the other claimant
// from reading it. Not a queue whose revocation lapsed: its application has stopped reading it, whatever
// the claim it could not write down still says (the lapse is kept in the bookkeeping, so that a
// restarted operator knows it too). Without trusted bookkeeping no lapse is known, so a claim another
// incarnation shares may be one its application stopped reading long ago: the queue goes to neither
// until the recovery shows which one reads it.
func (h *holdings) blocked(q allocate.Queue, self int32) bool {
	if self >= 0 {
		key := h.readers[self].key
		if claims(h.readers[self].inc, h.revoked.fenced[key], q) && !h.revoked.lapsed[key].has(q) &&
			(h.trusted || h.holders[q].count <= 1) {
			return false
		}
	}
	if held, ok := h.holders[q]; ok {
		return held.count > 1 || held.first != self
	}
	return h.unknowns > 1 || h.unknowns == 1 && h.unknownReader != self
}

// holdsBack says who keeps q from reader self (blocked), for the log.
func (h *holdings) holdsBack(q allocate.Queue, self int32) string {
	if held, ok := h.holders[q]; ok {
		r := h.readers[held.first]
		if held.first == self {
			return fmt.Sprintf("%d readers may hold it", held.count)
		}
		how := "claims or was given it"
		if h.revoked.pending[r.key].has(q) {
			how = "has not acknowledged its revocation"
		}
		return fmt.Sprintf("%s %s (%d readers)", r.inc.pod, how, held.count)
	}
	if h.unknownReader == unnamedReader {
		return "a reader nobody can name may hold any queue"
	}
	r := h.readers[h.unknownReader]
	why := "the bookkeeping cannot be trusted"
	switch {
	case r.claimUnreadable:
		why = "its claim cannot be read"
	case h.revoked.pending[r.key] != nil && h.revoked.pending[r.key].all:
		why = "it has not acknowledged a recovery"
	}
	return fmt.Sprintf("%s may hold any queue: %s (%d unknown readers)", r.inc.pod, why, h.unknowns)
}

// grant is the fourth step: each member gets what its target gives it and nobody else may be reading.
func (p *handoffPass) grant(held *holdings, reservedFor map[allocate.Queue]string) {
	for _, m := range p.in.members {
		self := held.indexOf(m.Pod, m.UID)
		var qs []allocate.Queue
		for _, q := range p.in.target[m.ID] {
			if r := reservedFor[q]; r != "" && r != m.ID {
				p.withhold(m, q, "reserved for departed member "+r)
				continue
			}
			if p.in.cooperative && held.blocked(q, self) {
				p.withhold(m, q, held.holdsBack(q, self))
				continue
			}
			qs = append(qs, q)
		}
		// In the order entries and claims list queues, once for every later use.
		slices.SortFunc(qs, protocol.CompareCanonical)
		p.res.entries[m.Pod] = qs
	}
}

// endReturnedRevocations is the fifth step: a queue given back to the incarnation an earlier revocation
// or fence took it from ends that revocation or fence for the queue. The incarnation now reads it by its
// entry, so nobody else gets it while it is given; and when it loses it again, revokeLost records a
// revocation of its own, whose lapse counts from its own publication. Left standing, the earlier one
// would let the queue go on the earlier clock, while the incarnation, which saw it given back, may read
// it until the later revocation's promise runs out (docs/protocol.md, rule 2).
func (p *handoffPass) endReturnedRevocations(held *holdings) {
	given := map[string][]allocate.Queue{}
	for _, m := range p.in.members {
		if qs := p.res.entries[m.Pod]; len(qs) > 0 {
			given[IncarnationKey(m.Pod, m.UID)] = qs
		}
	}
	if len(given) == 0 {
		return
	}
	end := func(revs []Revocation, sets queueSets) []Revocation {
		out := revs[:0]
		for _, r := range revs {
			key := IncarnationKey(r.Pod, r.UID)
			back := given[key]
			if r.All || len(back) == 0 {
				out = append(out, r)
				continue
			}
			qs, _ := p.in.scope.Expand(r.Queues)
			left := protocol.SubtractQueues(qs.Queues, back)
			if len(left) == len(qs.Queues) {
				out = append(out, r)
				continue
			}
			if set := sets[key]; set != nil {
				set.remove(back)
			}
			if len(left) > 0 {
				r.Queues = protocol.Compact(left)
				out = append(out, r)
			}
		}
		return out
	}
	p.res.state.Revocations = end(p.res.state.Revocations, held.revoked.pending)
	p.res.state.Fenced = end(p.res.state.Fenced, held.revoked.fenced)
	for key, back := range given {
		if set := held.revoked.lapsed[key]; set != nil {
			set.remove(back)
		}
	}
}

// withhold counts q, which the target gives to m, as withheld; the first one of a pass is described.
func (p *handoffPass) withhold(m Member, q allocate.Queue, why string) {
	if p.res.withheld == 0 {
		p.res.firstWithheld = fmt.Sprintf("%s for %s: %s", q, m.Pod, why)
	}
	p.res.withheld++
}

// revokeLost is the sixth step, in Cooperative mode: what incarnations that stand lose now is revoked, to
// be released by their acknowledgement. Without trusted bookkeeping every one of them is in a recovery
// until it acknowledges this generation.
func (p *handoffPass) revokeLost(held *holdings) {
	memberUID := make(map[string]types.UID, len(p.in.members))
	for _, m := range p.in.members {
		memberUID[m.Pod] = m.UID
	}
	for _, r := range held.readers {
		i := r.inc
		switch {
		case r.fencedAll:
			continue
		case !p.in.trusted && handoffMutation != "restart":
			p.revoke(Revocation{Pod: i.pod, UID: i.uid, At: p.in.now, All: true})
			p.res.recovering++
			continue
		case r.claimUnreadable:
			// Nothing is known of what it lost; it holds everything back until it writes its claim again.
			continue
		}
		isMember := memberUID[i.pod] == i.uid
		var kept []allocate.Queue
		if isMember {
			kept = p.res.entries[i.pod]
		}
		lost := lostQueues(r.held, kept, held.revoked.pending[r.key], held.revoked.fenced[r.key])
		if len(lost) == 0 {
			continue
		}
		if isMember {
			p.res.revokedFromMembers = append(p.res.revokedFromMembers, lost...)
		}
		p.revoke(Revocation{Pod: i.pod, UID: i.uid, At: p.in.now, Queues: protocol.Compact(lost)})
	}
}

// revoke records r, a revocation of this pass, which its incarnation has revokeTimeout to acknowledge.
func (p *handoffPass) revoke(r Revocation) {
	p.res.state.Revocations = append(p.res.state.Revocations, r)
	p.lookAgainAt(p.in.now.Add(p.in.revokeTimeout))
}

// lostQueues are the queues of held that kept leaves out and that no earlier revocation (pending) or
// fence (fenced) already took: what an incarnation loses now.
func lostQueues(held, kept []allocate.Queue, pending, fenced *queueSet) []allocate.Queue {
	var lost []allocate.Queue
	for _, q := range protocol.SubtractQueues(held, kept) {
		if !pending.has(q) && !fenced.has(q) {
			lost = append(lost, q)
		}
	}
	return lost
}
