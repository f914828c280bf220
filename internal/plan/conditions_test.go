package plan

import (
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/consumergroup-operator/consumergroup-operator/api/v1alpha1"
	"github.com/consumergroup-operator/consumergroup-operator/internal/fixture"
)

// TestConditionsOfAReport sets every condition from reports of each kind, and checks each condition's
// status, reason, and the words of its message a reader acts on.
func TestConditionsOfAReport(t *testing.T) {
	type want struct {
		status         metav1.ConditionStatus
		reason, phrase string
	}
	oneMember := []Member{{Pod: "p0"}}
	broken := &Problem{Reason: v1alpha1.ReasonInvalidSelector, Message: "spec.selector is empty"}
	edited := &Problem{Reason: v1alpha1.ReasonAssignmentEdited, Message: "Someone changed the assignment"}
	cases := []struct {
		name   string
		report Report
		want   map[string]want
	}{{
		name:   "assigned",
		report: Report{Assignment: Assignment{Generation: 3, Exists: true}, Members: oneMember, QueueCount: 8},
		want: map[string]want{
			v1alpha1.ConditionReady:       {metav1.ConditionTrue, v1alpha1.ReasonAssigned, "generation 3 gives 8 queues to 1 members"},
			v1alpha1.ConditionDegraded:    {metav1.ConditionFalse, v1alpha1.ReasonHealthy, healthyMessage},
			v1alpha1.ConditionPaused:      {metav1.ConditionFalse, v1alpha1.ReasonActive, ""},
			v1alpha1.ConditionProgressing: {metav1.ConditionFalse, v1alpha1.ReasonStable, ""},
			v1alpha1.ConditionFenced:      {metav1.ConditionFalse, v1alpha1.ReasonNoneFenced, ""},
			v1alpha1.ConditionTampered:    {metav1.ConditionFalse, v1alpha1.ReasonIntact, ""},
			v1alpha1.ConditionStalled:     {metav1.ConditionFalse, v1alpha1.ReasonHealthy, ""},
			v1alpha1.ConditionReconciling: {metav1.ConditionFalse, v1alpha1.ReasonSettled, ""},
		},
	}, {
		name:   "no members",
		report: Report{QueueCount: 8},
		want: map[string]want{
			v1alpha1.ConditionReady:    {metav1.ConditionFalse, v1alpha1.ReasonNoMembers, "spec.selector"},
			v1alpha1.ConditionDegraded: {metav1.ConditionFalse, v1alpha1.ReasonHealthy, ""},
		},
	}, {
		name:   "a problem keeps generation 3",
		report: Report{Assignment: Assignment{Generation: 3, Exists: true}, Members: oneMember, Problem: broken},
		want: map[string]want{
			v1alpha1.ConditionReady:    {metav1.ConditionFalse, v1alpha1.ReasonInvalidSelector, "spec.selector is empty; assignment generation 3 stays published"},
			v1alpha1.ConditionDegraded: {metav1.ConditionTrue, v1alpha1.ReasonInvalidSelector, "generation 3 stays published"},
			v1alpha1.ConditionStalled:  {metav1.ConditionTrue, v1alpha1.ReasonInvalidSelector, "spec.selector is empty"},
			v1alpha1.ConditionPaused:   {metav1.ConditionFalse, v1alpha1.ReasonActive, ""},
		},
	}, {
		name:   "a problem before anything was published",
		report: Report{Problem: broken},
		want: map[string]want{
			v1alpha1.ConditionReady: {metav1.ConditionFalse, v1alpha1.ReasonInvalidSelector, "spec.selector is empty"},
		},
	}, {
		name: "paused during a handoff",
		report: Report{Assignment: Assignment{Generation: 5, Exists: true, Bookkeeping: HandoffState{
			Revocations: []Revocation{{Pod: "p0", Generation: 5}}}}, Members: oneMember, Paused: true},
		want: map[string]want{
			v1alpha1.ConditionReady:       {metav1.ConditionFalse, v1alpha1.ReasonPaused, "generation 5 stays published"},
			v1alpha1.ConditionDegraded:    {metav1.ConditionFalse, v1alpha1.ReasonHealthy, "paused"},
			v1alpha1.ConditionPaused:      {metav1.ConditionTrue, v1alpha1.ReasonPaused, "spec.paused is true"},
			v1alpha1.ConditionProgressing: {metav1.ConditionTrue, v1alpha1.ReasonHandoffInProgress, "p0 (generation 5)"},
			v1alpha1.ConditionReconciling: {metav1.ConditionFalse, v1alpha1.ReasonPaused, ""},
		},
	}, {
		name:   "queues withheld",
		report: Report{Assignment: Assignment{Generation: 2, Exists: true}, Members: oneMember, Handoff: HandoffReport{Withheld: 4}},
		want: map[string]want{
			v1alpha1.ConditionProgressing: {metav1.ConditionTrue, v1alpha1.ReasonHandoffInProgress, "4 queues wait"},
			v1alpha1.ConditionReconciling: {metav1.ConditionTrue, v1alpha1.ReasonHandoffInProgress, "4 queues wait"},
		},
	}, {
		name: "fenced twice, named once",
		report: Report{Assignment: Assignment{Generation: 2, Exists: true, Bookkeeping: HandoffState{
			Fenced: []Revocation{{Pod: "p1"}, {Pod: "p1"}}}}, Members: oneMember},
		want: map[string]want{
			v1alpha1.ConditionFenced: {metav1.ConditionTrue, v1alpha1.ReasonRevokeTimeout, "Pods p1 did not"},
		},
	}, {
		name:   "tampered",
		report: Report{Assignment: Assignment{Generation: 2, Exists: true}, Members: oneMember, Tampered: edited},
		want: map[string]want{
			v1alpha1.ConditionTampered:    {metav1.ConditionTrue, v1alpha1.ReasonAssignmentEdited, "Someone changed"},
			v1alpha1.ConditionReconciling: {metav1.ConditionTrue, v1alpha1.ReasonRecovering, "Someone changed"},
		},
	}, {
		name:   "recovering",
		report: Report{Assignment: Assignment{Generation: 2, Exists: true}, Members: oneMember, Handoff: HandoffReport{Recovering: 2}},
		want: map[string]want{
			v1alpha1.ConditionTampered:    {metav1.ConditionTrue, v1alpha1.ReasonAssignmentEdited, "2 members have not yet acknowledged"},
			v1alpha1.ConditionReconciling: {metav1.ConditionTrue, v1alpha1.ReasonRecovering, "2 members"},
		},
	}}
	group := &v1alpha1.ConsumerGroup{ObjectMeta: metav1.ObjectMeta{Name: "g", Generation: 4}}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			status := StatusFor(group, &tc.report, fixture.Metav1Time(time.Unix(0, 0)))
			// Every condition but TopologyStale, which the read of the routes sets (routes_status.go).
			for _, typ := range v1alpha1.ConditionTypes {
				if set := meta.FindStatusCondition(status.Conditions, typ) != nil; set != (typ != v1alpha1.ConditionTopologyStale) {
					t.Errorf("%s set: %v", typ, set)
				}
			}
			for typ, w := range tc.want {
				c := meta.FindStatusCondition(status.Conditions, typ)
				switch {
				case c == nil:
					t.Errorf("%s is not set", typ)
				case c.Status != w.status || c.Reason != w.reason || !strings.Contains(c.Message, w.phrase):
					t.Errorf("%s is %s/%s %q, want %s/%s containing %q", typ, c.Status, c.Reason, c.Message, w.status, w.reason, w.phrase)
				case c.ObservedGeneration != group.Generation:
					t.Errorf("%s observed generation %d, want %d", typ, c.ObservedGeneration, group.Generation)
				}
			}
		})
	}
}
