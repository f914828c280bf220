package plan

import (
	"cmp"
	"slices"
	"time"
)

// publication is a generation of a group's assignment and when this operator first knew that the API
// server held it whole: its own write of it returned, or it read it back matching its digests.
type publication struct {
	generation int64
	knownAt    time.Time
}

// Publications are a group's publications, by generation, the most recent maxPublications of them.
type Publications []publication

// maxPublications bounds what an operator remembers of a group's publications. An older generation
// counts as known from the oldest remembered, which is later: a member's promise then runs from later.
const maxPublications = 64

// Add records that generation was known to be published at now.
func (ps Publications) Add(generation int64, now time.Time) Publications {
	if n := len(ps); n > 0 && ps[n-1].generation >= generation {
		return ps // known already, and since earlier; or an older copy read back
	}
	ps = append(ps, publication{generation: generation, knownAt: now})
	if len(ps) > maxPublications {
		ps = slices.Delete(ps, 0, len(ps)-maxPublications)
	}
	return ps
}

// KnownSince is when the operator first knew that a generation at or above generation was published: the
// moment from which every member that follows the protocol can have read one that is no older. False
// when it knows of none.
func (ps Publications) KnownSince(generation int64) (time.Time, bool) {
	i, _ := slices.BinarySearchFunc(ps, generation, func(p publication, g int64) int { return cmp.Compare(p.generation, g) })
	if i == len(ps) {
		return time.Time{}, false
	}
	return ps[i].knownAt, true
}
