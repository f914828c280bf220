package controllers

import (
	"testing"

	"github.com/consumergroup-operator/consumergroup-operator/internal/testenv"
	"github.com/consumergroup-operator/consumergroup-operator/pkg/allocate"
)

func TestCrossZoneCountsOnlyKnownZones(t *testing.T) {
	group := testenv.Group("ns", "g").Topic("t", testenv.Broker("a", 4, "zone-a"), testenv.Broker("b", 4, "zone-b"), testenv.Broker("c", 4, "")).Obj()
	members := []member{
		{Member: allocate.Member{ID: "m-a", Zone: "zone-a"}},
		{Member: allocate.Member{ID: "m-b", Zone: "zone-b"}},
		{Member: allocate.Member{ID: "m-none"}},
	}
	q := func(broker string, id int32) allocate.Queue {
		return allocate.Queue{Topic: "t", Broker: broker, ID: id}
	}
	plan := allocate.Plan{
		"m-a":    {q("a", 0), q("a", 1), q("b", 0), q("c", 0)}, // b/0 is across zones; c has no zone
		"m-b":    {q("b", 1), q("a", 2), q("a", 3)},            // a/2 and a/3 are across zones
		"m-none": {q("a", 4), q("b", 2)},                       // the member's zone is unknown
	}
	if got := crossZone(topologyOf(group, nil), members, plan); got != 3 {
		t.Errorf("crossZone = %d, want 3", got)
	}
}

func TestImbalanceWeighsMembers(t *testing.T) {
	members := []member{
		{Member: allocate.Member{ID: "heavy", Weight: 2}},
		{Member: allocate.Member{ID: "light", Weight: 1}},
	}
	ids := func(n int) []allocate.Queue { return make([]allocate.Queue, n) }
	for _, tc := range []struct {
		plan allocate.Plan
		want float64
	}{
		{allocate.Plan{"heavy": ids(8), "light": ids(4)}, 1},   // 4 per unit of weight each
		{allocate.Plan{"heavy": ids(6), "light": ids(6)}, 1.5}, // light: 6 per unit, mean 4
		{allocate.Plan{}, 0},
	} {
		owned := 0
		for _, qs := range tc.plan {
			owned += len(qs)
		}
		if got := imbalance(members, tc.plan, owned); got != tc.want {
			t.Errorf("imbalance(%v) = %v, want %v", tc.plan, got, tc.want)
		}
	}
}

func TestLeastCrossZoneCountsOnlyKnownZones(t *testing.T) {
	group := testenv.Group("ns", "g").Topic("t", testenv.Broker("a", 4, "zone-a"), testenv.Broker("b", 4, "zone-b"), testenv.Broker("c", 4, "")).Obj()
	zoneC := []member{
		{Member: allocate.Member{ID: "m-a", Zone: "zone-a"}},
		{Member: allocate.Member{ID: "m-c1", Zone: "zone-c"}},
		{Member: allocate.Member{ID: "m-c2", Zone: "zone-c"}},
	}
	// 4 queues each: m-a reads broker a's, and broker b's 4 go to zone-c, which has no broker.
	if got := leastCrossZone(topologyOf(group, nil), zoneC); got != 4 {
		t.Errorf("leastCrossZone with zone-c members = %d, want 4", got)
	}
	// A member of no zone counts nothing: broker b's queues go to it.
	zoneC[2].Zone = ""
	if got := leastCrossZone(topologyOf(group, nil), zoneC); got != 0 {
		t.Errorf("leastCrossZone with a member of no zone = %d, want 0", got)
	}
}
