package protocol

import (
	"slices"
	"testing"
)

func TestUnionAndSubtractQueues(t *testing.T) {
	a0, a1, b0, b1 := q("t", "a", 0), q("t", "a", 1), q("t", "b", 0), q("t", "b", 1)
	for _, tc := range []struct {
		a, b, union, aMinusB []Queue
	}{
		{nil, nil, nil, nil},
		{[]Queue{a0}, nil, []Queue{a0}, []Queue{a0}},
		{nil, []Queue{a0}, []Queue{a0}, nil},
		{[]Queue{a0, b0}, []Queue{a1, b0, b1}, []Queue{a0, a1, b0, b1}, []Queue{a0}},
		{[]Queue{a1, b1}, []Queue{a0, a1, b0, b1}, []Queue{a0, a1, b0, b1}, nil},
	} {
		if got := UnionQueues(tc.a, tc.b); !slices.Equal(got, tc.union) {
			t.Errorf("UnionQueues(%v, %v) = %v, want %v", tc.a, tc.b, got, tc.union)
		}
		if got := SubtractQueues(tc.a, tc.b); !slices.Equal(got, tc.aMinusB) {
			t.Errorf("SubtractQueues(%v, %v) = %v, want %v", tc.a, tc.b, got, tc.aMinusB)
		}
	}
}
