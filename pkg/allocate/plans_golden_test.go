package allocate

import (
	"flag"
	"fmt"
	"hash"
	"hash/fnv"
	"math"
	"math/rand/v2"
	"os"
	"slices"
	"strings"
	"testing"
)

// updatePlans rewrites testdata/plans.golden from the current code. Do so only when a change of plans is
// intended, and say why in the commit.
var updatePlans = flag.Bool("update-plans", false, "rewrite testdata/plans.golden from the current code")

const plansGoldenPath = "testdata/plans.golden"

// plansGoldenConfigs are the strategies and parameters whose plans TestPlansUnchanged pins: Sticky in each
// of its modes, and the strategies whose code has no RocketMQ vector for these inputs (zones, weights,
// previous plans).
func plansGoldenConfigs() []struct {
	name string
	s    Name
	p    Params
} {
	zero, big := int32(0), int32(1000)
	tol0, tol3 := 0.0, 0.3
	return []struct {
		name string
		s    Name
		p    Params
	}{
		{"sticky", Sticky, Params{}},
		{"sticky-norepair", Sticky, Params{ZoneRepairMoves: &zero}},
		{"sticky-repair1000", Sticky, Params{ZoneRepairMoves: &big}},
		{"sticky-skew1", Sticky, Params{MaxSkew: 1}},
		{"sticky-skew3", Sticky, Params{MaxSkew: 3}},
		{"sticky-load", Sticky, Params{BalanceBy: BalanceByLoad}},
		{"sticky-load-tol0", Sticky, Params{BalanceBy: BalanceByLoad, LoadTolerance: &tol0}},
		{"sticky-load-tol0.3", Sticky, Params{BalanceBy: BalanceByLoad, LoadTolerance: &tol3}},
		{"consistenthash", ConsistentHash, Params{}},
		{"consistenthash-v3", ConsistentHash, Params{VirtualNodes: vnodes(3)}},
	}
}

// goldenWorldInput is w's input with some of its variety widened: sparse queue ids for some brokers (so
// Sticky's sorted-id index is used as well as its dense table), a few queues listed twice, previous
// entries for queues that no longer exist, and loads for some queues (some not among the queues).
func goldenWorldInput(w *stickyWorld, prev Plan) Input {
	in := w.input(prev)
	slices.SortFunc(in.Queues, func(a, b Queue) int {
		return strings.Compare(a.String(), b.String())
	})
	slices.SortFunc(in.Members, func(a, b Member) int { return strings.Compare(a.ID, b.ID) })
	sparse := w.rng.IntN(3) == 0
	for k := range in.Queues {
		if sparse && in.Queues[k].Broker < "b3" {
			in.Queues[k].ID = in.Queues[k].ID*97 + 5
		}
	}
	for range w.rng.IntN(3) {
		in.Queues = append(in.Queues, in.Queues[w.rng.IntN(len(in.Queues))])
	}
	sh := shuffled(in, w.rng)
	in.Queues, in.Members = sh.Queues, sh.Members
	if len(prev) > 0 && w.rng.IntN(4) == 0 {
		ids := make([]string, 0, len(prev))
		for id := range prev {
			ids = append(ids, id)
		}
		slices.Sort(ids)
		id := ids[w.rng.IntN(len(ids))]
		in.Previous = clonePlan(prev)
		in.Previous[id] = append(in.Previous[id], Queue{Topic: "gone", Broker: "b9", ID: 3})
	}
	in.QueueLoad = map[Queue]float64{}
	for _, q := range in.Queues {
		switch w.rng.IntN(6) {
		case 0: // unreported
		case 1:
			in.QueueLoad[q] = float64(1 + w.rng.IntN(1000))
		default:
			in.QueueLoad[q] = math.Exp(w.rng.NormFloat64())
		}
	}
	in.QueueLoad[Queue{Topic: "absent", Broker: "b0", ID: 1}] = 5
	return in
}

func clonePlan(p Plan) Plan {
	out := make(Plan, len(p))
	for id, qs := range p {
		out[id] = slices.Clone(qs)
	}
	return out
}

// hashf writes to h, which never fails.
func hashf(h hash.Hash, format string, args ...any) { _, _ = fmt.Fprintf(h, format, args...) }

// planDigest hashes a plan: members in id order, each member's queues in the plan's order.
func planDigest(p Plan) uint64 {
	ids := make([]string, 0, len(p))
	for id := range p {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	h := fnv.New64a()
	for _, id := range ids {
		hashf(h, "%s:", id)
		for _, q := range p[id] {
			hashf(h, "%s,", q)
		}
		hashf(h, ";")
	}
	return h.Sum64()
}

// plansGoldenLines replays, for every configuration and seed, twelve steps of a random group, each plan
// fed back as the previous one, and returns one line per (configuration, seed) with the digest of its
// twelve plans. One strategy value serves every seed of a configuration, as one serves a group's replans.
func plansGoldenLines(t *testing.T) []string {
	const seeds, steps = 120, 12
	var lines []string
	for _, c := range plansGoldenConfigs() {
		s := mustNew(t, c.s, c.p)
		for seed := range uint64(seeds) {
			w := newStickyWorld(1000 + seed)
			h := fnv.New64a()
			var prev Plan
			for range steps {
				w.step()
				in := goldenWorldInput(w, prev)
				plan, err := s.Allocate(in)
				if err != nil {
					t.Fatalf("%s seed %d: %v", c.name, seed, err)
				}
				hashf(h, "%016x", planDigest(plan))
				prev = plan
			}
			lines = append(lines, fmt.Sprintf("%s %d %016x", c.name, seed, h.Sum64()))
		}
		lines = append(lines, fmt.Sprintf("%s large %016x", c.name, largeGroupDigest(t, s)))
	}
	return lines
}

// largeGroupDigest plans a group large enough for the strategies' parallel paths (8192 queues, shuffled)
// three times, members leaving and joining, each plan fed back as the previous one, and hashes the plans.
func largeGroupDigest(t *testing.T, s Strategy) uint64 {
	rng := rand.New(rand.NewPCG(7, 11))
	in := shuffled(benchInput(8192, 96), rng)
	in.QueueLoad = map[Queue]float64{}
	for _, q := range in.Queues[:6000] {
		in.QueueLoad[q] = math.Exp(rng.NormFloat64())
	}
	h := fnv.New64a()
	for step := range 3 {
		switch step {
		case 1:
			in.Members = slices.Delete(slices.Clone(in.Members), 10, 40)
		case 2:
			in.Members = append(in.Members, Member{ID: "joiner", Zone: "zone-1", Weight: 3})
		}
		plan, err := s.Allocate(in)
		if err != nil {
			t.Fatal(err)
		}
		hashf(h, "%016x", planDigest(plan))
		in.Previous = plan
	}
	return h.Sum64()
}

// TestPlansUnchanged pins the plans of Sticky (every mode) and ConsistentHash on seeded random groups to
// those recorded in testdata/plans.golden, so that a change to their code that is meant to keep their
// plans (a refactor, a speed-up) is checked to.
func TestPlansUnchanged(t *testing.T) {
	got := plansGoldenLines(t)
	if *updatePlans {
		if err := os.WriteFile(plansGoldenPath, []byte(strings.Join(got, "\n")+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	data, err := os.ReadFile(plansGoldenPath)
	if err != nil {
		t.Fatal(err)
	}
	want := strings.Split(strings.TrimSuffix(string(data), "\n"), "\n")
	if len(got) != len(want) {
		t.Fatalf("%d digests, %s has %d", len(got), plansGoldenPath, len(want))
	}
	bad := 0
	for i := range got {
		if got[i] != want[i] {
			bad++
			if bad <= 10 {
				t.Errorf("plans differ: got %q, want %q", got[i], want[i])
			}
		}
	}
	if bad > 0 {
		t.Fatalf("%d of %d (configuration, seed) digests differ", bad, len(got))
	}
}
