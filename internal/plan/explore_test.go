package plan

import (
	"flag"
	"fmt"
	"strings"
	"testing"
	"time"
)

// The exhaustive explorer of the handoff rules (issue 43). It drives the pure decision step the reconciler
// calls, handoff, through every interleaving of a bounded world (explore_model_test.go) against an
// adversary, breadth first with each world hashed once, so the first violation found is a shortest
// counterexample. After every event it checks that no two incarnations may read one queue at that instant,
// by each member's own reading set and the times its stop timeouts run out; and, from every world where a
// member's node has just died and nothing else failed, that its queues reach a live member within the
// documented 20 s (docs/protocol.md, recovery within 20 s).

var (
	exploreDepth   = flag.Int("explore-depth", 4, "events in the longest interleaving TestExplore searches; 5 or more for a deep manual run (5 takes about a minute, 6 several)")
	exploreFaults  = flag.Int("explore-faults", 2, "faults (member and operator) the adversary may inject per interleaving")
	exploreMembers = flag.Int("explore-members", 3, "member pods in the explored world")
	exploreQueues  = flag.Int("explore-queues", 3, "queues in the explored world")
)

// exLatenessOff says whether the lateness rule (membershipEnds, docs/protocol.md rule 3) is turned off by
// the mutation test. membershipEnds lives in membership.go; the model applies the mutation where it calls it.
func exLatenessOff() bool { return handoffMutation == "lateness" }

// exSteps are the amounts time may advance by: within the stop timeout and the promise (1 s, 3 s), past the
// promise and its margin (7 s), past the revoke timeout and a member's lateness (30 s); two or three of
// them pass a Lease's expiry (65 s) and the node-lease bound (12 s).
var exSteps = []time.Duration{time.Second, 3 * time.Second, 7 * time.Second, 30 * time.Second}

// exEvent is one thing that may happen next.
type exEvent struct {
	// kind names what happens, so that a search may leave some kinds out (exAdversary.kinds).
	kind    exKind
	advance time.Duration
	fault   bool
	apply   func(w *exWorld) string // returns what happened, for the timeline
}

// exKind is a kind of event.
type exKind string

const (
	exKindTime       exKind = "time"        // time passes (advance says how much)
	exKindPass       exKind = "pass"        // the operator runs a pass
	exKindTarget     exKind = "target"      // the strategy's target moves a queue, and a pass runs
	exKindOpLands    exKind = "op-lands"    // the operator's slow write lands, known or not
	exKindRestart    exKind = "restart"     // the operator restarts with nothing in memory
	exKindEdit       exKind = "edit"        // someone edits the handoff bookkeeping
	exKindOpSlow     exKind = "op-slow"     // the operator's next write will be slow
	exKindObserve    exKind = "observe"     // a member reads the assignment and confirms its view
	exKindAck        exKind = "ack"         // a member's application acknowledges
	exKindAckSlow    exKind = "ack-slow"    // ... and the write is slow
	exKindLandsLate  exKind = "lands-late"  // a member's slow write lands
	exKindWritesFail exKind = "writes-fail" // a member's writes start failing
	exKindCutOff     exKind = "cut-off"     // a member is cut off from the API server
	exKindDie        exKind = "die"         // a member's node dies with it
	exKindReplace    exKind = "replace"     // a dead member comes back as a new incarnation
	exKindRaise      exKind = "raise"       // node mode: the operator's write of the node views' line returns
	exKindAgent      exKind = "agent"       // node mode: a member's node agent confirms its view
)

// exAdversary bounds what may happen in a search: how many faults an interleaving may hold, the amounts
// time may advance by, and, when kinds is not nil, only the kinds of event it lists. A search in a world
// narrowed to the events that matter to one rule reaches deeper than one over every event.
type exAdversary struct {
	faults int
	steps  []time.Duration
	kinds  map[exKind]bool
}

// exEverything is the adversary of TestExploreHandoff: every kind of event, exploreFaults faults.
func exEverything() exAdversary {
	return exAdversary{faults: *exploreFaults, steps: exSteps}
}

// allows reports whether the adversary lets an event of kind happen.
func (a exAdversary) allows(kind exKind) bool { return a.kinds == nil || a.kinds[kind] }

// events lists what may happen next in w, as adv allows.
func (w *exWorld) events(adv exAdversary) []exEvent {
	all := w.allEvents(adv)
	out := all[:0]
	for _, ev := range all {
		if adv.allows(ev.kind) {
			out = append(out, ev)
		}
	}
	return out
}

// allEvents lists everything that may happen next in w, with at most adv.faults faults in all.
func (w *exWorld) allEvents(adv exAdversary) []exEvent {
	var out []exEvent
	for _, d := range adv.steps {
		out = append(out, exEvent{kind: exKindTime, advance: d, apply: func(w *exWorld) string {
			w.advance(d)
			return fmt.Sprintf("%v pass", d)
		}})
	}
	faultsLeft := w.faults < adv.faults
	if w.op.flight == nil {
		out = append(out, exEvent{kind: exKindPass, apply: func(w *exWorld) string { return w.describePass(w.pass()) }})
		// The strategy's target changes: any queue to any member slot, one at a time, giving a queue
		// back to its last holder included.
		for q := range w.queues {
			for slot := range w.members {
				if int(w.op.target[q]) == slot {
					continue
				}
				out = append(out, exEvent{kind: exKindTarget, apply: func(w *exWorld) string {
					w.op.target[q] = int8(slot)
					return fmt.Sprintf("the strategy's target gives q%d to %s; ", q, exPod(slot)) + w.describePass(w.pass())
				}})
			}
		}
	} else {
		out = append(out,
			exEvent{kind: exKindOpLands, apply: func(w *exWorld) string {
				f := *w.op.flight
				w.op.flight = nil
				w.publish(f, true)
				return fmt.Sprintf("the operator's slow write of generation %d lands and returns", f.gen)
			}},
			exEvent{kind: exKindOpLands, apply: func(w *exWorld) string {
				f := *w.op.flight
				w.op.flight = nil
				w.publish(f, false)
				return fmt.Sprintf("the operator's slow write of generation %d lands; its response is lost (known at the next pass)", f.gen)
			}})
	}
	if faultsLeft {
		out = append(out,
			exEvent{kind: exKindRestart, fault: true, apply: func(w *exWorld) string {
				w.restartOperator()
				return "the operator restarts (a new leader): it remembers nothing"
			}},
			exEvent{kind: exKindEdit, fault: true, apply: func(w *exWorld) string {
				w.op.untrusted = true
				return "someone edits the handoff bookkeeping: the operator cannot trust what it published"
			}})
		if w.op.flight == nil && !w.op.slowNext {
			out = append(out, exEvent{kind: exKindOpSlow, fault: true, apply: func(w *exWorld) string { w.op.slowNext = true; return "the operator's next write will be slow" }})
		}
	}
	if w.nodeViews && (w.line < w.cm.gen || !w.op.lineKnown) {
		out = append(out, exEvent{kind: exKindRaise, apply: func(w *exWorld) string {
			w.raiseLine()
			return fmt.Sprintf("the operator raises the node views' line to generation %d", w.line)
		}})
	}
	for slot := range w.members {
		m := &w.members[slot]
		pod := exPod(slot)
		if w.nodeViews && m.promise && m.fault != exDead {
			out = append(out, exEvent{kind: exKindAgent, apply: func(w *exWorld) string {
				if w.agentConfirms(slot) {
					return fmt.Sprintf("member %s's node agent confirms its view of generation %d (the line asks for %d); it reads %s", pod, w.members[slot].viewGen, w.line, exShow(w.reading(slot)))
				}
				return fmt.Sprintf("member %s's node agent does not confirm its view of generation %d: the line asks for %d", pod, w.members[slot].viewGen, w.line)
			}})
		}
		if m.fault == exDead {
			if faultsLeft && m.lease.stated+exLeaseDuration+exMaxSkew <= 0 {
				out = append(out, exEvent{kind: exKindReplace, fault: true, apply: func(w *exWorld) string { return w.replace(slot) }})
			}
			continue
		}
		if m.fault != exCutOff {
			out = append(out, exEvent{kind: exKindObserve, apply: func(w *exWorld) string {
				w.observe(slot)
				m := &w.members[slot]
				return fmt.Sprintf("member %s reads generation %d (%s), confirms its view%s; reads %s", pod, m.viewGen, exShow(m.viewQ),
					map[bool]string{true: ", renews its Lease (claim " + exShow(m.lease.claim) + ")", false: ""}[m.fault == exHealthy && !m.flight],
					exShow(w.reading(slot)))
			}})
		}
		if m.inGen > m.acked {
			out = append(out, exEvent{kind: exKindAck, apply: func(w *exWorld) string {
				g := w.members[slot].inGen
				w.ack(slot, false)
				if w.members[slot].fault != exHealthy {
					return fmt.Sprintf("member %s's application acknowledges generation %d; the write fails", pod, g)
				}
				return fmt.Sprintf("member %s acknowledges generation %d: its Lease says acked %d, claim %s", pod, g, g, exShow(w.members[slot].lease.claim))
			}})
			if m.fault == exHealthy && !m.flight {
				out = append(out, exEvent{kind: exKindAckSlow, apply: func(w *exWorld) string {
					g := w.members[slot].inGen
					w.ack(slot, true)
					return fmt.Sprintf("member %s acknowledges generation %d; the write (claim %s) is slow: Ack returns after AckWait", pod, g, exShow(w.members[slot].fl.claim))
				}})
			}
		}
		if m.flight {
			out = append(out, exEvent{kind: exKindLandsLate, apply: func(w *exWorld) string {
				m := &w.members[slot]
				fl := m.fl
				m.flight = false
				w.land(slot, fl)
				w.evaluate(slot)
				return fmt.Sprintf("member %s's slow write lands late: acked %d, claim %s", pod, fl.acked, exShow(fl.claim))
			}})
		}
		if faultsLeft {
			if m.fault == exHealthy {
				out = append(out, exEvent{kind: exKindWritesFail, fault: true, apply: func(w *exWorld) string {
					w.members[slot].fault = exWritesFail
					return fmt.Sprintf("member %s's writes start failing; its reads pass", pod)
				}})
			}
			if m.fault < exCutOff {
				out = append(out, exEvent{kind: exKindCutOff, fault: true, apply: func(w *exWorld) string {
					w.members[slot].fault = exCutOff
					return fmt.Sprintf("member %s is cut off from the API server", pod)
				}})
			}
			out = append(out, exEvent{kind: exKindDie, fault: true, apply: func(w *exWorld) string {
				m := &w.members[slot]
				m.fault, m.nodeDead, m.nodeDiedAt = exDead, true, 0
				return fmt.Sprintf("member %s's node dies with it", pod)
			}})
		}
	}
	return out
}

// replace: a dead member's pod comes back as a new incarnation (new UID), which takes the Lease over once
// the old claim has expired by its clock, with an empty claim.
func (w *exWorld) replace(slot int) string {
	m := &w.members[slot]
	promise, n := m.promise, len(m.stopping)
	*m = exMember{uid: m.uid + 1, promise: promise, confirmed: exLongAgo, renewed: 0, stopping: make([]time.Duration, n)}
	for i := range m.stopping {
		m.stopping[i] = exLongAgo
	}
	w.land(slot, exWrite{sentAt: 0})
	return fmt.Sprintf("pod %s comes back as incarnation %s and takes its Lease over, claiming nothing", exPod(slot), exUID(slot, m.uid))
}

func (w *exWorld) describePass(o exPassOutcome) string {
	var parts []string
	for slot, q := range o.entries {
		parts = append(parts, fmt.Sprintf("%s %s", exPod(slot), exShow(q)))
	}
	verb := "keeps generation"
	if o.published {
		verb = "publishes generation"
	}
	s := fmt.Sprintf("the operator %s %d: %s", verb, o.gen, strings.Join(parts, ", "))
	if w.op.flight != nil {
		s += " (its write is slow)"
	}
	if n := len(w.cm.state.Revocations) + len(w.cm.state.Fenced); n > 0 && w.op.flight == nil {
		var rs []string
		for _, r := range w.cm.state.Revocations {
			rs = append(rs, fmt.Sprintf("%s %s at generation %d", r.Pod, exShow(exGroupsMask(w.scope(), r.Queues)), r.Generation))
		}
		for _, r := range w.cm.state.Fenced {
			rs = append(rs, fmt.Sprintf("%s %s fenced", r.Pod, exShow(exGroupsMask(w.scope(), r.Queues))))
		}
		s += "; revocations: " + strings.Join(rs, ", ")
	}
	return s
}

func exShow(mask uint8) string {
	var qs []string
	for q := range 8 {
		if mask&(1<<q) != 0 {
			qs = append(qs, fmt.Sprintf("q%d", q))
		}
	}
	return "{" + strings.Join(qs, ",") + "}"
}

// violation says which two members may read one queue now, or "". A queue fenced from one of them is
// the documented exception (docs/protocol.md, guarantee 2), once unjustifiedFence has passed it.
func (w *exWorld) violation() string {
	for a := range w.members {
		for b := a + 1; b < len(w.members); b++ {
			if both := w.reading(a) & w.reading(b) &^ w.justlyFenced(a) &^ w.justlyFenced(b); both != 0 {
				return fmt.Sprintf("members %s and %s may both read %s", exPod(a), exPod(b), exShow(both))
			}
		}
	}
	return ""
}

// justlyFenced are the queues fenced from member slot's incarnation while it kept renewing.
func (w *exWorld) justlyFenced(slot int) uint8 {
	var out uint8
	uid := exUID(slot, w.members[slot].uid)
	for _, r := range w.cm.state.Fenced {
		if r.Pod == exPod(slot) && r.UID == uid {
			out |= exGroupsMask(w.scope(), r.Queues)
		}
	}
	return out &^ w.members[slot].badFence
}

// noteUnjustifiedFences marks the queues of each revocation of before that the operator fenced in w
// although its member did not renew its Lease at or after the revocation's deadline: "A pod that stopped
// renewing is not fenced; it is waited for" (docs/protocol.md). Such a fence is no exception to guarantee
// 2: violation counts the queues it lets another read. The model has no clock skew, so a member renewed
// when it sent the write.
func (w *exWorld) noteUnjustifiedFences(before *exWorld) {
	for _, f := range w.cm.state.Fenced {
		for _, r := range before.cm.state.Revocations {
			if r.Pod != f.Pod || r.UID != f.UID || r.Generation != f.Generation {
				continue
			}
			slot := int(r.Pod[0] - 'a')
			if m := &w.members[slot]; exUID(slot, m.uid) == r.UID && m.lease.stated < r.At.Sub(exNow)+exRevokeTimeout {
				m.badFence |= exGroupsMask(w.scope(), f.Queues)
			}
		}
	}
}

// exNode is a world the search reached: its parent, the event that led to it and when.
type exNode struct {
	parent  int32
	event   string
	elapsed time.Duration
}

// exResult is what a search found.
type exResult struct {
	states, depth int
	// timeline is the shortest counterexample, empty when none was found; what says what it shows.
	timeline []exNode
	what     string
}

// explore searches every interleaving of at most depth events that adv allows from start, breadth first.
func explore(start *exWorld, adv exAdversary, depth int) exResult {
	seen := map[[16]byte]struct{}{start.key(): {}}
	nodes := []exNode{{parent: -1, event: "settled: " + start.describeReading()}}
	type item struct {
		w    *exWorld
		node int32
	}
	frontier := []item{{start, 0}}
	res := exResult{}
	path := func(n int32) []exNode {
		var out []exNode
		for ; n >= 0; n = nodes[n].parent {
			out = append([]exNode{nodes[n]}, out...)
		}
		return out
	}
	for level := 1; level <= depth && len(frontier) > 0; level++ {
		var next []item
		for _, it := range frontier {
			for _, ev := range it.w.events(adv) {
				w := it.w.clone()
				if ev.fault {
					w.faults++
				}
				before := nodes[it.node].elapsed + ev.advance
				what := ev.apply(w)
				w.canonicalize()
				k := w.key()
				if _, dup := seen[k]; dup {
					continue
				}
				seen[k] = struct{}{}
				nodes = append(nodes, exNode{parent: it.node, event: what, elapsed: before})
				n := int32(len(nodes) - 1)
				w.noteUnjustifiedFences(it.w)
				if v := w.violation(); v != "" {
					res.states, res.depth = len(seen), level
					res.timeline, res.what = path(n), v
					return res
				}
				if strings.Contains(what, "node dies") && w.faults == 1 && w.quiet() && w.deadPromised() {
					if tail, why := w.clone().recover(nodes[n].elapsed); why != "" {
						res.states, res.depth = len(seen), level
						res.timeline, res.what = append(path(n), tail...), why
						return res
					}
				}
				next = append(next, item{w, n})
			}
		}
		frontier = next
		res.depth = level
	}
	res.states = len(seen)
	return res
}

func (w *exWorld) describeReading() string {
	var parts []string
	for slot := range w.members {
		p := "promises to stop within 6 s"
		if !w.members[slot].promise {
			p = "makes no promise"
		}
		parts = append(parts, fmt.Sprintf("%s reads %s (%s)", exPod(slot), exShow(w.reading(slot)), p))
	}
	return strings.Join(parts, ", ")
}

// deadPromised is whether the dead member promised contact fencing: the 20 s bound is for those; the
// queues of one that made no promise wait for its Lease to expire (65 s).
func (w *exWorld) deadPromised() bool {
	for _, m := range w.members {
		if m.fault == exDead {
			return m.promise
		}
	}
	return false
}

// quiet is whether nothing but a death is going on: no write in flight, nothing untrusted, every other
// member healthy.
func (w *exWorld) quiet() bool {
	if w.op.flight != nil || w.op.untrusted || w.op.slowNext || w.op.lostResponse != 0 {
		return false
	}
	for _, m := range w.members {
		if m.flight || m.fault != exHealthy && m.fault != exDead {
			return false
		}
	}
	return true
}

// recover runs w, in which a member's node just died, with nothing else failing: a pass every second, the
// target giving the dead member's queues to a live one, every live member reading, claiming and
// acknowledging at once. It returns the timeline and what went wrong: a second reader, or the dead member's
// queues not read by a live member within exRecoveryBound.
func (w *exWorld) recover(at time.Duration) ([]exNode, string) {
	dead, lost := -1, uint8(0)
	for slot, m := range w.members {
		if m.fault == exDead {
			dead = slot
		}
	}
	for slot, m := range w.members {
		if slot == dead {
			lost = m.inQ | m.ackedQ | m.claimed
		}
	}
	live := -1
	for slot, m := range w.members {
		if m.fault == exHealthy && live < 0 {
			live = slot
		}
	}
	// The strategy moves the dead member's queues once it stops being a member (pass).
	_ = live
	var tail []exNode
	note := func(s string) { tail = append(tail, exNode{event: s, elapsed: at}) }
	for step := 0; step < 30; step++ {
		w.advance(time.Second)
		at += time.Second
		note(w.describePass(w.pass()))
		if w.nodeViews {
			w.raiseLine() // the pass writes the node views after the assignment
		}
		for slot := range w.members {
			if w.members[slot].fault != exHealthy {
				continue
			}
			w.observe(slot)
			if m := &w.members[slot]; m.inGen > m.acked {
				w.ack(slot, false)
			}
			note(fmt.Sprintf("member %s reads generation %d, acknowledges it; reads %s", exPod(slot), w.members[slot].viewGen, exShow(w.reading(slot))))
		}
		if v := w.violation(); v != "" {
			return tail, v
		}
		var read uint8
		for slot, m := range w.members {
			if m.fault == exHealthy {
				read |= w.reading(slot)
			}
		}
		if lost&^read == 0 {
			return nil, ""
		}
		if time.Duration(step+1)*time.Second > exRecoveryBound {
			return tail, fmt.Sprintf("the dead member %s's queues %s are not read by a live member %v after its node died", exPod(dead), exShow(lost&^read), exRecoveryBound)
		}
	}
	return tail, "no recovery"
}

// table prints a timeline.
func (r exResult) table() string {
	var b strings.Builder
	fmt.Fprintf(&b, "counterexample (%d events): %s\n| t (s) | event |\n| --- | --- |\n", len(r.timeline)-1, r.what)
	for _, n := range r.timeline {
		fmt.Fprintf(&b, "| %.1f | %s |\n", n.elapsed.Seconds(), n.event)
	}
	return b.String()
}

func TestExploreHandoff(t *testing.T) {
	start := exSettled(*exploreMembers, *exploreQueues)
	began := time.Now()
	res := explore(start, exEverything(), *exploreDepth)
	t.Logf("explored %d states, %d events deep (%d members, %d queues, %d faults) in %v",
		res.states, res.depth, *exploreMembers, *exploreQueues, *exploreFaults, time.Since(began).Round(time.Millisecond))
	if len(res.timeline) > 0 {
		t.Fatal(res.table())
	}
}

// TestExploreNodeViews searches the world of TestExploreHandoff with its members in node mode: besides
// their own reads, a node agent may confirm a member's view, stale or not, whenever it holds the
// generation the node views' line asks for, and the operator's write raising the line may return at any
// later moment. No queue has two readers, and a dead member's queues move on within 20 s.
func TestExploreNodeViews(t *testing.T) {
	began := time.Now()
	res := explore(exSettledNodeViews(*exploreMembers, *exploreQueues), exEverything(), *exploreDepth)
	t.Logf("explored %d states, %d events deep in %v", res.states, res.depth, time.Since(began).Round(time.Millisecond))
	if len(res.timeline) > 0 {
		t.Fatal(res.table())
	}
}
