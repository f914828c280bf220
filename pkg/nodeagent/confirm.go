package nodeagent

import (
	"errors"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"

	"github.com/consumergroup-operator/consumergroup-operator/pkg/protocol"
)

// query is one member's question: does the node view let the group (namespace, group, groupUID) be
// confirmed at generation? The namespace is the one of the pod the token is bound to, never the request's.
type query struct {
	namespace, group string
	groupUID         types.UID
	generation       int64
}

// viewRead is what one read of the node view showed: its lines, or why it confirms nothing.
type viewRead struct {
	lines protocol.NodeViewLines
	// refusal is why the read confirms nothing; "" when lines can be used. missing says the view does
	// not exist.
	refusal string
	missing bool
}

// readOf interprets the answer to one GET of the node view called name. The reasons are fixed sentences:
// an error from the API server, or bytes of a ConfigMap anyone may have written, are logged by the agent,
// never sent to a member.
func readOf(name string, cm *corev1.ConfigMap, err error) viewRead {
	switch {
	case apierrors.IsNotFound(err):
		return viewRead{refusal: fmt.Sprintf("the node view %s does not exist: the operator has not written it", name), missing: true}
	case err != nil:
		return viewRead{refusal: "the node agent could not read its node view from the API server"}
	}
	lines, err := protocol.ReadNodeView(cm)
	switch {
	case errors.Is(err, protocol.ErrNodeViewEdited):
		return viewRead{refusal: fmt.Sprintf("the node view %s was edited by someone other than the operator (its digest does not match): it confirms nothing until the operator writes it again", name)}
	case err != nil:
		return viewRead{refusal: fmt.Sprintf("the node view %s is not in a format this agent reads", name)}
	}
	return viewRead{lines: lines}
}

// answer is what read says to q: confirmed only when the read lists q's group, for the same incarnation,
// with a must-see generation at most q's.
func answer(read viewRead, q query) protocol.NodeAgentConfirmResponse {
	if read.refusal != "" {
		return protocol.NodeAgentConfirmResponse{Reason: read.refusal}
	}
	line, ok := read.lines.Line(q.namespace, q.group)
	switch {
	case !ok:
		return refused("the node view has no line for group %s/%s", q.namespace, q.group)
	case line.GroupUID != q.groupUID:
		return refused("the node view's line for group %s/%s is for incarnation %q of the group, the view for %q",
			q.namespace, q.group, line.GroupUID, q.groupUID)
	case q.generation < line.MustSee:
		return refused("the view holds generation %d of group %s/%s, which must see generation %d",
			q.generation, q.namespace, q.group, line.MustSee)
	}
	return protocol.NodeAgentConfirmResponse{Confirmed: true}
}

func refused(format string, args ...any) protocol.NodeAgentConfirmResponse {
	return protocol.NodeAgentConfirmResponse{Reason: fmt.Sprintf(format, args...)}
}
