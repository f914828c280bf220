package plan

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

// RecoveryStep is how far above the highest generation it knows the operator publishes after it lost what
// it published. A member never acts on a generation at or below one it acted on; the status and the
// acknowledgements hold every generation but those published in the moments before the operator last
// stopped, which this step leaves far behind.
const RecoveryStep = 100

// Env is what a decision depends on besides the group and the world: the time, how far clocks may
// differ, the group's topology (topologyOf) and its strategy (or why it cannot be built).
type Env struct {
	Now             time.Time
	MaxSkew         time.Duration
	Topology        Topology
	Strategy        allocate.Strategy
	StrategyProblem *Problem
	// JoinWindow is how long after a generation members that only joined are held back (holdJoins); 0
	// publishes them at once.
	JoinWindow time.Duration
}

// Decision is what one pass does: what it writes to the API server (write) and what it says about it in
// the status, events and metrics (report), plus when to look again.
type Decision struct {
	Write  Writes
	Report Report
	// RequeueAfter is when to look again without an event.
	RequeueAfter time.Duration
	// MemberDeadline is when the earliest of the members' own deadlines falls (OwnMembershipEnd): a
	// renewal overdue, or a restart no renewal answered; zero without members. It is not in
	// RequeueAfter: each renewal moves it later, so a pass at each would be a pass for every renewal. The
	// caller looks again then only if no renewal moved it (the reconciler's lateMembers).
	MemberDeadline time.Time
}

// Writes are a pass's API writes: the ConfigMaps to write, in order; the shards no longer used; the
// Leases whose claims no longer stand and whose pods are gone.
type Writes struct {
	ConfigMaps   []protocol.Part
	DeleteShards []*corev1.ConfigMap
	DeleteLeases []protocol.LeaseState
}

// Assignment is what is published once a pass is done: its generation, when it was rebalanced, each
// member pod's entry and the handoff bookkeeping. exists is false while nothing is published.
type Assignment struct {
	Generation   int64
	RebalancedAt time.Time
	Entries      map[string]protocol.PublishedEntry
	Bookkeeping  HandoffState
	Exists       bool
}

// Rebalance is what publishing a new generation changed: moved counts the queues that change reader,
// beyondBound those of them beyond the fewest a plan balanced by queue count must move
// (allocate.LowerBound, allocate.CountMoves), movedLoad their reported load (0 when nobody reports load).
// The zero value is a pass that publishes no new generation.
type Rebalance struct {
	Published   bool
	Moved       int
	BeyondBound int
	MovedLoad   float64
}

// HandoffReport is what the handoff of a pass reports: the revocations it fenced, the queues withheld
// from their new reader, the incarnations that have not yet acknowledged a recovery.
type HandoffReport struct {
	Fenced               []Revocation
	Withheld, Recovering int
	// FirstWithheld says which queue waited first and why, for the log.
	FirstWithheld string
}

// Report is what a pass says: the assignment in force, the members it was made for, what changed, and
// what was found wrong.
type Report struct {
	Assignment
	Members []Member
	// MemberLeases are the members' own Leases, by pod name.
	MemberLeases map[string]*protocol.LeaseState
	QueueCount   int
	Rebalance    Rebalance
	Handoff      HandoffReport
	// Problem keeps the published assignment in place; paused is set while spec.paused does.
	Problem *Problem
	Paused  bool
	// HeldJoins are the pods that became members but wait for the join window to close (holdJoins);
	// they are not in Members, and read nothing, until then.
	HeldJoins []string
	// Tampered says what was found deleted or edited (the assignment before a claim); unreadableClaims
	// names the claims that cannot be read; suspectLeases says what the Leases hold that no member
	// following the protocol writes; restored lists metadata someone changed that this pass writes back.
	Tampered         *Problem
	UnreadableClaims *Problem
	SuspectLeases    *Problem
	Restored         []string
	// TotalLoad is the load the members report for the group's queues, and recommended the members it
	// needs (spec.autoscaling); both nil when nobody reports load.
	TotalLoad   *float64
	Recommended *int32
}

// newGeneration is what the steps that plan a new generation (planHandoff, layOut) produce. decide takes it
// whole once every step passed; a step that fails leaves it unused and what is published in force.
type newGeneration struct {
	assignment   Assignment
	rebalance    Rebalance
	handoff      HandoffReport
	configMaps   []protocol.Part
	deleteShards []*corev1.ConfigMap
	restored     []string
}

// Decide is the reconciler's whole judgement, free of I/O: from the group and what was observed, what to
// publish. It runs the checks that can stop a new assignment in order; the first that
// fails keeps the published assignment in place.
func Decide(group *v1alpha1.ConsumerGroup, obs *Observation, env Env) *Decision {
	dc := newDecider(group, obs, env)
	switch prob := dc.runSteps(); {
	case group.Spec.Paused:
		// Frozen: nothing new is published, whatever changed. Leases are still read and cleaned up.
		dc.keepPublished(nil)
		dc.d.Report.Paused = true
	case prob != nil:
		dc.keepPublished(prob)
	default:
		dc.take(dc.next)
	}
	dc.chooseLeasesToDelete()
	dc.recommend()
	dc.d.RequeueAfter = sooner(dc.d.RequeueAfter, dc.loadRebalanceDue)
	return dc.d
}

// runSteps runs the steps of a pass in order, up to the first that finds a problem, which it returns. A
// paused group runs none.
func (dc *decider) runSteps() *Problem {
	if dc.group.Spec.Paused {
		return nil
	}
	for _, step := range append([]func() *Problem{dc.checkOwnership}, append(dc.planSteps(), dc.planHandoff, dc.layOut)...) {
		if prob := step(); prob != nil {
			return prob
		}
	}
	return nil
}

// newDecider starts a decision: it reads the Leases and judges whether the published objects can be
// trusted, which every later step relies on.
func newDecider(group *v1alpha1.ConsumerGroup, obs *Observation, env Env) *decider {
	dc := &decider{group: group, obs: obs, env: env, d: &Decision{}}
	dc.indexIncarnations()
	dc.judgeTrust()
	dc.judgeLeases()
	return dc
}

// planSteps are the steps up to the strategy's target, in order; each can stop the plan with a problem.
// The handoff and the layout follow them in a pass; a preview stops after them.
func (dc *decider) planSteps() []func() *Problem {
	return []func() *Problem{dc.checkSelector, dc.findMembers, dc.listQueues, dc.checkStrategy, dc.holdJoins, dc.allocate}
}

// decider carries one decision through its steps.
type decider struct {
	group *v1alpha1.ConsumerGroup
	obs   *Observation
	env   Env
	d     *Decision

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
	state       HandoffState
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
// looked at the group: its Lease may have vanished before then (unseenDeadline).
func (dc *decider) indexIncarnations() {
	dc.leaseOf = map[string]*protocol.LeaseState{}
	byKey := map[string]*incarnation{}
	add := func(pod string, uid types.UID) *incarnation {
		k := IncarnationKey(pod, uid)
		if i := byKey[k]; i != nil {
			return i
		}
		i := &incarnation{pod: pod, uid: uid}
		if live := dc.obs.PodsByName[pod]; live != nil && live.UID == uid {
			i.exists, i.stopped, i.node = true, StoppedByKubelet(live), live.Spec.NodeName
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
	dc.leases = slices.Clone(dc.obs.Leases)
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
		if live := dc.obs.PodsByName[l.Pod]; live != nil && live.UID == l.PodUID {
			promise = max(promise, l.StopsWithin)
		}
		promising = promising && l.StopsWithin > 0
	}
	for i := range dc.obs.Pods {
		add(dc.obs.Pods[i].Name, dc.obs.Pods[i].UID)
	}
	unseenUntil := dc.unseenDeadline(longest, promise, promising)
	dc.unseenUntil = unseenUntil
	unseen := func(pod string, uid types.UID) {
		if i := add(pod, uid); i.lease == nil && !i.exists {
			i.unseenUntil = unseenUntil
		}
	}
	for pod, e := range dc.obs.Published.Entries {
		uid := types.UID(e.PodUID)
		if live := dc.obs.PodsByName[pod]; uid == "" && live != nil {
			uid = live.UID // a protocol-1 operator's entry: the pod of that name
		}
		if uid != "" {
			unseen(pod, uid)
		}
	}
	// A pod whose queues were revoked is named only by the bookkeeping once it is no longer a member: it
	// may still read them, its Lease gone before this operator started. Naming one more incarnation than
	// there is only holds queues back, so the bookkeeping counts here even when it cannot be trusted.
	if dc.obs.BookkeepingErr == nil {
		for _, r := range append(dc.obs.Bookkeeping.Revocations, dc.obs.Bookkeeping.Fenced...) {
			unseen(r.Pod, r.UID)
		}
	}
	slices.SortFunc(dc.incarnations, func(a, b *incarnation) int {
		return strings.Compare(IncarnationKey(a.pod, a.uid), IncarnationKey(b.pod, b.uid))
	})
	dc.d.Report.MemberLeases = map[string]*protocol.LeaseState{}
}

// unseenDeadline is how long an incarnation named only by what was published stands: a lease duration (the
// group's longest, else the default) from when this operator first looked at the group, or sooner when every
// Lease promises to stop within a bound and this operator's first write is older than that promise.
func (dc *decider) unseenDeadline(longest, promise time.Duration, promising bool) time.Time {
	if longest == 0 {
		longest = protocol.DefaultLeaseDuration
	}
	unseenUntil := dc.obs.SightedSince.Add(longest + dc.env.MaxSkew)
	// A pod that keeps its promise reads nothing a promise after an assignment that gives it nothing was
	// published: this operator's first write gave nothing to a pod it never saw. With node views, only
	// once every line of the group asks for that generation, as for any promise (promiseKept).
	at := dc.obs.FirstWrittenAt
	asked, linesOK := dc.obs.NodeViews.KnownSince("", dc.obs.FirstWrittenGeneration)
	if at = latest(at, asked); promising && promise > 0 && linesOK && !dc.obs.FirstWrittenAt.IsZero() && at.Add(promise+contactMargin).Before(unseenUntil) {
		unseenUntil = at.Add(promise + contactMargin)
	}
	return unseenUntil
}

// ackCeiling is the highest generation a member can have acknowledged: the highest the operator is known to
// have published, plus two recovery steps for generations published in the moments before it lost what it
// published (a recovery publishes recoveryStep above what it knows, and its status write may not follow).
// An acknowledgement above it was not made by a member following the protocol.
func (dc *decider) ackCeiling() int64 {
	known := max(dc.obs.Published.Generation, dc.group.Status.AssignmentGeneration)
	for _, e := range dc.obs.Published.Entries {
		known = max(known, e.Generation)
	}
	return min(known, protocol.MaxGeneration) + 2*RecoveryStep
}

// judgeTrust decides whether what the operator published can be believed: it exists (or nothing was ever
// published), matches its digests, and its handoff state reads. Otherwise the pass says what was found and
// works from the members' claims alone.
func (dc *decider) judgeTrust() {
	pub := dc.obs.Published
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
		dc.d.Report.Tampered = &Problem{v1alpha1.ReasonAssignmentDeleted, fmt.Sprintf(
			"ConfigMap %s was deleted while members acknowledge up to generation %d; it is published again, and queues no member claims are held back until every member acknowledged it",
			protocol.AssignmentName(dc.group.Name), dc.floor)}
		return
	case len(pub.Tampered) > 0:
		findings = pub.Tampered
	}
	state, err := dc.obs.Bookkeeping, dc.obs.BookkeepingErr
	if err != nil {
		findings = append(findings, err.Error())
	}
	if len(findings) > 0 {
		dc.d.Report.Tampered = &Problem{v1alpha1.ReasonAssignmentEdited, "Someone changed the assignment: " + Summarize(findings) +
			"; it is published again, and queues no member claims are held back until every member acknowledged it"}
		return
	}
	dc.trusted, dc.state = true, state
}

func (dc *decider) checkSelector() *Problem { return dc.obs.SelectorProblem }

// foreignRecheck is how often a group stalled by a ConfigMap it does not control looks whether it is gone.
const foreignRecheck = 10 * time.Second

// checkOwnership stops the pass when a ConfigMap under one of the assignment's names was not created for
// this group: the operator neither adopts nor overwrites it, and publishes nothing until it is gone.
func (dc *decider) checkOwnership() *Problem {
	if len(dc.obs.Foreign) == 0 {
		return nil
	}
	// Their removal starts no pass: the cache watches only the operator's own ConfigMaps.
	dc.d.lookAgainAt(dc.env.Now, dc.env.Now.Add(foreignRecheck))
	return &Problem{v1alpha1.ReasonNotOwned, fmt.Sprintf(
		"ConfigMaps %s exist and are not controlled by ConsumerGroup %s; the operator neither writes nor deletes what it did not create. Rename the group or move those ConfigMaps away",
		strings.Join(dc.obs.Foreign, ", "), dc.group.Name)}
}

func (dc *decider) findMembers() *Problem {
	members, expiry, prob := membersFor(dc.group, dc.obs.Pods, dc.obs.NodeZones,
		kubeletSignals{nodeLateAt: dc.obs.NodeLateAt, restartedAt: dc.obs.RestartedAt, agents: dc.obs.AgentHeartbeats}, dc.leaseOf, dc.env.Now)
	dc.d.Report.Members, dc.memberExpiry = members, expiry
	for _, m := range members {
		if l := dc.leaseOf[m.Pod]; l != nil {
			dc.d.Report.MemberLeases[m.Pod] = l
		}
	}
	return prob
}

// listQueues lists every queue of the topology, in RocketMQ's order (topic, then broker, by UTF-16 order,
// then id), with each broker's zone. Sorting the few topic and broker names here spares the strategies
// from sorting every queue: for 65,536 queues that sort costs more than most strategies' own work.
func (dc *decider) listQueues() *Problem {
	if n := dc.env.Topology.QueueCount(); n > protocol.MaxQueues {
		return &Problem{v1alpha1.ReasonAssignmentTooLarge, fmt.Sprintf("spec.topics lists %d queues; a group may have at most %d", n, protocol.MaxQueues)}
	}
	dc.queues = dc.env.Topology.Queues()
	dc.zones = dc.env.Topology.BrokerZones()
	dc.d.Report.QueueCount = len(dc.queues)
	return nil
}

func (dc *decider) checkStrategy() *Problem {
	if dc.group.Spec.MessageModel == v1alpha1.Broadcasting {
		return nil
	}
	return dc.env.StrategyProblem
}

// holdJoins holds back the members that only joined, for a short window after each generation
// (Env.JoinWindow): while the published assignment gives every queue to a member that still is one, each
// newcomer published alone makes a generation that every member acknowledges with a Lease write (two, with
// Cooperative handoff), and the pods of a Deployment become Ready one after another. Held back, the
// newcomers of a window join in one rebalance when it closes. A held member reads nothing, as before it
// joined, so holding moves no queue and keeps no queue from a reader: a member that leaves, a queue added
// or a handoff in flight ends the hold at once (joinsToHold).
func (dc *decider) holdJoins() *Problem {
	pub := dc.obs.Published
	if dc.env.JoinWindow <= 0 || !dc.trusted || !pub.Exists {
		return nil
	}
	held, wait := joinsToHold(dc.previousPlan(), dc.d.Report.Members, dc.queues, pub.RebalancedAt, dc.env.Now, dc.env.JoinWindow)
	if len(held) == 0 {
		return nil
	}
	members := make([]Member, 0, len(dc.d.Report.Members)-len(held))
	for _, m := range dc.d.Report.Members {
		if held[m.ID] {
			dc.d.Report.HeldJoins = append(dc.d.Report.HeldJoins, m.Pod)
			delete(dc.d.Report.MemberLeases, m.Pod)
			continue
		}
		members = append(members, m)
	}
	dc.d.Report.Members = members
	dc.d.RequeueAfter = sooner(dc.d.RequeueAfter, wait)
	return nil
}

// joinsToHold are the members (by id) to hold back at now, and how long until the window closes: those
// that published, the plan in force, has no entry for, while every member it has an entry for still is
// one, it gives every queue to one of them, and the last generation, rebalanced at rebalancedAt (in
// whole seconds), is less than window old. Otherwise none.
func joinsToHold(published allocate.Plan, members []Member, queues []allocate.Queue, rebalancedAt, now time.Time, window time.Duration) (map[string]bool, time.Duration) {
	wait := rebalancedAt.Add(window).Sub(now)
	if wait <= 0 || len(published) == 0 {
		return nil, 0
	}
	held := map[string]bool{}
	staying := make([]allocate.Member, 0, len(published))
	for _, m := range members {
		if _, ok := published[m.ID]; ok {
			staying = append(staying, m.Member)
		} else {
			held[m.ID] = true
		}
	}
	if len(held) == 0 || !coversExactly(published, staying, queues) {
		return nil, 0
	}
	return held, wait
}

// strategyMembers are the pass's members as the strategy sees them.
func (dc *decider) strategyMembers() []allocate.Member {
	members := make([]allocate.Member, len(dc.d.Report.Members))
	for i, m := range dc.d.Report.Members {
		members[i] = m.Member
	}
	return members
}

// allocate computes the target: every queue to every member in Broadcasting, the strategy's plan in
// Clustering. A plan that is not a partition of the spec's queues over the members is refused: publishing
// it would be ambiguous.
func (dc *decider) allocate() *Problem {
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
	out, err := dc.env.Strategy.Allocate(in)
	if err != nil {
		return strategyProblem(&dc.group.Spec.Strategy, v1alpha1.ReasonAllocationFailed, err)
	}
	if err := allocate.CheckPartition(dc.queues, members, out); err != nil {
		return &Problem{v1alpha1.ReasonAllocationFailed, err.Error()}
	}
	if interval > 0 {
		// Loads reach the Leases with renewals, which start no pass: look at them again every interval.
		// When only loads changed, rebalance at most once per interval, and look again when it has passed.
		dc.loadRebalanceDue = interval
		if allocate.Moved(previous, out) > 0 && coversExactly(previous, members, dc.queues) {
			// The annotation keeps whole seconds: count from the end of its second.
			if wait := dc.obs.Published.RebalancedAt.Add(interval + time.Second).Sub(dc.env.Now); wait > 0 {
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
	for _, m := range dc.d.Report.Members {
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
		dc.d.Report.Recommended = dc.group.Status.RecommendedMembers
		return
	}
	total := allocate.TotalLoad(allocate.Input{Queues: dc.queues}, loads)
	dc.d.Report.TotalLoad = &total
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
	dc.d.Report.Recommended = &n
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
func strategyProblem(s *v1alpha1.Strategy, reason string, err error) *Problem {
	var param *allocate.ParamError
	if errors.As(err, &param) {
		return &Problem{v1alpha1.ReasonInvalidStrategyParameters, fmt.Sprintf("%s.%s: %s", s.ParamsField(), param.Field, param.Message)}
	}
	return &Problem{reason, fmt.Sprintf("strategy %s: %v", s.Type, err)}
}

// previousPlan is what strategies that keep queues in place start from: what each member reads now (its
// published entry, or, when the published objects cannot be trusted, its claim), plus the queues
// reserved for departed members, so that a member returning within its grace gets them back.
func (dc *decider) previousPlan() allocate.Plan {
	plan := allocate.Plan{}
	if dc.trusted {
		for _, e := range dc.obs.Published.Entries {
			plan[e.Member] = e.Queues
		}
		for _, r := range dc.state.Reserved {
			if _, ok := plan[r.Member]; !ok {
				qs, _ := dc.obs.Scope.Expand(r.Queues)
				plan[r.Member] = qs.Queues
			}
		}
		return plan
	}
	for _, m := range dc.d.Report.Members {
		if l := dc.leaseOf[m.Pod]; l != nil && l.PodUID == m.UID && l.ClaimErr == nil {
			plan[m.ID] = l.Claim
		}
	}
	return plan
}

// Defaults of spec.handoff, for groups written before the API server applied them.
const DefaultRevokeTimeout = 30 * time.Second

// DurationOr is seconds as a duration, def when unset.
func DurationOr(seconds *int32, def time.Duration) time.Duration {
	if seconds == nil {
		return def
	}
	return time.Duration(*seconds) * time.Second
}

// planHandoff decides what each member may read now (handoff) and at which generation: it runs the
// handoff, checks that a generation is left to publish, chooses it, and stamps the revocations the
// handoff made with it. Each of those is a step of its own below.
func (dc *decider) planHandoff() *Problem {
	h := handoff(dc.handoffInput())
	dc.entries = h.entries
	dc.next.handoff = HandoffReport{Fenced: h.fenced, Withheld: h.withheld, Recovering: h.recovering, FirstWithheld: h.firstWithheld}
	dc.reportClaims(h.unreadableClaims)
	if prob := generationsLeft(dc.floor); prob != nil {
		return prob
	}
	dc.d.RequeueAfter = sooner(dc.d.RequeueAfter, h.requeueAfter)
	dc.d.MemberDeadline = dc.memberExpiry
	next := &dc.next.assignment
	var changed bool
	next.Generation, next.RebalancedAt, changed = dc.chooseGeneration()
	if changed {
		dc.next.rebalance = dc.countMoves(h.revokedFromMembers)
	}
	next.Bookkeeping = stampRevocations(h.state, next.Generation)
	return nil
}

// handoffInput is what the handoff of this pass works from.
func (dc *decider) handoffInput() handoffInput {
	spec := dc.group.Spec.Handoff
	return handoffInput{
		cooperative:   spec.Mode != v1alpha1.Immediate && dc.group.Spec.MessageModel != v1alpha1.Broadcasting,
		revokeTimeout: DurationOr(spec.RevokeTimeoutSeconds, DefaultRevokeTimeout),
		restartGrace:  DurationOr(spec.RestartGraceSeconds, 0),
		maxSkew:       dc.env.MaxSkew,
		now:           dc.env.Now,
		members:       dc.d.Report.Members,
		target:        dc.target,
		published:     dc.obs.Published.Entries,
		state:         dc.state,
		trusted:       dc.trusted,
		incarnations:  dc.incarnations,
		scope:         dc.obs.Scope,
		unseenUntil:   dc.unseenUntil,
		publications:  dc.obs.Publications,
		nodeViews:     dc.obs.NodeViews,
	}
}

// generationsLeft stops a pass whose next generation, above floor (the highest known), could come too
// close to the largest a member accepts for a recovery to fit above it.
func generationsLeft(floor int64) *Problem {
	if floor <= protocol.MaxGeneration-RecoveryStep {
		return nil
	}
	return &Problem{v1alpha1.ReasonGenerationExhausted, fmt.Sprintf(
		"the highest generation known is %d, too close to the largest a member accepts (%d) to publish another; the status or the objects naming it were edited. Delete and recreate the group to start again from 1",
		floor, protocol.MaxGeneration)}
}

// chooseGeneration is the generation the entries are published at, when it was rebalanced, and whether
// that is a new generation: the published one while the entries give every member what it gives them;
// otherwise the next above everything known, or a recovery step above it when what was published was
// lost. Entries that list queues the spec no longer has (a topic dropped, a broker turned read-only) are
// published again without them, even where the plan gives each member the same queues of the spec.
func (dc *decider) chooseGeneration() (generation int64, rebalancedAt time.Time, changed bool) {
	pub := dc.obs.Published
	if dc.trusted && pub.Exists && pub.Outside == 0 && dc.sameAsPublished() {
		return pub.Generation, pub.RebalancedAt, false
	}
	generation = dc.floor + 1
	if dc.d.Report.Tampered.LostPublished() {
		generation = dc.floor + RecoveryStep
	}
	return generation, dc.env.Now.UTC().Truncate(time.Second), true
}

// stampRevocations is the handoff bookkeeping to publish at generation: the revocations the handoff made in
// this pass (generation 0) take the generation that publishes them, whose acknowledgement ends them.
func stampRevocations(state HandoffState, generation int64) HandoffState {
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
	r := &dc.d.Report
	if len(unreadable) > 0 {
		r.UnreadableClaims = &Problem{v1alpha1.ReasonClaimUnreadable, fmt.Sprintf(
			"The claims in Leases %s cannot be read; until their members write them again, queues no other member claims are held back",
			strings.Join(unreadable, ", "))}
		if r.Tampered == nil {
			r.Tampered = r.UnreadableClaims
		}
	}
	if r.Tampered == nil {
		r.Tampered = r.SuspectLeases
	}
}

// countMoves is the rebalance of publishing the entries in a new generation: the queues that change
// reader between the published entries (none, when they cannot be trusted) and the new ones. In
// Cooperative mode a move spans two generations: it is counted when the queue is revoked from its reader
// (revoked, from pods that stay members), since the grant that follows gives it to a member that had
// none of it.
func (dc *decider) countMoves(revoked []allocate.Queue) Rebalance {
	before := allocate.Plan{}
	if dc.trusted {
		for _, e := range dc.obs.Published.Entries {
			before[e.Member] = e.Queues
		}
	}
	after := make(allocate.Plan, len(dc.d.Report.Members))
	for _, m := range dc.d.Report.Members {
		after[m.ID] = dc.entries[m.Pod]
	}
	r := Rebalance{Published: true, Moved: allocate.Moved(before, after) + len(revoked)}
	if r.Moved > 0 && dc.group.Spec.MessageModel != v1alpha1.Broadcasting {
		// The queues revoked now are the moves of the target (they reach their new readers in a later
		// generation), so the split is the target's: Sticky by count moves beyond the bound only to keep
		// queues in their broker's zone.
		r.BeyondBound = r.Moved - min(r.Moved, allocate.LowerBound(allocate.Input{Queues: dc.queues, Members: dc.strategyMembers(), Previous: before}))
	}
	if loads := dc.queueLoads(); loads != nil {
		r.MovedLoad = allocate.MovedLoad(before, after, loads)
		for _, q := range revoked {
			r.MovedLoad += loads[q]
		}
	}
	return r
}

// sameAsPublished reports whether the entries give every member pod what the published assignment does.
func (dc *decider) sameAsPublished() bool {
	pub := dc.obs.Published.Entries
	if len(pub) != len(dc.d.Report.Members) {
		return false
	}
	for _, m := range dc.d.Report.Members {
		e, ok := pub[m.Pod]
		if !ok || e.Member != m.ID || types.UID(e.PodUID) != m.UID || !slices.Equal(e.Queues, dc.entries[m.Pod]) {
			return false
		}
	}
	return true
}

// layOut encodes each entry once and spreads them over the ConfigMaps (protocol.Layout); the writes are the
// ConfigMaps that do not already hold what they must.
func (dc *decider) layOut() *Problem {
	next := &dc.next.assignment
	data := make(map[string]string, len(dc.d.Report.Members))
	next.Entries = make(map[string]protocol.PublishedEntry, len(dc.d.Report.Members))
	for _, m := range dc.d.Report.Members {
		e := protocol.NewEntry(m.ID, string(m.UID), next.Generation, dc.entries[m.Pod])
		data[m.Pod] = string(e.Encode())
		next.Entries[m.Pod] = protocol.PublishedEntry{Entry: e, Queues: dc.entries[m.Pod]}
	}
	index := map[string]string{protocol.RebalancedAtAnnotation: next.RebalancedAt.UTC().Format(time.RFC3339)}
	if raw := next.Bookkeeping.encode(); raw != "" {
		index[protocol.HandoffAnnotation] = raw
	}
	parts, err := protocol.Layout(dc.group.Name, next.Generation, data, index)
	if err != nil {
		return &Problem{v1alpha1.ReasonAssignmentTooLarge, err.Error() + "; reduce the queues or members of the group"}
	}
	next.Exists = true
	wanted := map[string]bool{}
	for _, part := range parts {
		wanted[part.Name] = true
		observed := dc.obs.Shards[part.Name]
		if part.Name == protocol.AssignmentName(dc.group.Name) {
			observed = dc.obs.Index
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
	for _, name := range slices.Sorted(maps.Keys(dc.obs.Shards)) {
		if !wanted[name] {
			dc.next.deleteShards = append(dc.next.deleteShards, dc.obs.Shards[name])
		}
	}
	return nil
}

// holds reports whether cm already has part's data and the protocol's annotations.
func holds(cm *corev1.ConfigMap, part protocol.Part) bool {
	if len(cm.Data) != len(part.Data) || !maps.Equal(cm.Data, part.Data) && len(cm.Data) > 0 {
		return false
	}
	for _, k := range OwnAnnotations {
		if cm.Annotations[k] != part.Annotations[k] {
			return false
		}
	}
	return true
}

// OwnAnnotations are the annotations the operator writes on the ConfigMaps that publish an assignment.
var OwnAnnotations = []string{protocol.GenerationAnnotation, protocol.ShardsAnnotation, protocol.DigestAnnotation,
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
func (dc *decider) keepPublished(prob *Problem) {
	pub := dc.obs.Published
	dc.d.Report.Problem = prob
	dc.d.Report.Assignment = Assignment{
		Generation:   max(pub.Generation, dc.group.Status.AssignmentGeneration),
		RebalancedAt: pub.RebalancedAt,
		Entries:      pub.Entries,
		Bookkeeping:  dc.state,
		Exists:       pub.Exists,
	}
}

// take is the decision when every step passed: the new publication is written, and in force afterwards.
func (dc *decider) take(next newGeneration) {
	dc.d.Write.ConfigMaps, dc.d.Write.DeleteShards = next.configMaps, next.deleteShards
	r := &dc.d.Report
	r.Assignment, r.Rebalance, r.Handoff, r.Restored = next.assignment, next.rebalance, next.handoff, next.restored
}

// chooseLeasesToDelete lists the Leases to delete: those whose incarnation the kubelet reports stopped, and those
// of pods that are gone once their claim no longer stands. Nobody else deletes them: they outlive their
// pods (protocol.MemberLease), and the garbage collector takes them only with the group. A vanished Lease
// has nothing left to delete; the pass looks again when its claim, or an unseen incarnation's entry,
// stops standing.
func (dc *decider) chooseLeasesToDelete() {
	for _, i := range dc.incarnations {
		var until time.Time
		switch state := i.state(dc.env.Now, dc.env.MaxSkew); {
		case i.lease == nil:
			if state != incarnationUnseen {
				continue
			}
			until = i.unseenUntil
		case dc.obs.Vanished[i.lease.UID]:
			until = i.lease.Expiry(dc.env.MaxSkew)
		case state == incarnationStopped || state == incarnationGone:
			dc.d.Write.DeleteLeases = append(dc.d.Write.DeleteLeases, *i.lease)
			continue
		case !i.exists: // departed, or drained with its pod gone: its Lease goes once it no longer stands
			until = i.lease.Expiry(dc.env.MaxSkew)
		default:
			continue
		}
		dc.d.lookAgainAt(dc.env.Now, until)
	}
}

// lookAgainAt makes the pass run again at t at the latest.
func (d *Decision) lookAgainAt(now, t time.Time) {
	d.RequeueAfter = soonerRequeue(d.RequeueAfter, now, t)
}

// judgeLeases reports what the Leases say that no member following the protocol writes: an acknowledgement
// of a generation never published (ignored, indexIncarnations), a renewTime that went backwards (timed on
// the operator's clock all the same, observe.Sightings), a load report that cannot be read (counted as none).
// It keeps nothing from being published.
func (dc *decider) judgeLeases() {
	findings := slices.Clone(dc.overclaims)
	for _, name := range dc.obs.Backwards {
		findings = append(findings, fmt.Sprintf("Lease %s: spec.renewTime went backwards; its renewals are timed by the operator's clock", name))
	}
	for _, l := range dc.leases {
		if dc.obs.Vanished[l.UID] {
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
		dc.d.Report.SuspectLeases = &Problem{v1alpha1.ReasonLeaseTampered, Summarize(findings)}
	}
}

// claimsOutsideSpec says whether l lists queues outside the spec although its member acknowledged a
// published generation that lists none. Before that, a member may still read queues an earlier spec
// named; after it, a member following the protocol claims only queues of its entry, and reports load
// only for queues it claims. What lies outside the spec is never listed (protocol.Scope), so it can
// neither cost memory nor block a queue of the spec.
func (dc *decider) claimsOutsideSpec(l protocol.LeaseState) bool {
	pub := dc.obs.Published
	return l.Outside > 0 && pub.Exists && pub.Outside == 0 && l.AckedGeneration >= pub.Generation
}

// Summarize joins findings into one message, the first few in full.
func Summarize(findings []string) string { return JoinFirst(findings, "; ", "; and %d more") }

// JoinFirst joins the first five of items with sep, and says how many more there are with more, a format
// of one %d.
func JoinFirst(items []string, sep, more string) string {
	const shown = 5
	s := strings.Join(items[:min(len(items), shown)], sep)
	if len(items) > shown {
		s += fmt.Sprintf(more, len(items)-shown)
	}
	return s
}
