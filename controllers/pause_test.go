//go:build envtest

package controllers

import (
	"context"
	"maps"
	"slices"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/consumergroup-operator/consumergroup-operator/api/v1alpha1"
	"github.com/consumergroup-operator/consumergroup-operator/internal/testenv"
)

// TestPauseFreezesAssignment pauses a group, then adds a pod and deletes one: nothing is published, the
// Paused condition says why, and the departed pod's entry stays. Resuming publishes for the pods there
// are then.
func TestPauseFreezesAssignment(t *testing.T) {
	ns := newNamespace(t)
	startManager(t, ns)
	testenv.Group(ns, "p").Topic("t", testenv.Broker("b", 8, "")).Strategy(v1alpha1.Strategy{Type: v1alpha1.Sticky}).Create(t, k8s)
	pods := []string{"p-0", "p-1"}
	p0 := testenv.Pod(ns, "p-0", "p").Create(t, k8s)
	testenv.Pod(ns, "p-1", "p").Create(t, k8s)
	before := waitForAssignment(t, ns, "p", pods, partitionOf(8))
	waitForCondition(t, ns, "p", v1alpha1.ConditionPaused, metav1.ConditionFalse, v1alpha1.ReasonActive)

	pauseGroup(t, ns, "p", true)
	g := waitForCondition(t, ns, "p", v1alpha1.ConditionPaused, metav1.ConditionTrue, v1alpha1.ReasonPaused)
	if c := meta.FindStatusCondition(g.Status.Conditions, v1alpha1.ConditionReady); c.Status != metav1.ConditionFalse || c.Reason != v1alpha1.ReasonPaused {
		t.Errorf("Ready is %s/%s while paused, want False/Paused", c.Status, c.Reason)
	}
	if c := meta.FindStatusCondition(g.Status.Conditions, v1alpha1.ConditionDegraded); c.Status != metav1.ConditionFalse {
		t.Errorf("Degraded is %s while paused: a pause is not a fault", c.Status)
	}
	frozen := getAssignment(t, ns, "p").ResourceVersion

	passes := reconcileCount(t)
	testenv.Pod(ns, "p-2", "p").Create(t, k8s)
	must(t, k8s.Delete(context.Background(), p0, client.GracePeriodSeconds(0)))
	waitForPassAfter(t, passes)
	// Passes run on both changes; give them time to publish, were they going to.
	time.Sleep(time.Second)
	cm := getAssignment(t, ns, "p")
	if cm.ResourceVersion != frozen {
		t.Fatalf("the paused assignment was written: resourceVersion %s → %s", frozen, cm.ResourceVersion)
	}
	now, err := readPublished(cm)
	must(t, err)
	if now.Generation != before.Generation || len(now.Entries) != 2 || now.Entries["p-0"].Member == "" {
		t.Errorf("paused: generation %d with entries %v, want generation %d with p-0 and p-1 as before",
			now.Generation, slices.Sorted(maps.Keys(now.Entries)), before.Generation)
	}

	pauseGroup(t, ns, "p", false)
	waitForCondition(t, ns, "p", v1alpha1.ConditionPaused, metav1.ConditionFalse, v1alpha1.ReasonActive)
	waitForAssignment(t, ns, "p", []string{"p-1", "p-2"}, partitionOf(8))
}

func pauseGroup(t *testing.T, ns, name string, paused bool) {
	t.Helper()
	g := getGroup(t, ns, name)
	patch := client.MergeFrom(g.DeepCopy())
	g.Spec.Paused = paused
	must(t, k8s.Patch(context.Background(), g, patch))
}
