package controllers

import (
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/workqueue"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/consumergroup-operator/consumergroup-operator/internal/plan"
	"github.com/consumergroup-operator/consumergroup-operator/pkg/protocol"
)

func TestPlanNodeViews(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	const uid = types.UID("g-uid")
	line := func(mustSee int64) protocol.NodeViewLine {
		return protocol.NodeViewLine{Namespace: "ns", Group: "g", GroupUID: uid, MustSee: mustSee}
	}
	knows := func(mustSee int64) plan.LineHistory { return plan.LineHistory{}.Add(t0, mustSee) }
	tests := []struct {
		name     string
		podNodes []string
		cached   map[string]protocol.NodeViewLine
		known    map[string]plan.LineHistory
		need     plan.LinesMustSee
		want     nodeViewWork
	}{
		{name: "nothing anywhere"},
		{name: "a node with a pod and no line gets one", podNodes: []string{"n2", "n1"},
			cached: map[string]protocol.NodeViewLine{"n1": line(3)}, known: map[string]plan.LineHistory{"n1": knows(3)},
			want: nodeViewWork{raise: []string{"n2"}}},
		{name: "steady: lines there, nothing waits", podNodes: []string{"n1"},
			cached: map[string]protocol.NodeViewLine{"n1": line(3)}, want: nodeViewWork{}},
		{name: "a promise waits on a line that asks for less", podNodes: []string{"n1", "n2"},
			cached: map[string]protocol.NodeViewLine{"n1": line(3), "n2": line(5)},
			known:  map[string]plan.LineHistory{"n1": knows(3), "n2": knows(5)}, need: plan.LinesMustSee{Everywhere: 5},
			want: nodeViewWork{raise: []string{"n1"}}},
		{name: "a line this operator knows nothing of is learnt", podNodes: []string{"n1"},
			cached: map[string]protocol.NodeViewLine{"n1": line(7)}, need: plan.LinesMustSee{Everywhere: 5},
			want: nodeViewWork{raise: []string{"n1"}}},
		{name: "what the operator knows lags the cache", podNodes: []string{"n1"},
			cached: map[string]protocol.NodeViewLine{"n1": line(7)}, known: map[string]plan.LineHistory{"n1": knows(4)}, need: plan.LinesMustSee{Everywhere: 5},
			want: nodeViewWork{raise: []string{"n1"}}},
		{name: "a line of an earlier group of the name", podNodes: []string{"n1"},
			cached: map[string]protocol.NodeViewLine{"n1": {Namespace: "ns", Group: "g", GroupUID: "old", MustSee: 9}},
			want:   nodeViewWork{raise: []string{"n1"}}},
		{name: "a promise waits on one node's line only", podNodes: []string{"n1", "n2"},
			cached: map[string]protocol.NodeViewLine{"n1": line(3), "n2": line(3)},
			known:  map[string]plan.LineHistory{"n1": knows(3), "n2": knows(3)}, need: plan.LinesMustSee{ByNode: map[string]int64{"n2": 5}},
			want: nodeViewWork{raise: []string{"n2"}}},
		{name: "lines on nodes without a pod go, cached or only known", podNodes: []string{"n1"},
			cached: map[string]protocol.NodeViewLine{"n1": line(3), "n3": line(3)},
			known:  map[string]plan.LineHistory{"n1": knows(3), "n4": knows(2), "n5": knows(plan.NoLine)},
			want:   nodeViewWork{remove: []string{"n3", "n4"}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			podNodes := map[string]bool{}
			for _, n := range tt.podNodes {
				podNodes[n] = true
			}
			if got := planNodeViews(podNodes, tt.cached, tt.known, uid, tt.need); !reflect.DeepEqual(got, tt.want) {
				t.Fatalf("planNodeViews = %+v, want %+v", got, tt.want)
			}
		})
	}
}

// What several passes ask of one line before its node view is written comes to one change: the later
// incarnation of the group, the higher generation, or the removal asked last; applied, it never lowers a
// line of the same incarnation.
func TestLineChanges(t *testing.T) {
	g := types.NamespacedName{Namespace: "ns", Name: "g"}
	raise := func(uid types.UID, gen int64) lineChange { return lineChange{uid: uid, mustSee: gen} }
	remove := lineChange{remove: true}
	merges := []struct {
		name        string
		first, then lineChange
		want        lineChange
	}{
		{"the higher generation", raise("u", 7), raise("u", 5), raise("u", 7)},
		{"a later incarnation", raise("u", 7), raise("v", 2), raise("v", 2)},
		{"a removal asked last", raise("u", 7), remove, remove},
		{"a raise after a removal", remove, raise("u", 3), raise("u", 3)},
	}
	for _, tt := range merges {
		if got := tt.first.merge(tt.then); got != tt.want {
			t.Errorf("%s: %+v then %+v = %+v, want %+v", tt.name, tt.first, tt.then, got, tt.want)
		}
	}
	lines := protocol.NodeViewLines{}.With(protocol.NodeViewLine{Namespace: "ns", Group: "g", GroupUID: "u", MustSee: 6})
	applies := []struct {
		name string
		c    lineChange
		want int64 // the line's must-see afterwards; 0 for none
	}{
		{"never lowered", raise("u", 4), 6},
		{"raised", raise("u", 9), 9},
		{"another incarnation's line replaced", raise("v", 2), 2},
		{"removed", remove, 0},
	}
	for _, tt := range applies {
		l, _ := tt.c.apply(lines, g).Line("ns", "g")
		if l.MustSee != tt.want {
			t.Errorf("%s: the line asks for %d, want %d", tt.name, l.MustSee, tt.want)
		}
	}
}

// TestLinesOfDecodesAViewOncePerVersion: a pass reads the cached views' lines decoded at their
// resourceVersion; a new version is decoded again, and a view that does not read stays unread.
func TestLinesOfDecodesAViewOncePerVersion(t *testing.T) {
	view := func(rv string, mustSee int64) *corev1.ConfigMap {
		name := protocol.NodeViewName("n1")
		data, digest := protocol.NodeViewData(name, protocol.NodeViewLines{}.
			With(protocol.NodeViewLine{Namespace: "ns", Group: "g", GroupUID: "u", MustSee: mustSee}))
		return &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name, ResourceVersion: rv,
			Annotations: map[string]string{protocol.DigestAnnotation: digest}}, Data: data}
	}
	mustSee := func(lines protocol.NodeViewLines, err error) int64 {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		l, ok := lines.Line("ns", "g")
		if !ok {
			t.Fatalf("no line in %+v", lines)
		}
		return l.MustSee
	}
	nv := &nodeViews{}
	if got := mustSee(nv.linesOf(view("1", 3))); got != 3 {
		t.Fatalf("version 1: must see %d, want 3", got)
	}
	// The same version is not decoded again: its text (which a version cannot change) is not read.
	if got := mustSee(nv.linesOf(view("1", 4))); got != 3 {
		t.Fatalf("version 1 again: must see %d, want the decoded 3", got)
	}
	if got := mustSee(nv.linesOf(view("2", 4))); got != 4 {
		t.Fatalf("version 2: must see %d, want 4", got)
	}
	edited := view("3", 5)
	edited.Data[protocol.NodeViewKey] += " "
	if _, err := nv.linesOf(edited); !errors.Is(err, protocol.ErrNodeViewEdited) {
		t.Fatalf("an edited view: %v, want %v", err, protocol.ErrNodeViewEdited)
	}
	if _, err := nv.linesOf(edited); !errors.Is(err, protocol.ErrNodeViewEdited) {
		t.Fatalf("an edited view, again: %v, want %v", err, protocol.ErrNodeViewEdited)
	}
	for i := range maxParsedViews + 1 {
		cm := view("1", 1)
		cm.Name = fmt.Sprintf("view-%d", i)
		_, _ = nv.linesOf(cm)
		if len(nv.parsed) > maxParsedViews {
			t.Fatalf("%d views kept, more than %d", len(nv.parsed), maxParsedViews)
		}
	}
}

// TestViewChangedKeepsEachGroupsViews: the node views' watch events keep, by group, the views that hold a
// line of it, and wake the groups whose lines a change removed or lowered, never those it raised or added.
func TestViewChangedKeepsEachGroupsViews(t *testing.T) {
	rv := 0
	view := func(node string, lines ...protocol.NodeViewLine) *corev1.ConfigMap {
		rv++
		name := protocol.NodeViewName(node)
		var all protocol.NodeViewLines
		for _, l := range lines {
			all = all.With(l)
		}
		data, digest := protocol.NodeViewData(name, all)
		return &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "operator", ResourceVersion: fmt.Sprint(rv),
			Labels:      map[string]string{protocol.NodeViewLabel: "true"},
			Annotations: map[string]string{protocol.DigestAnnotation: digest, protocol.NodeViewNodeAnnotation: node}}, Data: data}
	}
	line := func(group string, mustSee int64) protocol.NodeViewLine {
		return protocol.NodeViewLine{Namespace: "ns", Group: group, GroupUID: types.UID(group + "-uid"), MustSee: mustSee}
	}
	a, b := types.NamespacedName{Namespace: "ns", Name: "a"}, types.NamespacedName{Namespace: "ns", Name: "b"}
	n1, n2 := protocol.NodeViewName("n1"), protocol.NodeViewName("n2")
	nv := newNodeViews(nil, nil, "operator", nil)
	q := workqueue.NewTypedRateLimitingQueue(workqueue.DefaultTypedControllerRateLimiter[reconcile.Request]())
	defer q.ShutDown()
	woken := func() []types.NamespacedName {
		var out []types.NamespacedName
		for q.Len() > 0 {
			r, _ := q.Get()
			out = append(out, r.NamespacedName)
			q.Done(r)
			q.Forget(r)
		}
		slices.SortFunc(out, func(x, y types.NamespacedName) int { return strings.Compare(x.String(), y.String()) })
		return out
	}
	step := func(name string, old, new *corev1.ConfigMap, wantViews map[types.NamespacedName][]string, wantWoken []types.NamespacedName) {
		t.Helper()
		var o, n client.Object
		if old != nil {
			o = old
		}
		if new != nil {
			n = new
		}
		nv.viewChanged(o, n, q)
		if !reflect.DeepEqual(nv.viewsOf, wantViews) {
			t.Fatalf("%s: views by group %v, want %v", name, nv.viewsOf, wantViews)
		}
		if got := woken(); !slices.Equal(got, wantWoken) {
			t.Fatalf("%s: woke %v, want %v", name, got, wantWoken)
		}
	}
	v1 := view("n1", line("a", 1), line("b", 1))
	step("n1 listed", nil, v1, map[types.NamespacedName][]string{a: {n1}, b: {n1}}, nil)
	v2 := view("n2", line("a", 3))
	step("n2 created", nil, v2, map[types.NamespacedName][]string{a: {n1, n2}, b: {n1}}, nil)
	v1b := view("n1", line("a", 2))
	step("b's line leaves n1, a's rises", v1, v1b, map[types.NamespacedName][]string{a: {n1, n2}}, []types.NamespacedName{b})
	v2b := view("n2", line("a", 2))
	step("a's line on n2 lowered by someone else", v2, v2b, map[types.NamespacedName][]string{a: {n1, n2}}, []types.NamespacedName{a})
	step("n1 deleted", v1b, nil, map[types.NamespacedName][]string{a: {n2}}, []types.NamespacedName{a})
	edited := view("n2", line("a", 2))
	edited.Data[protocol.NodeViewKey] += " "
	step("n2 edited so that it no longer reads", v2b, edited, map[types.NamespacedName][]string{}, []types.NamespacedName{a})
}
