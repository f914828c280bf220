package controllers

import (
	"slices"
	"sort"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
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
	membersDesc     = groupDesc("consumergroup_members", "Members in the published assignment.")
	queuesDesc      = groupDesc("consumergroup_queues", "Queues the group's spec lists.")
	unownedDesc     = groupDesc("consumergroup_unowned_queues", "Queues no member is given in the published assignment: published to nobody, or revoked and not yet granted.")
	generationDesc  = groupDesc("consumergroup_assignment_generation", "Generation of the published assignment.")
	rebalancesDesc  = groupDesc("consumergroup_rebalances_total", "Assignment generations published, by reason: spec (the spec changed), membership (members came or went), handoff (a revoked queue was granted, or another step of a handoff), recovery (what the operator wrote was deleted or edited).", "reason")
	movedDesc       = groupDesc("consumergroup_queues_moved_total", "Queues that changed reader.")
	movedBeyondDesc = groupDesc("consumergroup_queues_moved_beyond_bound_total",
		"Queues that changed reader beyond the fewest a plan balanced by queue count must move: with Sticky by count, its locality moves, which keep queues in their broker's zone. The balance moves are consumergroup_queues_moved_total minus these.")
	movedLoadDesc    = groupDesc("consumergroup_load_moved_total", "Reported load of the queues that changed reader (a queue nobody reports counting at the mean).")
	handoffDesc      = groupDesc("consumergroup_handoff_duration_seconds", "Time from the publication of a queue's revocation to the publication of its grant to another member.")
	fencedDesc       = groupDesc("consumergroup_members_fenced_total", "Revocations whose member missed its revoke timeout while renewing its Lease.")
	imbalanceDesc    = groupDesc("consumergroup_imbalance_ratio", "The busiest member's queues per unit of weight over the group's mean; 1 is perfect balance.")
	crossZoneDesc    = groupDesc("consumergroup_cross_zone_queues", "Queues given to a member in another zone than their broker's (both known).")
	minCrossZoneDesc = groupDesc("consumergroup_min_cross_zone_queues",
		"The fewest queues any balanced plan of the current members gives to a member in another zone than their broker's (both known).")
	bytesDesc       = groupDesc("consumergroup_assignment_bytes", "Size of the entries of the assignment ConfigMaps, as last written by this replica.")
	conditionDesc   = groupDesc("consumergroup_status_condition", "1 for each condition's current status, 0 for the others.", "type", "status")
	recommendedDesc = groupDesc("consumergroup_recommended_members",
		"Members the reported load needs at spec.autoscaling.targetLoadPerMember (status.recommendedMembers); absent without spec.autoscaling.")
	loadDesc = groupDesc("consumergroup_load", "Load the members report for all the group's queues, a queue nobody reports counting at the mean (status.totalLoad).")

	// Route metrics, of groups with spec.nameServer.
	discoveredQueuesDesc = groupDesc("consumergroup_discovered_queues", "Queues of the discovered topics in force: readable queues of the routes last read from the name servers.")
	routesReadDesc       = groupDesc("consumergroup_routes_last_read_timestamp_seconds", "When a name server last answered a read of the group's routes, in seconds since the epoch.")
	routeErrorsDesc      = groupDesc("consumergroup_routes_read_errors_total",
		"Failures to read routes from a name server, by reason: Unreachable, Refused, Timeout, Garbled, Rejected, Untrusted, NotAllowed, Denied.", "reason")

	// handoffBuckets are the upper bounds of the handoff histogram's buckets, in seconds.
	handoffBuckets = [...]float64{0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300}
	// rebalanceReasons are the values of consumergroup_rebalances_total's reason label.
	rebalanceReasons = [...]string{rebalanceSpec, rebalanceMembership, rebalanceHandoff, rebalanceRecovery}
	// conditionStatuses are the values of consumergroup_status_condition's status label.
	conditionStatuses = [...]metav1.ConditionStatus{metav1.ConditionTrue, metav1.ConditionFalse, metav1.ConditionUnknown}

	// groupMetrics holds every group's series, registered once.
	groupMetrics = &groupCollector{}
)

func groupDesc(name, help string, extra ...string) *prometheus.Desc {
	return prometheus.NewDesc(name, help, groupLabels(extra...), nil)
}

// groupLabels are the labels of every group metric, then extra.
func groupLabels(extra ...string) []string { return append([]string{"namespace", "group"}, extra...) }

func init() {
	metrics.Registry.MustRegister(groupMetrics)
}

// groupCollector keeps each group's values in a groupSeries of a few hundred bytes and makes the series
// from them at each scrape. client_golang's vectors keep every series as an object of its own between
// scrapes, about 500 bytes a gauge and 1.4 KB a histogram; a group has about 45 series, 24 of them its
// conditions', which came to 27 KB a group: more than the 4 KiB a member pod may cost at the ten pods a
// group of the scale run has (docs/performance.md).
type groupCollector struct {
	mu     sync.Mutex
	groups map[types.NamespacedName]*groupSeries
	// pairs are the label pairs the groups' series share.
	pairs labelPairs
}

// groupSeries is one group's values.
type groupSeries struct {
	members, queues, unowned, generation, imbalance, crossZone, minCrossZone float64
	// bytes is set once this replica wrote the assignment; recommended while the status recommends; load
	// once the members reported any.
	bytes, recommended, load optional
	fenced                   float64
	// published says whether this replica saw the group publish: the counters of moves start then.
	published                     bool
	moved, movedBeyond, movedLoad float64
	// rebalances counts by reason, in rebalanceReasons' order; a reason's series exists once counted.
	rebalances [len(rebalanceReasons)]uint64
	// handoffs is the histogram of handoff durations: a series once one was observed.
	handoffs handoffHistogram
	// conditions are the status's conditions, their type and status.
	conditions []conditionStatus
	// discoveredQueues and routesRead are set while the group discovers its queues from name servers;
	// routeErrors counts failed reads by reason, a bounded set (nameserver's reasons).
	discoveredQueues, routesRead optional
	routeErrors                  map[string]uint64
}

// optional is a gauge value that may be absent.
type optional struct {
	value float64
	set   bool
}

type handoffHistogram struct {
	count   uint64
	sum     float64
	buckets [len(handoffBuckets)]uint64 // each bucket's own count, not the cumulative one
}

func (h *handoffHistogram) observe(v float64) {
	h.count++
	h.sum += v
	if i := sort.SearchFloat64s(handoffBuckets[:], v); i < len(handoffBuckets) {
		h.buckets[i]++
	}
}

type conditionStatus struct {
	condition string
	status    metav1.ConditionStatus
}

// Describe sends every group metric's description.
func (c *groupCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{membersDesc, queuesDesc, unownedDesc, generationDesc, rebalancesDesc, movedDesc, movedBeyondDesc, movedLoadDesc,
		handoffDesc, fencedDesc, imbalanceDesc, crossZoneDesc, minCrossZoneDesc, bytesDesc, conditionDesc, recommendedDesc, loadDesc,
		discoveredQueuesDesc, routesReadDesc, routeErrorsDesc} {
		ch <- d
	}
}

// Collect sends the series of every group.
func (c *groupCollector) Collect(ch chan<- prometheus.Metric) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for key, s := range c.groups {
		s.collect(ch, &c.pairs, key.Namespace, key.Name)
	}
}

// labelPairs are label pairs made once and shared by every series that carries them: a scrape of
// client_golang's const metrics makes each series' pairs anew, two or four of them, and at 2,000 groups
// of 45 series each that came to about 25 MB of heap for every scrape, a sixth of the operator's heap at
// 20,000 pods (docs/performance.md). Only Collect uses them, under groupCollector.mu.
type labelPairs map[[2]string]*dto.LabelPair

// pair is the shared label pair name=value.
func (p *labelPairs) pair(name, value string) *dto.LabelPair {
	if *p == nil {
		*p = labelPairs{}
	}
	key := [2]string{name, value}
	lp := (*p)[key]
	if lp == nil {
		lp = &dto.LabelPair{Name: &key[0], Value: &key[1]}
		(*p)[key] = lp
	}
	return lp
}

// forgetValues drops the pairs of a label whose values come and go with groups (namespaces and names),
// so that a long-lived operator keeps only those of its groups now.
func (p labelPairs) forgetValues(name, value string) { delete(p, [2]string{name, value}) }

// groupMetric is one series of a group: a gauge or a counter, with its labels sorted by name as the
// registry wants them and shared with the group's other series.
type groupMetric struct {
	desc    *prometheus.Desc
	labels  []*dto.LabelPair
	value   float64
	counter bool
}

func (m *groupMetric) Desc() *prometheus.Desc { return m.desc }

// Write fills out with the series. The labels are shared and never changed: the registry copies them
// before it sorts them, and the series it writes are read only.
func (m *groupMetric) Write(out *dto.Metric) error {
	out.Label = m.labels
	if m.counter {
		out.Counter = &dto.Counter{Value: &m.value}
	} else {
		out.Gauge = &dto.Gauge{Value: &m.value}
	}
	return nil
}

func (s *groupSeries) collect(ch chan<- prometheus.Metric, pairs *labelPairs, ns, name string) {
	// Label names sort as group, namespace, then the extras (reason; status, type).
	base := []*dto.LabelPair{pairs.pair("group", name), pairs.pair("namespace", ns)}
	labelled := func(extra []string) []*dto.LabelPair {
		if len(extra) == 0 {
			return base
		}
		out := make([]*dto.LabelPair, 0, len(base)+len(extra)/2)
		out = append(out, base...)
		for i := 0; i+1 < len(extra); i += 2 {
			out = append(out, pairs.pair(extra[i], extra[i+1]))
		}
		return out
	}
	gauge := func(d *prometheus.Desc, v float64, extra ...string) {
		ch <- &groupMetric{desc: d, labels: labelled(extra), value: v}
	}
	counter := func(d *prometheus.Desc, v float64, extra ...string) {
		ch <- &groupMetric{desc: d, labels: labelled(extra), value: v, counter: true}
	}
	gauge(membersDesc, s.members)
	gauge(queuesDesc, s.queues)
	gauge(unownedDesc, s.unowned)
	gauge(generationDesc, s.generation)
	gauge(imbalanceDesc, s.imbalance)
	gauge(crossZoneDesc, s.crossZone)
	gauge(minCrossZoneDesc, s.minCrossZone)
	for _, o := range []struct {
		desc *prometheus.Desc
		optional
	}{{bytesDesc, s.bytes}, {recommendedDesc, s.recommended}, {loadDesc, s.load}, {discoveredQueuesDesc, s.discoveredQueues}, {routesReadDesc, s.routesRead}} {
		if o.set {
			gauge(o.desc, o.value)
		}
	}
	counter(fencedDesc, s.fenced)
	if s.published {
		counter(movedDesc, s.moved)
		counter(movedBeyondDesc, s.movedBeyond)
		counter(movedLoadDesc, s.movedLoad)
	}
	for i, n := range s.rebalances {
		if n > 0 {
			counter(rebalancesDesc, float64(n), "reason", rebalanceReasons[i])
		}
	}
	if h := s.handoffs; h.count > 0 {
		cumulative := make(map[float64]uint64, len(handoffBuckets))
		var below uint64
		for i, upper := range handoffBuckets {
			below += h.buckets[i]
			cumulative[upper] = below
		}
		ch <- prometheus.MustNewConstHistogram(handoffDesc, h.count, h.sum, cumulative, ns, name)
	}
	for reason, n := range s.routeErrors {
		counter(routeErrorsDesc, float64(n), "reason", reason)
	}
	for _, c := range s.conditions {
		for _, status := range conditionStatuses {
			v := 0.0
			if c.status == status {
				v = 1
			}
			gauge(conditionDesc, v, "status", string(status), "type", c.condition)
		}
	}
}

// update runs f on group's series, made empty if there are none, under the lock.
func (c *groupCollector) update(group types.NamespacedName, f func(*groupSeries)) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.groups == nil {
		c.groups = map[types.NamespacedName]*groupSeries{}
	}
	s := c.groups[group]
	if s == nil {
		s = &groupSeries{}
		c.groups[group] = s
	}
	f(s)
}

// forget removes a group's series.
func (c *groupCollector) forget(group types.NamespacedName) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.groups, group)
	// Another group of the name, or of the namespace, makes its pair again at the next scrape.
	c.pairs.forgetValues("group", group.Name)
	c.pairs.forgetValues("namespace", group.Namespace)
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
	key := types.NamespacedName{Namespace: group.Namespace, Name: group.Name}
	published := d.Report.Rebalance.Published && d.Report.Exists
	var handoffs []float64
	if published {
		handoffs = handoffDurations(mem, key, obs, d, now)
	}
	groupMetrics.update(key, func(s *groupSeries) {
		recordGauges(s, topo, status, d)
		recordConditions(s, status)
		s.fenced += float64(len(d.Report.Handoff.Fenced))
		if !published {
			return
		}
		s.published = true
		s.moved += float64(d.Report.Rebalance.Moved)
		s.movedBeyond += float64(d.Report.Rebalance.BeyondBound)
		s.movedLoad += d.Report.Rebalance.MovedLoad
		s.rebalances[slices.Index(rebalanceReasons[:], rebalanceReason(group, old, obs, d))]++
		for _, seconds := range handoffs {
			s.handoffs.observe(seconds)
		}
	})
}

// recordGauges sets the gauges that describe the group as this pass left it.
func recordGauges(s *groupSeries, topo plan.Topology, status *v1alpha1.ConsumerGroupStatus, d *plan.Decision) {
	s.members = float64(status.MemberCount)
	s.queues = float64(d.Report.QueueCount)
	s.generation = float64(status.AssignmentGeneration)
	owned := 0
	owners := make(allocate.Plan, len(d.Report.Entries))
	for _, e := range d.Report.Entries {
		owned += len(e.Queues)
		owners[e.Member] = e.Queues
	}
	s.unowned = float64(status.UnownedQueues)
	s.imbalance = imbalance(d.Report.Members, owners, owned)
	s.crossZone = float64(crossZone(topo, d.Report.Members, owners))
	s.minCrossZone = float64(leastCrossZone(topo, d.Report.Members))
	if len(d.Write.ConfigMaps) > 0 {
		size := 0
		for _, part := range d.Write.ConfigMaps {
			for _, v := range part.Data {
				size += len(v)
			}
		}
		s.bytes = optional{float64(size), true}
	}
	s.recommended = optional{}
	if status.RecommendedMembers != nil {
		s.recommended = optional{float64(*status.RecommendedMembers), true}
	}
	if d.Report.TotalLoad != nil {
		s.load = optional{*d.Report.TotalLoad, true}
	}
}

// recordConditions keeps the type and status of each of the status's conditions.
func recordConditions(s *groupSeries, status *v1alpha1.ConsumerGroupStatus) {
	s.conditions = s.conditions[:0]
	for _, c := range status.Conditions {
		s.conditions = append(s.conditions, conditionStatus{condition: c.Type, status: c.Status})
	}
}

// handoffDurations times handoffs: a queue published to a member before this pass and to none now was
// revoked; one published to none before and to a member now, after a revocation this replica saw, was
// handed off, and its handoff's duration in seconds is returned.
func handoffDurations(mem *memory, key types.NamespacedName, obs *plan.Observation, d *plan.Decision, now time.Time) []float64 {
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
	var durations []float64
	// Handed-off times are this replica's observation only: a new leader starts counting anew.
	mem.with(key, func(g *groupMemory) {
		for q := range before {
			if _, ok := g.revoked[q]; !ok && !after[q] {
				if g.revoked == nil {
					g.revoked = map[allocate.Queue]time.Time{}
				}
				g.revoked[q] = now
			}
		}
		for q, at := range g.revoked {
			if after[q] {
				durations = append(durations, now.Sub(at).Seconds())
				delete(g.revoked, q)
			}
		}
		// A queue the spec dropped is handed to nobody. A map keeps the room of the most it held: once
		// every handoff is over the group holds none, rather than one sized for its largest handoff.
		if len(g.revoked) == 0 || len(g.revoked) > d.Report.QueueCount {
			g.revoked = nil
		}
	})
	return durations
}

// forgetMetrics removes a deleted group's series.
func forgetMetrics(key types.NamespacedName) { groupMetrics.forget(key) }

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
