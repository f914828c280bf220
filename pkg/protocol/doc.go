// Package protocol is the contract between the operator and its member pods, in one place: the names of
// the objects and keys, the encoding of a published entry and of a member's claim, the layout of an
// assignment over its ConfigMaps, the member Lease and the rule that says how long a member's claim
// stands. The operator (controllers), the pod-side client (pkg/member), the agent, the demo and the tests
// all read and write these objects through this package, so that no side spells the contract on its own.
// docs/protocol.md describes it for clients in other languages.
//
// Files: names.go the names of objects and keys, entry.go the published Entry, ranges.go the range form of
// a queue set that entries, claims and load reports share, queues.go operations on queue sets, compress.go
// the compression of long annotation values, claim.go a member's Claim, load.go its LoadReport, scope.go
// the bound a reader applies, lease.go the member Lease, layout.go the layout of an assignment over its
// ConfigMaps as written, layout_read.go reading it back.
//
// Two objects carry the protocol:
//
//   - The assignment, written by the operator: the ConfigMap AssignmentName(group), one key per member pod
//     holding that pod's Entry, and, when the entries do not fit one ConfigMap, shard ConfigMaps
//     ShardName(group, k) (see Layout).
//   - One Lease per member pod, LeaseName(group, pod), written by the pod: it shows that the pod is alive
//     (renewTime), which generation its application has applied (AckedGenerationAnnotation) and which
//     queues it may be reading (its Claim, ClaimAnnotation).
//
// Safety rests on the Leases, not on the assignment: the operator gives a queue to a member only when no
// other member whose claim still stands (Stands) may be reading it. The assignment and the operator's
// bookkeeping in it are hints that anyone can delete or edit; the operator checks them (Digest, Entry.Sum)
// and, when they cannot be trusted, falls back on the claims alone.
//
// Versions. ProtocolVersion names this contract. It is 2: protocol 1 had no claims, bound entries to pod
// names only and let the Lease be deleted with its pod. Entries keep format version 1 (protocol 2 added
// optional fields that version-1 readers ignore), so a protocol-1 member reads them; the operator reads a
// Lease without a claim as a protocol-1 member's and falls back on what it published for it. A reader
// refuses an entry or a claim of a format version it does not know and takes the safe side: a member holds
// nothing, the operator counts the claim as covering every queue.
package protocol

// ProtocolVersion is the version of the contract this package implements.
const ProtocolVersion = 2
