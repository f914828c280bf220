package plan

import "time"

// minRequeue is the shortest wait before a pass runs again for a deadline: one that falls now, or has
// passed, still waits this long, so that a clock read a moment early does not make passes spin.
const minRequeue = 100 * time.Millisecond

// soonerRequeue is the wait before the next pass: current (0 for none) or the wait until t from now, the
// shorter.
func soonerRequeue(current time.Duration, now, t time.Time) time.Duration {
	return sooner(current, max(t.Sub(now), minRequeue))
}

// sooner is the shorter of two waits, where 0 (or less) means none.
func sooner(a, b time.Duration) time.Duration {
	switch {
	case b <= 0:
		return a
	case a <= 0 || b < a:
		return b
	}
	return a
}
