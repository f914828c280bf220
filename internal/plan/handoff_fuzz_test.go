package plan

import (
	"runtime"
	"testing"

	"github.com/consumergroup-operator/consumergroup-operator/pkg/protocol"
)

// FuzzDecodeHandoffInScope: the handoff annotation is written by the operator but editable by anyone who can
// write the ConfigMap; reading it through the group's scope costs what its length and the scope imply.
func FuzzDecodeHandoffInScope(f *testing.F) {
	f.Add(`{"version":2,"revocations":[{"pod":"p","uid":"u","generation":3,"at":"2026-01-01T00:00:00Z","queues":[{"topic":"t","broker":"b","ids":"0-65535"}]}],"reserved":[{"member":"m","departedAt":"2026-01-01T00:00:00Z","queues":[{"topic":"t","broker":"c","ids":"0-65535"}]}]}`)
	f.Add(`{"version":2,"fenced":[{"pod":"p","uid":"u","generation":9223372036854775807,"at":"2026-01-01T00:00:00Z","all":true}]}`)
	f.Add(`{`)
	const perInputByte, constant = 64, 256 << 10
	f.Fuzz(func(t *testing.T, raw string) {
		scope := protocol.NewScope()
		scope.Add("t", "b", 6)
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		state, err := decodeHandoff(raw, scope)
		if err == nil {
			var qs queueSet
			for _, r := range append(state.Revocations, state.Fenced...) {
				qs.addGroups(r.Queues, scope)
				if r.Generation <= 0 || r.Generation > protocol.MaxGeneration {
					t.Fatalf("accepted a revocation of generation %d", r.Generation)
				}
			}
			if len(qs.queues) > scope.Len() {
				t.Fatalf("read %d queues from a scope of %d", len(qs.queues), scope.Len())
			}
		}
		runtime.ReadMemStats(&after)
		if n, limit := after.TotalAlloc-before.TotalAlloc, uint64(perInputByte*len(raw)+constant); n > limit {
			t.Fatalf("reading a %d-byte annotation allocated %d bytes, more than %d", len(raw), n, limit)
		}
	})
}
