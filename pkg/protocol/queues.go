package protocol

// UnionQueues is the union of a and b, each sorted by CompareQueues without repeats, in that order. When
// one is empty it returns the other itself: the result may share memory with the inputs, so callers must
// not modify it.
func UnionQueues(a, b []Queue) []Queue {
	if len(b) == 0 {
		return a
	}
	if len(a) == 0 {
		return b
	}
	out := make([]Queue, 0, max(len(a), len(b)))
	i, j := 0, 0
	for i < len(a) || j < len(b) {
		switch {
		case j == len(b) || i < len(a) && CompareQueues(a[i], b[j]) < 0:
			out = append(out, a[i])
			i++
		case i == len(a) || CompareQueues(a[i], b[j]) > 0:
			out = append(out, b[j])
			j++
		default:
			out = append(out, a[i])
			i, j = i+1, j+1
		}
	}
	return out
}

// SubtractQueues is the queues of a that are not in b, each sorted by CompareQueues; nil when b holds
// every queue of a.
func SubtractQueues(a, b []Queue) []Queue {
	var out []Queue
	j := 0
	for _, q := range a {
		for j < len(b) && CompareQueues(b[j], q) < 0 {
			j++
		}
		if j == len(b) || b[j] != q {
			out = append(out, q)
		}
	}
	return out
}
