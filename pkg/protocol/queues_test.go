package protocol

import (
	"slices"
	"testing"
)

func TestUnionAndSubtractQueues(t *testing.T) {
	a0, a1, b0, b1 := q("t", "a", 0), q("t", "a", 1), q("t", "b", 0), q("t", "b", 1)
	for _, tc := range []struct {
		name                 string
		a, b, union, aMinusB []Queue
	}{
		{"both empty", nil, nil, nil, nil},
		{"only the first", []Queue{a0}, nil, []Queue{a0}, []Queue{a0}},
		{"only the second", nil, []Queue{a0}, []Queue{a0}, nil},
		{"one queue in common", []Queue{a0, b0}, []Queue{a1, b0, b1}, []Queue{a0, a1, b0, b1}, []Queue{a0}},
		{"the first within the second", []Queue{a1, b1}, []Queue{a0, a1, b0, b1}, []Queue{a0, a1, b0, b1}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := UnionQueues(tc.a, tc.b); !slices.Equal(got, tc.union) {
				t.Errorf("UnionQueues(%v, %v) = %v, want %v", tc.a, tc.b, got, tc.union)
			}
			if got := SubtractQueues(tc.a, tc.b); !slices.Equal(got, tc.aMinusB) {
				t.Errorf("SubtractQueues(%v, %v) = %v, want %v", tc.a, tc.b, got, tc.aMinusB)
			}
		})
	}
}
