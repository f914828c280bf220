package allocate

import (
	"encoding/json"
	"flag"
	"fmt"
	"hash/fnv"
	"math/rand/v2"
	"os"
	"slices"
	"strings"
	"testing"
)

// goldenPath is the file of vectors recorded from RocketMQ's own Java strategies. It lives in testdata so
// that the parity check runs wherever the repository is checked out; a missing file fails the test.
var goldenPath = flag.String("golden", "testdata/rocketmq-allocate.json",
	"file of RocketMQ allocation vectors TestRocketMQParity checks against")

type goldenQueue struct {
	Topic      string `json:"topic"`
	BrokerName string `json:"brokerName"`
	QueueID    int32  `json:"queueId"`
}

type goldenCase struct {
	ID       string `json:"id"`
	Strategy string `json:"strategy"`
	Params   struct {
		VirtualNodeCnt *int32 `json:"virtualNodeCnt"`
		Inner          string `json:"inner"`
		InnerParams    struct {
			VirtualNodeCnt *int32 `json:"virtualNodeCnt"`
		} `json:"innerParams"`
		MessageQueueList []goldenQueue `json:"messageQueueList"`
		Consumeridcs     []string      `json:"consumeridcs"`
	} `json:"params"`
	MqAll    []goldenQueue            `json:"mqAll"`
	CidAll   []string                 `json:"cidAll"`
	Expected map[string][]goldenQueue `json:"expected"`
	Errors   map[string]string        `json:"errors"`
}

var goldenStrategies = map[string]Name{
	"AVG":                 Averagely,
	"AVG_BY_CIRCLE":       AveragelyByCircle,
	"CONSISTENT_HASH":     ConsistentHash,
	"MACHINE_ROOM_NEARBY": MachineRoomNearby,
	"MACHINE_ROOM":        ByMachineRoom,
	"CONFIG":              ByConfig,
}

func toQueues(gs []goldenQueue) []Queue {
	qs := make([]Queue, len(gs))
	for i, g := range gs {
		qs[i] = Queue{Topic: g.Topic, Broker: g.BrokerName, ID: g.QueueID}
	}
	return qs
}

// roomBefore is the golden vectors' resolver: s up to the first sep, or all of s.
func roomBefore(s, sep string) string {
	room, _, _ := strings.Cut(s, sep)
	return room
}

// goldenInput translates one case into the operator's terms, with queues and members shuffled so that
// only the strategy's own sorting can reproduce RocketMQ's order.
func goldenInput(c goldenCase) (Name, Params, Input, error) {
	name, ok := goldenStrategies[c.Strategy]
	if !ok {
		return "", Params{}, Input{}, fmt.Errorf("unknown strategy %q", c.Strategy)
	}
	p := Params{VirtualNodes: c.Params.VirtualNodeCnt, MachineRooms: c.Params.Consumeridcs}
	in := Input{Queues: toQueues(c.MqAll)}
	for _, id := range c.CidAll {
		in.Members = append(in.Members, Member{ID: id})
	}
	switch name {
	case MachineRoomNearby:
		inner, ok := goldenStrategies[c.Params.Inner]
		if !ok {
			return "", Params{}, Input{}, fmt.Errorf("unknown inner strategy %q", c.Params.Inner)
		}
		p.Inner = inner
		p.InnerParams = &Params{VirtualNodes: c.Params.InnerParams.VirtualNodeCnt}
		in.BrokerZones = map[string]string{}
		for _, q := range in.Queues {
			in.BrokerZones[q.Broker] = roomBefore(q.Broker, "-")
		}
		for i := range in.Members {
			in.Members[i].Zone = roomBefore(in.Members[i].ID, "@")
		}
	case ByConfig:
		// RocketMQ gives its one configured list to every caller; per member, that is the same list for all.
		p.Assignments = map[string][]Queue{}
		for _, id := range c.CidAll {
			p.Assignments[id] = toQueues(c.Params.MessageQueueList)
		}
	}
	h := fnv.New64a()
	h.Write([]byte(c.ID))
	rng := rand.New(rand.NewPCG(h.Sum64(), 2026))
	rng.Shuffle(len(in.Queues), func(i, j int) { in.Queues[i], in.Queues[j] = in.Queues[j], in.Queues[i] })
	rng.Shuffle(len(in.Members), func(i, j int) { in.Members[i], in.Members[j] = in.Members[j], in.Members[i] })
	return name, p, in, nil
}

// checkGoldenCase runs the strategy once for the whole group and returns every difference from RocketMQ.
func checkGoldenCase(c goldenCase) []string {
	name, p, in, err := goldenInput(c)
	if err != nil {
		return []string{err.Error()}
	}
	s, err := New(name, p)
	if err != nil {
		return []string{fmt.Sprintf("New(%s): %v", name, err)}
	}
	plan, planErr := s.Allocate(in)

	var problems []string
	wantGroupError := false
	for _, id := range c.CidAll {
		if msg, ok := c.Errors[id]; ok && strings.Contains(msg, "Machine room is null") {
			wantGroupError = true
		}
	}
	if wantGroupError != (planErr != nil) {
		return []string{fmt.Sprintf("error = %v, want an error: %v", planErr, wantGroupError)}
	}
	if planErr != nil {
		return nil
	}
	for _, id := range c.CidAll {
		got, ok := plan[id]
		if !ok {
			problems = append(problems, fmt.Sprintf("member %q has no entry in the plan", id))
			continue
		}
		want := toQueues(c.Expected[id]) // absent (an error in Java), null and [] all mean nothing
		if !slices.Equal(got, want) {
			problems = append(problems, fmt.Sprintf("member %q:\n got %v\nwant %v", id, got, want))
		}
	}
	if len(plan) != len(slices.Compact(slices.Sorted(slices.Values(c.CidAll)))) {
		problems = append(problems, fmt.Sprintf("plan has %d entries for %d members", len(plan), len(c.CidAll)))
	}
	return problems
}

func TestRocketMQParity(t *testing.T) {
	data, err := os.ReadFile(*goldenPath)
	if err != nil {
		t.Fatalf("reading golden vectors (override with -args -golden=FILE): %v", err)
	}
	var golden struct {
		CaseCount int          `json:"caseCount"`
		Cases     []goldenCase `json:"cases"`
	}
	if err := json.Unmarshal(data, &golden); err != nil {
		t.Fatalf("parsing %s: %v", *goldenPath, err)
	}
	if len(golden.Cases) == 0 || len(golden.Cases) != golden.CaseCount {
		t.Fatalf("%s holds %d cases, says caseCount %d", *goldenPath, len(golden.Cases), golden.CaseCount)
	}
	passed, ran := 0, 0 // ran counts the cases -run selects
	for _, c := range golden.Cases {
		t.Run(c.ID, func(t *testing.T) {
			ran++
			problems := checkGoldenCase(c)
			if len(problems) == 0 {
				passed++
				return
			}
			if len(problems) > 3 {
				problems = append(problems[:3], fmt.Sprintf("... and %d more", len(problems)-3))
			}
			t.Errorf("%s:\n%s", c.Strategy, strings.Join(problems, "\n"))
		})
	}
	t.Logf("parity: %d/%d cases", passed, ran)
	if passed < ran {
		t.Fail()
	}
}
