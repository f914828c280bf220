package assignment

import (
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/consumergroup-operator/consumergroup-operator/pkg/allocate"
)

func q(topic, broker string, id int32) allocate.Queue {
	return allocate.Queue{Topic: topic, Broker: broker, ID: id}
}

func TestEncodeCompactsRanges(t *testing.T) {
	cases := []struct {
		name   string
		queues []allocate.Queue
		want   string
	}{
		{"nothing", nil, `{"version":1,"generation":3,"member":"m","queues":[]}`},
		{"one", []allocate.Queue{q("t", "b", 4)}, `{"version":1,"generation":3,"member":"m","queues":[{"topic":"t","broker":"b","ids":"4"}]}`},
		{
			"ranges, unsorted input, duplicates, two brokers",
			[]allocate.Queue{q("t", "b", 3), q("t", "a", 0), q("t", "b", 1), q("t", "b", 2), q("t", "b", 7), q("t", "b", 2), q("t", "b", 9), q("t", "b", 8)},
			`{"version":1,"generation":3,"member":"m","queues":[{"topic":"t","broker":"a","ids":"0"},{"topic":"t","broker":"b","ids":"1-3,7-9"}]}`,
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, err := Encode("m", 3, tc.queues)
			if err != nil {
				t.Fatal(err)
			}
			if string(got) != tc.want {
				t.Fatalf("got  %s\nwant %s", got, tc.want)
			}
		})
	}
}

// TestRoundTrip encodes random sets of queues and checks that decoding gives the same set, sorted.
func TestRoundTrip(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for range 500 {
		var queues []allocate.Queue
		for range rng.IntN(200) {
			queues = append(queues, q([]string{"orders", "payments", "订单"}[rng.IntN(3)], []string{"broker-a", "broker-b"}[rng.IntN(2)], rng.Int32N(64)))
		}
		data, err := Encode("member", 9, queues)
		if err != nil {
			t.Fatal(err)
		}
		e, got, err := Decode(data)
		if err != nil {
			t.Fatal(err)
		}
		want := slices.Clone(queues)
		slices.SortFunc(want, compareQueues)
		want = slices.Compact(want)
		if !slices.Equal(got, want) {
			t.Fatalf("round trip of %v gave %v", want, got)
		}
		if n, err := e.Count(); err != nil || n != len(want) || e.Generation != 9 || e.Member != "member" {
			t.Fatalf("count %d (%v), generation %d, member %q", n, err, e.Generation, e.Member)
		}
	}
}

func TestDecodeRejectsBadInput(t *testing.T) {
	for _, bad := range []string{
		`not json`,
		`{"version":2,"generation":1,"member":"m","queues":[]}`,
		`{"version":1,"generation":1,"member":"m","queues":[{"topic":"t","broker":"b","ids":"3-1"}]}`,
		`{"version":1,"generation":1,"member":"m","queues":[{"topic":"t","broker":"b","ids":"x"}]}`,
		`{"version":1,"generation":1,"member":"m","queues":[{"topic":"t","broker":"b","ids":"-1"}]}`,
	} {
		if _, _, err := Decode([]byte(bad)); err == nil {
			t.Errorf("Decode(%s) accepted bad input", bad)
		}
	}
}
