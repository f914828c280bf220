package protocol

import (
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
)

func q(topic, broker string, id int32) Queue { return Queue{Topic: topic, Broker: broker, ID: id} }

func TestEntryEncodingIsCanonical(t *testing.T) {
	cases := []struct {
		name   string
		queues []Queue
		want   string // without the checksum
	}{
		{"nothing", nil, `{"version":1,"generation":3,"member":"m","podUID":"u","queues":[]`},
		{"one", []Queue{q("t", "b", 4)}, `{"version":1,"generation":3,"member":"m","podUID":"u","queues":[{"topic":"t","broker":"b","ids":"4"}]`},
		{
			"ranges, unsorted input, duplicates, two brokers",
			[]Queue{q("t", "b", 3), q("t", "a", 0), q("t", "b", 1), q("t", "b", 2), q("t", "b", 7), q("t", "b", 2), q("t", "b", 9), q("t", "b", 8)},
			`{"version":1,"generation":3,"member":"m","podUID":"u","queues":[{"topic":"t","broker":"a","ids":"0"},{"topic":"t","broker":"b","ids":"1-3,7-9"}]`,
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got := string(NewEntry("m", "u", 3, tc.queues).Encode())
			if !strings.HasPrefix(got, tc.want+`,"sum":"`) {
				t.Fatalf("got  %s\nwant %s,\"sum\":...", got, tc.want)
			}
			shuffled := slices.Clone(tc.queues)
			slices.Reverse(shuffled)
			if again := string(NewEntry("m", "u", 3, shuffled).Encode()); again != got {
				t.Fatalf("the same queues in another order encode as %s", again)
			}
		})
	}
}

// TestEntryRoundTrip encodes random sets of queues and checks that decoding gives the same set, sorted.
func TestEntryRoundTrip(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for range 500 {
		var queues []Queue
		for range rng.IntN(200) {
			queues = append(queues, q([]string{"orders", "payments", "订单"}[rng.IntN(3)], []string{"broker-a", "broker-b"}[rng.IntN(2)], rng.Int32N(64)))
		}
		e, got, err := DecodeEntry(NewEntry("member", "uid-1", 9, queues).Encode())
		if err != nil {
			t.Fatal(err)
		}
		want := slices.Clone(queues)
		slices.SortFunc(want, CompareCanonical)
		want = slices.Compact(want)
		if !slices.Equal(got, want) {
			t.Fatalf("round trip of %v gave %v", want, got)
		}
		if e.Generation != 9 || e.Member != "member" || e.PodUID != "uid-1" {
			t.Fatalf("decoded %+v", e)
		}
	}
}

func TestDecodeEntryRefusesBadInput(t *testing.T) {
	valid := string(NewEntry("m", "u", 1, []Queue{q("t", "b", 1), q("t", "b", 2)}).Encode())
	for _, tc := range []struct{ name, bad string }{
		{"not JSON", `not json`},
		{"an unknown version", `{"version":2,"generation":1,"member":"m","queues":[]}`},
		{"a descending id range", `{"version":1,"generation":1,"member":"m","queues":[{"topic":"t","broker":"b","ids":"3-1"}]}`},
		{"an id that is not a number", `{"version":1,"generation":1,"member":"m","queues":[{"topic":"t","broker":"b","ids":"x"}]}`},
		{"a negative id", `{"version":1,"generation":1,"member":"m","queues":[{"topic":"t","broker":"b","ids":"-1"}]}`},
		{"no ids", `{"version":1,"generation":1,"member":"m","queues":[{"topic":"t","broker":"b","ids":""}]}`},
		// Overlapping or descending ranges, repeated groups, ids past the bound: a reader's work stays bounded.
		{"overlapping ranges", `{"version":1,"generation":1,"member":"m","queues":[{"topic":"t","broker":"b","ids":"0-5,3"}]}`},
		{"descending ids", `{"version":1,"generation":1,"member":"m","queues":[{"topic":"t","broker":"b","ids":"4,2"}]}`},
		{"a repeated group", `{"version":1,"generation":1,"member":"m","queues":[{"topic":"t","broker":"b","ids":"0"},{"topic":"t","broker":"b","ids":"1"}]}`},
		{"ids past the bound", `{"version":1,"generation":1,"member":"m","queues":[{"topic":"t","broker":"b","ids":"0-2147483647"}]}`},
		// Hand edits: the queues or the member changed, the checksum not.
		{"queues edited, checksum not", strings.Replace(valid, `"ids":"1-2"`, `"ids":"1-3"`, 1)},
		{"member edited, checksum not", strings.Replace(valid, `"member":"m"`, `"member":"n"`, 1)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, _, err := DecodeEntry([]byte(tc.bad)); err == nil {
				t.Errorf("DecodeEntry(%s) accepted bad input", tc.bad)
			}
		})
	}
	// A protocol-1 operator's entry has neither pod UID nor checksum, and is read.
	if _, got, err := DecodeEntry([]byte(`{"version":1,"generation":1,"member":"m","queues":[{"topic":"t","broker":"b","ids":"0-1"}]}`)); err != nil || len(got) != 2 {
		t.Errorf("a protocol-1 entry reads as %v, %v", got, err)
	}
}

func TestExpandBoundsTheQueueCount(t *testing.T) {
	var groups []BrokerQueues
	for b := range 17 {
		groups = append(groups, BrokerQueues{Topic: "t", Broker: string(rune('a' + b)), IDs: "0-65535"})
	}
	if _, err := Expand(groups); err == nil || !strings.Contains(err.Error(), "more than") {
		t.Fatalf("Expand of 17×65536 queues returned %v, want a bound error", err)
	}
	if qs, err := Expand(groups[:16]); err != nil || len(qs) != MaxQueues {
		t.Fatalf("Expand of 16×65536 queues: %d, %v", len(qs), err)
	}
}
