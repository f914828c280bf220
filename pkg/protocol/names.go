package protocol

import (
	"crypto/sha256"
	"encoding/hex"
	"hash/fnv"
	"strconv"
	"strings"
)

// Labels and annotations of the protocol's objects. Their values never change within a protocol version.
const (
	// GroupLabel on the assignment ConfigMaps and on every member Lease names the ConsumerGroup.
	GroupLabel = "messaging.consumergroup.io/group"
	// ManagedByLabel marks the ConfigMaps the operator writes; ManagedByValue is its value.
	ManagedByLabel = "app.kubernetes.io/managed-by"
	ManagedByValue = "consumergroup-operator"

	// GenerationAnnotation on each assignment ConfigMap holds the generation it publishes, in decimal.
	GenerationAnnotation = "messaging.consumergroup.io/assignment-generation"
	// ShardsAnnotation on the assignment ConfigMap says over how many shard ConfigMaps the entries are
	// spread; absent or "1" when the ConfigMap holds them itself.
	ShardsAnnotation = "messaging.consumergroup.io/shards"
	// DigestAnnotation on each assignment ConfigMap is a digest of what the operator wrote in it (Digest),
	// so that an edit by anyone else shows.
	DigestAnnotation = "messaging.consumergroup.io/digest"
	// RebalancedAtAnnotation on the assignment ConfigMap holds when its entries last changed (RFC 3339).
	RebalancedAtAnnotation = "messaging.consumergroup.io/rebalanced-at"
	// HandoffAnnotation on the assignment ConfigMap holds the operator's bookkeeping of queues in flight.
	// Members do not read it; it is a hint the operator can lose without losing safety.
	HandoffAnnotation = "messaging.consumergroup.io/handoff"

	// AckedGenerationAnnotation on a member's Lease holds, in decimal, the last generation the member's
	// application applied: it reads exactly the queues that generation lists for it. "0" means none.
	AckedGenerationAnnotation = "messaging.consumergroup.io/acked-generation"
	// ClaimAnnotation on a member's Lease holds the member's Claim: every queue it may be reading.
	ClaimAnnotation = "messaging.consumergroup.io/claim"
	// LoadAnnotation on a member's Lease holds the member's LoadReport: the load of the queues it reads,
	// written with its renewals. Absent when the member reports none.
	LoadAnnotation = "messaging.consumergroup.io/load"
	// PodAnnotation on a member's Lease names its pod. The Lease also names the pod as an owner, but the
	// garbage collector removes that reference once the pod is gone while the group, its other owner,
	// remains: the annotation still says whose claim the Lease holds.
	PodAnnotation = "messaging.consumergroup.io/pod"
	// StopsWithinAnnotation on a member's Lease holds, in whole seconds, the member's promise of contact
	// fencing: it reads no queue later than this long after the operator has published an assignment
	// that does not give the queue to it, whether or not it could read that assignment. Absent, the
	// member promises nothing beyond its Lease (StopAfter).
	StopsWithinAnnotation = "messaging.consumergroup.io/stops-within-seconds"
	// StoppedAnnotation on a member's Lease, "true", says that the member has stopped for good (it
	// drained: its application was handed no queue and stopped): it reads no queue now and will read none,
	// whatever any assignment, lost or not, gives it, so it will acknowledge nothing more. A member writes
	// it only with an empty claim, and a reader believes it only then (LeaseState.Stopped).
	StoppedAnnotation = "messaging.consumergroup.io/stopped"
)

// AssignmentName is the name of the ConfigMap that publishes group's assignment.
func AssignmentName(group string) string { return group + "-assignment" }

// ShardName is the name of group's shard ConfigMap number shard.
func ShardName(group string, shard int) string {
	return AssignmentName(group) + "-" + strconv.Itoa(shard)
}

// ShardOf says which of shards shard ConfigMaps holds pod's entry: FNV-1a (32 bit) of the pod name,
// modulo shards. Any reader can compute it.
func ShardOf(pod string, shards int) int {
	if shards <= 1 {
		return 0
	}
	h := fnv.New32a()
	_, _ = h.Write([]byte(pod))
	return int(h.Sum32() % uint32(shards))
}

// maxNameLength is the longest object name the API server accepts for a Lease (a DNS subdomain).
const maxNameLength = 253

// leaseNameHashLength is how many hex digits of the full name's hash end a truncated Lease name:
// 40 bits, so two long names in one namespace collide with negligible probability.
const leaseNameHashLength = 10

// LeaseName is the name of the Lease the member pod named pod keeps for group: "<group>.<pod>". Both are
// DNS subdomains, so the joined name is one too; when it is longer than 253 characters it is cut, and a
// hash of the full name is appended so that distinct members keep distinct Leases. Every incarnation of a
// pod name shares the name: a new pod takes the Lease over only once the claim of the previous one no
// longer stands (see Stands).
func LeaseName(group, pod string) string { return boundedName(group + "." + pod) }

// boundedName is name when it is a short enough object name, else its first characters and a hash of
// the whole, so that distinct long names stay distinct.
func boundedName(name string) string {
	if len(name) <= maxNameLength {
		return name
	}
	sum := sha256.Sum256([]byte(name))
	hash := hex.EncodeToString(sum[:])[:leaseNameHashLength]
	// A DNS subdomain's labels end with an alphanumeric character, so the cut may not end in '.' or '-'.
	prefix := strings.TrimRight(name[:maxNameLength-1-leaseNameHashLength], ".-")
	return prefix + "-" + hash
}
