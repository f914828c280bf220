package protocol

import (
	"encoding/json"
	"fmt"
)

// ClaimVersion is the format version of a Claim.
const ClaimVersion = 1

// Claim is what a member states in its Lease about the queues it may be reading. The member writes it
// whenever it acknowledges a generation, and with every renewal: Queues are the queues of the generation
// its application acknowledged, plus those of the generation it last handed the application, if that is
// newer. The operator gives a queue to another member only when no claim that stands lists it.
type Claim struct {
	// Version is the format version; readers refuse versions they do not know.
	Version int `json:"version"`
	// PodUID is the pod incarnation whose process wrote the claim.
	PodUID string `json:"podUID"`
	// Acked is the generation the member's application acknowledged last, as AckedGenerationAnnotation.
	Acked int64 `json:"acked"`
	// Queues are the queues the member may be reading, as an entry lists them.
	Queues []BrokerQueues `json:"queues"`
}

// NewClaim builds the claim of pod incarnation podUID, which acknowledged acked and may read queues.
func NewClaim(podUID string, acked int64, queues []Queue) Claim {
	return Claim{Version: ClaimVersion, PodUID: podUID, Acked: acked, Queues: Compact(queues)}
}

// Encode returns the claim as ClaimAnnotation holds it: its JSON, or, when that is long, "z:" followed by
// the base64 of the DEFLATE-compressed JSON.
func (c Claim) Encode() string {
	b, err := json.Marshal(c)
	if err != nil {
		panic(err) // strings and integers only: cannot fail
	}
	return compressLong(b)
}

// DecodeClaim parses a claim as Encode writes it and expands its queues. It refuses an unknown version,
// malformed ranges, and input that inflates past a few MiB.
func DecodeClaim(s string) (Claim, []Queue, error) {
	c, queues, err := DecodeClaimIn(s, nil)
	return c, queues.Queues, err
}

// DecodeClaimIn is DecodeClaim for a reader that expands only the queues of scope (Scope.Expand): it
// also refuses a claim that inflates past what listing every queue of scope takes.
func DecodeClaimIn(s string, scope *Scope) (Claim, Expanded, error) {
	data, err := inflate(s, "claim", scope.maxEncodedLen(maxIDLen))
	if err != nil {
		return Claim{}, Expanded{}, err
	}
	var c Claim
	if err := json.Unmarshal(data, &c); err != nil {
		return Claim{}, Expanded{}, fmt.Errorf("decoding claim: %w", err)
	}
	if c.Version != ClaimVersion {
		return Claim{}, Expanded{}, fmt.Errorf("claim has format version %d; this reader knows version %d", c.Version, ClaimVersion)
	}
	if c.Acked < 0 || c.Acked > MaxGeneration {
		return Claim{}, Expanded{}, fmt.Errorf("claim acknowledges generation %d, outside 0 to %d", c.Acked, MaxGeneration)
	}
	queues, err := scope.Expand(c.Queues)
	if err != nil {
		return Claim{}, Expanded{}, fmt.Errorf("claim: %w", err)
	}
	return c, queues, nil
}
