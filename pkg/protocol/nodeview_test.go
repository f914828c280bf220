package protocol

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func nodeView(name string, lines NodeViewLines) *corev1.ConfigMap {
	data, digest := NodeViewData(name, lines)
	return &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name, Annotations: map[string]string{DigestAnnotation: digest}}, Data: data}
}

func TestNodeViewRoundTrip(t *testing.T) {
	lines := NodeViewLines{}.
		With(NodeViewLine{Namespace: "b", Group: "g", GroupUID: "u1", MustSee: 4}).
		With(NodeViewLine{Namespace: "a", Group: "z", GroupUID: "u2", MustSee: 9}).
		With(NodeViewLine{Namespace: "a", Group: "g", GroupUID: "u3", MustSee: 1}).
		With(NodeViewLine{Namespace: "b", Group: "g", GroupUID: "u1", MustSee: 7})
	got, err := ReadNodeView(nodeView(NodeViewName("n1"), lines))
	if err != nil {
		t.Fatal(err)
	}
	var order []string
	for _, l := range got.Lines {
		order = append(order, l.Namespace+"/"+l.Group)
	}
	if want := "a/g a/z b/g"; strings.Join(order, " ") != want {
		t.Fatalf("lines in order %q, want %q", strings.Join(order, " "), want)
	}
	if l, ok := got.Line("b", "g"); !ok || l.MustSee != 7 {
		t.Fatalf("line b/g = %+v, %v; want must-see 7 (replaced, not added)", l, ok)
	}
	if _, ok := got.Without("a", "z").Line("a", "z"); ok {
		t.Fatal("Without left the line")
	}
	if _, ok := got.Line("c", "g"); ok {
		t.Fatal("a group without a line has one")
	}
}

func TestReadNodeViewRefuses(t *testing.T) {
	good := NodeViewLines{}.With(NodeViewLine{Namespace: "a", Group: "g", MustSee: 3})
	tests := []struct {
		name string
		edit func(cm *corev1.ConfigMap)
		want string
	}{
		{"edited without the digest", func(cm *corev1.ConfigMap) {
			cm.Data[NodeViewKey] = strings.Replace(cm.Data[NodeViewKey], `"mustSee":3`, `"mustSee":1`, 1)
		}, "digest"},
		{"no digest", func(cm *corev1.ConfigMap) { delete(cm.Annotations, DigestAnnotation) }, "digest"},
		{"unknown version", func(cm *corev1.ConfigMap) { redigest(cm, `{"version":2,"lines":[]}`) }, "format version 2"},
		{"junk", func(cm *corev1.ConfigMap) { redigest(cm, `{"version":`) }, "decoding"},
		{"generation 0", func(cm *corev1.ConfigMap) {
			redigest(cm, `{"version":1,"lines":[{"namespace":"a","group":"g","mustSee":0}]}`)
		}, "outside 1"},
		{"a group twice", func(cm *corev1.ConfigMap) {
			redigest(cm, `{"version":1,"lines":[{"namespace":"a","group":"g","mustSee":2},{"namespace":"a","group":"g","mustSee":1}]}`)
		}, "twice"},
		{"too many lines", func(cm *corev1.ConfigMap) {
			var b strings.Builder
			b.WriteString(`{"version":1,"lines":[`)
			for i := range MaxNodeViewLines + 1 {
				if i > 0 {
					b.WriteString(",")
				}
				b.WriteString(`{"namespace":"a","group":"g` + strings.Repeat("x", i%7) + `","mustSee":1}`)
			}
			b.WriteString("]}")
			redigest(cm, b.String())
		}, "more than"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cm := nodeView("node-view.n", good)
			tt.edit(cm)
			_, err := ReadNodeView(cm)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("ReadNodeView = %v, want an error containing %q", err, tt.want)
			}
		})
	}
}

func redigest(cm *corev1.ConfigMap, raw string) {
	cm.Data[NodeViewKey] = raw
	cm.Annotations[DigestAnnotation] = Digest(cm.Name, nil, cm.Data)
}

func TestNodeViewNameIsBounded(t *testing.T) {
	long := strings.Repeat("n", 253)
	if got := NodeViewName(long); len(got) > 253 || got == NodeViewName(long[:252]) {
		t.Fatalf("NodeViewName of a 253-character node = %q (%d characters)", got, len(got))
	}
	if got := NodeViewName("worker-1"); got != "node-view.worker-1" {
		t.Fatalf("NodeViewName(worker-1) = %q", got)
	}
}
