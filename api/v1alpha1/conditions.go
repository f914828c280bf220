package v1alpha1

// The conditions of a ConsumerGroup's status and their reasons. The operator sets them; GitOps tools,
// kubectl wait and alerts read them, so they are part of the API: renaming one breaks its readers.

// Condition types: Ready (the published assignment follows the spec and the members), Degraded (a new
// assignment cannot be computed; the last good one stays), Progressing (queues wait for a handoff), Fenced
// (a member missed its revoke timeout and its queues were handed on) and Tampered (objects the operator
// wrote, or a member's claim, were deleted or edited, and the operator holds queues back until it knows
// again who reads what). Reconciling and Stalled follow the kstatus conventions that GitOps tools read
// (sigs.k8s.io/cli-utils/pkg/kstatus): Reconciling while the group is on its way to what the spec and the
// members ask (a handoff or a recovery in flight), Stalled while it cannot get there until someone changes
// the spec or the pods. Paused is True while spec.paused freezes the published assignment.
const (
	ConditionReady       = "Ready"
	ConditionDegraded    = "Degraded"
	ConditionProgressing = "Progressing"
	ConditionFenced      = "Fenced"
	ConditionTampered    = "Tampered"
	ConditionReconciling = "Reconciling"
	ConditionStalled     = "Stalled"
	ConditionPaused      = "Paused"
)

// Reasons of healthy and in-flight states.
const (
	ReasonAssigned          = "Assigned"
	ReasonNoMembers         = "NoMembers"
	ReasonHealthy           = "Healthy"
	ReasonHandoffInProgress = "HandoffInProgress"
	ReasonStable            = "Stable"
	ReasonRevokeTimeout     = "RevokeTimeout"
	ReasonNoneFenced        = "NoneFenced"
	ReasonIntact            = "Intact"
	ReasonRecovering        = "Recovering"
	ReasonSettled           = "Settled"
	ReasonPaused            = "Paused"
	ReasonActive            = "Active"
)

// Reasons for problems with the group's input: each keeps the published assignment in place.
const (
	ReasonInvalidSelector           = "InvalidSelector"
	ReasonInvalidMemberAnnotation   = "InvalidMemberAnnotation"
	ReasonDuplicateMemberID         = "DuplicateMemberID"
	ReasonInvalidStrategyParameters = "InvalidStrategyParameters"
	ReasonAllocationFailed          = "AllocationFailed"
	ReasonAssignmentTooLarge        = "AssignmentTooLarge"
	ReasonGenerationExhausted       = "GenerationExhausted"
	ReasonNotOwned                  = "NotOwned"
)

// Reasons for Tampered, which are also the reasons of the Warning events that report it.
const (
	ReasonAssignmentDeleted = "AssignmentDeleted"
	ReasonAssignmentEdited  = "AssignmentEdited"
	ReasonClaimUnreadable   = "ClaimUnreadable"
	ReasonLeaseTampered     = "LeaseTampered"
)

// ConditionTopologyStale is True while the last read of the routes failed for some topic: the routes read
// before stay in force.
const ConditionTopologyStale = "TopologyStale"

// Reasons of TopologyStale besides pkg/nameserver's (Unreachable, Refused, Timeout, Garbled, Rejected,
// Untrusted, NotAllowed, Denied). Each comes with a fixed sentence: nothing a name server sent, and no error text,
// reaches a condition or an event.
const (
	ReasonRoutesFresh = "Fresh"
	// ReasonRoutesPending: no read has finished yet.
	ReasonRoutesPending = "Reading"
	// ReasonNameServerNotFound: spec.nameServer.clusterNameServer names no ClusterNameServer.
	ReasonNameServerNotFound = "NameServerNotFound"
)

// Conditions of a ClusterNameServer.
const (
	// ClusterNameServerReady is True while the last read of its routes reached a name server.
	ClusterNameServerReady = "Ready"
	// ReasonNameServerAnswered: the last read reached a name server; otherwise the reason is the last
	// failure's (pkg/nameserver). A ClusterNameServer no group has read has no Ready condition.
	ReasonNameServerAnswered = "Answered"
)

// ConditionTypes are every condition type the operator sets, in the order status lists them; the CRD's
// description of status.conditions names each (a test in config checks it).
var ConditionTypes = []string{
	ConditionReady, ConditionDegraded, ConditionProgressing, ConditionFenced, ConditionTampered,
	ConditionReconciling, ConditionStalled, ConditionPaused, ConditionTopologyStale,
}
