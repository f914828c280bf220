package allocate

import (
	"fmt"
	"math/rand/v2"
	"testing"
)

// crossZoneKnown counts the queues plan reads outside their broker's zone where both zones are known,
// written out here independently of MinCrossZoneKnown.
func crossZoneKnown(in Input, plan Plan) int {
	n := 0
	for _, m := range in.Members {
		for _, q := range plan[m.ID] {
			if z := in.BrokerZones[q.Broker]; z != "" && m.Zone != "" && z != m.Zone {
				n++
			}
		}
	}
	return n
}

// tinyZoneGroup is a random group small enough to try every plan: up to 7 queues over brokers in up to
// three zones (one broker with no zone sometimes), up to 4 members with weights 1 to 3, some with no zone.
func tinyZoneGroup(rng *rand.Rand) Input {
	zones := []string{"z1", "z2", "z3", ""}
	in := Input{BrokerZones: map[string]string{}}
	for b := range 1 + rng.IntN(3) {
		broker := fmt.Sprintf("b%d", b)
		in.BrokerZones[broker] = zones[rng.IntN(len(zones))]
		for id := range 1 + rng.IntN(3) {
			in.Queues = append(in.Queues, Queue{Topic: "T", Broker: broker, ID: int32(id)})
		}
	}
	in.Queues = in.Queues[:min(len(in.Queues), 7)]
	for i := range 1 + rng.IntN(4) {
		in.Members = append(in.Members, Member{ID: fmt.Sprintf("m%d", i), Zone: zones[rng.IntN(len(zones))], Weight: int32(1 + rng.IntN(3))})
	}
	return in
}

// bruteMinCrossZone tries every plan of in and returns the fewest queues read across zones, counted both
// ways, over the balanced ones.
func bruteMinCrossZone(in Input) (crossZone, known int) {
	n, q := len(in.Members), len(in.Queues)
	crossZone, known = -1, -1
	owner := make([]int, q)
	floor, ceil := FairShares(q, in.Members)
	counts := make([]int, n)
	for {
		clear(counts)
		for _, o := range owner {
			counts[o]++
		}
		fits := true
		for i, c := range counts {
			fits = fits && c >= floor[i] && c <= ceil[i]
		}
		if !fits {
			if !nextOwners(owner, n) {
				return crossZone, known
			}
			continue
		}
		plan := Plan{}
		for _, m := range in.Members {
			plan[m.ID] = []Queue{}
		}
		for k, o := range owner {
			id := in.Members[o].ID
			plan[id] = append(plan[id], in.Queues[k])
		}
		if Balanced(in, plan) {
			if c := CrossZone(in, plan); crossZone < 0 || c < crossZone {
				crossZone = c
			}
			if c := crossZoneKnown(in, plan); known < 0 || c < known {
				known = c
			}
		}
		if !nextOwners(owner, n) {
			return crossZone, known
		}
	}
}

// nextOwners steps owner, a number in base n, to the next assignment; false after the last.
func nextOwners(owner []int, n int) bool {
	k := 0
	for k < len(owner) && owner[k] == n-1 {
		owner[k] = 0
		k++
	}
	if k == len(owner) {
		return false
	}
	owner[k]++
	return true
}

// TestMinCrossZoneBruteForce holds the closed forms against every balanced plan of 2,000 tiny groups.
func TestMinCrossZoneBruteForce(t *testing.T) {
	rng := rand.New(rand.NewPCG(25, 1))
	positive := 0
	for range 2000 {
		in := tinyZoneGroup(rng)
		wantAll, wantKnown := bruteMinCrossZone(in)
		if got := MinCrossZone(in); got != wantAll {
			t.Fatalf("MinCrossZone = %d, every plan tried gives %d at best: %+v", got, wantAll, in)
		}
		if got := MinCrossZoneKnown(in); got != wantKnown {
			t.Fatalf("MinCrossZoneKnown = %d, every plan tried gives %d at best: %+v", got, wantKnown, in)
		}
		if wantAll > 0 && wantKnown > 0 {
			positive++
		}
	}
	if positive < 200 {
		t.Fatalf("only %d groups need a cross-zone read: the test shows little", positive)
	}
}

func TestMinCrossZoneCases(t *testing.T) {
	q := func(broker string, n int) []Queue {
		var qs []Queue
		for id := range n {
			qs = append(qs, Queue{Topic: "orders", Broker: broker, ID: int32(id)})
		}
		return qs
	}
	zones := map[string]string{"broker-a": "zone-a", "broker-b": "zone-b"}
	pods := func(zs ...string) []Member {
		var ms []Member
		for i, z := range zs {
			ms = append(ms, Member{ID: fmt.Sprintf("pod-%d", i), Zone: z})
		}
		return ms
	}
	cases := []struct {
		name string
		in   Input
		want int
	}{
		// The demo of issue 25: 12 queues, pods 2/2/1 over zones a/b/c; the zone-c pod reads 2 from elsewhere.
		{"demo after rollout", Input{Queues: append(q("broker-a", 6), q("broker-b", 6)...), BrokerZones: zones,
			Members: pods("zone-a", "zone-a", "zone-b", "zone-b", "zone-c")}, 2},
		{"every zone self-sufficient", Input{Queues: append(q("broker-a", 6), q("broker-b", 6)...), BrokerZones: zones,
			Members: pods("zone-a", "zone-b")}, 0},
		// 4 members share 12 queues 3 each: zone-a's one member reads 3 of broker-a's 9, the rest go out.
		{"a short-handed zone", Input{Queues: append(q("broker-a", 9), q("broker-b", 3)...), BrokerZones: zones,
			Members: pods("zone-a", "zone-b", "zone-b", "zone-b")}, 6},
		{"no members", Input{Queues: q("broker-a", 3), BrokerZones: zones}, 0},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if got := MinCrossZone(c.in); got != c.want {
				t.Errorf("MinCrossZone = %d, want %d", got, c.want)
			}
		})
	}
}
