package protocol

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
)

// A node view is the ConfigMap the operator keeps, in its own namespace, for each node that runs members:
// for every group with members on the node, the lowest generation a member of it must have in its view
// before the node agent may confirm that view (docs/protocol.md, node mode). The agent reads it once a
// second for every member on its node, instead of each member reading its own assignment's metadata.
//
// A line only rises while its group lives: the operator raises it to the group's newest published
// generation before it counts on the promise of a member on the node, and a member whose view is older is
// not confirmed. A line that is missing, or a view whose digest does not match, confirms nothing.
const (
	// NodeViewLabel marks the node views; its value is "true".
	NodeViewLabel = "messaging.consumergroup.io/node-view"
	// NodeViewNodeAnnotation names the node a view is for: a node's name may be too long for a label.
	NodeViewNodeAnnotation = "messaging.consumergroup.io/node"
	// NodeViewKey is the data key that holds a view's lines (NodeViewLines, JSON).
	NodeViewKey = "groups"
	// NodeViewVersion is the format version of the lines.
	NodeViewVersion = 1
	// MaxNodeViewLines bounds the lines of one view: what a reader decodes is bounded whatever the
	// ConfigMap says.
	MaxNodeViewLines = 4096
)

// NodeViewName is the name of the node view of node.
func NodeViewName(node string) string { return boundedName("node-view." + node) }

// NodeViewLine is one group's line in a node view.
type NodeViewLine struct {
	Namespace string    `json:"namespace"`
	Group     string    `json:"group"`
	GroupUID  types.UID `json:"groupUID"`
	// MustSee is the lowest generation of the group's assignment a member's view may hold and be
	// confirmed: the newest the group had published when the operator last raised the line.
	MustSee int64 `json:"mustSee"`
}

// NodeViewLines are a node view's lines, in the order of CompareNodeViewLines, at most one per group.
type NodeViewLines struct {
	Version int            `json:"version"`
	Lines   []NodeViewLine `json:"lines"`
}

// CompareNodeViewLines orders lines by namespace, then group.
func CompareNodeViewLines(a, b NodeViewLine) int {
	if c := strings.Compare(a.Namespace, b.Namespace); c != 0 {
		return c
	}
	return strings.Compare(a.Group, b.Group)
}

// Line is the line of the group namespace/group.
func (v NodeViewLines) Line(namespace, group string) (NodeViewLine, bool) {
	i, ok := slices.BinarySearchFunc(v.Lines, NodeViewLine{Namespace: namespace, Group: group}, CompareNodeViewLines)
	if !ok {
		return NodeViewLine{}, false
	}
	return v.Lines[i], true
}

// With returns the lines with line in place of the group's line, or added.
func (v NodeViewLines) With(line NodeViewLine) NodeViewLines {
	out := NodeViewLines{Version: NodeViewVersion, Lines: slices.Clone(v.Lines)}
	i, ok := slices.BinarySearchFunc(out.Lines, line, CompareNodeViewLines)
	if ok {
		out.Lines[i] = line
	} else {
		out.Lines = slices.Insert(out.Lines, i, line)
	}
	return out
}

// Without returns the lines without the group namespace/group's line.
func (v NodeViewLines) Without(namespace, group string) NodeViewLines {
	out := NodeViewLines{Version: NodeViewVersion, Lines: slices.Clone(v.Lines)}
	if i, ok := slices.BinarySearchFunc(out.Lines, NodeViewLine{Namespace: namespace, Group: group}, CompareNodeViewLines); ok {
		out.Lines = slices.Delete(out.Lines, i, i+1)
	}
	return out
}

// NodeViewData is the data and the digest of a node view called name holding lines.
func NodeViewData(name string, lines NodeViewLines) (data map[string]string, digest string) {
	lines.Version = NodeViewVersion
	if lines.Lines == nil {
		lines.Lines = []NodeViewLine{}
	}
	raw, err := json.Marshal(lines)
	if err != nil {
		panic(fmt.Sprintf("encoding node view lines: %v", err)) // strings and integers always encode
	}
	data = map[string]string{NodeViewKey: string(raw)}
	return data, Digest(name, nil, data)
}

// ErrNodeViewEdited says that a node view's digest does not match what it holds: someone other than the
// operator wrote it, and it confirms nothing until the operator writes it again.
var ErrNodeViewEdited = errors.New("the node view's digest does not match its data")

// ReadNodeView reads a node view's lines. A view that anyone but the operator edited, of a format
// version this reader does not know, with lines out of order or doubled, or with more than
// MaxNodeViewLines, is an error: its reader confirms nothing from it.
func ReadNodeView(cm *corev1.ConfigMap) (NodeViewLines, error) {
	if cm.Annotations[DigestAnnotation] != Digest(cm.Name, nil, cm.Data) {
		return NodeViewLines{}, ErrNodeViewEdited
	}
	raw := cm.Data[NodeViewKey]
	var v NodeViewLines
	if err := json.Unmarshal([]byte(raw), &v); err != nil {
		return NodeViewLines{}, fmt.Errorf("decoding node view %s: %w", cm.Name, err)
	}
	switch {
	case v.Version != NodeViewVersion:
		return NodeViewLines{}, fmt.Errorf("node view %s has format version %d; this reader knows %d", cm.Name, v.Version, NodeViewVersion)
	case len(v.Lines) > MaxNodeViewLines:
		return NodeViewLines{}, fmt.Errorf("node view %s has %d lines, more than %d", cm.Name, len(v.Lines), MaxNodeViewLines)
	}
	for i, l := range v.Lines {
		if l.MustSee < 1 || l.MustSee > MaxGeneration {
			return NodeViewLines{}, fmt.Errorf("node view %s: group %s/%s must see generation %d, outside 1 to %d", cm.Name, l.Namespace, l.Group, l.MustSee, MaxGeneration)
		}
		if i > 0 && CompareNodeViewLines(v.Lines[i-1], l) >= 0 {
			return NodeViewLines{}, fmt.Errorf("node view %s: its lines are not in order, or name group %s/%s twice", cm.Name, l.Namespace, l.Group)
		}
	}
	return v, nil
}
