package plan

import (
	"math"
	"time"

	"k8s.io/apimachinery/pkg/types"
)

// NoLine stands, in a LineHistory, for a node view without the group's line (or that cannot be read):
// the node agent confirms nothing for the group's members on that node, which is as good as any
// generation.
const NoLine int64 = math.MaxInt64

// lineSighting is one thing this operator knows of a group's line in a node view: from at on, until the
// next sighting, it held mustSee (NoLine for none).
type lineSighting struct {
	at      time.Time
	mustSee int64
}

// LineHistory is what this operator knows of one group's line in one node view, oldest first: its own
// writes of the line, from when each returned, and its live reads of it, from when each was sent. Only
// the operator writes node views, so a line holds what the last of them showed.
type LineHistory []lineSighting

// maxLineSightings bounds a history. Forgetting the oldest sightings makes a line known later, never
// sooner.
const maxLineSightings = 8

// Add records that the line held mustSee from at on. A sighting older than the last one known adds
// nothing, and neither does one of what the last one showed: the line held that from the last one's
// time already, which is what KnownSince answers, and a line written again unchanged takes no more room.
func (h LineHistory) Add(at time.Time, mustSee int64) LineHistory {
	if n := len(h); n > 0 && (at.Before(h[n-1].at) || h[n-1].mustSee == mustSee) {
		return h
	}
	h = append(h, lineSighting{at: at, mustSee: mustSee})
	if len(h) > maxLineSightings {
		h = h[len(h)-maxLineSightings:]
	}
	return h
}

// Last is the last sighting's must-see generation; false when there is none.
func (h LineHistory) Last() (int64, bool) {
	if len(h) == 0 {
		return 0, false
	}
	return h[len(h)-1].mustSee, true
}

// KnownSince is from when on the line is known to have asked for generation or a later one, or not to
// exist: from then, the node agent confirms only a member whose view holds generation. False while it
// asks for less, or nothing is known of it.
func (h LineHistory) KnownSince(generation int64) (time.Time, bool) {
	k := len(h)
	for k > 0 && h[k-1].mustSee >= generation {
		k--
	}
	if k == len(h) {
		return time.Time{}, false
	}
	return h[k].at, true
}

// NodeViews is what this operator knows of a group's lines in the node views, by node: every node view
// the cache shows with a line for the group, and every one this operator wrote the line of.
type NodeViews struct {
	// Enabled is set when the operator keeps node views: a member's promise then counts only from when
	// every line of its group asks for the generation that revoked its queues.
	Enabled bool
	Lines   map[string]LineHistory
}

// KnownSince is from when on the group's line in node's view is known to ask for generation or more
// (LineHistory.KnownSince): a member on node that its agent confirms after then holds generation in its
// view. A node without a line, as far as this operator knows, confirms nothing. For a member whose node
// is not known (""), every line counts. Without node views, any time will do. False while a line asks
// for less or is not known.
func (nv NodeViews) KnownSince(node string, generation int64) (time.Time, bool) {
	var since time.Time
	if !nv.Enabled {
		return since, true
	}
	for n, h := range nv.Lines {
		if node != "" && n != node {
			continue
		}
		at, ok := h.KnownSince(generation)
		if !ok {
			return time.Time{}, false
		}
		if at.After(since) {
			since = at
		}
	}
	return since, true
}

// LinesMustSee says what generation the group's lines in the node views must ask for before every promise
// the operator may count on counts (promiseKept, unseenDeadline): Everywhere, on every node, and ByNode,
// on the nodes named, more. 0 when nothing waits on a promise.
type LinesMustSee struct {
	Everywhere int64
	ByNode     map[string]int64
}

// On is what node's line must ask for.
func (m LinesMustSee) On(node string) int64 { return max(m.Everywhere, m.ByNode[node]) }

// NodeLinesMustSee is what the group's lines must ask for: on the node of each incarnation with a
// revocation that has not lapsed, that revocation's generation, and on every node for one whose node
// is unknown (nodeOf says "": its pod is gone); and everywhere the generation of this operator's first
// write, which gave nothing to a pod it never saw.
func NodeLinesMustSee(bookkeeping HandoffState, firstWrittenGeneration int64, nodeOf func(pod string, uid types.UID) string) LinesMustSee {
	need := LinesMustSee{Everywhere: firstWrittenGeneration, ByNode: map[string]int64{}}
	for _, r := range bookkeeping.Revocations {
		if r.Lapsed {
			continue
		}
		if node := nodeOf(r.Pod, r.UID); node != "" {
			need.ByNode[node] = max(need.ByNode[node], r.Generation)
		} else {
			need.Everywhere = max(need.Everywhere, r.Generation)
		}
	}
	return need
}

// NodeOf is the node the pod incarnation pod, uid runs on, "" when its pod is gone or not scheduled.
func (obs *Observation) NodeOf(pod string, uid types.UID) string {
	if live := obs.PodsByName[pod]; live != nil && live.UID == uid {
		return live.Spec.NodeName
	}
	return ""
}
