package controllers

import (
	"errors"
	"fmt"
	"maps"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/consumergroup-operator/consumergroup-operator/api/v1alpha1"
	"github.com/consumergroup-operator/consumergroup-operator/pkg/allocate"
	"github.com/consumergroup-operator/consumergroup-operator/pkg/protocol"
)

// recoveryStep is how far above the highest generation it knows the operator publishes after it lost what
// it published. A member never acts on a generation at or below one it acted on; the status and the
// acknowledgements hold every generation but those published in the moments before the operator last
// stopped, which this step leaves far behind.
const recoveryStep = 100

// decideEnv is what a decision depends on besides the group and the world: the time, how far clocks may
// differ, the group's topology (topologyOf) and its strategy (or why it cannot be built).
type decideEnv struct {
	now             time.Time
	maxSkew         time.Duration
	topology        topology
	strategy        allocate.Strategy
	strategyProblem *problem
}

// decision is what one pass does: what it writes to the API server (write) and what it says about it in
// the status, events and metrics (report), plus when to look again.
type decision struct {
	write  writes
	report report
	// requeueAfter is when to look again without an event.
	requeueAfter time.Duration
}

// writes are a pass's API writes: the ConfigMaps to write, in order; the shards no longer used; the
// Leases whose claims no longer stand and whose pods are gone.
type writes struct {
	configMaps   []protocol.Part
	deleteShards []*corev1.ConfigMap
	deleteLeases []protocol.LeaseState
}

// assignment is what is published once a pass is done: its generation, when it was rebalanced, each
// member pod's entry and the handoff bookkeeping. exists is false while nothing is published.
type assignment struct {
	generation   int64
	rebalancedAt time.Time
	entries      map[string]protocol.PublishedEntry
	bookkeeping  handoffState
	exists       bool
}

// rebalance is what publishing a new generation changed: moved counts the queues that change reader,
// beyondBound those of them beyond the fewest a plan balanced by queue count must move
// (allocate.LowerBound, allocate.CountMoves), movedLoad their reported load (0 when nobody reports load).
// The zero value is a pass that publishes no new generation.
type rebalance struct {
	published   bool
	moved       int
	beyondBound int
	movedLoad   float64
}

// handoffReport is what the handoff of a pass reports: the revocations it fenced, the queues withheld
// from their new reader, the incarnations that have not yet acknowledged a recovery.
type handoffReport struct {
	fenced               []revocation
	withheld, recovering int
	// firstWithheld says which queue waited first and why, for the log.
	firstWithheld string
}

// report is what a pass says: the assignment in force, the members it was made for, what changed, and
// what was found wrong.
type report struct {
	assignment
	members []member
	// memberLeases are the members' own Leases, by pod name.
	memberLeases map[string]*protocol.LeaseState
	queueCount   int
	rebalance    rebalance
	handoff      handoffReport
	// problem keeps the published assignment in place; paused is set while spec.paused does.
	problem *problem
	paused  bool
	// tampered says what was found deleted or edited (the assignment before a claim); unreadableClaims
	// names the claims that cannot be read; suspectLeases says what the Leases hold that no member
	// following the protocol writes; restored lists metadata someone changed that this pass writes back.
	tampered         *problem
	unreadableClaims *problem
	suspectLeases    *problem
	restored         []string
	// totalLoad is the load the members report for the group's queues, and recommended the members it
	// needs (spec.autoscaling); both nil when nobody reports load.
	totalLoad   *float64
	recommended *int32
}

// newGeneration is what the steps that plan a new generation (planHandoff, layOut) produce. decide takes it
// whole once every step passed; a step that fails leaves it unused and what is published in force.
type newGeneration struct {
	assignment   assignment
	rebalance    rebalance
	handoff      handoffReport
	configMaps   []protocol.Part
	deleteShards []*corev1.ConfigMap
	restored     []string
}

// decide is the reconciler's whole judgement, free of I/O: from the group and what was observed, what to
// publish. It runs the checks that can stop a new assignment in order; the first that
// fails keeps the published assignment in place.
func decide(group *v1alpha1.ConsumerGroup, obs *observation, env decideEnv) *decision {
	dc := newDecider(group, obs, env)
	switch prob := dc.runSteps(); {
	case group.Spec.Paused:
		// Frozen: nothing new is published, whatever changed. Leases are still read and cleaned up.
		dc.keepPublished(nil)
		dc.d.report.paused = true
	case prob != nil:
		dc.keepPublished(prob)
	default:
		dc.take(dc.next)
	}
	dc.chooseLeasesToDelete()
	dc.recommend()
	dc.d.requeueAfter = sooner(dc.d.requeueAfter, dc.loadRebalanceDue)
	return dc.d
}

// runSteps runs the steps of a pass in order, up to the first that finds a problem, which it returns. A
// paused group runs none.
func (dc *decider) runSteps() *problem {
	if dc.group.Spec.Paused {
		return nil
	}
	for _, step := range append([]func() *problem{dc.checkOwnership}, append(dc.planSteps(), dc.planHandoff, dc.layOut)...) {
		if prob := step(); prob != nil {
			return prob
		}
	}
	return nil
}

// newDecider starts a decision: it reads the Leases and judges whether the published objects can be
// trusted, which every later step relies on.
func newDecider(group *v1alpha1.ConsumerGroup, obs *observation, env decideEnv) *decider {
	dc := &decider{group: group, obs: obs, env: env, d: &decision{}}
	dc.indexIncarnations()
	dc.judgeTrust()
	dc.judgeLeases()
	return dc
}

// planSteps are the steps up to the strategy's target, in order; each can stop the plan with a problem.
// The handoff and the layout follow them in a pass; a preview stops after them.
func (dc *decider) planSteps() []func() *problem {
	return []func() *problem{dc.checkSelector, dc.findMembers, dc.listQueues, dc.checkStrategy, dc.allocate}
}

// decider carries one decision through its steps.
type decider struct {
	group *v1alpha1.ConsumerGroup
	obs   *observation
	env   decideEnv
	d     *decision

	// leases are the observed Leases as this decision counts them: a copy, with acknowledgements of
	// generations never published set to 0 (indexIncarnations), so that the observation stays as read.
	leases       []protocol.LeaseState
	leaseOf      map[string]*protocol.LeaseState
	incarnations []*incarnation
	// overclaims say which Leases acknowledge generations never published.
	overclaims []string
	// unseenUntil is one lease duration after this operator first looked at the group: until then, a pod
	// whose Lease vanished before may still read, and nothing may name it (indexIncarnations).
	unseenUntil time.Time
	trusted     bool
	state       handoffState
	floor       int64
	queues      []allocate.Queue
	zones       map[string]string
	target      allocate.Plan
	// entries are what each member pod may read now, sorted (handoff).
	entries      map[string][]allocate.Queue
	memberExpiry time.Time
	// reportedLoad and loads are read once per pass, by reported and queueLoads.
	reportedLoad map[allocate.Queue]float64
	loads        map[allocate.Queue]float64
	// loadRebalanceDue is when to look at the members' loads again, for a group balanced by load or
	// autoscaled; 0 for others.
	loadRebalanceDue time.Duration
	// next is the new generation the plan publishes once every step passed (planHandoff, layOut).
	next newGeneration
}

// indexIncarnations indexes the Leases by pod and lists every incarnation that may be reading: the holders of
// Leases, the pods, and whoever the published objects name. An incarnation named only by what was
// published, with neither a pod nor a Lease, stands for a lease duration from when this operator first
// looked at the group: its Lease may have vanished before then (stillPublished).
func (dc *decider) indexIncarnations() {
	dc.leaseOf = map[string]*protocol.LeaseState{}
	byKey := map[string]*incarnation{}
	add := func(pod string, uid types.UID) *incarnation {
		k := incarnationKey(pod, uid)
		if i := byKey[k]; i != nil {
			return i
		}
		i := &incarnation{pod: pod, uid: uid}
		if live := dc.obs.podsByName[pod]; live != nil && live.UID == uid {
			i.exists, i.stopped = true, stoppedByKubelet(live)
		}
		byKey[k] = i
		dc.incarnations = append(dc.incarnations, i)
		return i
	}
	ceiling := dc.ackCeiling()
	// Without its Lease, a member's duration is unknown: the longest of the group's others, as members of
	// one group run with one configuration, else the default. Its promise likewise: the longest of those
	// of the Leases whose pods exist (written by those pods), when every Lease makes one, else none.
	var longest, promise time.Duration
	promising := true
	dc.leases = slices.Clone(dc.obs.leases)
	for idx := range dc.leases {
		l := &dc.leases[idx]
		if l.AckedGeneration > ceiling {
			dc.overclaims = append(dc.overclaims, fmt.Sprintf("Lease %s acknowledges generation %d, above any generation published (at most %d): the acknowledgement is ignored", l.Name, l.AckedGeneration, ceiling))
			l.AckedGeneration = 0
		}
		if l.Pod != "" {
			dc.leaseOf[l.Pod] = l
		}
		add(l.Pod, l.PodUID).lease = l
		dc.floor = max(dc.floor, l.AckedGeneration)
		longest = max(longest, l.Duration)
		if live := dc.obs.podsByName[l.Pod]; live != nil && live.UID == l.PodUID {
			promise = max(promise, l.StopsWithin)
		}
		promising = promising && l.StopsWithin > 0
	}
	for i := range dc.obs.pods {
		add(dc.obs.pods[i].Name, dc.obs.pods[i].UID)
	}
	unseenUntil := dc.unseenDeadline(longest, promise, promising)
	dc.unseenUntil = unseenUntil
	unseen := func(pod string, uid types.UID) {
		if i := add(pod, uid); i.lease == nil && !i.exists {
			i.unseenUntil = unseenUntil
		}
	}
	for pod, e := range dc.obs.published.Entries {
		uid := types.UID(e.PodUID)
		if live := dc.obs.podsByName[pod]; uid == "" && live != nil {
			uid = live.UID // a protocol-1 operator's entry: the pod of that name
		}
		if uid != "" {
			unseen(pod, uid)
		}
	}
	// A pod whose queues were revoked is named only by the bookkeeping once it is no longer a member: it
	// may still read them, its Lease gone before this operator started. Naming one more incarnation than
	// there is only holds queues back, so the bookkeeping counts here even when it cannot be trusted.
	if dc.obs.bookkeepingErr == nil {
		for _, r := range append(dc.obs.bookkeeping.Revocations, dc.obs.bookkeeping.Fenced...) {
			unseen(r.Pod, r.UID)
		}
	}
	slices.SortFunc(dc.incarnations, func(a, b *incarnation) int {
		return strings.Compare(incarnationKey(a.pod, a.uid), incarnationKey(b.pod, b.uid))
	})
	dc.d.report.memberLeases = map[string]*protocol.LeaseState{}
}

// unseenDeadline is how long an incarnation named only by what was published stands: a lease duration (the
// group's longest, else the default) from when this operator first looked at the group, or sooner when every
// Lease promises to stop within a bound and this operator's first write is older than that promise.
func (dc *decider) unseenDeadline(longest, promise time.Duration, promising bool) time.Time {
	if longest == 0 {
		longest = protocol.DefaultLeaseDuration
	}
	unseenUntil := dc.obs.sightedSince.Add(longest + dc.env.maxSkew)
	// A pod that keeps its promise reads nothing a promise after an assignment that gives it nothing was
	// published: this operator's first write gave nothing to a pod it never saw.
	if at := dc.obs.firstWrittenAt; promising && promise > 0 && !at.IsZero() && at.Add(promise+contactMargin).Before(unseenUntil) {
		unseenUntil = at.Add(promise + contactMargin)
	}
	return unseenUntil
}

// ackCeiling is the highest generation a member can have acknowledged: the highest the operator is known to
// have published, plus two recovery steps for generations published in the moments before it lost what it
// published (a recovery publishes recoveryStep above what it knows, and its status write may not follow).
// An acknowledgement above it was not made by a member following the protocol.
func (dc *decider) ackCeiling() int64 {
	known := max(dc.obs.published.Generation, dc.group.Status.AssignmentGeneration)
	for _, e := range dc.obs.published.Entries {
		known = max(known, e.Generation)
	}
	return min(known, protocol.MaxGeneration) + 2*recoveryStep
}

// judgeTrust decides whether what the operator published can be believed: it exists (or nothing was ever
// published), matches its digests, and its handoff state reads. Otherwise the pass says what was found and
// works from the members' claims alone.
func (dc *decider) judgeTrust() {
	pub := dc.obs.published
	dc.floor = max(dc.floor, pub.Generation, dc.group.Status.AssignmentGeneration)
	for _, e := range pub.Entries {
		// An edited generation annotation must not take the next generation below what members read.
		dc.floor = max(dc.floor, e.Generation)
	}
	everPublished := dc.floor > 0
	for _, l := range dc.leases {
		everPublished = everPublished || len(l.Claim) > 0 || l.ClaimErr != nil
	}
	var findings []string
	switch {
	case !pub.Exists && everPublished:
		dc.d.report.tampered = &problem{v1alpha1.ReasonAssignmentDeleted, fmt.Sprintf(
			"ConfigMap %s was deleted while members acknowledge up to generation %d; it is published again, and queues no member claims are held back until every member acknowledged it",
			assignmentName(dc.group), dc.floor)}
		return
	case len(pub.Tampered) > 0:
		findings = pub.Tampered
	}
	state, err := dc.obs.bookkeeping, dc.obs.bookkeepingErr
	if err != nil {
		findings = append(findings, err.Error())
	}
	if len(findings) > 0 {
		dc.d.report.tampered = &problem{v1alpha1.ReasonAssignmentEdited, "Someone changed the assignment: " + summarize(findings) +
			"; it is published again, and queues no member claims are held back until every member acknowledged it"}
		return
	}
	dc.trusted, dc.state = true, state
}

func (dc *decider) checkSelector() *problem { return dc.obs.selectorProblem }

// foreignRecheck is how often a group stalled by a ConfigMap it does not control looks whether it is gone.
const foreignRecheck = 10 * time.Second

// checkOwnership stops the pass when a ConfigMap under one of the assignment's names was not created for
// this group: the operator neither adopts nor overwrites it, and publishes nothing until it is gone.
func (dc *decider) checkOwnership() *problem {
	if len(dc.obs.foreign) == 0 {
		return nil
	}
	// Their removal starts no pass: the cache watches only the operator's own ConfigMaps.
	dc.d.lookAgainAt(dc.env.now, dc.env.now.Add(foreignRecheck))
	return &problem{v1alpha1.ReasonNotOwned, fmt.Sprintf(
		"ConfigMaps %s exist and are not controlled by ConsumerGroup %s; the operator neither writes nor deletes what it did not create. Rename the group or move those ConfigMaps away",
		strings.Join(dc.obs.foreign, ", "), dc.group.Name)}
}

func (dc *decider) findMembers() *problem {
	members, expiry, prob := membersFor(dc.group, dc.obs.pods, dc.obs.nodeZones,
		kubeletSignals{nodeLateAt: dc.obs.nodeLateAt, restartedAt: dc.obs.restartedAt}, dc.leaseOf, dc.env.now)
	dc.d.report.members, dc.memberExpiry = members, expiry
	for _, m := range members {
		if l := dc.leaseOf[m.Pod]; l != nil {
			dc.d.report.memberLeases[m.Pod] = l
		}
	}
	return prob
}

// listQueues lists every queue of the topology, in RocketMQ's order (topic, then broker, by UTF-16 order,
// then id), with each broker's zone. Sorting the few topic and broker names here spares the strategies
// from sorting every queue: for 65,536 queues that sort costs more than most strategies' own work.
func (dc *decider) listQueues() *problem {
	n := 0
	topics := slices.Clone(dc.env.topology)
	slices.SortFunc(topics, func(a, b v1alpha1.Topic) int { return allocate.CompareUTF16(a.Name, b.Name) })
	for i, t := range topics {
		topics[i].Brokers = slices.Clone(t.Brokers)
		slices.SortFunc(topics[i].Brokers, func(a, b v1alpha1.Broker) int { return allocate.CompareUTF16(a.Name, b.Name) })
		for _, b := range t.Brokers {
			n += int(b.Queues)
		}
	}
	if n > protocol.MaxQueues {
		return &problem{v1alpha1.ReasonAssignmentTooLarge, fmt.Sprintf("spec.topics lists %d queues; a group may have at most %d", n, protocol.MaxQueues)}
	}
	dc.queues = make([]allocate.Queue, 0, n)
	dc.zones = map[string]string{}
	for _, t := range topics {
		for _, b := range t.Brokers {
			if b.Zone != "" {
				dc.zones[b.Name] = b.Zone
			}
			for id := range b.Queues {
				dc.queues = append(dc.queues, allocate.Queue{Topic: t.Name, Broker: b.Name, ID: id})
			}
		}
	}
	dc.d.report.queueCount = len(dc.queues)
	return nil
}

func (dc *decider) checkStrategy() *problem {
	if dc.group.Spec.MessageModel == v1alpha1.Broadcasting {
		return nil
	}
	return dc.env.strategyProblem
}

// strategyMembers are the pass's members as the strategy sees them.
func (dc *decider) strategyMembers() []allocate.Member {
	members := make([]allocate.Member, len(dc.d.report.members))
	for i, m := range dc.d.report.members {
		members[i] = m.Member
	}
	return members
}

// allocate computes the target: every queue to every member in Broadcasting, the strategy's plan in
// Clustering. A plan that is not a partition of the spec's queues over the members is refused: publishing
// it would be ambiguous.
func (dc *decider) allocate() *problem {
	members := dc.strategyMembers()
	dc.target = make(allocate.Plan, len(members))
	if dc.group.Spec.MessageModel == v1alpha1.Broadcasting {
		for _, m := range members {
			dc.target[m.ID] = dc.queues
		}
		return nil
	}
	previous := dc.previousPlan()
	interval := dc.group.Spec.Strategy.LoadRebalanceInterval()
	in := allocate.Input{Queues: dc.queues, Members: members, BrokerZones: dc.zones, Previous: previous}
	if interval > 0 {
		in.QueueLoad = dc.reported()
	}
	out, err := dc.env.strategy.Allocate(in)
	if err != nil {
		return strategyProblem(&dc.group.Spec.Strategy, v1alpha1.ReasonAllocationFailed, err)
	}
	if err := allocate.CheckPartition(dc.queues, members, out); err != nil {
		return &problem{v1alpha1.ReasonAllocationFailed, err.Error()}
	}
	if interval > 0 {
		// Loads reach the Leases with renewals, which start no pass: look at them again every interval.
		// When only loads changed, rebalance at most once per interval, and look again when it has passed.
		dc.loadRebalanceDue = interval
		if allocate.Moved(previous, out) > 0 && coversExactly(previous, members, dc.queues) {
			// The annotation keeps whole seconds: count from the end of its second.
			if wait := dc.obs.published.RebalancedAt.Add(interval + time.Second).Sub(dc.env.now); wait > 0 {
				out, dc.loadRebalanceDue = previous, wait
			}
		}
	}
	for _, m := range members {
		dc.target[m.ID] = out[m.ID]
	}
	return nil
}

// reported is the load the members report per queue, from their Leases, read once per pass. Where two
// report one queue (a handoff in flight), the higher counts.
func (dc *decider) reported() map[allocate.Queue]float64 {
	if dc.reportedLoad != nil {
		return dc.reportedLoad
	}
	dc.reportedLoad = map[allocate.Queue]float64{}
	for _, m := range dc.d.report.members {
		l := dc.leaseOf[m.Pod]
		if l == nil || l.PodUID != m.UID {
			continue
		}
		for q, v := range l.Load {
			dc.reportedLoad[q] = max(dc.reportedLoad[q], v)
		}
	}
	return dc.reportedLoad
}

// queueLoads is every queue's load as the strategies count it (allocate.QueueLoads); nil when nobody
// reports load.
func (dc *decider) queueLoads() map[allocate.Queue]float64 {
	if dc.loads == nil && len(dc.reported()) > 0 {
		dc.loads = allocate.QueueLoads(allocate.Input{Queues: dc.queues, QueueLoad: dc.reported()})
	}
	return dc.loads
}

// recommend computes the total reported load and, with spec.autoscaling, how many members it needs.
// Without reports it keeps the last recommendation: nothing says the load changed.
func (dc *decider) recommend() {
	loads := dc.queueLoads()
	if loads == nil || len(dc.queues) == 0 {
		dc.d.report.recommended = dc.group.Status.RecommendedMembers
		return
	}
	total := allocate.TotalLoad(allocate.Input{Queues: dc.queues}, loads)
	dc.d.report.totalLoad = &total
	as := dc.group.Spec.Autoscaling
	if as == nil {
		return
	}
	target, err := strconv.ParseFloat(as.TargetLoadPerMember, 64)
	if err != nil || target <= 0 {
		return // the API refuses it; an older object that slipped through gets no recommendation
	}
	var previous int32
	if r := dc.group.Status.RecommendedMembers; r != nil {
		previous = *r
	}
	n := recommendMembers(total, target, len(dc.queues), previous)
	dc.d.report.recommended = &n
	// Loads arrive with renewals, which start no pass: look again within the default interval.
	if dc.loadRebalanceDue == 0 || v1alpha1.DefaultLoadRebalanceInterval < dc.loadRebalanceDue {
		dc.loadRebalanceDue = v1alpha1.DefaultLoadRebalanceInterval
	}
}

// recommendMembers is how many members carry total at target each: total / target rounded up, from 1 to
// the queue count (a member without a queue reads nothing). It goes down from previous only once the
// load is 10% below what the lower count carries at target, so that a load hovering at a boundary does
// not flap the count.
func recommendMembers(total, target float64, queues int, previous int32) int32 {
	n := int32(math.Ceil(total / target))
	if previous > 0 && n < previous {
		n = min(previous, max(n, int32(math.Ceil(total/(0.9*target)))))
	}
	return max(1, min(n, int32(queues)))
}

// coversExactly reports whether plan gives every queue to one of members and has an entry for each member
// and no one else: the members and queues it was made for are those of now.
func coversExactly(plan allocate.Plan, members []allocate.Member, queues []allocate.Queue) bool {
	if len(plan) != len(members) || allocate.CheckPartition(queues, members, plan) != nil {
		return false
	}
	held := 0
	for _, m := range members {
		qs, ok := plan[m.ID]
		if !ok {
			return false
		}
		held += len(qs)
	}
	return held == len(queues)
}

// strategyProblem turns a strategy's error into a problem; one about a parameter names its field.
func strategyProblem(s *v1alpha1.Strategy, reason string, err error) *problem {
	var param *allocate.ParamError
	if errors.As(err, &param) {
		return &problem{v1alpha1.ReasonInvalidStrategyParameters, fmt.Sprintf("%s.%s: %s", s.ParamsField(), param.Field, param.Message)}
	}
	return &problem{reason, fmt.Sprintf("strategy %s: %v", s.Type, err)}
}

// previousPlan is what strategies that keep queues in place start from: what each member reads now (its
// published entry, or, when the published objects cannot be trusted, its claim), plus the queues
// reserved for departed members, so that a member returning within its grace gets them back.
func (dc *decider) previousPlan() allocate.Plan {
	plan := allocate.Plan{}
	if dc.trusted {
		for _, e := range dc.obs.published.Entries {
			plan[e.Member] = e.Queues
		}
		for _, r := range dc.state.Reserved {
			if _, ok := plan[r.Member]; !ok {
				qs, _ := dc.obs.scope.Expand(r.Queues)
				plan[r.Member] = qs.Queues
			}
		}
		return plan
	}
	for _, m := range dc.d.report.members {
		if l := dc.leaseOf[m.Pod]; l != nil && l.PodUID == m.UID && l.ClaimErr == nil {
			plan[m.ID] = l.Claim
		}
	}
	return plan
}

// Defaults of spec.handoff, for groups written before the API server applied them.
const defaultRevokeTimeout = 30 * time.Second

// durationOr is seconds as a duration, def when unset.
func durationOr(seconds *int32, def time.Duration) time.Duration {
	if seconds == nil {
		return def
	}
	return time.Duration(*seconds) * time.Second
}

// planHandoff decides what each member may read now (handoff) and at which generation: it runs the
// handoff, checks that a generation is left to publish, chooses it, and stamps the revocations the
// handoff made with it. Each of those is a step of its own below.
func (dc *decider) planHandoff() *problem {
	h := handoff(dc.handoffInput())
	dc.entries = h.entries
	dc.next.handoff = handoffReport{fenced: h.fenced, withheld: h.withheld, recovering: h.recovering, firstWithheld: h.firstWithheld}
	dc.reportClaims(h.unreadableClaims)
	if prob := generationsLeft(dc.floor); prob != nil {
		return prob
	}
	dc.d.requeueAfter = sooner(dc.d.requeueAfter, h.requeueAfter)
	if !dc.memberExpiry.IsZero() {
		dc.d.lookAgainAt(dc.env.now, dc.memberExpiry)
	}
	next := &dc.next.assignment
	var changed bool
	next.generation, next.rebalancedAt, changed = dc.chooseGeneration()
	if changed {
		dc.next.rebalance = dc.countMoves(h.revokedFromMembers)
	}
	next.bookkeeping = stampRevocations(h.state, next.generation)
	return nil
}

// handoffInput is what the handoff of this pass works from.
func (dc *decider) handoffInput() handoffInput {
	spec := dc.group.Spec.Handoff
	return handoffInput{
		cooperative:   spec.Mode != v1alpha1.Immediate && dc.group.Spec.MessageModel != v1alpha1.Broadcasting,
		revokeTimeout: durationOr(spec.RevokeTimeoutSeconds, defaultRevokeTimeout),
		restartGrace:  durationOr(spec.RestartGraceSeconds, 0),
		maxSkew:       dc.env.maxSkew,
		now:           dc.env.now,
		members:       dc.d.report.members,
		target:        dc.target,
		published:     dc.obs.published.Entries,
		state:         dc.state,
		trusted:       dc.trusted,
		incarnations:  dc.incarnations,
		scope:         dc.obs.scope,
		unseenUntil:   dc.unseenUntil,
		publications:  dc.obs.publications,
	}
}

// generationsLeft stops a pass whose next generation, above floor (the highest known), could come too
// close to the largest a member accepts for a recovery to fit above it.
func generationsLeft(floor int64) *problem {
	if floor <= protocol.MaxGeneration-recoveryStep {
		return nil
	}
	return &problem{v1alpha1.ReasonGenerationExhausted, fmt.Sprintf(
		"the highest generation known is %d, too close to the largest a member accepts (%d) to publish another; the status or the objects naming it were edited. Delete and recreate the group to start again from 1",
		floor, protocol.MaxGeneration)}
}

// chooseGeneration is the generation the entries are published at, when it was rebalanced, and whether
// that is a new generation: the published one while the entries give every member what it gives them;
// otherwise the next above everything known, or a recovery step above it when what was published was
// lost. Entries that list queues the spec no longer has (a topic dropped, a broker turned read-only) are
// published again without them, even where the plan gives each member the same queues of the spec.
func (dc *decider) chooseGeneration() (generation int64, rebalancedAt time.Time, changed bool) {
	pub := dc.obs.published
	if dc.trusted && pub.Exists && pub.Outside == 0 && dc.sameAsPublished() {
		return pub.Generation, pub.RebalancedAt, false
	}
	generation = dc.floor + 1
	if dc.d.report.tampered.lostPublished() {
		generation = dc.floor + recoveryStep
	}
	return generation, dc.env.now.UTC().Truncate(time.Second), true
}

// stampRevocations is the handoff bookkeeping to publish at generation: the revocations the handoff made in
// this pass (generation 0) take the generation that publishes them, whose acknowledgement ends them.
func stampRevocations(state handoffState, generation int64) handoffState {
	state.Revocations = slices.Clone(state.Revocations)
	for i := range state.Revocations {
		if r := &state.Revocations[i]; r.Generation == 0 {
			r.Generation = generation
		}
	}
	sortState(&state)
	return state
}

// reportClaims reports the Leases whose claims cannot be read, which the handoff found; they, or else
// what the Leases hold that no member following the protocol writes, are what Tampered says when nothing
// the operator published was deleted or edited.
func (dc *decider) reportClaims(unreadable []string) {
	r := &dc.d.report
	if len(unreadable) > 0 {
		r.unreadableClaims = &problem{v1alpha1.ReasonClaimUnreadable, fmt.Sprintf(
			"The claims in Leases %s cannot be read; until their members write them again, queues no other member claims are held back",
			strings.Join(unreadable, ", "))}
		if r.tampered == nil {
			r.tampered = r.unreadableClaims
		}
	}
	if r.tampered == nil {
		r.tampered = r.suspectLeases
	}
}

// countMoves is the rebalance of publishing the entries in a new generation: the queues that change
// reader between the published entries (none, when they cannot be trusted) and the new ones. In
// Cooperative mode a move spans two generations: it is counted when the queue is revoked from its reader
// (revoked, from pods that stay members), since the grant that follows gives it to a member that had
// none of it.
func (dc *decider) countMoves(revoked []allocate.Queue) rebalance {
	before := allocate.Plan{}
	if dc.trusted {
		for _, e := range dc.obs.published.Entries {
			before[e.Member] = e.Queues
		}
	}
	after := make(allocate.Plan, len(dc.d.report.members))
	for _, m := range dc.d.report.members {
		after[m.ID] = dc.entries[m.Pod]
	}
	r := rebalance{published: true, moved: allocate.Moved(before, after) + len(revoked)}
	if r.moved > 0 && dc.group.Spec.MessageModel != v1alpha1.Broadcasting {
		// The queues revoked now are the moves of the target (they reach their new readers in a later
		// generation), so the split is the target's: Sticky by count moves beyond the bound only to keep
		// queues in their broker's zone.
		r.beyondBound = r.moved - min(r.moved, allocate.LowerBound(allocate.Input{Queues: dc.queues, Members: dc.strategyMembers(), Previous: before}))
	}
	if loads := dc.queueLoads(); loads != nil {
		r.movedLoad = allocate.MovedLoad(before, after, loads)
		for _, q := range revoked {
			r.movedLoad += loads[q]
		}
	}
	return r
}

// sameAsPublished reports whether the entries give every member pod what the published assignment does.
func (dc *decider) sameAsPublished() bool {
	pub := dc.obs.published.Entries
	if len(pub) != len(dc.d.report.members) {
		return false
	}
	for _, m := range dc.d.report.members {
		e, ok := pub[m.Pod]
		if !ok || e.Member != m.ID || types.UID(e.PodUID) != m.UID || !slices.Equal(e.Queues, dc.entries[m.Pod]) {
			return false
		}
	}
	return true
}

// layOut encodes each entry once and spreads them over the ConfigMaps (protocol.Layout); the writes are the
// ConfigMaps that do not already hold what they must.
func (dc *decider) layOut() *problem {
	next := &dc.next.assignment
	data := make(map[string]string, len(dc.d.report.members))
	next.entries = make(map[string]protocol.PublishedEntry, len(dc.d.report.members))
	for _, m := range dc.d.report.members {
		e := protocol.NewEntry(m.ID, string(m.UID), next.generation, dc.entries[m.Pod])
		data[m.Pod] = string(e.Encode())
		next.entries[m.Pod] = protocol.PublishedEntry{Entry: e, Queues: dc.entries[m.Pod]}
	}
	index := map[string]string{protocol.RebalancedAtAnnotation: next.rebalancedAt.UTC().Format(time.RFC3339)}
	if raw := next.bookkeeping.encode(); raw != "" {
		index[protocol.HandoffAnnotation] = raw
	}
	parts, err := protocol.Layout(dc.group.Name, next.generation, data, index)
	if err != nil {
		return &problem{v1alpha1.ReasonAssignmentTooLarge, err.Error() + "; reduce the queues or members of the group"}
	}
	next.exists = true
	wanted := map[string]bool{}
	for _, part := range parts {
		wanted[part.Name] = true
		observed := dc.obs.shards[part.Name]
		if part.Name == assignmentName(dc.group) {
			observed = dc.obs.index
		}
		switch {
		case observed == nil:
			dc.next.configMaps = append(dc.next.configMaps, part)
		case !holds(observed, part):
			dc.next.configMaps = append(dc.next.configMaps, part)
		case !labelledFor(observed, dc.group):
			dc.next.configMaps = append(dc.next.configMaps, part)
			dc.next.restored = append(dc.next.restored, fmt.Sprintf("ConfigMap %s: its labels were changed", part.Name))
		}
	}
	for _, name := range slices.Sorted(maps.Keys(dc.obs.shards)) {
		if !wanted[name] {
			dc.next.deleteShards = append(dc.next.deleteShards, dc.obs.shards[name])
		}
	}
	return nil
}

// holds reports whether cm already has part's data and the protocol's annotations.
func holds(cm *corev1.ConfigMap, part protocol.Part) bool {
	if len(cm.Data) != len(part.Data) || !maps.Equal(cm.Data, part.Data) && len(cm.Data) > 0 {
		return false
	}
	for _, k := range ownAnnotations {
		if cm.Annotations[k] != part.Annotations[k] {
			return false
		}
	}
	return true
}

// ownAnnotations are the annotations the operator writes on the ConfigMaps that publish an assignment.
var ownAnnotations = []string{protocol.GenerationAnnotation, protocol.ShardsAnnotation, protocol.DigestAnnotation,
	protocol.RebalancedAtAnnotation, protocol.HandoffAnnotation}

// labelledFor reports whether cm carries the operator's labels for group. Whether group is its
// controller is the one ownership check, controlledBy: a ConfigMap that fails it is foreign, and stops
// the pass before it is laid out (checkOwnership).
func labelledFor(cm *corev1.ConfigMap, group *v1alpha1.ConsumerGroup) bool {
	return cm.Labels[protocol.GroupLabel] == group.Name && cm.Labels[protocol.ManagedByLabel] == protocol.ManagedByValue
}

// keepPublished is the decision when a step found a problem, or the group is paused (prob is nil): what
// is published stays as it is, handoff bookkeeping included, until the input is fixed. The publication
// the steps may have begun is left unused.
func (dc *decider) keepPublished(prob *problem) {
	pub := dc.obs.published
	dc.d.report.problem = prob
	dc.d.report.assignment = assignment{
		generation:   max(pub.Generation, dc.group.Status.AssignmentGeneration),
		rebalancedAt: pub.RebalancedAt,
		entries:      pub.Entries,
		bookkeeping:  dc.state,
		exists:       pub.Exists,
	}
}

// take is the decision when every step passed: the new publication is written, and in force afterwards.
func (dc *decider) take(next newGeneration) {
	dc.d.write.configMaps, dc.d.write.deleteShards = next.configMaps, next.deleteShards
	r := &dc.d.report
	r.assignment, r.rebalance, r.handoff, r.restored = next.assignment, next.rebalance, next.handoff, next.restored
}

// chooseLeasesToDelete lists the Leases to delete: those whose incarnation the kubelet reports stopped, and those
// of pods that are gone once their claim no longer stands. Nobody else deletes them: they outlive their
// pods (protocol.MemberLease), and the garbage collector takes them only with the group. A vanished Lease
// has nothing left to delete; the pass looks again when its claim, or an unseen incarnation's entry,
// stops standing.
func (dc *decider) chooseLeasesToDelete() {
	for _, i := range dc.incarnations {
		var until time.Time
		switch state := i.state(dc.env.now, dc.env.maxSkew); {
		case i.lease == nil:
			if state != incarnationUnseen {
				continue
			}
			until = i.unseenUntil
		case dc.obs.vanished[i.lease.UID]:
			until = i.lease.Expiry(dc.env.maxSkew)
		case state == incarnationStopped || state == incarnationGone:
			dc.d.write.deleteLeases = append(dc.d.write.deleteLeases, *i.lease)
			continue
		case !i.exists: // departed, or drained with its pod gone: its Lease goes once it no longer stands
			until = i.lease.Expiry(dc.env.maxSkew)
		default:
			continue
		}
		dc.d.lookAgainAt(dc.env.now, until)
	}
}

// lookAgainAt makes the pass run again at t at the latest.
func (d *decision) lookAgainAt(now, t time.Time) {
	d.requeueAfter = soonerRequeue(d.requeueAfter, now, t)
}

// judgeLeases reports what the Leases say that no member following the protocol writes: an acknowledgement
// of a generation never published (ignored, indexIncarnations), a renewTime that went backwards (timed on
// the operator's clock all the same, leaseSightings), a load report that cannot be read (counted as none).
// It keeps nothing from being published.
func (dc *decider) judgeLeases() {
	findings := slices.Clone(dc.overclaims)
	for _, name := range dc.obs.backwards {
		findings = append(findings, fmt.Sprintf("Lease %s: spec.renewTime went backwards; its renewals are timed by the operator's clock", name))
	}
	for _, l := range dc.leases {
		if dc.obs.vanished[l.UID] {
			continue
		}
		if l.LoadErr != nil {
			findings = append(findings, fmt.Sprintf("Lease %s: the load report cannot be read (%v); it counts as none", l.Name, l.LoadErr))
		}
		if dc.claimsOutsideSpec(l) {
			findings = append(findings, fmt.Sprintf("Lease %s: its claim or load report lists %d queues outside the spec after acknowledging generation %d, which lists none; they are ignored", l.Name, l.Outside, l.AckedGeneration))
		}
	}
	if len(findings) > 0 {
		dc.d.report.suspectLeases = &problem{v1alpha1.ReasonLeaseTampered, summarize(findings)}
	}
}

// claimsOutsideSpec says whether l lists queues outside the spec although its member acknowledged a
// published generation that lists none. Before that, a member may still read queues an earlier spec
// named; after it, a member following the protocol claims only queues of its entry, and reports load
// only for queues it claims. What lies outside the spec is never listed (protocol.Scope), so it can
// neither cost memory nor block a queue of the spec.
func (dc *decider) claimsOutsideSpec(l protocol.LeaseState) bool {
	pub := dc.obs.published
	return l.Outside > 0 && pub.Exists && pub.Outside == 0 && l.AckedGeneration >= pub.Generation
}

// summarize joins findings into one message, the first few in full.
func summarize(findings []string) string { return joinFirst(findings, "; ", "; and %d more") }

// joinFirst joins the first five of items with sep, and says how many more there are with more, a format
// of one %d.
func joinFirst(items []string, sep, more string) string {
	const shown = 5
	s := strings.Join(items[:min(len(items), shown)], sep)
	if len(items) > shown {
		s += fmt.Sprintf(more, len(items)-shown)
	}
	return s
}
