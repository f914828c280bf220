package controllers

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/metrics"

	"github.com/consumergroup-operator/consumergroup-operator/api/v1alpha1"
	"github.com/consumergroup-operator/consumergroup-operator/pkg/nameserver"
)

// Route metrics, labelled by the group's namespace and name (docs/metrics.md).
var (
	discoveredQueuesGauge = groupGauge("consumergroup_discovered_queues", "Queues of the discovered topics in force: readable queues of the routes last read from the name servers.")
	routesReadGauge       = groupGauge("consumergroup_routes_last_read_timestamp_seconds", "When a read of the routes last reached every discovered topic (status.routes.readTime), in seconds since the epoch.")
	routeErrorsTotal      = groupCounter("consumergroup_routes_read_errors_total",
		"Failures to read routes from a name server, by reason: Unreachable, Timeout, Garbled, Rejected, CredentialsUnreadable.", "reason")
)

func init() {
	metrics.Registry.MustRegister(discoveredQueuesGauge, routesReadGauge, routeErrorsTotal)
}

func forgetRouteMetrics(key types.NamespacedName) {
	match := prometheus.Labels{"namespace": key.Namespace, "group": key.Name}
	discoveredQueuesGauge.DeletePartialMatch(match)
	routesReadGauge.DeletePartialMatch(match)
	routeErrorsTotal.DeletePartialMatch(match)
}

// recordRoutes writes in the status, before anything is planned with them, the routes a pass plans with:
// those last recorded, updated by the read this pass found finished, for the topics the spec discovers now.
// Recorded first, they survive a restart of the operator that follows the publication of an assignment
// made from them. It then reports the read in events and metrics.
func (r *ConsumerGroupReconciler) recordRoutes(ctx context.Context, group *v1alpha1.ConsumerGroup, pass routePass, now time.Time) error {
	status := group.Status.DeepCopy()
	status.Routes = mergeRoutes(group, group.Status.Routes, pass.pending)
	setTopologyCondition(status, group, pass.pending, now)
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
	if pass.pending != nil {
		r.routes.recorded(key, pass.pending)
		for _, e := range pass.pending.errs {
			routeErrorsTotal.With(prometheus.Labels{"namespace": key.Namespace, "group": key.Name, "reason": e.Reason}).Inc()
		}
	}
	recordRouteMetrics(key, status.Routes)
	return nil
}

func recordRouteMetrics(key types.NamespacedName, routes *v1alpha1.RoutesStatus) {
	l := prometheus.Labels{"namespace": key.Namespace, "group": key.Name}
	if routes == nil {
		discoveredQueuesGauge.Delete(l)
		routesReadGauge.Delete(l)
		return
	}
	n := 0
	for _, t := range routes.Topics {
		for _, b := range t.Brokers {
			n += int(b.Queues)
		}
	}
	discoveredQueuesGauge.With(l).Set(float64(n))
	if routes.ReadTime != nil {
		routesReadGauge.With(l).Set(float64(routes.ReadTime.Unix()))
	}
}

// mergeRoutes is the routes in force after read (nil when no read finished): prev's, for the topics group
// discovers, updated with what read answered. A topic the name servers say does not exist keeps its
// brokers until they have said so for absentIntervals refresh intervals; a topic nobody answered for
// keeps them as they were. Nil for a group without spec.nameServer.
func mergeRoutes(group *v1alpha1.ConsumerGroup, prev *v1alpha1.RoutesStatus, read *routeRead) *v1alpha1.RoutesStatus {
	if group.Spec.NameServer == nil {
		return nil
	}
	out := &v1alpha1.RoutesStatus{}
	old := map[string]*v1alpha1.TopicRoute{}
	if prev != nil {
		out.ObservedGeneration, out.ReadTime, out.NameServer = prev.ObservedGeneration, prev.ReadTime, prev.NameServer
		for i := range prev.Topics {
			old[prev.Topics[i].Name] = &prev.Topics[i]
		}
	}
	grace := absentIntervals * refreshInterval(group)
	complete := true
	for _, name := range discoveredTopics(group) {
		t := v1alpha1.TopicRoute{Name: name}
		if o := old[name]; o != nil {
			t = *o.DeepCopy()
		}
		if read != nil {
			a, answered := read.answers[name]
			complete = complete && answered
			if answered {
				answer(&t, a, read.at, grace)
			}
		}
		out.Topics = append(out.Topics, t)
	}
	if read != nil && read.answeredBy != "" {
		out.NameServer, out.ObservedGeneration = read.answeredBy, read.generation
	}
	if read != nil && complete {
		at := metav1.NewTime(read.at)
		out.ReadTime = &at
	}
	return out
}

// answer updates t with the name servers' answer a, read at.
func answer(t *v1alpha1.TopicRoute, a nameserver.Answer, at time.Time, grace time.Duration) {
	read := metav1.NewTime(at)
	t.ReadTime = &read
	if !a.Absent {
		t.AbsentSince = nil
		t.Brokers = nil
		for _, b := range a.Route.Queues() {
			t.Brokers = append(t.Brokers, v1alpha1.BrokerRoute{Name: b.Broker, Queues: b.Readable, ReadQueueNums: b.ReadQueues, Perm: b.Perm})
		}
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

// setTopologyCondition sets TopologyStale from read, the read this pass records; without one, the
// condition stays as it is, or is Unknown until the first read.
func setTopologyCondition(status *v1alpha1.ConsumerGroupStatus, group *v1alpha1.ConsumerGroup, read *routeRead, now time.Time) {
	if group.Spec.NameServer == nil {
		meta.RemoveStatusCondition(&status.Conditions, v1alpha1.ConditionTopologyStale)
		return
	}
	set := func(s metav1.ConditionStatus, reason, message string) {
		meta.SetStatusCondition(&status.Conditions, metav1.Condition{Type: v1alpha1.ConditionTopologyStale, Status: s, Reason: reason,
			Message: message, ObservedGeneration: group.Generation, LastTransitionTime: metav1.NewTime(now)})
	}
	if read == nil {
		if meta.FindStatusCondition(status.Conditions, v1alpha1.ConditionTopologyStale) == nil {
			set(metav1.ConditionUnknown, v1alpha1.ReasonRoutesPending, "The routes have not been read from the name servers yet")
		}
		return
	}
	var unanswered []string
	for _, name := range discoveredTopics(group) {
		if _, ok := read.answers[name]; !ok {
			unanswered = append(unanswered, name)
		}
	}
	if len(unanswered) == 0 {
		msg := fmt.Sprintf("The routes of %s were read from %s at %s", count(len(read.answers), "topic"), read.answeredBy, read.at.UTC().Format(time.RFC3339))
		if len(read.errs) > 0 {
			msg += "; on the way: " + describeReadErrors(read.errs)
		}
		set(metav1.ConditionFalse, v1alpha1.ReasonRoutesFresh, msg+absentNote(status.Routes, group))
		return
	}
	since := "never read"
	if rt := status.Routes; rt != nil && rt.ReadTime != nil {
		since = "last read in full at " + rt.ReadTime.UTC().Format(time.RFC3339)
	}
	reason := nameserver.ReasonUnreachable
	if len(read.errs) > 0 {
		reason = read.errs[len(read.errs)-1].Reason
	}
	set(metav1.ConditionTrue, reason, fmt.Sprintf("The routes of %s could not be read: %s. The routes in force (%s) stay until a name server answers",
		summarizeNames(unanswered), describeReadErrors(read.errs), since))
}

// describeReadErrors names each name server that failed and its error, the first few in full.
func describeReadErrors(errs []*nameserver.Error) string {
	if len(errs) == 0 {
		return "no name server answered in time"
	}
	var parts []string
	for _, e := range errs {
		parts = append(parts, fmt.Sprintf("name server %s: %s (%v)", e.Addr, e.Reason, e.Err))
	}
	return summarize(parts)
}

func summarizeNames(names []string) string { return joinFirst(names, ", ", " and %d more") }

// absentNote says which topics the name servers report absent and keep their queues for now.
func absentNote(routes *v1alpha1.RoutesStatus, group *v1alpha1.ConsumerGroup) string {
	if routes == nil {
		return ""
	}
	grace := absentIntervals * refreshInterval(group)
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
	return "; " + summarize(notes)
}

// emitRouteEvents reports what recording the routes changed: a Warning when the routes turn stale (or
// stale for another reason), and the queues of the discovered topics that came or went.
func (r *ConsumerGroupReconciler) emitRouteEvents(group *v1alpha1.ConsumerGroup, old *v1alpha1.ConsumerGroupStatus) {
	if c := meta.FindStatusCondition(group.Status.Conditions, v1alpha1.ConditionTopologyStale); c != nil && c.Status == metav1.ConditionTrue {
		if was := meta.FindStatusCondition(old.Conditions, v1alpha1.ConditionTopologyStale); was == nil || was.Status != metav1.ConditionTrue || was.Reason != c.Reason {
			r.Recorder.Eventf(group, nil, corev1.EventTypeWarning, v1alpha1.ConditionTopologyStale, "ReadRoutes", "%s", c.Message)
		}
	}
	if changes := routeChanges(old.Routes, group.Status.Routes); len(changes) > 0 {
		r.Recorder.Eventf(group, nil, corev1.EventTypeNormal, EventRoutesChanged, "ReadRoutes", "Discovered queues changed: %s", summarize(changes))
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
