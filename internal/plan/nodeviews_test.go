package plan

import (
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/types"
)

func TestLineHistoryKnownSince(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	at := func(s int) time.Time { return t0.Add(time.Duration(s) * time.Second) }
	tests := []struct {
		name       string
		sightings  []lineSighting
		generation int64
		want       time.Time
		wantOK     bool
	}{
		{name: "nothing known", generation: 3},
		{name: "asks for less", sightings: []lineSighting{{at(1), 2}}, generation: 3},
		{name: "asks for exactly it", sightings: []lineSighting{{at(1), 3}}, generation: 3, want: at(1), wantOK: true},
		{name: "from the first of the last run that asks for enough", sightings: []lineSighting{{at(1), 2}, {at(2), 4}, {at(3), 5}}, generation: 3, want: at(2), wantOK: true},
		{name: "a line removed confirms nothing", sightings: []lineSighting{{at(1), 2}, {at(4), NoLine}}, generation: 9, want: at(4), wantOK: true},
		{name: "written again lower after its removal", sightings: []lineSighting{{at(1), 5}, {at(2), NoLine}, {at(3), 4}}, generation: 5},
		{name: "written again lower, then raised", sightings: []lineSighting{{at(1), 5}, {at(2), NoLine}, {at(3), 4}, {at(6), 7}}, generation: 5, want: at(6), wantOK: true},
		{name: "seen again unchanged: from the first time", sightings: []lineSighting{{at(1), 2}, {at(2), 4}, {at(3), 4}, {at(5), 4}}, generation: 4, want: at(2), wantOK: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var h LineHistory
			for _, s := range tt.sightings {
				h = h.Add(s.at, s.mustSee)
			}
			got, ok := h.KnownSince(tt.generation)
			if ok != tt.wantOK || !got.Equal(tt.want) {
				t.Fatalf("KnownSince(%d) = %v, %v; want %v, %v", tt.generation, got, ok, tt.want, tt.wantOK)
			}
		})
	}
}

func TestLineHistoryAddIgnoresOlderAndForgetsOldest(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	h := LineHistory{}.Add(t0.Add(time.Second), 5).Add(t0, 1)
	if last, _ := h.Last(); last != 5 || len(h) != 1 {
		t.Fatalf("an older sighting was added: %+v", h)
	}
	for i := range 2 * maxLineSightings {
		h = h.Add(t0.Add(time.Duration(2+i)*time.Second), 6+int64(i))
	}
	if len(h) != maxLineSightings {
		t.Fatalf("history holds %d sightings, want at most %d", len(h), maxLineSightings)
	}
	// The oldest kept sighting bounds what is known: forgetting makes a line known later, not sooner.
	if got, ok := h.KnownSince(6); !ok || !got.Equal(h[0].at) {
		t.Fatalf("KnownSince(6) = %v, %v; want %v", got, ok, h[0].at)
	}
}

func TestLineHistoryAddKeepsOneSightingOfAnUnchangedLine(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	h := LineHistory{}.Add(t0, 3)
	for i := range 100 {
		h = h.Add(t0.Add(time.Duration(1+i)*time.Second), 3)
	}
	if len(h) != 1 || cap(h) > 1 {
		t.Fatalf("100 sightings of an unchanged line kept %d (room for %d): %+v", len(h), cap(h), h)
	}
	if got, ok := h.KnownSince(3); !ok || !got.Equal(t0) {
		t.Fatalf("KnownSince(3) = %v, %v; want %v", got, ok, t0)
	}
}

func TestNodeViewsKnownSince(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	a := LineHistory{}.Add(t0.Add(2*time.Second), 4)
	b := LineHistory{}.Add(t0.Add(5*time.Second), 6)
	both := NodeViews{Enabled: true, Lines: map[string]LineHistory{"n1": a, "n2": b}}
	tests := []struct {
		name   string
		nv     NodeViews
		node   string
		gen    int64
		want   time.Time
		wantOK bool
	}{
		{"off: no constraint", NodeViews{Lines: map[string]LineHistory{"n1": nil}}, "", 4, time.Time{}, true},
		{"on, no lines: no agent confirms anything", NodeViews{Enabled: true}, "", 4, time.Time{}, true},
		{"node unknown: the latest of the lines", both, "", 4, t0.Add(5 * time.Second), true},
		{"node unknown: one line asks for less", both, "", 5, time.Time{}, false},
		{"node unknown: one line not known", NodeViews{Enabled: true, Lines: map[string]LineHistory{"n1": a, "n2": nil}}, "", 4, time.Time{}, false},
		{"on its node: that line alone", both, "n1", 4, t0.Add(2 * time.Second), true},
		{"on its node: it asks for less, the other line does not count", both, "n1", 5, time.Time{}, false},
		{"on a node without a line", both, "n3", 9, time.Time{}, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, ok := tt.nv.KnownSince(tt.node, tt.gen)
			if ok != tt.wantOK || !got.Equal(tt.want) {
				t.Fatalf("KnownSince(%d) = %v, %v; want %v, %v", tt.gen, got, ok, tt.want, tt.wantOK)
			}
		})
	}
}

func TestNodeLinesMustSee(t *testing.T) {
	nodeOf := func(pod string, _ types.UID) string { return map[string]string{"a": "n1", "b": "n2"}[pod] }
	tests := []struct {
		name         string
		state        HandoffState
		firstWritten int64
		want         LinesMustSee
	}{
		{"nothing waits", HandoffState{}, 0, LinesMustSee{}},
		{"the first write", HandoffState{}, 4, LinesMustSee{Everywhere: 4}},
		{"on each revoked pod's node, the newest revocation not lapsed",
			HandoffState{Revocations: []Revocation{{Pod: "a", Generation: 5}, {Pod: "a", Generation: 9, Lapsed: true}, {Pod: "a", Generation: 7}, {Pod: "b", Generation: 6}}}, 4,
			LinesMustSee{Everywhere: 4, ByNode: map[string]int64{"n1": 7, "n2": 6}}},
		{"a pod whose node is unknown: everywhere", HandoffState{Revocations: []Revocation{{Pod: "gone", Generation: 8}, {Pod: "a", Generation: 5}}}, 0,
			LinesMustSee{Everywhere: 8, ByNode: map[string]int64{"n1": 5}}},
		{"fenced revocations wait on no promise", HandoffState{Fenced: []Revocation{{Pod: "a", Generation: 8}}}, 2, LinesMustSee{Everywhere: 2}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := NodeLinesMustSee(tt.state, tt.firstWritten, nodeOf)
			if got.Everywhere != tt.want.Everywhere || len(got.ByNode) != len(tt.want.ByNode) {
				t.Fatalf("NodeLinesMustSee = %+v, want %+v", got, tt.want)
			}
			for n, g := range tt.want.ByNode {
				if got.ByNode[n] != g {
					t.Fatalf("NodeLinesMustSee = %+v, want %+v", got, tt.want)
				}
			}
			if got.On("n1") != max(tt.want.Everywhere, tt.want.ByNode["n1"]) {
				t.Fatalf("On(n1) = %d", got.On("n1"))
			}
		})
	}
}
