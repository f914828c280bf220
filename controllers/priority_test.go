package controllers

import (
	"context"
	"slices"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/controller/priorityqueue"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/consumergroup-operator/consumergroup-operator/api/v1alpha1"
	"github.com/consumergroup-operator/consumergroup-operator/internal/plan"
)

func TestPassPriorityIsUrgentWhileQueuesAreWithheld(t *testing.T) {
	for _, tc := range []struct {
		name    string
		handoff plan.HandoffReport
		want    int
	}{
		{name: "nothing withheld", want: routinePriority},
		{name: "recovering, nothing withheld", handoff: plan.HandoffReport{Recovering: 2}, want: routinePriority},
		{name: "a queue withheld", handoff: plan.HandoffReport{Withheld: 1, FirstWithheld: "q"}, want: urgentPriority},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := passPriority(&plan.Report{Handoff: tc.handoff})
			if got == nil || *got != tc.want {
				t.Errorf("passPriority = %v, want %d (never unset: the pass that ran would pass its own on)", got, tc.want)
			}
		})
	}
}

// A group woken urgently leaves controller-runtime's priority queue before the routine passes queued
// ahead of it, one already queued among them included.
func TestUrgentGroupsLeaveTheQueueFirst(t *testing.T) {
	q := priorityqueue.New[reconcile.Request]("urgent-groups-test")
	defer q.ShutDown()
	group := func(name string) reconcile.Request {
		return reconcile.Request{NamespacedName: types.NamespacedName{Namespace: "ns", Name: name}}
	}
	for _, name := range []string{"a", "b", "c", "late"} {
		q.Add(group(name))
	}
	wake := enqueueUrgently()
	for _, name := range []string{"late", "lost"} {
		wake.Generic(context.Background(), event.GenericEvent{Object: &v1alpha1.ConsumerGroup{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name}}}, q)
	}
	var got []string
	for range 5 {
		req, priority, shutdown := q.GetWithPriority()
		if shutdown {
			t.Fatal("the queue shut down")
		}
		got = append(got, req.Name)
		if want := req.Name == "late" || req.Name == "lost"; (priority == urgentPriority) != want {
			t.Errorf("group %s left the queue at priority %d", req.Name, priority)
		}
		q.Done(req)
	}
	if want := []string{"late", "lost", "a", "b", "c"}; !slices.Equal(got, want) {
		t.Errorf("groups left the queue in the order %q, want %q", got, want)
	}
}
