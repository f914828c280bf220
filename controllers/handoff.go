package controllers

import (
	"encoding/json"
	"slices"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/types"

	"github.com/consumergroup-operator/consumergroup-operator/api/v1alpha1"
	"github.com/consumergroup-operator/consumergroup-operator/pkg/allocate"
	"github.com/consumergroup-operator/consumergroup-operator/pkg/assignment"
	podmember "github.com/consumergroup-operator/consumergroup-operator/pkg/member"
)

// HandoffAnnotation on the assignment ConfigMap holds the handoff state: queues taken from a pod that has
// not yet acknowledged it, queues kept for departed members, and fenced pods. Keeping it there, beside the
// plan it belongs to, lets a restarted operator resume a handoff where the last one stopped.
const HandoffAnnotation = "messaging.consumergroup.io/handoff"

// Defaults of spec.handoff, for groups written before the API server applied them.
const (
	defaultRevokeTimeout = 30 * time.Second
)

// handoffState is what the operator remembers between passes about queues in flight.
type handoffState struct {
	// Revocations are queues taken from a pod still running, not yet given to anyone else.
	Revocations []revocation `json:"revocations,omitempty"`
	// Reserved are queues kept, unread, for a member that left, in case it returns.
	Reserved []reservation `json:"reserved,omitempty"`
	// Fenced are pods that did not acknowledge a revocation in time.
	Fenced []fencedPod `json:"fenced,omitempty"`
}

type revocation struct {
	Pod string    `json:"pod"`
	UID types.UID `json:"uid"`
	// Generation is the first generation that no longer lists the queues for the pod; the pod releases
	// them by acknowledging it or any later one.
	Generation int64                     `json:"generation"`
	RevokedAt  time.Time                 `json:"revokedAt"`
	Queues     []assignment.BrokerQueues `json:"queues"`
}

type reservation struct {
	Member     string                    `json:"member"`
	DepartedAt time.Time                 `json:"departedAt"`
	Queues     []assignment.BrokerQueues `json:"queues"`
}

type fencedPod struct {
	Pod        string    `json:"pod"`
	UID        types.UID `json:"uid"`
	Generation int64     `json:"generation"`
	FencedAt   time.Time `json:"fencedAt"`
}

func (s handoffState) empty() bool {
	return len(s.Revocations) == 0 && len(s.Reserved) == 0 && len(s.Fenced) == 0
}

func (s handoffState) encode() string {
	if s.empty() {
		return ""
	}
	b, _ := json.Marshal(s)
	return string(b)
}

func decodeHandoff(v string) handoffState {
	var s handoffState
	if v != "" {
		// An unreadable state is treated as empty: revocations in it are lost, so the queues they held back
		// are given out at once, which is what Immediate mode would have done.
		_ = json.Unmarshal([]byte(v), &s)
	}
	return s
}

// podPlan is one pod's published entry.
type podPlan struct {
	member string
	queues []allocate.Queue
}

// handoffInput is everything the handoff decision depends on.
type handoffInput struct {
	spec v1alpha1.Handoff
	now  time.Time
	// nextGeneration is the generation a changed plan is published at.
	nextGeneration int64
	// published is the plan in force, by pod name.
	published map[string]podPlan
	// target is the strategy's plan for the current members, by member id.
	target  allocate.Plan
	members []member
	state   handoffState
	// pods maps the name of every pod that exists now, member or not, to its UID.
	pods map[string]types.UID
	// leases are the member Leases, by pod name.
	leases map[string]podmember.LeaseState
}

// handoffResult is the plan to publish and the state to keep.
type handoffResult struct {
	// plan is what each member pod may read now.
	plan  map[string][]allocate.Queue
	state handoffState
	// fenced are the revocations that timed out in this pass.
	fenced []revocation
	// withheld counts queues the target gives to a member that must wait for them.
	withheld int
	// revokedFromMembers counts the queues this pass takes from pods that stay members: each is a move
	// that completes when the grant follows.
	revokedFromMembers int
	// requeueAfter is when the next deadline falls; 0 when nothing waits on time.
	requeueAfter time.Duration
}

// handoff turns the strategy's target into the plan that may be published now. In Cooperative mode a
// queue whose owner changes is first taken from the old owner (a revocation) and given to the new owner
// only once the old owner acknowledged a generation without it, its pod is gone, its Lease expired, or the
// revoke timeout passed (the pod is then fenced). Queues kept for a departed member (restart grace) go to
// nobody until it returns or the grace ends. Every plan it returns lists each queue at most once.
func handoff(in handoffInput) handoffResult {
	res := handoffResult{plan: make(map[string][]allocate.Queue, len(in.members))}
	cooperative := in.spec.Mode != v1alpha1.Immediate
	timeout := durationOr(in.spec.RevokeTimeoutSeconds, defaultRevokeTimeout)
	grace := durationOr(in.spec.RestartGraceSeconds, 0)
	var deadlines []time.Time

	isMember := make(map[string]bool, len(in.members))
	for _, m := range in.members {
		isMember[m.ID] = true
	}
	alive := func(pod string, uid types.UID) bool {
		current, ok := in.pods[pod]
		return ok && (uid == "" || current == uid)
	}

	// Phase 1: settle earlier revocations. What is still pending holds its queues back.
	blocked := map[allocate.Queue]bool{}
	for _, r := range in.state.Revocations {
		lease, hasLease := in.leases[r.Pod]
		switch {
		case hasLease && lease.AckedGeneration >= r.Generation:
		case !alive(r.Pod, r.UID):
		case hasLease && !lease.RenewTime.IsZero() && in.now.After(lease.RenewTime.Add(2*lease.Duration)):
			// The member stops reading when it cannot renew; twice the duration allows for clock skew.
		case !in.now.Before(r.RevokedAt.Add(timeout)):
			res.fenced = append(res.fenced, r)
			res.state.Fenced = append(res.state.Fenced, fencedPod{Pod: r.Pod, UID: r.UID, Generation: r.Generation, FencedAt: in.now})
		default:
			res.state.Revocations = append(res.state.Revocations, r)
			qs, _ := assignment.ExpandAll(r.Queues)
			for _, q := range qs {
				blocked[q] = true
			}
			deadlines = append(deadlines, r.RevokedAt.Add(timeout))
			if hasLease && !lease.RenewTime.IsZero() {
				deadlines = append(deadlines, lease.RenewTime.Add(2*lease.Duration))
			}
		}
	}
	// A fenced pod stays listed until it catches up with a later generation or goes.
	for _, f := range in.state.Fenced {
		lease, hasLease := in.leases[f.Pod]
		if alive(f.Pod, f.UID) && !(hasLease && lease.AckedGeneration >= f.Generation) {
			res.state.Fenced = append(res.state.Fenced, f)
		}
	}

	// Phase 2: reservations for departed members, kept until they return or the grace ends.
	reservedFor := map[allocate.Queue]string{}
	if grace > 0 {
		reserved := map[string]bool{}
		for _, r := range in.state.Reserved {
			if isMember[r.Member] || !in.now.Before(r.DepartedAt.Add(grace)) {
				continue
			}
			reserved[r.Member] = true
			res.state.Reserved = append(res.state.Reserved, r)
			deadlines = append(deadlines, r.DepartedAt.Add(grace))
		}
		for _, pod := range slices.Sorted(mapKeys(in.published)) {
			p := in.published[pod]
			if isMember[p.member] || reserved[p.member] || len(p.queues) == 0 {
				continue
			}
			reserved[p.member] = true
			res.state.Reserved = append(res.state.Reserved, reservation{Member: p.member, DepartedAt: in.now, Queues: assignment.Compact(p.queues)})
			deadlines = append(deadlines, in.now.Add(grace))
		}
		for _, r := range res.state.Reserved {
			qs, _ := assignment.ExpandAll(r.Queues)
			for _, q := range qs {
				reservedFor[q] = r.Member
			}
		}
	}

	// Phase 3: each member keeps what it has and the target leaves it, and gets what nobody may still read.
	ownerPod := map[allocate.Queue]string{}
	for pod, p := range in.published {
		for _, q := range p.queues {
			ownerPod[q] = pod
		}
	}
	for _, m := range in.members {
		var qs []allocate.Queue
		for _, q := range in.target[m.ID] {
			owner, owned := ownerPod[q]
			switch {
			case owned && owner == m.Pod:
			case !cooperative && reservedFor[q] == "":
			case reservedFor[q] != "", blocked[q]:
				res.withheld++
				continue
			case owned && alive(owner, ""):
				// The old owner still runs: it is revoked below, and this member waits.
				res.withheld++
				continue
			}
			qs = append(qs, q)
		}
		res.plan[m.Pod] = qs
	}

	// Phase 4: what running pods lost in this plan is revoked, to be released by their acknowledgement.
	if cooperative {
		for _, pod := range slices.Sorted(mapKeys(in.published)) {
			uid, running := in.pods[pod]
			if !running {
				continue
			}
			kept := map[allocate.Queue]bool{}
			for _, q := range res.plan[pod] {
				kept[q] = true
			}
			var lost []allocate.Queue
			for _, q := range in.published[pod].queues {
				if !kept[q] {
					lost = append(lost, q)
				}
			}
			if _, stays := res.plan[pod]; stays {
				res.revokedFromMembers += len(lost)
			}
			if len(lost) > 0 {
				res.state.Revocations = append(res.state.Revocations, revocation{
					Pod: pod, UID: uid, Generation: in.nextGeneration, RevokedAt: in.now, Queues: assignment.Compact(lost)})
				deadlines = append(deadlines, in.now.Add(timeout))
			}
		}
	}

	sortState(&res.state)
	if len(deadlines) > 0 {
		next := slices.MinFunc(deadlines, func(a, b time.Time) int { return a.Compare(b) })
		res.requeueAfter = max(next.Sub(in.now), 100*time.Millisecond)
	}
	return res
}

// sortState orders the state so that the same state always encodes to the same annotation.
func sortState(s *handoffState) {
	slices.SortFunc(s.Revocations, func(a, b revocation) int {
		if a.Generation != b.Generation {
			return int(a.Generation - b.Generation)
		}
		return strings.Compare(a.Pod, b.Pod)
	})
	slices.SortFunc(s.Reserved, func(a, b reservation) int { return strings.Compare(a.Member, b.Member) })
	slices.SortFunc(s.Fenced, func(a, b fencedPod) int { return strings.Compare(a.Pod, b.Pod) })
	s.Fenced = slices.CompactFunc(s.Fenced, func(a, b fencedPod) bool { return a.Pod == b.Pod })
}

func durationOr(seconds *int32, def time.Duration) time.Duration {
	if seconds == nil {
		return def
	}
	return time.Duration(*seconds) * time.Second
}

func mapKeys[V any](m map[string]V) func(func(string) bool) {
	return func(yield func(string) bool) {
		for k := range m {
			if !yield(k) {
				return
			}
		}
	}
}

// liveMembers drops the members whose Lease has expired: a member pod that keeps a Lease stops reading
// when it cannot renew it, so its queues must go to others, even though its pod may still look Ready.
// Pods without a Lease (consumers that do not use the member protocol) stay members while Ready. It
// returns when the earliest remaining Lease expires, for the reconciler to look again then: renewals do
// not trigger a pass.
func liveMembers(members []member, leases map[string]podmember.LeaseState, now time.Time) ([]member, time.Time) {
	live := members[:0:0]
	var nextExpiry time.Time
	for _, m := range members {
		lease, ok := leases[m.Pod]
		if !ok || lease.RenewTime.IsZero() {
			live = append(live, m)
			continue
		}
		if !lease.Live(now) {
			continue
		}
		live = append(live, m)
		if expiry := lease.RenewTime.Add(lease.Duration); nextExpiry.IsZero() || expiry.Before(nextExpiry) {
			nextExpiry = expiry
		}
	}
	return live, nextExpiry
}
