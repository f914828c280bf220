//go:build envtest

package controllers

import (
	"context"
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/consumergroup-operator/consumergroup-operator/pkg/protocol"
)

// nodeViewLine reads group nv's line in node's view from the API server; MustSee 0 when there is none.
func nodeViewLine(t *testing.T, ns, node string) (protocol.NodeViewLine, error) {
	t.Helper()
	var cm corev1.ConfigMap
	if err := k8s.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: protocol.NodeViewName(node)}, &cm); err != nil {
		return protocol.NodeViewLine{}, err
	}
	lines, err := protocol.ReadNodeView(&cm)
	if err != nil {
		return protocol.NodeViewLine{}, err
	}
	l, _ := lines.Line(ns, "nv")
	return l, nil
}

// TestNodeViewsFollowTheGroup runs the operator with node views: each node a member pod runs on gets a
// line for the group, asking at least for the generation in force. A lost node's queues are revoked and
// move on within the promise, once that node's line asks for the generation that revoked them; the other
// node's line is not written, and no queue has two readers by the members' records. A node view deleted
// or edited by someone else is written again; a group deleted leaves them.
func TestNodeViewsFollowTheGroup(t *testing.T) {
	ns := newNamespace(t)
	startManager(t, ns, func(r *ConsumerGroupReconciler) { r.NodeViewsNamespace = ns })
	w := settleOnTwoNodes(t, ns, "nv")
	own, nodeA, nodeB, onA, onB, loseNodeA := w.own, w.nodeA, w.nodeB, w.onA, w.onB, w.loseNodeA
	for _, node := range []string{nodeA, nodeB} {
		eventually(t, 10*time.Second, func() error {
			l, err := nodeViewLine(t, ns, node)
			if err == nil && l.MustSee < 1 {
				err = fmt.Errorf("node view of %s has no line for the group", node)
			}
			return err
		})
	}
	held := own.Reading(onA.Reader())
	// The revocation is the first generation after the settled one. It is taken from the settled status,
	// not from the status once the queues moved: the grant's ConfigMap is published before its status.
	revokedIn := getGroup(t, ns, "nv").Status.AssignmentGeneration + 1

	loseNodeA()
	onA.Partition(true)
	lost := time.Now()
	waitUntilReading(t, own, onB, held, 20*time.Second)
	t.Logf("the lost node's queues were read again %v after it was lost", time.Since(lost).Round(time.Millisecond))
	assertNoOverlap(t, own)
	if l, err := nodeViewLine(t, ns, nodeA); err != nil || l.MustSee < revokedIn {
		t.Fatalf("node view of the lost node: line %+v (%v) once the queues moved; want it to ask for generation %d at least", l, err, revokedIn)
	}
	// Only the revoked member's node needs the generation: the other line is not written.
	if l, err := nodeViewLine(t, ns, nodeB); err != nil || l.MustSee >= revokedIn {
		t.Fatalf("node view of the other node: line %+v (%v); want it as it was, below generation %d", l, err, revokedIn)
	}

	// Someone else deletes node B's view, then edits it: the operator writes it again.
	ctx := context.Background()
	must(t, k8s.Delete(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: protocol.NodeViewName(nodeB)}}))
	eventually(t, 10*time.Second, func() error {
		_, err := nodeViewLine(t, ns, nodeB)
		return err
	})
	var cm corev1.ConfigMap
	must(t, k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: protocol.NodeViewName(nodeB)}, &cm))
	cm.Data[protocol.NodeViewKey] = `{"version":1,"lines":[]}`
	must(t, k8s.Update(ctx, &cm))
	eventually(t, 10*time.Second, func() error {
		l, err := nodeViewLine(t, ns, nodeB)
		if err == nil && l.MustSee < revokedIn {
			err = fmt.Errorf("node B's line asks for %d, want at least %d", l.MustSee, revokedIn)
		}
		return err
	})

	// The group is deleted: its lines leave the node views, which confirm its members no more.
	must(t, k8s.Delete(ctx, getGroup(t, ns, "nv")))
	for _, node := range []string{nodeA, nodeB} {
		eventually(t, 10*time.Second, func() error {
			l, err := nodeViewLine(t, ns, node)
			if err == nil && l.MustSee != 0 {
				err = fmt.Errorf("node view of %s still has the deleted group's line %+v", node, l)
			}
			return err
		})
	}
}
