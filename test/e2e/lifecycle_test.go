//go:build e2e

package e2e

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/consumergroup-operator/consumergroup-operator/api/v1alpha1"
	"github.com/consumergroup-operator/consumergroup-operator/internal/testenv"
	"github.com/consumergroup-operator/consumergroup-operator/pkg/protocol"
)

// TestNodeDrain drains a node as `kubectl drain` does: it cordons the node, then evicts its pods through
// the Eviction API, which a PodDisruptionBudget (one pod unavailable at most) paces. Each evicted pod's
// queues leave it through the drain path (its preStop hook's Drain returns once the operator released
// them and the member acknowledged), and no queue is read twice.
func TestNodeDrain(t *testing.T) {
	const app, replicas = "payments", 6
	ns := namespace(t)
	f := runFleet(t, ns, app, app)
	testenv.Must(t, admin.Create(context.Background(), group(ns, app, 36)))
	one := intstr.FromInt32(1)
	testenv.Must(t, admin.Create(context.Background(), &policyv1.PodDisruptionBudget{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: app},
		Spec: policyv1.PodDisruptionBudgetSpec{MaxUnavailable: &one,
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": app}}},
	}))
	dep := deployment(ns, app, replicas)
	testenv.Must(t, admin.Create(context.Background(), dep))
	settled(t, ns, app, replicas, 2*time.Minute, f)

	// The node with the most of the group's pods.
	live, _ := podsOf(t, ns, app)
	perNode := map[string]int{}
	node := ""
	for _, p := range live {
		perNode[p.Spec.NodeName]++
		if perNode[p.Spec.NodeName] > perNode[node] {
			node = p.Spec.NodeName
		}
	}
	evicted := map[string]bool{} // readers
	for _, p := range live {
		if p.Spec.NodeName == node {
			evicted[p.Name+"/"+string(p.UID)] = true
		}
	}

	cordon(t, node, true)
	t.Cleanup(func() { cordon(t, node, false) })
	for _, p := range live {
		if p.Spec.NodeName != node {
			continue
		}
		testenv.Eventually(t, 2*time.Minute, func() error {
			err := adminCS.PolicyV1().Evictions(ns).Evict(context.Background(), &policyv1.Eviction{
				ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: p.Name},
			})
			if apierrors.IsNotFound(err) {
				return nil
			}
			return err // 429 while the budget allows no disruption
		})
	}
	testenv.Eventually(t, 2*time.Minute, func() error {
		live, all := podsOf(t, ns, app)
		for _, p := range live {
			if p.Spec.NodeName == node {
				return fmt.Errorf("pod %s still on %s", p.Name, node)
			}
		}
		if len(live) != replicas || all != replicas {
			return fmt.Errorf("%d pods, %d live", all, len(live))
		}
		return nil
	})
	g := settled(t, ns, app, replicas, time.Minute, f)
	f.checkNoDoubleReaders(t)
	for _, m := range g.Status.Members {
		var pod corev1.Pod
		testenv.Must(t, admin.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: m.Pod}, &pod))
		if pod.Spec.NodeName == node {
			t.Errorf("member %s is on the drained node %s", m.Pod, node)
		}
	}
	drains := f.drained()
	for reader := range evicted {
		d, ok := drains[reader]
		switch {
		case !ok:
			t.Errorf("evicted %s never drained", reader)
		case d.err != nil:
			t.Errorf("evicted %s: drain did not finish: %v", reader, d.err)
		}
	}
	t.Logf("drained %s: %d pods evicted; longest time a queue had no reader: %s", node, len(evicted), f.own.LongestGap().Round(time.Millisecond))
}

func cordon(t *testing.T, node string, unschedulable bool) {
	t.Helper()
	patch := fmt.Sprintf(`{"spec":{"unschedulable":%t}}`, unschedulable)
	testenv.Must(t, admin.Patch(context.Background(), &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: node}},
		client.RawPatch(types.MergePatchType, []byte(patch))))
}

// TestGroupDeletion deletes a group: the garbage collector removes its ConfigMaps. Its members' Leases
// belong to their pods too, and go with them.
func TestGroupDeletion(t *testing.T) {
	const app = "billing"
	ns := namespace(t)
	f := runFleet(t, ns, app, app)
	g := group(ns, app, 12)
	testenv.Must(t, admin.Create(context.Background(), g))
	dep := deployment(ns, app, 3)
	testenv.Must(t, admin.Create(context.Background(), dep))
	settled(t, ns, app, 3, 2*time.Minute, f)
	if cms, leases := countOurs(t, ns, app); cms == 0 || leases != 3 {
		t.Fatalf("before the deletion: %d ConfigMaps and %d Leases of the group, want some and 3", cms, leases)
	}

	testenv.Must(t, admin.Delete(context.Background(), g))
	testenv.Eventually(t, time.Minute, func() error {
		if cms, _ := countOurs(t, ns, app); cms > 0 {
			return fmt.Errorf("%d ConfigMaps of the deleted group left", cms)
		}
		return nil
	})
	scale(t, dep, 0)
	testenv.Eventually(t, 2*time.Minute, func() error {
		if _, leases := countOurs(t, ns, app); leases > 0 {
			return fmt.Errorf("%d Leases of the deleted group left once its pods are gone", leases)
		}
		return nil
	})
}

// countOurs counts the ConfigMaps and Leases labelled as group's in ns.
func countOurs(t *testing.T, ns, group string) (cms, leases int) {
	t.Helper()
	ours := client.MatchingLabels{protocol.GroupLabel: group}
	var cmList corev1.ConfigMapList
	testenv.Must(t, admin.List(context.Background(), &cmList, client.InNamespace(ns), ours))
	var leaseList coordinationv1.LeaseList
	testenv.Must(t, admin.List(context.Background(), &leaseList, client.InNamespace(ns), ours))
	return len(cmList.Items), len(leaseList.Items)
}

// TestNamespaceDeletion deletes the namespace of a running group right after its consumers' node lost
// power (every process stops at once, claims standing): the namespace controller deletes the pods, the
// garbage collector strips the pods from their Leases, then everything goes. Nothing is left behind, the
// group's generation does not run away, and the operator logs no error about the namespace.
func TestNamespaceDeletion(t *testing.T) {
	const app = "shipping"
	ns := namespace(t)
	f := runFleet(t, ns, app, app)
	testenv.Must(t, admin.Create(context.Background(), group(ns, app, 12)))
	testenv.Must(t, admin.Create(context.Background(), deployment(ns, app, 3)))
	g := settled(t, ns, app, 3, 2*time.Minute, f)
	f.stop()

	nsObj := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}
	testenv.Must(t, admin.Delete(context.Background(), nsObj))
	highest := g.Status.AssignmentGeneration
	testenv.Poll(t, 2*time.Minute, 50*time.Millisecond, nil, func() error {
		var now v1alpha1.ConsumerGroup
		if err := admin.Get(context.Background(), client.ObjectKeyFromObject(g), &now); err == nil {
			highest = max(highest, now.Status.AssignmentGeneration)
		}
		return gone(nsObj)
	})
	// A member's departure takes a generation or two; a recovery would jump by a hundred.
	if highest > g.Status.AssignmentGeneration+10 {
		t.Errorf("the generation ran from %d to %d while the namespace was deleted", g.Status.AssignmentGeneration, highest)
	}
	// Give a loop time to show, then read the operator's log for errors about this namespace.
	time.Sleep(3 * time.Second)
	if errs := operatorErrors(t, ns); len(errs) > 0 {
		t.Errorf("the operator logged %d errors about namespace %s, the first:\n%s", len(errs), ns, strings.Join(errs[:min(len(errs), 5)], "\n"))
	}
}

// operatorErrors returns the operator's error log lines that mention ns.
func operatorErrors(t *testing.T, ns string) []string {
	t.Helper()
	log, err := os.Open(operatorLog)
	testenv.Must(t, err)
	defer func() { _ = log.Close() }()
	var errs []string
	lines := bufio.NewScanner(log)
	lines.Buffer(make([]byte, 1<<20), 1<<20)
	for lines.Scan() {
		if line := lines.Text(); strings.Contains(line, `"level":"error"`) && strings.Contains(line, ns) {
			errs = append(errs, line)
		}
	}
	testenv.Must(t, lines.Err())
	return errs
}
