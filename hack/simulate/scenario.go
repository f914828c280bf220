package main

import (
	"encoding/json"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"slices"
	"strings"

	"github.com/consumergroup-operator/consumergroup-operator/api/v1alpha1"
)

// Scenario is a sequence of group states. Every step lists the full membership; a step may also
// replace the topics, so a topic can gain or lose queues.
type Scenario struct {
	Name        string  `json:"name,omitempty"`
	Description string  `json:"description,omitempty"`
	Topics      []Topic `json:"topics"`
	Steps       []Step  `json:"steps"`
}

// Topic is one topic and the brokers that serve its queues, as a ConsumerGroup names them.
type Topic = v1alpha1.Topic

// Broker serves Queues queues (ids 0..Queues-1) of a topic from Zone, as a ConsumerGroup names it.
type Broker = v1alpha1.Broker

// Step is the group at one point in time.
type Step struct {
	// Label names the change that led to this step, for tables and plots.
	Label   string   `json:"label,omitempty"`
	Members []Member `json:"members"`
	// Topics, when set, replaces the topics from this step on.
	Topics []Topic `json:"topics,omitempty"`
	// QueueLoad, when set, replaces every queue's load from this step on, by "topic/broker/id"; a queue
	// it does not list has load 0. A scenario without it balances and measures queue counts only.
	QueueLoad map[string]float64 `json:"queueLoad,omitempty"`
}

// Member is one consumer pod.
type Member struct {
	ID     string `json:"id"`
	Zone   string `json:"zone"`
	Weight int32  `json:"weight,omitempty"`
}

// sized is one step per group size: pods pod-0 .. pod-(n-1), the newest leaving first when it shrinks.
func sized(counts ...int) []Step {
	steps := make([]Step, len(counts))
	for i, n := range counts {
		steps[i] = Step{Label: fmt.Sprintf("%d pods", n), Members: pods(n)}
	}
	return steps
}

// loadScenario returns the built-in scenario called nameOrFile, or reads the file of that name.
func loadScenario(nameOrFile string) (Scenario, error) {
	for _, s := range builtins() {
		if s.Name == nameOrFile {
			return s, nil
		}
	}
	data, err := os.ReadFile(nameOrFile)
	if err != nil {
		return Scenario{}, fmt.Errorf("scenario %q is neither built in (%v) nor a readable file: %w", nameOrFile, builtinNames(), err)
	}
	var s Scenario
	if err := json.Unmarshal(data, &s); err != nil {
		return Scenario{}, fmt.Errorf("scenario file %s: %w", nameOrFile, err)
	}
	if s.Name == "" {
		s.Name = nameOrFile
	}
	if len(s.Steps) == 0 {
		return Scenario{}, fmt.Errorf("scenario file %s has no steps", nameOrFile)
	}
	return s, nil
}

func builtinNames() []string {
	var names []string
	for _, s := range builtins() {
		names = append(names, s.Name)
	}
	return names
}

var zones = []string{"zone-a", "zone-b", "zone-c"}

// pods returns pods pod-0..pod-<n-1>, spread over the three zones round-robin.
func pods(n int) []Member {
	var ms []Member
	for i := range n {
		ms = append(ms, Member{ID: fmt.Sprintf("pod-%d", i), Zone: zones[i%len(zones)], Weight: 1})
	}
	return ms
}

// orders is one topic with one broker per zone, perBroker queues each.
func orders(perBroker int) []Topic {
	t := Topic{Name: "orders"}
	for i, z := range zones {
		t.Brokers = append(t.Brokers, Broker{Name: fmt.Sprintf("broker-%c", 'a'+i), Queues: int32(perBroker), Zone: z})
	}
	return []Topic{t}
}

func without(ms []Member, ids ...string) []Member {
	return slices.DeleteFunc(slices.Clone(ms), func(m Member) bool { return slices.Contains(ids, m.ID) })
}

func withWeight(ms []Member, weights map[string]int32) []Member {
	out := slices.Clone(ms)
	for i := range out {
		if w, ok := weights[out[i].ID]; ok {
			out[i].Weight = w
		}
	}
	return out
}

// builtins are the scenarios the docs plot. Each starts from an empty previous plan.
func builtins() []Scenario {
	var restart []Step
	all := pods(6)
	restart = append(restart, Step{Label: "6 pods", Members: all})
	for i := range 6 {
		id := fmt.Sprintf("pod-%d", i)
		restart = append(restart,
			Step{Label: id + " down", Members: without(all, id)},
			Step{Label: id + " back", Members: all})
	}

	nine := pods(9)
	zoneC := []string{"pod-2", "pod-5", "pod-8"}

	return append([]Scenario{
		{
			Name:        "scale-out",
			Description: "A group of 10 pods grows to 11, 12 and 16 pods; 48 queues over three zones.",
			Topics:      orders(16),
			Steps:       sized(10, 11, 12, 16),
		},
		{
			Name:        "scale-in",
			Description: "A group of 16 pods shrinks to 12, 11 and 10 pods, the newest pods leaving first.",
			Topics:      orders(16),
			Steps:       sized(16, 12, 11, 10),
		},
		{
			Name:        "rolling-restart",
			Description: "Six StatefulSet pods restart one at a time and come back under the same name.",
			Topics:      orders(8),
			Steps:       restart,
		},
		{
			Name:        "zone-outage",
			Description: "Zone-c loses its three pods (its broker stays up), then the pods come back.",
			Topics:      orders(12),
			Steps: []Step{
				{Label: "9 pods", Members: nine},
				{Label: "zone-c down", Members: without(nine, zoneC...)},
				{Label: "zone-c back", Members: nine},
			},
		},
		{
			Name:        "queue-growth",
			Description: "Six pods; the topic starts with fewer queues than pods and grows from 3 to 48 queues.",
			Topics:      orders(1),
			Steps: []Step{
				{Label: "3 queues", Members: pods(6)},
				{Label: "12 queues", Members: pods(6), Topics: orders(4)},
				{Label: "24 queues", Members: pods(6), Topics: orders(8)},
				{Label: "48 queues", Members: pods(6), Topics: orders(16)},
			},
		},
		{
			Name:        "weights",
			Description: "Four pods share 48 queues; pod-0's weight goes to 2, then 4 with pod-1 at 2, then back to 1.",
			Topics:      orders(16),
			Steps: []Step{
				{Label: "equal", Members: pods(4)},
				{Label: "pod-0 w=2", Members: withWeight(pods(4), map[string]int32{"pod-0": 2})},
				{Label: "pod-0 w=4, pod-1 w=2", Members: withWeight(pods(4), map[string]int32{"pod-0": 4, "pod-1": 2})},
				{Label: "equal again", Members: pods(4)},
			},
		},
	}, append(replacementScenarios(), loadScenarios()...)...)
}

// twoBrokerZones is one topic on brokers in zone-a and zone-b only: members in zone-c read across zones.
func twoBrokerZones(perBroker int) []Topic {
	t := orders(perBroker)
	t[0].Brokers = t[0].Brokers[:2]
	return t
}

// rollingReplacement is a Deployment's rollout with one surge pod: each old pod in turn gets a
// replacement, which the scheduler puts in the next zone round the ring, and then goes away.
func rollingReplacement(n int) []Step {
	current := pods(n)
	steps := []Step{{Label: fmt.Sprintf("%d pods", n), Members: slices.Clone(current)}}
	for i := range n {
		id := fmt.Sprintf("new-%d", i)
		current = append(current, Member{ID: id, Zone: zones[(i+1)%len(zones)], Weight: 1})
		steps = append(steps, Step{Label: id + " up", Members: slices.Clone(current)})
		current = without(current, fmt.Sprintf("pod-%d", i))
		steps = append(steps, Step{Label: fmt.Sprintf("pod-%d gone", i), Members: slices.Clone(current)})
	}
	return steps
}

// churn is a seeded random sequence of pods joining (in a random zone) and leaving, between 3 and 12.
func churn(seed uint64, count int) []Step {
	rng := rand.New(rand.NewPCG(seed, 25))
	current := pods(6)
	steps := []Step{{Label: "6 pods", Members: slices.Clone(current)}}
	next := len(current)
	for range count {
		if len(current) > 3 && (len(current) >= 12 || rng.IntN(2) == 0) {
			gone := current[rng.IntN(len(current))].ID
			current = without(current, gone)
			steps = append(steps, Step{Label: gone + " leaves", Members: slices.Clone(current)})
			continue
		}
		m := Member{ID: fmt.Sprintf("pod-%d", next), Zone: zones[rng.IntN(len(zones))], Weight: 1}
		next++
		current = append(current, m)
		steps = append(steps, Step{Label: m.ID + " joins " + m.Zone, Members: slices.Clone(current)})
	}
	return steps
}

// replacementScenarios are the rollouts and the random membership changes over which a settled Sticky
// group reads as few queues across zones as balance allows.
func replacementScenarios() []Scenario {
	return []Scenario{
		{
			Name:        "rollout-2-broker-zones",
			Description: "Six pods over three zones are replaced one by one with one surge pod; brokers in zone-a and zone-b only, 24 queues.",
			Topics:      twoBrokerZones(12),
			Steps:       rollingReplacement(6),
		},
		{
			Name:        "rollout-3-broker-zones",
			Description: "Six pods over three zones are replaced one by one with one surge pod; a broker in every zone, 24 queues.",
			Topics:      orders(8),
			Steps:       rollingReplacement(6),
		},
		{
			Name:        "churn",
			Description: "Pods join in random zones and leave at random, 3 to 12 of them, 20 times; brokers in zone-a and zone-b, 24 queues.",
			Topics:      twoBrokerZones(12),
			Steps:       churn(7, 20),
		},
	}
}

// loadScenarios are the built-in scenarios with per-queue load: 48 queues over three zones and 8 pods,
// whose loads are drawn from a seeded generator, so that every run and every plot is the same.
func loadScenarios() []Scenario {
	topics := orders(16)
	g := newLoadGen(topics[0], rand.New(rand.NewPCG(2026, 12)))
	eight := pods(8)
	hot := g.hotSpot("broker-a")
	noise := []Step{{Label: "uniform", Members: eight, QueueLoad: g.hotSpot("none")}, {Label: "hot spot", Members: eight, QueueLoad: hot}}
	for i := range 4 {
		noise = append(noise, Step{Label: fmt.Sprintf("noise %d", i+1), Members: eight, QueueLoad: g.noisy(hot)})
	}
	var wandering []Step
	for _, b := range topics[0].Brokers {
		wandering = append(wandering, Step{Label: "on " + b.Name, Members: eight, QueueLoad: g.hotSpot(b.Name)})
	}
	return []Scenario{
		{
			Name:        "load-lognormal",
			Description: "Eight pods read 48 queues whose loads are log-normal; the loads change, a pod joins, one leaves.",
			Topics:      topics,
			Steps: []Step{
				{Label: "8 pods", Members: eight, QueueLoad: g.logNormal()},
				{Label: "loads change", Members: eight, QueueLoad: g.logNormal()},
				{Label: "pod-8 joins", Members: pods(9)},
				{Label: "pod-3 leaves", Members: without(pods(9), "pod-3")},
			},
		},
		{
			Name:        "load-hotspot",
			Description: "Broker-a's queues carry a Zipf hot spot (40, 20, 13, ... per queue), every other queue 1; a pod joins.",
			Topics:      topics,
			Steps: []Step{
				{Label: "uniform", Members: eight, QueueLoad: g.hotSpot("none")},
				{Label: "hot spot", Members: eight, QueueLoad: g.hotSpot("broker-a")},
				{Label: "pod-8 joins", Members: pods(9)},
			},
		},
		{
			Name:        "load-hotspot-noise",
			Description: "Broker-a's Zipf hot spot (two queues carry a third of the load), then four steps of ±3% noise on every queue, over eight pods.",
			Topics:      topics,
			Steps:       noise,
		},
		{
			Name:        "load-wandering",
			Description: "The Zipf hot spot moves from broker-a to broker-b to broker-c and away again, over eight pods.",
			Topics:      topics,
			Steps:       append(wandering, Step{Label: "gone", Members: eight, QueueLoad: g.hotSpot("none")}),
		},
	}
}

// loadGen draws the built-in load scenarios' loads for the queues of one topic, in queue order, from one
// seeded generator: the order of the calls fixes the loads.
type loadGen struct {
	queues []string
	rng    *rand.Rand
}

func newLoadGen(t Topic, rng *rand.Rand) *loadGen {
	g := &loadGen{rng: rng}
	for _, b := range t.Brokers {
		for id := range b.Queues {
			g.queues = append(g.queues, fmt.Sprintf("%s/%s/%d", t.Name, b.Name, id))
		}
	}
	return g
}

// logNormal gives every queue a log-normal load.
func (g *loadGen) logNormal() map[string]float64 {
	loads := map[string]float64{}
	for _, q := range g.queues {
		loads[q] = math.Round(100*math.Exp(g.rng.NormFloat64())) / 10
	}
	return loads
}

// hotSpot gives the queues of broker hot a Zipf-like load, rank r carrying 40/r, and every other queue a
// load of 1.
func (g *loadGen) hotSpot(hot string) map[string]float64 {
	loads := map[string]float64{}
	rank := 1
	for _, q := range g.queues {
		loads[q] = 1
		if strings.Contains(q, "/"+hot+"/") {
			loads[q] = math.Round(400/float64(rank)) / 10
			rank++
		}
	}
	return loads
}

// noisy returns loads with every queue's load changed by up to ±3%.
func (g *loadGen) noisy(loads map[string]float64) map[string]float64 {
	out := map[string]float64{}
	for _, q := range g.queues { // in queue order, not the map's, so that every run draws the same
		out[q] = math.Round(1000*loads[q]*(0.97+0.06*g.rng.Float64())) / 1000
	}
	return out
}
