package controllers

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/consumergroup-operator/consumergroup-operator/api/v1alpha1"
	"github.com/consumergroup-operator/consumergroup-operator/internal/plan"
	"github.com/consumergroup-operator/consumergroup-operator/pkg/nameserver"
)

// recordRoutes writes in the status, before anything is planned with them, the routes a pass plans with:
// those last recorded, updated by the read this pass found finished, for the topics the spec discovers now.
// Recorded first, they survive a restart of the operator that follows the publication of an assignment
// made from them. It then reports the read in events and metrics.
func (r *routeDiscovery) recordRoutes(ctx context.Context, group *v1alpha1.ConsumerGroup, pass routePass, now time.Time) error {
	status := group.Status.DeepCopy()
	status.Routes = mergeRoutes(group, group.Status.Routes, pass.pending, pass.source)
	setTopologyCondition(status, group, pass.pending, pass.source, now)
	if !equality.Semantic.DeepEqual(&group.Status, status) {
		updated := group.DeepCopy()
		updated.Status = *status
		if err := r.Status().Update(ctx, updated, client.FieldOwner(FieldOwner)); err != nil {
			return err
		}
		old := group.Status
		group.Status = *status
		group.ResourceVersion = updated.ResourceVersion
		r.emitRouteEvents(group, &old)
	}
	key := client.ObjectKeyFromObject(group)
	if read := pass.pending; read != nil && !read.refused {
		r.routes.recorded(key, read)
		groupMetrics.update(key, func(s *groupSeries) {
			if read.answeredBy != "" {
				s.routesRead = optional{float64(read.at.Unix()), true}
			}
			for _, e := range read.errs {
				if s.routeErrors == nil {
					s.routeErrors = map[string]uint64{}
				}
				s.routeErrors[e.Reason]++
			}
		})
	}
	recordRouteMetrics(key, status.Routes)
	return nil
}

func recordRouteMetrics(key types.NamespacedName, routes *v1alpha1.RoutesStatus) {
	groupMetrics.update(key, func(s *groupSeries) {
		if routes == nil {
			s.discoveredQueues, s.routesRead = optional{}, optional{}
			return
		}
		n := 0
		for _, t := range routes.Topics {
			for _, b := range t.Brokers {
				n += int(b.Queues)
			}
		}
		s.discoveredQueues = optional{float64(n), true}
	})
}

// mergeRoutes is the routes in force after read from src (nil when no read finished): prev's, for the
// topics group discovers, updated with what read answered. A topic the name servers say does not exist
// keeps its brokers until they have said so for absentIntervals refresh intervals; a topic nobody
// answered for keeps them as they were. A read that changes nothing returns prev's routes as they were,
// times included, so that it writes nothing. Nil for a group without spec.nameServer.
func mergeRoutes(group *v1alpha1.ConsumerGroup, prev *v1alpha1.RoutesStatus, read *routeRead, src *routeSource) *v1alpha1.RoutesStatus {
	if group.Spec.NameServer == nil {
		return nil
	}
	if read != nil && read.refused {
		read = nil
	}
	var zones []v1alpha1.BrokerZone
	if src != nil {
		zones = src.zones
	}
	out := &v1alpha1.RoutesStatus{}
	old := map[string]*v1alpha1.TopicRoute{}
	if prev != nil {
		out.ObservedGeneration, out.ReadTime, out.NameServer = prev.ObservedGeneration, prev.ReadTime, prev.NameServer
		for i := range prev.Topics {
			old[prev.Topics[i].Name] = &prev.Topics[i]
		}
	}
	grace := absentGrace(src)
	complete, changed := true, false
	for _, name := range plan.DiscoveredTopics(group) {
		t := v1alpha1.TopicRoute{Name: name}
		o := old[name]
		if o != nil {
			t = *o.DeepCopy()
		}
		if read != nil {
			a, answered := read.answers[name]
			complete = complete && answered
			if answered {
				answer(&t, a, read.at, grace, group.Spec.NameServer.BrokerZones, zones)
				changed = changed || o == nil || !equality.Semantic.DeepEqual(o, &t)
			}
		}
		if src != nil {
			// The zones follow the spec at once, without waiting for a read.
			setZones(&t, group.Spec.NameServer.BrokerZones, zones)
		}
		out.Topics = append(out.Topics, t)
	}
	if read != nil && read.answeredBy != "" {
		out.NameServer = read.answeredBy
		if complete {
			out.ObservedGeneration = group.Generation
		}
	}
	if read != nil && complete && (changed || out.ReadTime == nil) {
		at := metav1.NewTime(read.at)
		out.ReadTime = &at
	}
	return out
}

// answer updates t with the name servers' answer a, read at, each broker in its zone of zones. Its
// readTime moves only when the route changes.
func answer(t *v1alpha1.TopicRoute, a nameserver.Answer, at time.Time, grace time.Duration, zones ...[]v1alpha1.BrokerZone) {
	before := t.DeepCopy()
	defer func() {
		if before.ReadTime == nil || !equality.Semantic.DeepEqual(before.Brokers, t.Brokers) || !equality.Semantic.DeepEqual(before.AbsentSince, t.AbsentSince) {
			read := metav1.NewTime(at)
			t.ReadTime = &read
		}
	}()
	if !a.Absent {
		t.AbsentSince = nil
		t.Brokers = nil
		for _, b := range a.Route.Queues() {
			t.Brokers = append(t.Brokers, v1alpha1.BrokerRoute{Name: b.Broker, Queues: b.Readable, ReadQueueNums: b.ReadQueues, Perm: b.Perm})
		}
		setZones(t, zones...)
		return
	}
	if t.AbsentSince == nil {
		// The status keeps whole seconds: rounded up, so that the interval is never cut short.
		since := metav1.NewTime(at.Truncate(time.Second).Add(time.Second))
		t.AbsentSince = &since
	}
	if !at.Before(t.AbsentSince.Add(grace)) {
		t.Brokers = nil
	}
}

// absentGrace is how long the topics of src keep their queues once the name servers say they do not
// exist: absentIntervals refresh intervals (of the default one while the group may read from nothing).
func absentGrace(src *routeSource) time.Duration {
	if src == nil {
		return absentIntervals * defaultRefreshInterval
	}
	return absentIntervals * src.interval
}

// setZones sets the zone of each of t's brokers from the first of zones that lists it, or its name.
func setZones(t *v1alpha1.TopicRoute, zones ...[]v1alpha1.BrokerZone) {
	for i := range t.Brokers {
		t.Brokers[i].Zone = plan.BrokerZone(t.Brokers[i].Name, zones...)
	}
}

// maxRouteMessage is the longest TopologyStale message, in bytes, and so the longest route event.
const maxRouteMessage = 1024

// setTopologyCondition sets TopologyStale from read, the read this pass records, of src; without one,
// the condition stays as it is, or is Unknown until the first read. Its message is made of the
// operator's own sentences and the names the spec and the administrator chose: never what a name
// server sent, never an error's text. Nor does it carry a time, so that a read that changes nothing
// writes nothing.
func setTopologyCondition(status *v1alpha1.ConsumerGroupStatus, group *v1alpha1.ConsumerGroup, read *routeRead, src *routeSource, now time.Time) {
	if group.Spec.NameServer == nil {
		meta.RemoveStatusCondition(&status.Conditions, v1alpha1.ConditionTopologyStale)
		return
	}
	set := func(s metav1.ConditionStatus, reason, message string) {
		meta.SetStatusCondition(&status.Conditions, metav1.Condition{Type: v1alpha1.ConditionTopologyStale, Status: s, Reason: reason,
			Message: capMessage(message), ObservedGeneration: group.Generation, LastTransitionTime: metav1.NewTime(now)})
	}
	if read == nil {
		if meta.FindStatusCondition(status.Conditions, v1alpha1.ConditionTopologyStale) == nil {
			set(metav1.ConditionUnknown, v1alpha1.ReasonRoutesPending, "The routes have not been read from the name servers yet")
		}
		return
	}
	var unanswered []string
	for _, name := range plan.DiscoveredTopics(group) {
		if _, ok := read.answers[name]; !ok {
			unanswered = append(unanswered, name)
		}
	}
	if len(unanswered) == 0 {
		msg := fmt.Sprintf("The routes of %s were read from %s", count(len(plan.DiscoveredTopics(group)), "topic"), read.answeredBy)
		set(metav1.ConditionFalse, v1alpha1.ReasonRoutesFresh, msg+absentNote(status.Routes, src))
		return
	}
	since := "never read"
	if rt := status.Routes; rt != nil && rt.ReadTime != nil {
		since = "as they stand since " + rt.ReadTime.UTC().Format(time.RFC3339)
	}
	reason := nameserver.ReasonUnreachable
	if len(read.errs) > 0 {
		reason = read.errs[len(read.errs)-1].Reason
	}
	set(metav1.ConditionTrue, reason, fmt.Sprintf("The routes of %s could not be read: %s. The routes in force (%s) stay until a name server answers",
		summarizeNames(unanswered), describeReadErrors(read.errs), since))
}

// describeReadErrors names each name server that failed and the sentence of its reason.
func describeReadErrors(errs []*nameserver.Error) string {
	if len(errs) == 0 {
		return "no name server answered in time"
	}
	var parts []string
	for _, e := range errs {
		if e.Addr == "" {
			parts = append(parts, readErrorSentence(e))
			continue
		}
		parts = append(parts, fmt.Sprintf("name server %s: %s", e.Addr, readErrorSentence(e)))
	}
	return plan.Summarize(parts)
}

// readErrorSentence is the operator's own sentence for e: the one the operator wrote, or the fixed one
// of its reason.
func readErrorSentence(e *nameserver.Error) string {
	if s, ok := e.Err.(sentenceError); ok {
		return string(s)
	}
	return e.Sentence()
}

// capMessage cuts s to maxRouteMessage bytes, at a character's boundary.
func capMessage(s string) string {
	if len(s) <= maxRouteMessage {
		return s
	}
	const ellipsis = "…"
	return strings.ToValidUTF8(s[:maxRouteMessage-len(ellipsis)], "") + ellipsis
}

func summarizeNames(names []string) string { return plan.JoinFirst(names, ", ", " and %d more") }

// absentNote says which topics the name servers report absent and keep their queues for now.
func absentNote(routes *v1alpha1.RoutesStatus, src *routeSource) string {
	if routes == nil {
		return ""
	}
	grace := absentGrace(src)
	var notes []string
	for _, t := range routes.Topics {
		if t.AbsentSince != nil {
			notes = append(notes, fmt.Sprintf("%s is reported absent since %s; its queues are kept until %s", t.Name,
				t.AbsentSince.UTC().Format(time.RFC3339), t.AbsentSince.Add(grace).UTC().Format(time.RFC3339)))
		}
	}
	if len(notes) == 0 {
		return ""
	}
	return "; " + plan.Summarize(notes)
}

// emitRouteEvents reports what recording the routes changed: a Warning when the routes turn stale (or
// stale for another reason), and the queues of the discovered topics that came or went.
func (r *routeDiscovery) emitRouteEvents(group *v1alpha1.ConsumerGroup, old *v1alpha1.ConsumerGroupStatus) {
	if c := meta.FindStatusCondition(group.Status.Conditions, v1alpha1.ConditionTopologyStale); c != nil && c.Status == metav1.ConditionTrue {
		if was := meta.FindStatusCondition(old.Conditions, v1alpha1.ConditionTopologyStale); was == nil || was.Status != metav1.ConditionTrue || was.Reason != c.Reason {
			r.Recorder.Eventf(group, nil, corev1.EventTypeWarning, v1alpha1.ConditionTopologyStale, "ReadRoutes", "%s", c.Message)
		}
	}
	if changes := routeChanges(old.Routes, group.Status.Routes); len(changes) > 0 {
		r.Recorder.Eventf(group, nil, corev1.EventTypeNormal, EventRoutesChanged, "ReadRoutes", "%s", capMessage("Discovered queues changed: "+plan.Summarize(changes)))
	}
}

// routeChanges lists, per topic and broker, the readable queue counts that differ between before and after.
func routeChanges(before, after *v1alpha1.RoutesStatus) []string {
	counts := func(rs *v1alpha1.RoutesStatus) map[string]int32 {
		m := map[string]int32{}
		if rs != nil {
			for _, t := range rs.Topics {
				for _, b := range t.Brokers {
					m[t.Name+"/"+b.Name] = b.Queues
				}
			}
		}
		return m
	}
	was, is := counts(before), counts(after)
	var out []string
	for _, k := range slices.Sorted(maps.Keys(is)) {
		if was[k] != is[k] {
			out = append(out, fmt.Sprintf("%s %d → %d", k, was[k], is[k]))
		}
	}
	for _, k := range slices.Sorted(maps.Keys(was)) {
		if _, ok := is[k]; !ok && was[k] > 0 {
			out = append(out, fmt.Sprintf("%s %d → 0", k, was[k]))
		}
	}
	return out
}
