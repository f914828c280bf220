package plan

import (
	"errors"
	"flag"
	"fmt"
	"hash/fnv"
	"maps"
	"math/rand/v2"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/types"

	"github.com/consumergroup-operator/consumergroup-operator/pkg/allocate"
	"github.com/consumergroup-operator/consumergroup-operator/pkg/protocol"
)

// updateHandoff rewrites testdata/handoff.golden from the current code. Do so only when a change of the
// handoff's decisions is intended, and say why in the commit.
var updateHandoff = flag.Bool("update-handoff", false, "rewrite testdata/handoff.golden from the current code")

const (
	handoffGoldenPath  = "testdata/handoff.golden"
	handoffGoldenCases = 4000
	// goldenQueues and goldenPods size the random worlds: small, so that pods collide on queues often.
	goldenQueues = 12
	goldenPods   = 6
)

// TestHandoffUnchanged pins what handoff decides for handoffGoldenCases random inputs (randomHandoffInput):
// each line of testdata/handoff.golden is a digest of one result, whole. A change of the handoff's code
// that means to keep its behaviour must leave every line as it is.
func TestHandoffUnchanged(t *testing.T) {
	got := make([]string, handoffGoldenCases)
	for c := range got {
		in := randomHandoffInput(rand.New(rand.NewPCG(uint64(c), 0x68616e64)))
		got[c] = fmt.Sprintf("%d %016x", c, handoffDigest(handoff(in)))
	}
	checkPinned(t, handoffGoldenPath, got, *updateHandoff, "handoff", "-update-handoff")
}

// checkPinned compares got, one digest a line, with the pinned file path, or rewrites the file when
// update is set. what names the code whose decisions are pinned, flag the flag that rewrites them.
func checkPinned(t *testing.T, path string, got []string, update bool, what, flag string) {
	t.Helper()
	if update {
		if err := os.MkdirAll("testdata", 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(strings.Join(got, "\n")+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	want := strings.Split(strings.TrimSuffix(string(raw), "\n"), "\n")
	if len(want) != len(got) {
		t.Fatalf("%s has %d lines, the test makes %d", path, len(want), len(got))
	}
	changed := 0
	for i := range got {
		if got[i] != want[i] {
			if changed < 5 {
				t.Errorf("%s decides otherwise than before: %s, was %s", what, got[i], want[i])
			}
			changed++
		}
	}
	if changed > 0 {
		t.Errorf("%d of %d pinned decisions changed; rerun with %s only if the change is meant", changed, len(got), flag)
	}
}

// handoffDigest digests every field of a result, in an order that does not depend on map iteration.
func handoffDigest(res handoffResult) uint64 {
	h := fnv.New64a()
	for _, pod := range slices.Sorted(maps.Keys(res.entries)) {
		_, _ = fmt.Fprintf(h, "entry %s %v\n", pod, res.entries[pod])
	}
	_, _ = fmt.Fprintf(h, "state %s\nfenced %+v\n", res.state.encode(), res.fenced)
	_, _ = fmt.Fprintf(h, "withheld %d recovering %d revoked %v unreadable %v requeue %v\n",
		res.withheld, res.recovering, res.revokedFromMembers, res.unreadableClaims, res.requeueAfter)
	return h.Sum64()
}

// goldenNow is the time of every golden case.
var goldenNow = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

// randomHandoffInput is a small world drawn from rng that reaches every rule of handoff: trusted or not,
// Cooperative or not; members, former members and replaced incarnations (another UID under a pod's name);
// Leases missing, expired, stopped, without a claim, with an unreadable claim or with a promise; entries
// for this incarnation, another or none named; revocations pending, acknowledged, timed out, lapsed or of
// everything; fenced incarnations; reservations; a hold on unclaimed queues.
func randomHandoffInput(rng *rand.Rand) handoffInput {
	scope := protocol.NewScope()
	scope.Add("t", "b", goldenQueues)
	ago := func(maxSeconds int) time.Time {
		return goldenNow.Add(-time.Duration(rng.IntN(maxSeconds*10+1)) * 100 * time.Millisecond)
	}
	in := handoffInput{
		cooperative:   rng.IntN(5) > 0,
		trusted:       rng.IntN(4) > 0,
		revokeTimeout: 30 * time.Second,
		maxSkew:       time.Second,
		now:           goldenNow,
		target:        allocate.Plan{},
		published:     map[string]protocol.PublishedEntry{},
		scope:         scope,
	}
	if rng.IntN(3) == 0 {
		in.restartGrace = 20 * time.Second
	}
	for p := range goldenPods {
		pod, uid := fmt.Sprintf("p%d", p), types.UID(fmt.Sprintf("u%d", p))
		isMember := rng.IntN(3) > 0
		if isMember {
			in.members = append(in.members, Member{Member: allocate.Member{ID: fmt.Sprintf("m%d", p)}, Pod: pod, UID: uid})
		}
		if isMember || rng.IntN(2) == 0 {
			in.incarnations = append(in.incarnations, randomIncarnation(rng, pod, uid, isMember || rng.IntN(2) == 0, ago))
		}
		if rng.IntN(5) == 0 { // an earlier incarnation of the same pod
			in.incarnations = append(in.incarnations, randomIncarnation(rng, pod, types.UID(fmt.Sprintf("v%d", p)), false, ago))
		}
		if rng.IntN(2) == 0 {
			e := protocol.PublishedEntry{Entry: protocol.Entry{Member: fmt.Sprintf("m%d", p), PodUID: string(uid)}, Queues: randomQueues(rng, 4)}
			switch rng.IntN(5) {
			case 0:
				e.PodUID = ""
			case 1:
				e.PodUID = fmt.Sprintf("v%d", p)
			}
			in.published[pod] = e
		}
	}
	for id := range int32(goldenQueues) {
		if len(in.members) > 0 && rng.IntN(8) > 0 {
			m := in.members[rng.IntN(len(in.members))]
			in.target[m.ID] = append(in.target[m.ID], allocate.Queue{Topic: "t", Broker: "b", ID: id})
		}
	}
	in.state = randomHandoffState(rng, ago)
	for g := range int64(6) {
		if rng.IntN(2) == 0 {
			in.publications = in.publications.Add(g+1, ago(10))
		}
	}
	if rng.IntN(6) == 0 {
		in.unseenUntil = goldenNow.Add(time.Duration(rng.IntN(10)-2) * time.Second)
	}
	return in
}

// randomIncarnation is pod's incarnation uid, its pod existing or not, with a Lease or without.
func randomIncarnation(rng *rand.Rand, pod string, uid types.UID, exists bool, ago func(int) time.Time) *incarnation {
	i := &incarnation{pod: pod, uid: uid, exists: exists, stopped: exists && rng.IntN(12) == 0}
	if !exists && rng.IntN(3) == 0 {
		i.unseenUntil = goldenNow.Add(time.Duration(rng.IntN(20)-10) * time.Second)
	}
	if rng.IntN(5) == 0 {
		return i
	}
	l := &protocol.LeaseState{
		Name: pod + "-lease", Pod: pod, PodUID: uid, Member: "m" + pod[1:],
		AckedGeneration: int64(rng.IntN(7)), RenewTime: ago(15), Duration: 10 * time.Second,
		HasClaim: rng.IntN(8) > 0,
	}
	switch {
	case !l.HasClaim:
	case rng.IntN(15) == 0:
		l.ClaimErr = errors.New("unreadable")
	default:
		l.Claim = randomQueues(rng, 4)
	}
	if rng.IntN(3) == 0 {
		l.StopsWithin = 3 * time.Second
	}
	i.lease = l
	return i
}

// randomHandoffState is bookkeeping as an earlier pass could have left it.
func randomHandoffState(rng *rand.Rand, ago func(int) time.Time) HandoffState {
	var s HandoffState
	revocationOf := func() Revocation {
		p := rng.IntN(goldenPods)
		r := Revocation{Pod: fmt.Sprintf("p%d", p), UID: types.UID(fmt.Sprintf("u%d", p)), Generation: int64(1 + rng.IntN(6)), At: ago(45)}
		if rng.IntN(5) == 0 {
			r.UID = types.UID(fmt.Sprintf("v%d", p))
		}
		if rng.IntN(6) == 0 {
			r.All = true
		} else {
			r.Queues = protocol.Compact(randomQueues(rng, 4))
		}
		return r
	}
	for range rng.IntN(4) {
		s.Revocations = append(s.Revocations, revocationOf())
	}
	for range rng.IntN(2) {
		s.Fenced = append(s.Fenced, revocationOf())
	}
	for range rng.IntN(3) {
		s.Reserved = append(s.Reserved, reservation{Member: fmt.Sprintf("m%d", rng.IntN(goldenPods)), DepartedAt: ago(30), Queues: protocol.Compact(randomQueues(rng, 3))})
	}
	if rng.IntN(8) == 0 {
		until := goldenNow.Add(time.Duration(rng.IntN(10)-3) * time.Second)
		s.HoldUnclaimedUntil = &until
	}
	return s
}

// randomQueues is up to n distinct queues of t/b, sorted as claims and entries list them.
func randomQueues(rng *rand.Rand, n int) []allocate.Queue {
	var qs []allocate.Queue
	for range rng.IntN(n + 1) {
		q := allocate.Queue{Topic: "t", Broker: "b", ID: int32(rng.IntN(goldenQueues))}
		if !slices.Contains(qs, q) {
			qs = append(qs, q)
		}
	}
	slices.SortFunc(qs, protocol.CompareCanonical)
	return qs
}
