package protocol

import (
	"maps"
	"math"
	"strings"
	"testing"
)

func TestLoadReportRoundTrip(t *testing.T) {
	few := map[Queue]float64{q("orders", "broker-a", 0): 12.5, q("orders", "broker-a", 1): 0, q("orders", "broker-b", 7): 1234.5678, q("audit", "broker-a", 3): 1e-3}
	// Every other queue of 32 brokers, with distinct loads: written compressed.
	scattered := map[Queue]float64{}
	for b := range 32 {
		for id := int32(0); id < 2048; id += 2 {
			scattered[q("orders", "broker-"+string(rune('A'+b)), id)] = float64(b*2048+int(id)) / 7
		}
	}
	for _, tc := range []struct {
		name       string
		loads      map[Queue]float64
		compressed bool
	}{{"none", nil, false}, {"few", few, false}, {"scattered", scattered, true}} {
		t.Run(tc.name, func(t *testing.T) {
			s := NewLoadReport(tc.loads).Encode()
			if got := strings.HasPrefix(s, compressedMark); got != tc.compressed {
				t.Fatalf("compressed = %v, want %v (%d bytes)", got, tc.compressed, len(s))
			}
			if len(s) > 200<<10 {
				t.Fatalf("the report takes %d bytes, more than a Lease's annotations may", len(s))
			}
			got, err := DecodeLoad(s)
			if err != nil {
				t.Fatal(err)
			}
			if len(got) != len(tc.loads) {
				t.Fatalf("decoded %d queues, want %d", len(got), len(tc.loads))
			}
			for q, want := range tc.loads {
				v, ok := got[q]
				// Four significant digits: within 0.05% of the reported value.
				if !ok || math.Abs(v-want) > want*5e-4 {
					t.Errorf("%s: decoded %v (present %v), want %v to four significant digits", q, v, ok, want)
				}
			}
		})
	}
	if s := NewLoadReport(few).Encode(); !strings.Contains(s, `"loads":[12.5,0]`) || !strings.Contains(s, `1235`) {
		t.Errorf("report %s: want orders/broker-a's loads in id order and 1234.5678 rounded to 1235", s)
	}
}

func TestLoadReportRefusesBadInput(t *testing.T) {
	for _, tc := range []struct{ name, bad string }{
		{"empty", ``},
		{"an unknown version", `{"version":2,"queues":[]}`},
		{"fewer loads than ids", `{"version":1,"queues":[{"topic":"t","broker":"b","ids":"0-2","loads":[1,2]}]}`},
		{"a negative load", `{"version":1,"queues":[{"topic":"t","broker":"b","ids":"0","loads":[-1]}]}`},
		{"a descending id range", `{"version":1,"queues":[{"topic":"t","broker":"b","ids":"3-1","loads":[1,1,1]}]}`},
		{"a repeated group", `{"version":1,"queues":[{"topic":"t","broker":"b","ids":"0","loads":[1]},{"topic":"t","broker":"b","ids":"1","loads":[1]}]}`},
		{"compressed, not base64", `z:!!!`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := DecodeLoad(tc.bad); err == nil {
				t.Errorf("DecodeLoad(%.60q) accepted bad input", tc.bad)
			}
		})
	}
	for _, tc := range []struct {
		name string
		v    float64
	}{{"negative", -1}, {"NaN", math.NaN()}, {"infinite", math.Inf(1)}} {
		t.Run("CheckLoad, "+tc.name, func(t *testing.T) {
			err := CheckLoad(map[Queue]float64{q("t", "b", 0): 1, q("t", "b", 4): tc.v})
			if err == nil || !strings.Contains(err.Error(), "t/b/4") {
				t.Errorf("CheckLoad with a load of %v: %v, want an error naming t/b/4", tc.v, err)
			}
		})
	}
	if err := CheckLoad(maps.Clone(map[Queue]float64{q("t", "b", 0): 0})); err != nil {
		t.Errorf("CheckLoad refused a load of 0: %v", err)
	}
}
