package protocol

import (
	"bytes"
	"compress/flate"
	"encoding/base64"
	"slices"
	"strings"
	"testing"
)

func TestClaimRoundTrip(t *testing.T) {
	few := []Queue{q("orders", "broker-a", 0), q("orders", "broker-a", 1), q("orders", "broker-b", 7)}
	// Every other queue of 64 brokers: tens of thousands of ranges, written compressed.
	var scattered []Queue
	for b := range 64 {
		for id := int32(0); id < 2048; id += 2 {
			scattered = append(scattered, q("orders", "broker-"+string(rune('A'+b)), id))
		}
	}
	for _, tc := range []struct {
		name       string
		queues     []Queue
		compressed bool
	}{{"none", nil, false}, {"few", few, false}, {"scattered", scattered, true}} {
		t.Run(tc.name, func(t *testing.T) {
			s := NewClaim("uid-1", 7, tc.queues).Encode()
			if got := strings.HasPrefix(s, compressedMark); got != tc.compressed {
				t.Fatalf("compressed = %v, want %v (%d bytes)", got, tc.compressed, len(s))
			}
			if len(s) > 200<<10 {
				t.Fatalf("the claim takes %d bytes, more than a Lease's annotations may", len(s))
			}
			c, got, err := DecodeClaim(s)
			if err != nil {
				t.Fatal(err)
			}
			want := slices.Clone(tc.queues)
			slices.SortFunc(want, CompareCanonical)
			if c.PodUID != "uid-1" || c.Acked != 7 || !slices.Equal(got, want) {
				t.Fatalf("decoded uid %q acked %d, %d queues; want %d", c.PodUID, c.Acked, len(got), len(want))
			}
		})
	}
}

func TestDecodeClaimRefusesBadInput(t *testing.T) {
	// A few bytes that inflate to far more than a claim may hold.
	var bomb bytes.Buffer
	w, _ := flate.NewWriter(&bomb, flate.BestCompression)
	_, _ = w.Write(bytes.Repeat([]byte{' '}, 64<<20))
	_ = w.Close()
	for _, tc := range []struct{ name, bad string }{
		{"empty", ``},
		{"no version", `{}`},
		{"an unknown version", `{"version":2,"podUID":"u","acked":1,"queues":[]}`},
		{"a negative acknowledged generation", `{"version":1,"podUID":"u","acked":-1,"queues":[]}`},
		{"a descending id range", `{"version":1,"podUID":"u","acked":1,"queues":[{"topic":"t","broker":"b","ids":"9-3"}]}`},
		{"compressed, not base64", `z:!!!`},
		{"compressed, inflating past the bound", compressedMark + base64.StdEncoding.EncodeToString(bomb.Bytes())},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, _, err := DecodeClaim(tc.bad); err == nil {
				t.Errorf("DecodeClaim(%.60q) accepted bad input", tc.bad)
			}
		})
	}
}
