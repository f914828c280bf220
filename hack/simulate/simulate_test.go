package main

import (
	"bytes"
	"encoding/json"
	"encoding/xml"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/consumergroup-operator/consumergroup-operator/pkg/allocate"
)

// TestBuiltinScenariosSticky is the acceptance check: on every built-in scenario Sticky moves
// exactly the lower bound and stays balanced, and every other strategy at least runs.
func TestBuiltinScenariosSticky(t *testing.T) {
	names, _, err := strategyNames("")
	if err != nil {
		t.Fatal(err)
	}
	fewerQueuesThanMembers := false
	for _, sc := range builtins() {
		out, err := run(sc, names, 0)
		if err != nil {
			t.Fatalf("%s: %v", sc.Name, err)
		}
		if len(out.Results) != len(names) {
			t.Fatalf("%s: %d results for %d strategies", sc.Name, len(out.Results), len(names))
		}
		for _, r := range out.Results {
			for i, s := range r.Steps {
				if s.Error != "" {
					t.Errorf("%s/%s/%s: %s", sc.Name, r.Strategy, out.Labels[i], s.Error)
				}
				if r.Strategy != string(allocate.Sticky) {
					continue
				}
				if s.Moved != s.LowerBound || !s.Balanced {
					t.Errorf("%s/%s: Sticky moved %d (bound %d), balanced %v", sc.Name, out.Labels[i], s.Moved, s.LowerBound, s.Balanced)
				}
				if s.MinLoad == 0 && len(sc.Steps[i].Members) > 0 {
					fewerQueuesThanMembers = true
				}
			}
		}
	}
	if !fewerQueuesThanMembers {
		t.Error("no built-in scenario has more members than queues")
	}
}

// TestMovedAndLowerBound checks the simulator's counters on a hand-worked case: 6 queues held 4/2 by
// a and b, c joins; quotas are 2/2/2, so a must give up 2 and b none.
func TestMovedAndLowerBound(t *testing.T) {
	q := func(i int32) allocate.Queue { return allocate.Queue{Topic: "t", Broker: "b", ID: i} }
	in := allocate.Input{
		Queues:      []allocate.Queue{q(0), q(1), q(2), q(3), q(4), q(5)},
		Members:     []allocate.Member{{ID: "a", Weight: 1}, {ID: "b", Weight: 1}, {ID: "c", Weight: 1}},
		BrokerZones: map[string]string{"b": "z"},
		Previous:    allocate.Plan{"a": {q(0), q(1), q(2), q(3)}, "b": {q(4), q(5)}},
	}
	if got := allocate.LowerBound(in); got != 2 {
		t.Fatalf("lower bound %d, want 2", got)
	}
	var s StepResult
	measure(&s, in, allocate.Plan{"a": {q(0), q(1)}, "b": {q(2), q(3)}, "c": {q(4), q(5)}})
	if s.Moved != 4 || s.MaxLoad != 2 || s.MinLoad != 2 || !s.Balanced || s.CrossZone != 6 {
		t.Fatalf("got %+v", s)
	}
}

func TestFormats(t *testing.T) {
	for _, format := range []string{"json", "table", "svg", "markdown"} {
		var b bytes.Buffer
		if err := mainErr([]string{"-scenario", "weights", "-format", format}, &b); err != nil {
			t.Fatalf("%s: %v", format, err)
		}
		switch format {
		case "json":
			var out Output
			if err := json.Unmarshal(b.Bytes(), &out); err != nil {
				t.Fatal(err)
			}
			if len(out.Results) == 0 || out.Results[0].Strategy != "Sticky" || len(out.Results[0].Steps[0].Plan) != 4 {
				t.Fatalf("unexpected JSON: %.200s", b.String())
			}
		case "svg":
			if err := xml.Unmarshal(b.Bytes(), new(struct{ XMLName xml.Name })); err != nil {
				t.Fatalf("SVG is not well-formed XML: %v", err)
			}
		}
	}
	if err := mainErr([]string{"-strategies", "Nope"}, &bytes.Buffer{}); err == nil {
		t.Fatal("unknown strategy accepted")
	}
}

// TestScenarioFile runs a scenario from a file, with a step that replaces the topics.
func TestScenarioFile(t *testing.T) {
	file := filepath.Join(t.TempDir(), "s.json")
	doc := `{"topics":[{"name":"orders","brokers":[{"name":"broker-a","queues":4,"zone":"zone-a"}]}],
	"steps":[{"members":[{"id":"pod-0","zone":"zone-a","weight":1}]},
	{"members":[{"id":"pod-0","zone":"zone-a"},{"id":"pod-1","zone":"zone-a"}],
	 "topics":[{"name":"orders","brokers":[{"name":"broker-a","queues":8,"zone":"zone-a"}]}]}]}`
	if err := os.WriteFile(file, []byte(doc), 0o600); err != nil {
		t.Fatal(err)
	}
	var b bytes.Buffer
	if err := mainErr([]string{"-scenario", file, "-strategies", "Sticky,ByConfig", "-format", "json"}, &b); err != nil {
		t.Fatal(err)
	}
	var out Output
	if err := json.Unmarshal(b.Bytes(), &out); err != nil {
		t.Fatal(err)
	}
	last := out.Results[0].Steps[1]
	if len(out.Results) != 1 || last.MaxLoad != 4 || last.MinLoad != 4 || last.Moved != 0 || last.LowerBound != 0 {
		t.Fatalf("got %+v", last)
	}
	if len(out.Skipped) != 1 || !strings.HasPrefix(out.Skipped[0], "ByConfig") {
		t.Fatalf("skipped %v", out.Skipped)
	}
}
