package plan

import (
	"time"

	"k8s.io/apimachinery/pkg/api/equality"

	"github.com/consumergroup-operator/consumergroup-operator/api/v1alpha1"
)

// OnlyAcknowledgementsChanged reports whether next differs from prev in the members' acknowledged
// generations alone: the same member lines in the same order, and everything else equal. Such a status
// says nothing a reader acts on (the conditions, the counts and the generation are unchanged) and, while
// a group fills, every member's acknowledgement would make one.
func OnlyAcknowledgementsChanged(prev, next *v1alpha1.ConsumerGroupStatus) bool {
	if len(prev.Members) != len(next.Members) {
		return false
	}
	masked := *next
	masked.Members = make([]v1alpha1.MemberStatus, len(next.Members))
	changed := false
	for i, line := range next.Members {
		if !equality.Semantic.DeepEqual(line.AckedGeneration, prev.Members[i].AckedGeneration) {
			changed = true
		}
		line.AckedGeneration = prev.Members[i].AckedGeneration
		masked.Members[i] = line
	}
	return changed && equality.Semantic.DeepEqual(*prev, masked)
}

// StatusWriteWait is how long a status that changes only members' acknowledgements waits before it is
// written, given when the group's status was last written and the least time between such writes
// (interval; 0 writes at once). The first acknowledgement after a quiet interval is written at once; those
// that follow within the interval wait for it to end and are written together.
func StatusWriteWait(prev, next *v1alpha1.ConsumerGroupStatus, lastWritten, now time.Time, interval time.Duration) time.Duration {
	if interval <= 0 || lastWritten.IsZero() || !OnlyAcknowledgementsChanged(prev, next) {
		return 0
	}
	return max(0, lastWritten.Add(interval).Sub(now))
}
