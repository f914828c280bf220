package plan

import (
	"testing"
	"time"
)

func TestSooner(t *testing.T) {
	for _, tc := range []struct{ a, b, want time.Duration }{
		{0, 0, 0},
		{0, time.Second, time.Second},
		{time.Second, 0, time.Second},
		{time.Second, 2 * time.Second, time.Second},
		{2 * time.Second, time.Second, time.Second},
		{time.Second, -time.Second, time.Second},
	} {
		if got := sooner(tc.a, tc.b); got != tc.want {
			t.Errorf("sooner(%v, %v) = %v, want %v", tc.a, tc.b, got, tc.want)
		}
	}
}

func TestSoonerRequeue(t *testing.T) {
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		name    string
		current time.Duration
		at      time.Time
		want    time.Duration
	}{
		{"first deadline", 0, now.Add(3 * time.Second), 3 * time.Second},
		{"a sooner deadline", 5 * time.Second, now.Add(3 * time.Second), 3 * time.Second},
		{"a later deadline", 2 * time.Second, now.Add(3 * time.Second), 2 * time.Second},
		{"a deadline now waits the floor", 0, now, minRequeue},
		{"a deadline passed waits the floor", 5 * time.Second, now.Add(-time.Minute), minRequeue},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := soonerRequeue(tc.current, now, tc.at); got != tc.want {
				t.Errorf("%s: soonerRequeue = %v, want %v", tc.name, got, tc.want)
			}
		})
	}
}
