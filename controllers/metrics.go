package controllers

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/metrics"

	"github.com/consumergroup-operator/consumergroup-operator/api/v1alpha1"
	"github.com/consumergroup-operator/consumergroup-operator/internal/plan"
	"github.com/consumergroup-operator/consumergroup-operator/pkg/allocate"
)

// The operator's metrics, served on controller-runtime's metrics endpoint, labelled by the group's
// namespace and name; none is labelled by pod or queue. docs/metrics.md describes each.
var (
	membersGauge    = groupGauge("consumergroup_members", "Members in the published assignment.")
	queuesGauge     = groupGauge("consumergroup_queues", "Queues the group's spec lists.")
	unownedGauge    = groupGauge("consumergroup_unowned_queues", "Queues no member is given in the published assignment: published to nobody, or revoked and not yet granted.")
	generationGauge = groupGauge("consumergroup_assignment_generation", "Generation of the published assignment.")
	rebalancesTotal = groupCounter("consumergroup_rebalances_total",
		"Assignment generations published, by reason: spec (the spec changed), membership (members came or went), handoff (a revoked queue was granted, or another step of a handoff), recovery (what the operator wrote was deleted or edited).",
		"reason")
	movedTotal            = groupCounter("consumergroup_queues_moved_total", "Queues that changed reader.")
	movedBeyondBoundTotal = groupCounter("consumergroup_queues_moved_beyond_bound_total",
		"Queues that changed reader beyond the fewest a plan balanced by queue count must move: with Sticky by count, its locality moves, which keep queues in their broker's zone. The balance moves are consumergroup_queues_moved_total minus these.")
	movedLoadTotal = groupCounter("consumergroup_load_moved_total", "Reported load of the queues that changed reader (a queue nobody reports counting at the mean).")
	handoffSeconds = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "consumergroup_handoff_duration_seconds",
		Help:    "Time from the publication of a queue's revocation to the publication of its grant to another member.",
		Buckets: []float64{0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300},
	}, groupLabels())
	fencedTotal    = groupCounter("consumergroup_members_fenced_total", "Revocations whose member missed its revoke timeout while renewing its Lease.")
	imbalanceGauge = groupGauge("consumergroup_imbalance_ratio", "The busiest member's queues per unit of weight over the group's mean; 1 is perfect balance.")
	crossZoneGauge = groupGauge("consumergroup_cross_zone_queues", "Queues given to a member in another zone than their broker's (both known).")
	minCrossZone   = groupGauge("consumergroup_min_cross_zone_queues",
		"The fewest queues any balanced plan of the current members gives to a member in another zone than their broker's (both known).")
	bytesGauge       = groupGauge("consumergroup_assignment_bytes", "Size of the entries of the assignment ConfigMaps, as last written by this replica.")
	conditionGauge   = groupGauge("consumergroup_status_condition", "1 for each condition's current status, 0 for the others.", "type", "status")
	recommendedGauge = groupGauge("consumergroup_recommended_members",
		"Members the reported load needs at spec.autoscaling.targetLoadPerMember (status.recommendedMembers); absent without spec.autoscaling.")
	loadGauge = groupGauge("consumergroup_load", "Load the members report for all the group's queues, a queue nobody reports counting at the mean (status.totalLoad).")

	// groupCollectors are every metric above: registered once, and a deleted group's series removed from each.
	groupCollectors = []interface {
		prometheus.Collector
		DeletePartialMatch(prometheus.Labels) int
	}{
		membersGauge, queuesGauge, unownedGauge, generationGauge, rebalancesTotal, movedTotal, movedBeyondBoundTotal, movedLoadTotal, handoffSeconds,
		fencedTotal, imbalanceGauge, crossZoneGauge, minCrossZone, bytesGauge, conditionGauge, recommendedGauge, loadGauge,
	}
)

// groupLabels are the labels of every group metric, then extra.
func groupLabels(extra ...string) []string { return append([]string{"namespace", "group"}, extra...) }

func groupGauge(name, help string, extra ...string) *prometheus.GaugeVec {
	return prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: name, Help: help}, groupLabels(extra...))
}

func groupCounter(name, help string, extra ...string) *prometheus.CounterVec {
	return prometheus.NewCounterVec(prometheus.CounterOpts{Name: name, Help: help}, groupLabels(extra...))
}

func init() {
	for _, c := range groupCollectors {
		metrics.Registry.MustRegister(c)
	}
}

// Rebalance reasons.
const (
	rebalanceSpec       = "spec"
	rebalanceMembership = "membership"
	rebalanceHandoff    = "handoff"
	rebalanceRecovery   = "recovery"
)

// recordMetrics sets the group's metrics after a pass that published d (or kept what was published); old is the
// status before the pass, status after it.
func recordMetrics(mem *memory, group *v1alpha1.ConsumerGroup, topo plan.Topology, old, status *v1alpha1.ConsumerGroupStatus, obs *plan.Observation, d *plan.Decision, now time.Time) {
	l := prometheus.Labels{"namespace": group.Namespace, "group": group.Name}
	recordGauges(l, topo, status, d)
	recordConditions(group, status)
	fencedTotal.With(l).Add(float64(len(d.Report.Handoff.Fenced)))
	if !d.Report.Rebalance.Published || !d.Report.Exists {
		return
	}
	movedTotal.With(l).Add(float64(d.Report.Rebalance.Moved))
	movedBeyondBoundTotal.With(l).Add(float64(d.Report.Rebalance.BeyondBound))
	movedLoadTotal.With(l).Add(d.Report.Rebalance.MovedLoad)
	rebalancesTotal.With(prometheus.Labels{"namespace": group.Namespace, "group": group.Name, "reason": rebalanceReason(group, old, obs, d)}).Inc()
	recordHandoffs(mem, l, types.NamespacedName{Namespace: group.Namespace, Name: group.Name}, obs, d, now)
}

// recordGauges sets the gauges that describe the group as this pass left it.
func recordGauges(l prometheus.Labels, topo plan.Topology, status *v1alpha1.ConsumerGroupStatus, d *plan.Decision) {
	membersGauge.With(l).Set(float64(status.MemberCount))
	queuesGauge.With(l).Set(float64(d.Report.QueueCount))
	generationGauge.With(l).Set(float64(status.AssignmentGeneration))
	owned := 0
	owners := make(allocate.Plan, len(d.Report.Entries))
	for _, e := range d.Report.Entries {
		owned += len(e.Queues)
		owners[e.Member] = e.Queues
	}
	unownedGauge.With(l).Set(float64(status.UnownedQueues))
	imbalanceGauge.With(l).Set(imbalance(d.Report.Members, owners, owned))
	crossZoneGauge.With(l).Set(float64(crossZone(topo, d.Report.Members, owners)))
	minCrossZone.With(l).Set(float64(leastCrossZone(topo, d.Report.Members)))
	if len(d.Write.ConfigMaps) > 0 {
		size := 0
		for _, part := range d.Write.ConfigMaps {
			for _, v := range part.Data {
				size += len(v)
			}
		}
		bytesGauge.With(l).Set(float64(size))
	}
	if status.RecommendedMembers != nil {
		recommendedGauge.With(l).Set(float64(*status.RecommendedMembers))
	} else {
		recommendedGauge.Delete(l)
	}
	if d.Report.TotalLoad != nil {
		loadGauge.With(l).Set(*d.Report.TotalLoad)
	}
}

// recordConditions sets 1 for each condition's current status and 0 for the others.
func recordConditions(group *v1alpha1.ConsumerGroup, status *v1alpha1.ConsumerGroupStatus) {
	for _, c := range status.Conditions {
		for _, s := range []metav1.ConditionStatus{metav1.ConditionTrue, metav1.ConditionFalse, metav1.ConditionUnknown} {
			v := 0.0
			if c.Status == s {
				v = 1
			}
			conditionGauge.With(prometheus.Labels{"namespace": group.Namespace, "group": group.Name, "type": c.Type, "status": string(s)}).Set(v)
		}
	}
}

// recordHandoffs times handoffs: a queue published to a member before this pass and to none now was
// revoked; one published to none before and to a member now, after a revocation this replica saw, was
// handed off.
func recordHandoffs(mem *memory, l prometheus.Labels, key types.NamespacedName, obs *plan.Observation, d *plan.Decision, now time.Time) {
	before := map[allocate.Queue]bool{}
	for _, e := range obs.Published.Entries {
		for _, q := range e.Queues {
			before[q] = true
		}
	}
	after := map[allocate.Queue]bool{}
	for _, e := range d.Report.Entries {
		for _, q := range e.Queues {
			after[q] = true
		}
	}
	// Handed-off times are this replica's observation only: a new leader starts counting anew.
	mem.with(key, func(g *groupMemory) {
		if g.revoked == nil {
			g.revoked = map[allocate.Queue]time.Time{}
		}
		for q := range before {
			if _, ok := g.revoked[q]; !ok && !after[q] {
				g.revoked[q] = now
			}
		}
		for q, at := range g.revoked {
			if after[q] {
				handoffSeconds.With(l).Observe(now.Sub(at).Seconds())
				delete(g.revoked, q)
			}
		}
		// A queue the spec dropped is handed to nobody.
		if len(g.revoked) > d.Report.QueueCount {
			clear(g.revoked)
		}
	})
}

// forgetMetrics removes a deleted group's series.
func forgetMetrics(key types.NamespacedName) {
	match := prometheus.Labels{"namespace": key.Namespace, "group": key.Name}
	for _, c := range groupCollectors {
		c.DeletePartialMatch(match)
	}
}

// rebalanceReason says why d published a new generation.
func rebalanceReason(group *v1alpha1.ConsumerGroup, old *v1alpha1.ConsumerGroupStatus, obs *plan.Observation, d *plan.Decision) string {
	switch {
	case d.Report.Tampered != nil && d.Report.Tampered.Reason != v1alpha1.ReasonClaimUnreadable:
		return rebalanceRecovery
	case old.ObservedGeneration != group.Generation:
		return rebalanceSpec
	}
	before := map[string]bool{}
	for pod := range obs.Published.Entries {
		before[pod] = true
	}
	if len(before) != len(d.Report.Entries) {
		return rebalanceMembership
	}
	for pod := range d.Report.Entries {
		if !before[pod] {
			return rebalanceMembership
		}
	}
	return rebalanceHandoff
}

// crossZone counts the queues owners gives to a member in another zone than their broker's, where the spec
// gives the broker's zone and the member's node has one.
func crossZone(topo plan.Topology, members []plan.Member, owners allocate.Plan) int {
	brokerZone := topo.BrokerZones()
	n := 0
	for _, m := range members {
		if m.Zone == "" {
			continue
		}
		for _, q := range owners[m.ID] {
			if z := brokerZone[q.Broker]; z != "" && z != m.Zone {
				n++
			}
		}
	}
	return n
}

// leastCrossZone is the fewest queues any balanced plan of members gives to a member in another zone than
// their broker's, counted as crossZone counts them (allocate.MinCrossZoneKnown).
func leastCrossZone(topo plan.Topology, members []plan.Member) int {
	in := allocate.Input{Queues: topo.Queues(), BrokerZones: topo.BrokerZones()}
	for _, m := range members {
		in.Members = append(in.Members, m.Member)
	}
	return allocate.MinCrossZoneKnown(in)
}

// imbalance is the busiest member's queues per unit of weight over the mean per unit of weight.
func imbalance(members []plan.Member, owners allocate.Plan, owned int) float64 {
	if len(members) == 0 || owned == 0 {
		return 0
	}
	var weights float64
	busiest := 0.0
	for _, m := range members {
		w := float64(max(m.Weight, 1))
		weights += w
		busiest = max(busiest, float64(len(owners[m.ID]))/w)
	}
	return busiest / (float64(owned) / weights)
}
