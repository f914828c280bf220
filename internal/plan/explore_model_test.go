package plan

import (
	"encoding/binary"
	"fmt"
	"hash/fnv"
	"slices"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/types"

	"github.com/consumergroup-operator/consumergroup-operator/pkg/allocate"
	"github.com/consumergroup-operator/consumergroup-operator/pkg/protocol"
)

// The world the explorer (explore_test.go) searches: a few member pods, a few queues, the assignment
// ConfigMap and the members' Leases as the API server holds them, what the operator remembers, and each
// member as pkg/member runs it with its application. Every time in it is relative to now (exNow): time
// passing shifts them all back, and a time further back than exHorizon is as good as any older one, so a
// world that differs only in when it started encodes the same. Generations are renumbered densely after
// each event for the same reason: only their order counts.

// Times and bounds, the defaults of docs/protocol.md.
const (
	exStopTimeout    = protocol.DefaultStopTimeout                 // 2 s
	exContactTimeout = protocol.DefaultContactTimeout              // 4 s
	exPromise        = exContactTimeout + exStopTimeout            // 6 s, StopsWithin
	exLeaseDuration  = protocol.DefaultLeaseDuration               // 60 s
	exMaxSkew        = protocol.DefaultMaxClockSkew                // 5 s
	exStopAfter      = exLeaseDuration - exLeaseDuration/3         // 40 s, protocol.StopAfter
	exLastThird      = exLeaseDuration / 3                         // 20 s to stop after StopAfter without a promise
	exRevokeTimeout  = DefaultRevokeTimeout                        // 30 s
	exNodeLate       = 10*time.Second + 2*time.Second              // a kubelet's 10 s interval and a fifth
	exHorizon        = exLeaseDuration + exMaxSkew + 5*time.Second // 70 s: anything older is long ago
	exRecoveryBound  = 20 * time.Second                            // docs/protocol.md, recovery within 20 s
	exLongAgo        = -exHorizon
)

// exNow is now in every world.
var exNow = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// exFault is what the adversary did to a member incarnation. Faults only get worse.
type exFault uint8

const (
	exHealthy exFault = iota
	exWritesFail
	exCutOff
	exDead
)

// exLease is a member Lease as the API server holds it.
type exLease struct {
	held   bool
	uid    uint8
	acked  int64
	claim  uint8
	stated time.Duration // spec.renewTime, when its writer sent the write
}

// exWrite is a Lease write the member sent and the API server has not applied yet.
type exWrite struct {
	acked  int64
	claim  uint8
	sentAt time.Duration
}

// exMember is one member pod: its current incarnation as pkg/member runs it, with its application, and its
// Lease on the API server.
type exMember struct {
	uid     uint8 // the incarnation: pod UID <pod>-<uid>
	fault   exFault
	promise bool // the Lease promises contact fencing (StopsWithin); otherwise an older member
	// The member's view: the newest generation it read and its entry's queues in it.
	viewSeen bool
	viewGen  int64
	viewQ    uint8
	// confirmed is when it last confirmed its view (contact fencing); renewed when it sent the last Lease
	// write that succeeded (StopAfter).
	confirmed, renewed time.Duration
	// The assignment in force (handed to the application), the one pending its claim, the highest delivered.
	inGen          int64
	inQ            uint8
	pending        bool
	penGen         int64
	penQ           uint8
	hiGen          int64
	hiQ            uint8
	acked, written int64
	ackedQ         uint8
	// claimed is the claim of the member's last write that landed (Client.claimed).
	claimed uint8
	flight  bool
	fl      exWrite
	// stopping is, per queue, until when the application may still read it after it was taken away.
	stopping []time.Duration
	lease    exLease
	// nodeDiedAt is when the member's node stopped renewing its node Lease; nodeDead says it did.
	nodeDead   bool
	nodeDiedAt time.Duration
	// badFence are queues the operator fenced from this incarnation although it had stopped renewing.
	badFence uint8
}

// exSighting is what the operator saw of one member Lease (observe.Sightings).
type exSighting struct {
	known        bool
	stated       time.Duration
	seenAt       time.Duration
	afterTheFact bool
}

// exEntry is one pod's entry in the assignment ConfigMap.
type exEntry struct {
	has bool
	uid uint8
	q   uint8
}

// exConfigMap is the assignment as published.
type exConfigMap struct {
	gen     int64
	entries []exEntry
	state   HandoffState
}

// exOperator is what the operator remembers, in memory, and its write in flight.
type exOperator struct {
	pubs         Publications
	since        time.Duration
	firstWritten bool
	seen         []exSighting
	// untrusted: the bookkeeping was edited, so nothing published is trusted until published again.
	untrusted bool
	// slowNext makes the next write slow: it lands (and returns) at a later event.
	slowNext bool
	flight   *exConfigMap
	// lostResponse is a generation that landed while its write's response was lost: the operator learns it
	// was published when it reads it back, at its next pass.
	lostResponse int64
	// target is the strategy's last plan: for each queue, the member slot it goes to.
	target []int8
	// lineKnown says that the operator knows what the node views' line holds, since lineKnownAt (its
	// write of it returned): a restarted operator does not.
	lineKnown   bool
	lineKnownAt time.Duration
}

// exWorld is one state of the bounded world.
type exWorld struct {
	queues  int
	members []exMember
	cm      exConfigMap
	op      exOperator
	faults  int
	// nodeViews: the members are in node mode (docs/protocol.md): a node agent confirms a member's view,
	// whatever the member's own reads, when it holds line, the must-see generation of the group's line
	// in the node views (one line stands for every node's), which the operator raises.
	nodeViews bool
	line      int64
}

func exPod(slot int) string { return string(rune('a' + slot)) }

func exUID(slot int, uid uint8) types.UID { return types.UID(fmt.Sprintf("%s-%d", exPod(slot), uid)) }

func exAt(d time.Duration) time.Time { return exNow.Add(d) }

func exQueues(mask uint8) []allocate.Queue {
	var out []allocate.Queue
	for q := int32(0); q < 8; q++ {
		if mask&(1<<q) != 0 {
			out = append(out, allocate.Queue{Topic: "t", Broker: "b", ID: q})
		}
	}
	return out
}

func exMask(qs []allocate.Queue) uint8 {
	var m uint8
	for _, q := range qs {
		m |= 1 << q.ID
	}
	return m
}

func exGroupsMask(scope *protocol.Scope, groups []protocol.BrokerQueues) uint8 {
	qs, _ := scope.Expand(groups)
	return exMask(qs.Queues)
}

// exSettled is the world the search starts from: member i reads queue i (and the last member the rest),
// every generation acknowledged; every member but the last promises contact fencing, the last is an older
// member that does not, so that both rule sets are explored.
func exSettled(members, queues int) *exWorld {
	w := &exWorld{queues: queues}
	w.cm = exConfigMap{gen: 1, entries: make([]exEntry, members)}
	w.op = exOperator{since: exLongAgo, firstWritten: true, seen: make([]exSighting, members), target: make([]int8, queues)}
	w.op.pubs = w.op.pubs.Add(1, exAt(-10*time.Second))
	for slot := range members {
		var q uint8
		for i := range queues {
			if min(i, members-1) == slot {
				q |= 1 << i
				w.op.target[i] = int8(slot)
			}
		}
		m := exMember{uid: 1, promise: slot < members-1, viewSeen: true, viewGen: 1, viewQ: q, confirmed: 0, renewed: -time.Second,
			inGen: 1, inQ: q, hiGen: 1, hiQ: q, acked: 1, written: 1, ackedQ: q, claimed: q, stopping: make([]time.Duration, queues),
			lease: exLease{held: true, uid: 1, acked: 1, claim: q, stated: -time.Second}}
		for i := range m.stopping {
			m.stopping[i] = exLongAgo
		}
		w.members = append(w.members, m)
		w.cm.entries[slot] = exEntry{has: true, uid: 1, q: q}
		w.op.seen[slot] = exSighting{known: true, stated: -time.Second, seenAt: -time.Second}
	}
	return w
}

func cloneState(s HandoffState) HandoffState {
	s.Revocations = slices.Clone(s.Revocations)
	s.Fenced = slices.Clone(s.Fenced)
	s.Reserved = slices.Clone(s.Reserved)
	return s
}

// exSettledNodeViews is exSettled with the members in node mode, the node views' line at the generation
// in force, and the operator knowing it.
func exSettledNodeViews(members, queues int) *exWorld {
	w := exSettled(members, queues)
	w.nodeViews, w.line = true, w.cm.gen
	w.op.lineKnown, w.op.lineKnownAt = true, exLongAgo
	return w
}

func (w *exWorld) clone() *exWorld {
	c := *w
	c.members = slices.Clone(w.members)
	for i := range c.members {
		c.members[i].stopping = slices.Clone(w.members[i].stopping)
	}
	c.cm.entries = slices.Clone(w.cm.entries)
	c.cm.state = cloneState(w.cm.state)
	c.op.pubs = slices.Clone(w.op.pubs)
	c.op.seen = slices.Clone(w.op.seen)
	c.op.target = slices.Clone(w.op.target)
	if w.op.flight != nil {
		f := *w.op.flight
		f.entries = slices.Clone(f.entries)
		f.state = cloneState(f.state)
		c.op.flight = &f
	}
	return &c
}

// reading is what member slot's application may be reading now: what is in force, and what it was told to
// stop and may still read until its stop timeout runs out.
func (w *exWorld) reading(slot int) uint8 {
	m := &w.members[slot]
	if m.fault == exDead {
		return 0
	}
	r := m.inQ
	for q, until := range m.stopping {
		if until > 0 {
			r |= 1 << q
		}
	}
	return r
}

// scope is the group's queues.
func (w *exWorld) scope() *protocol.Scope {
	s := protocol.NewScope()
	s.Add("t", "b", int32(w.queues))
	return s
}

// --- the member, as pkg/member runs it ---

// fresh is whether the member may act on its view now (member observation.fresh): its Lease is held and
// was renewed within StopAfter, and, with contact fencing, it confirmed its view within the contact
// timeout.
func (m *exMember) fresh() bool {
	if m.fault == exDead || !m.lease.held || m.lease.uid != m.uid || -m.renewed >= exStopAfter {
		return false
	}
	return !m.promise || -m.confirmed < exContactTimeout
}

// stopBy is how long the application has to stop what it is handed away at a moment: the stop timeout, or,
// for a member without a promise handed generation 0 because its Lease went stale, the last third of the
// lease duration.
func (m *exMember) stopBy(generationZero bool) time.Duration {
	if generationZero && !m.promise {
		return exLastThird
	}
	return exStopTimeout
}

// deliver hands the application (gen, q), as Client.deliverLocked: it stops what it no longer has within
// its time, and starts what it gains at once (the worst case).
func (m *exMember) deliver(gen int64, q uint8, at time.Duration) {
	for i := range m.stopping {
		if m.inQ&^q&(1<<i) != 0 {
			m.stopping[i] = max(m.stopping[i], at+m.stopBy(gen == 0))
		}
	}
	m.inGen, m.inQ = gen, q
	if gen > 0 {
		m.hiGen, m.hiQ = gen, q
	}
}

// record is what the Lease must say now (Client.record).
func (m *exMember) record() exWrite {
	claim := m.ackedQ | m.inQ
	if m.pending {
		claim |= m.penQ
	}
	return exWrite{acked: m.acked, claim: claim}
}

// evaluate is pkg/member's decide on an observed event, at now (0).
func (w *exWorld) evaluate(slot int) {
	m := &w.members[slot]
	if m.fault == exDead {
		return
	}
	if !m.fresh() {
		if m.inGen != 0 || m.inQ != 0 {
			m.deliver(0, 0, 0)
		}
		m.pending = false
		return
	}
	if !m.viewSeen {
		return
	}
	gen, q := m.viewGen, m.viewQ
	if !(gen > m.hiGen || gen == m.hiGen && q == m.hiQ) {
		return // an older copy, or other queues under the same generation: not acted on
	}
	switch {
	case gen == m.inGen && q == m.inQ:
		m.pending = false
	case q&^m.claimed != 0:
		// Claim first; deliver once the Lease says so.
		m.pending, m.penGen, m.penQ = true, gen, q
		if m.fault == exHealthy && !m.flight {
			w.land(slot, m.record())
			w.evaluate(slot)
		}
	default:
		m.pending = false
		m.deliver(gen, q, 0)
	}
}

// land applies a write of member slot to its Lease at now (0): the keeper's write returned.
func (w *exWorld) land(slot int, wr exWrite) {
	m := &w.members[slot]
	m.lease = exLease{held: true, uid: m.uid, acked: wr.acked, claim: wr.claim, stated: wr.sentAt}
	m.claimed, m.written = wr.claim, wr.acked
	m.renewed = max(m.renewed, wr.sentAt)
	// The operator's watch sees the new renewTime now (observe.Sightings.Saw).
	s := &w.op.seen[slot]
	switch {
	case !s.known:
		*s = exSighting{known: true, stated: wr.sentAt, seenAt: 0, afterTheFact: true}
	case s.stated != wr.sentAt:
		*s = exSighting{known: true, stated: wr.sentAt, seenAt: 0}
	}
}

// observe: the member reads the assignment and confirms its view, renews its Lease when its writes pass,
// and decides.
func (w *exWorld) observe(slot int) {
	m := &w.members[slot]
	e := w.cm.entries[slot]
	m.viewSeen, m.viewGen, m.viewQ = true, w.cm.gen, 0
	if e.has && e.uid == m.uid {
		m.viewQ = e.q
	}
	m.confirmed = 0
	if m.fault == exHealthy && !m.flight {
		w.land(slot, m.record())
	}
	w.evaluate(slot)
}

// knownNodeViews is what the operator knows of the node views' line.
func (w *exWorld) knownNodeViews() NodeViews {
	if !w.nodeViews {
		return NodeViews{}
	}
	var h LineHistory
	if w.op.lineKnown {
		h = h.Add(exAt(w.op.lineKnownAt), w.line)
	}
	return NodeViews{Enabled: true, Lines: map[string]LineHistory{"node": h}}
}

// raiseLine: the operator's write of the group's line in the node views returns, raised to the
// generation published (controllers.nodeViews.sync); it knows the line from now. A line it knows asks
// for that generation already is not written.
func (w *exWorld) raiseLine() {
	if w.op.lineKnown && w.line >= w.cm.gen {
		return
	}
	w.line = max(w.line, w.cm.gen)
	w.op.lineKnown, w.op.lineKnownAt = true, 0
}

// agentConfirms: the node agent's read of the node view, sent after member slot asked, confirms the
// view the member holds, without the member reading anything itself: when it holds the line's
// generation. A member cut off from the API server still reaches the agent on its node.
func (w *exWorld) agentConfirms(slot int) bool {
	m := &w.members[slot]
	if !m.viewSeen || m.viewGen < w.line {
		return false
	}
	m.confirmed = 0
	w.evaluate(slot)
	return true
}

// ack: the application acknowledges the generation in force, having stopped what it no longer lists
// (Client.Ack). late leaves the write in flight: Ack returns after AckWait and the write lands later.
func (w *exWorld) ack(slot int, late bool) {
	m := &w.members[slot]
	for i := range m.stopping {
		m.stopping[i] = exLongAgo
	}
	m.acked, m.ackedQ = m.inGen, m.inQ
	switch {
	case m.fault != exHealthy || m.flight:
		// Kept, and written with a later write.
	case late:
		m.flight, m.fl = true, m.record()
	default:
		w.land(slot, m.record())
	}
}

// advance lets d pass: members that stop being fresh meanwhile hand their application generation 0 at that
// moment; then every time shifts back by d.
func (w *exWorld) advance(d time.Duration) {
	for slot := range w.members {
		m := &w.members[slot]
		if m.fault == exDead || m.inGen == 0 && m.inQ == 0 && !m.pending {
			continue
		}
		end := m.renewed + exStopAfter
		zeroBecauseStale := true
		if m.promise && m.confirmed+exContactTimeout < end {
			end, zeroBecauseStale = m.confirmed+exContactTimeout, false
		}
		if end <= d {
			end = max(end, 0)
			for i := range m.stopping {
				if m.inQ&(1<<i) != 0 {
					stop := exStopTimeout
					if zeroBecauseStale && !m.promise {
						stop = exLastThird
					}
					m.stopping[i] = max(m.stopping[i], end+stop)
				}
			}
			m.inGen, m.inQ, m.pending = 0, 0, false
		}
	}
	shift := func(t time.Duration) time.Duration { return max(t-d, exLongAgo) }
	shiftAt := func(t time.Time) time.Time { return exAt(shift(t.Sub(exNow))) }
	for slot := range w.members {
		m := &w.members[slot]
		m.confirmed, m.renewed, m.fl.sentAt = shift(m.confirmed), shift(m.renewed), shift(m.fl.sentAt)
		m.lease.stated, m.nodeDiedAt = shift(m.lease.stated), shift(m.nodeDiedAt)
		for i := range m.stopping {
			m.stopping[i] = shift(m.stopping[i])
		}
		s := &w.op.seen[slot]
		s.stated, s.seenAt = shift(s.stated), shift(s.seenAt)
	}
	w.op.since = shift(w.op.since)
	w.op.lineKnownAt = shift(w.op.lineKnownAt)
	for i := range w.op.pubs {
		w.op.pubs[i].knownAt = shiftAt(w.op.pubs[i].knownAt)
	}
	shiftState := func(s *HandoffState) {
		for i := range s.Revocations {
			s.Revocations[i].At = shiftAt(s.Revocations[i].At)
		}
		for i := range s.Fenced {
			s.Fenced[i].At = shiftAt(s.Fenced[i].At)
		}
		if s.HoldUnclaimedUntil != nil {
			t := shiftAt(*s.HoldUnclaimedUntil)
			s.HoldUnclaimedUntil = &t
		}
	}
	shiftState(&w.cm.state)
	if w.op.flight != nil {
		shiftState(&w.op.flight.state)
	}
}

// --- the operator ---

// leaseState is member slot's Lease as the operator counts it: renewals timed on its own clock
// (observe.Sightings), the renewal seen after the fact counting for lateness from its stated time plus the
// skew bound (renewedBy).
func (w *exWorld) leaseState(slot int) *protocol.LeaseState {
	m := &w.members[slot]
	s := w.op.seen[slot]
	if !s.known {
		// Its first read, at this pass.
		s = exSighting{known: true, stated: m.lease.stated, seenAt: 0, afterTheFact: true}
		w.op.seen[slot] = s
	}
	l := &protocol.LeaseState{Name: "g." + exPod(slot), Pod: exPod(slot), PodUID: exUID(slot, m.lease.uid), Member: exPod(slot),
		AckedGeneration: m.lease.acked, RenewTime: exAt(s.seenAt), Duration: exLeaseDuration,
		RenewedBy: RenewedBy(exAt(s.stated), exAt(s.seenAt), s.afterTheFact, exMaxSkew),
		HasClaim:  true, Claim: exQueues(m.lease.claim)}
	if m.promise {
		l.StopsWithin = exPromise
	}
	return l
}

// membership is who the operator counts as members now (membersFor with kubeletSignals), and every
// incarnation that may be reading (indexIncarnations).
func (w *exWorld) membership() ([]Member, []*incarnation) {
	var members []Member
	var incs []*incarnation
	known := map[string]bool{}
	for slot := range w.members {
		m := &w.members[slot]
		if !m.lease.held {
			continue
		}
		l := w.leaseState(slot)
		i := &incarnation{pod: exPod(slot), uid: l.PodUID, lease: l, exists: m.lease.uid == m.uid}
		incs = append(incs, i)
		known[IncarnationKey(i.pod, i.uid)] = true
		if m.lease.uid != m.uid {
			continue // an earlier pod's Lease: the new pod is no member until it takes the Lease over
		}
		var nodeLate time.Time
		if m.nodeDead {
			// The node Lease as the operator saw it: its last renewal, after the fact when it saw it only
			// once it started.
			seenAt := max(m.nodeDiedAt, w.op.since)
			nodeLate = RenewedBy(exAt(m.nodeDiedAt), exAt(seenAt), seenAt > m.nodeDiedAt, exMaxSkew).Add(exNodeLate)
		}
		end := membershipEnds(l, nodeLate, time.Time{})
		if exLatenessOff() {
			end = l.RenewedBy.Add(l.Duration)
		}
		if exNow.Before(end) {
			members = append(members, Member{Member: allocate.Member{ID: exPod(slot), Weight: 1}, Pod: exPod(slot), UID: l.PodUID})
		}
	}
	for slot := range w.members {
		m := &w.members[slot]
		if k := IncarnationKey(exPod(slot), exUID(slot, m.uid)); !known[k] {
			known[k] = true
			incs = append(incs, &incarnation{pod: exPod(slot), uid: exUID(slot, m.uid), exists: true})
		}
	}
	unseenUntil := exAt(w.op.since + exLeaseDuration + exMaxSkew)
	unseen := func(pod string, uid types.UID) {
		if k := IncarnationKey(pod, uid); !known[k] {
			known[k] = true
			incs = append(incs, &incarnation{pod: pod, uid: uid, unseenUntil: unseenUntil})
		}
	}
	for slot, e := range w.cm.entries {
		if e.has {
			unseen(exPod(slot), exUID(slot, e.uid))
		}
	}
	for _, r := range append(slices.Clone(w.cm.state.Revocations), w.cm.state.Fenced...) {
		unseen(r.Pod, r.UID)
	}
	slices.SortFunc(incs, func(a, b *incarnation) int {
		return strings.Compare(IncarnationKey(a.pod, a.uid), IncarnationKey(b.pod, b.uid))
	})
	return members, incs
}

// exPassOutcome is what a pass decided, for the timeline.
type exPassOutcome struct {
	gen       int64
	published bool
	entries   []uint8
}

// pass is one pass of the reconciler around handoff: read back what is published, count the members and
// incarnations, run the handoff on the target, stamp its new revocations with the generation it publishes
// (decide.planHandoff) and write it, at once or slowly.
func (w *exWorld) pass() exPassOutcome {
	if g := w.op.lostResponse; g > 0 {
		w.op.pubs, w.op.lostResponse = w.op.pubs.Add(g, exNow), 0
	}
	if !w.op.untrusted {
		w.op.pubs = w.op.pubs.Add(w.cm.gen, exNow) // read back matching its digests
	}
	members, incs := w.membership()
	target := allocate.Plan{}
	for _, m := range members {
		target[m.ID] = nil
	}
	if len(members) > 0 {
		for q, slot := range w.op.target {
			id := exPod(int(slot))
			if _, ok := target[id]; !ok {
				id = members[0].ID // the strategy gives a departed member's queues to a member
			}
			target[id] = append(target[id], allocate.Queue{Topic: "t", Broker: "b", ID: int32(q)})
		}
	}
	published := map[string]protocol.PublishedEntry{}
	for slot, e := range w.cm.entries {
		if e.has {
			published[exPod(slot)] = protocol.PublishedEntry{Entry: protocol.Entry{Member: exPod(slot), PodUID: string(exUID(slot, e.uid)), Generation: w.cm.gen}, Queues: exQueues(e.q)}
		}
	}
	res := handoff(handoffInput{
		cooperative: true, revokeTimeout: exRevokeTimeout, maxSkew: exMaxSkew, now: exNow,
		members: members, target: target, published: published, state: cloneState(w.cm.state),
		trusted: !w.op.untrusted, incarnations: incs, scope: w.scope(), publications: slices.Clone(w.op.pubs),
		unseenUntil: exAt(w.op.since + exLeaseDuration + exMaxSkew), nodeViews: w.knownNodeViews(),
	})
	next := exConfigMap{gen: w.cm.gen, entries: make([]exEntry, len(w.members)), state: res.state}
	same := !w.op.untrusted
	isMember := map[string]bool{}
	for _, m := range members {
		isMember[m.Pod] = true
	}
	for slot := range w.members {
		pod := exPod(slot)
		if !isMember[pod] {
			same = same && !w.cm.entries[slot].has
			continue
		}
		e := exEntry{has: true, uid: w.members[slot].lease.uid, q: exMask(res.entries[pod])}
		next.entries[slot] = e
		same = same && w.cm.entries[slot] == e
	}
	if !same {
		next.gen = w.maxGeneration() + 1
	}
	for i := range next.state.Revocations {
		if next.state.Revocations[i].Generation == 0 {
			next.state.Revocations[i].Generation = next.gen
		}
	}
	sortState(&next.state)
	out := exPassOutcome{gen: next.gen, published: !same, entries: make([]uint8, len(w.members))}
	for slot, e := range next.entries {
		out.entries[slot] = e.q
	}
	if w.op.slowNext {
		w.op.slowNext, w.op.flight = false, &next
		return out
	}
	w.publish(next, true)
	return out
}

// publish puts cm on the API server; known says whether the operator learns it now (its write returned).
func (w *exWorld) publish(cm exConfigMap, known bool) {
	w.cm = cm
	w.op.untrusted = false
	if known {
		w.op.pubs = w.op.pubs.Add(cm.gen, exNow)
	} else {
		w.op.lostResponse = cm.gen
	}
}

// maxGeneration is the highest generation the world knows of.
func (w *exWorld) maxGeneration() int64 {
	g := w.cm.gen
	for _, m := range w.members {
		g = max(g, m.lease.acked, m.hiGen, m.viewGen)
	}
	if w.op.flight != nil {
		g = max(g, w.op.flight.gen)
	}
	return g
}

// restartOperator: a new operator process (or leader) with nothing in memory.
func (w *exWorld) restartOperator() {
	w.op.pubs, w.op.since, w.op.firstWritten, w.op.lostResponse, w.op.lineKnown = nil, 0, false, 0, false
	for i := range w.op.seen {
		w.op.seen[i] = exSighting{}
	}
}

// --- canonical form ---

// canonicalize renumbers the generations densely, keeping their order, so that worlds that differ only in
// how many generations went by encode the same.
func (w *exWorld) canonicalize() {
	var gens []int64
	note := func(g int64) { gens = append(gens, g) }
	each := func(f func(*int64)) {
		f(&w.cm.gen)
		for i := range w.cm.state.Revocations {
			f(&w.cm.state.Revocations[i].Generation)
		}
		for i := range w.cm.state.Fenced {
			f(&w.cm.state.Fenced[i].Generation)
		}
		if w.op.flight != nil {
			f(&w.op.flight.gen)
			for i := range w.op.flight.state.Revocations {
				f(&w.op.flight.state.Revocations[i].Generation)
			}
			for i := range w.op.flight.state.Fenced {
				f(&w.op.flight.state.Fenced[i].Generation)
			}
		}
		for i := range w.op.pubs {
			f(&w.op.pubs[i].generation)
		}
		f(&w.op.lostResponse)
		f(&w.line)
		for i := range w.members {
			m := &w.members[i]
			for _, p := range []*int64{&m.viewGen, &m.inGen, &m.penGen, &m.hiGen, &m.acked, &m.written, &m.fl.acked, &m.lease.acked} {
				f(p)
			}
		}
	}
	each(func(g *int64) { note(*g) })
	slices.Sort(gens)
	gens = slices.Compact(gens)
	rank := make(map[int64]int64, len(gens))
	n := int64(0)
	for _, g := range gens {
		if g > 0 {
			n++
		}
		rank[g] = n
	}
	each(func(g *int64) { *g = rank[*g] })
	// Publications older than the horizon say the same as the oldest kept: drop the ones before it.
	for len(w.op.pubs) > 1 && w.op.pubs[1].knownAt.Sub(exNow) <= exLongAgo {
		w.op.pubs = w.op.pubs[1:]
	}
}

// key is the canonical encoding of the world, hashed.
func (w *exWorld) key() [16]byte {
	var b []byte
	i64 := func(v int64) { b = binary.AppendVarint(b, v) }
	d := func(t time.Duration) { i64(int64(t / time.Millisecond)) }
	at := func(t time.Time) { d(t.Sub(exNow)) }
	bit := func(v bool) {
		if v {
			b = append(b, 1)
		} else {
			b = append(b, 0)
		}
	}
	scope := w.scope()
	revs := func(rs []Revocation) {
		i64(int64(len(rs)))
		for _, r := range rs {
			b = append(b, r.Pod...)
			b = append(b, r.UID...)
			i64(r.Generation)
			at(r.At)
			bit(r.All)
			b = append(b, exGroupsMask(scope, r.Queues))
		}
	}
	cm := func(c *exConfigMap) {
		i64(c.gen)
		for _, e := range c.entries {
			bit(e.has)
			b = append(b, e.uid, e.q)
		}
		revs(c.state.Revocations)
		revs(c.state.Fenced)
		bit(c.state.HoldUnclaimedUntil != nil)
		if c.state.HoldUnclaimedUntil != nil {
			at(*c.state.HoldUnclaimedUntil)
		}
	}
	cm(&w.cm)
	bit(w.op.flight != nil)
	if w.op.flight != nil {
		cm(w.op.flight)
	}
	i64(int64(len(w.op.pubs)))
	for _, p := range w.op.pubs {
		i64(p.generation)
		at(p.knownAt)
	}
	d(w.op.since)
	bit(w.op.firstWritten)
	bit(w.op.untrusted)
	bit(w.op.slowNext)
	i64(w.op.lostResponse)
	for _, t := range w.op.target {
		b = append(b, byte(t))
	}
	for _, s := range w.op.seen {
		bit(s.known)
		d(s.stated)
		d(s.seenAt)
		bit(s.afterTheFact)
	}
	for _, m := range w.members {
		b = append(b, m.uid, byte(m.fault))
		bit(m.promise)
		bit(m.viewSeen)
		i64(m.viewGen)
		b = append(b, m.viewQ)
		d(m.confirmed)
		d(m.renewed)
		i64(m.inGen)
		b = append(b, m.inQ)
		bit(m.pending)
		i64(m.penGen)
		b = append(b, m.penQ)
		i64(m.hiGen)
		b = append(b, m.hiQ)
		i64(m.acked)
		i64(m.written)
		b = append(b, m.ackedQ, m.claimed)
		bit(m.flight)
		i64(m.fl.acked)
		b = append(b, m.fl.claim)
		d(m.fl.sentAt)
		for _, s := range m.stopping {
			d(max(s, 0))
		}
		bit(m.lease.held)
		b = append(b, m.lease.uid)
		i64(m.lease.acked)
		b = append(b, m.lease.claim)
		d(m.lease.stated)
		bit(m.nodeDead)
		d(m.nodeDiedAt)
		b = append(b, m.badFence)
	}
	i64(int64(w.faults))
	bit(w.nodeViews)
	i64(w.line)
	bit(w.op.lineKnown)
	d(w.op.lineKnownAt)
	h := fnv.New128a()
	h.Write(b)
	var k [16]byte
	h.Sum(k[:0])
	return k
}
