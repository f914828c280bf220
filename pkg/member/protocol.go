package member

import (
	"crypto/sha256"
	"encoding/hex"
	"strconv"
	"strings"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
)

// The names of the protocol between the operator and its member pods, documented in docs/protocol.md.
// The operator imports them from here; the values must not change without a new protocol version.
const (
	// GroupLabel on a member's Lease (and on the assignment ConfigMap) names the ConsumerGroup.
	// Same key as v1alpha1.GroupLabel.
	GroupLabel = "messaging.consumergroup.io/group"
	// GenerationAnnotation on the assignment ConfigMap holds the assignment generation it publishes.
	// Same key as v1alpha1.GenerationAnnotation.
	GenerationAnnotation = "messaging.consumergroup.io/assignment-generation"
	// AckedGenerationAnnotation on a member's Lease holds, as a decimal string, the last assignment
	// generation the member's application has applied: it consumes exactly the queues that generation
	// lists for it, and has stopped consuming every queue that generation does not list. "0" means none.
	AckedGenerationAnnotation = "messaging.consumergroup.io/acked-generation"
	// AssignmentSuffix follows the group's name in the name of its assignment ConfigMap.
	AssignmentSuffix = "-assignment"
	// DefaultLeaseDuration is a member Lease's spec.leaseDurationSeconds unless configured otherwise.
	// The member renews every third of it and stops consuming when it has not renewed for all of it.
	DefaultLeaseDuration = 15 * time.Second
	// DefaultDrainAckTimeout is how long Drain waits for the application to acknowledge the release of
	// its queues before acknowledging it itself.
	DefaultDrainAckTimeout = 5 * time.Second
)

// maxNameLength is the longest object name the API server accepts for a Lease (a DNS subdomain).
const maxNameLength = 253

// leaseNameHashLength is how many hex digits of the full name's hash end a truncated Lease name:
// 40 bits, so two long names in one namespace collide with negligible probability.
const leaseNameHashLength = 10

// AssignmentConfigMapName is the name of the ConfigMap that publishes group's assignment.
func AssignmentConfigMapName(group string) string { return group + AssignmentSuffix }

// LeaseName is the name of the Lease the member pod named pod keeps for group: "<group>.<pod>". Both are
// DNS subdomains, so the joined name is one too; when it is longer than 253 characters it is cut, and a
// hash of the full name is appended so that distinct members keep distinct Leases.
func LeaseName(group, pod string) string {
	name := group + "." + pod
	if len(name) <= maxNameLength {
		return name
	}
	sum := sha256.Sum256([]byte(name))
	hash := hex.EncodeToString(sum[:])[:leaseNameHashLength]
	// A DNS subdomain's labels end with an alphanumeric character, so the cut may not end in '.' or '-'.
	prefix := strings.TrimRight(name[:maxNameLength-1-leaseNameHashLength], ".-")
	return prefix + "-" + hash
}

// LeaseState is what a member's Lease says, as the operator reads it.
type LeaseState struct {
	// Member is the member id (spec.holderIdentity).
	Member string
	// AckedGeneration is the last generation the member applied; 0 when none or unreadable.
	AckedGeneration int64
	// RenewTime is when the member last showed it was alive; zero when never.
	RenewTime time.Time
	// Duration is how long after RenewTime the member counts as alive (spec.leaseDurationSeconds).
	Duration time.Duration
}

// ReadLease reads a member's Lease.
func ReadLease(lease *coordinationv1.Lease) LeaseState {
	var s LeaseState
	if lease.Spec.HolderIdentity != nil {
		s.Member = *lease.Spec.HolderIdentity
	}
	if lease.Spec.RenewTime != nil {
		s.RenewTime = lease.Spec.RenewTime.Time
	}
	if lease.Spec.LeaseDurationSeconds != nil {
		s.Duration = time.Duration(*lease.Spec.LeaseDurationSeconds) * time.Second
	}
	if v, err := strconv.ParseInt(lease.Annotations[AckedGenerationAnnotation], 10, 64); err == nil && v > 0 {
		s.AckedGeneration = v
	}
	return s
}

// Live reports whether the member renewed its Lease within its duration before now. A member that is
// not live has stopped consuming on its own by now (it stops when it cannot renew), provided the clocks
// of the pod and the reader agree; readers that hand its queues on should allow for skew.
func (s LeaseState) Live(now time.Time) bool {
	return !s.RenewTime.IsZero() && now.Before(s.RenewTime.Add(s.Duration))
}
