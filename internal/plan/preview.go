package plan

import (
	"github.com/consumergroup-operator/consumergroup-operator/api/v1alpha1"
	"github.com/consumergroup-operator/consumergroup-operator/pkg/allocate"
	"github.com/consumergroup-operator/consumergroup-operator/pkg/protocol"
)

// Preview is the plan the operator would head for with a group as it is now, computed from the live state
// by the steps a reconcile pass runs, writing nothing. kubectl cg plan shows it; a what-if (another spec,
// other pods) is a Preview of a changed group or of a reader that lists other pods.
type Preview struct {
	// Members are the group's members as the strategy sees them: sorted, with their zones and weights.
	Members []PreviewMember
	// Current is what each member pod reads now, its published entry, by pod name, in generation
	// Generation.
	Current    map[string][]allocate.Queue
	Generation int64
	// Target is where the group goes once every handoff has completed: the strategy's plan, by pod name.
	// Nil when a check stopped the plan: Reason and Message say why, as the Ready condition would.
	Target          map[string][]allocate.Queue
	Reason, Message string
	// Queues are the spec's queues; BrokerZones their brokers' zones.
	Queues      []allocate.Queue
	BrokerZones map[string]string
	// Leases are the members' Leases, by pod name.
	Leases map[string]protocol.LeaseState
	// Revocations are the handoffs in flight: queues taken from a pod that has not yet acknowledged it.
	// Fenced are the pods that missed their revoke timeout while renewing their Lease.
	Revocations []PreviewRevocation
	Fenced      []string
}

// PreviewRevocation is one handoff in flight: Pod reads Queues (every queue, if All: a recovery) until it
// acknowledges Generation.
type PreviewRevocation struct {
	Pod        string
	Generation int64
	Queues     []allocate.Queue
	All        bool
}

// PreviewMember is one member of a Preview.
type PreviewMember struct {
	allocate.Member
	Pod string
}

// PreviewOf is the Preview of group in the world obs, free of I/O: the published entries, the Leases and
// the handoffs in flight as observed, and the strategy's target as the steps of a pass up to it compute
// it (decider.planSteps).
func PreviewOf(group *v1alpha1.ConsumerGroup, obs *Observation, env Env) *Preview {
	dc := newDecider(group, obs, env)
	pv := &Preview{Current: map[string][]allocate.Queue{}, Generation: obs.Published.Generation, Leases: map[string]protocol.LeaseState{}}
	for pod, e := range obs.Published.Entries {
		pv.Current[pod] = e.Queues
	}
	// As their members wrote them: a preview has no sightings of its own to time them by.
	for _, l := range obs.LeasesAsWritten {
		pv.Leases[l.Pod] = l
	}
	for _, r := range dc.state.Revocations {
		qs, _ := obs.Scope.Expand(r.Queues)
		pv.Revocations = append(pv.Revocations, PreviewRevocation{Pod: r.Pod, Generation: r.Generation, Queues: qs.Queues, All: r.All})
	}
	for _, f := range dc.state.Fenced {
		pv.Fenced = append(pv.Fenced, f.Pod)
	}
	for _, step := range dc.planSteps() {
		if prob := step(); prob != nil {
			// The problem is the preview's answer, as it is the Ready condition's.
			pv.Reason, pv.Message = prob.Reason, prob.Message
			return pv
		}
	}
	pv.Queues, pv.BrokerZones = dc.queues, dc.zones
	pv.Target = map[string][]allocate.Queue{}
	for _, m := range dc.d.Report.Members {
		pv.Members = append(pv.Members, PreviewMember{Member: m.Member, Pod: m.Pod})
		pv.Target[m.Pod] = dc.target[m.ID]
	}
	return pv
}
