package testenv

import (
	"slices"
	"testing"

	"github.com/consumergroup-operator/consumergroup-operator/pkg/allocate"
)

func TestOwnershipRecordsOverlapsAndGapsFromEachApplication(t *testing.T) {
	q := func(id int32) allocate.Queue { return allocate.Queue{Topic: "t", Broker: "b", ID: id} }
	o := NewOwnership()
	o.Apply("a", []allocate.Queue{q(1), q(2)})
	o.Apply("b", []allocate.Queue{q(3)})
	if v := o.Violations(); len(v) != 0 {
		t.Fatalf("violations after disjoint readings: %v", v)
	}
	// a gives q2 up, b takes it: no overlap; then b takes q1 while a still reads it: one.
	o.Apply("a", []allocate.Queue{q(1)})
	o.Apply("b", []allocate.Queue{q(2), q(3)})
	if v := o.Violations(); len(v) != 0 {
		t.Fatalf("violations after a handoff: %v", v)
	}
	o.Apply("b", []allocate.Queue{q(1), q(2), q(3)})
	if v := o.Violations(); len(v) != 1 {
		t.Fatalf("violations after b took what a reads: %v, want 1", v)
	}
	if got := o.Readers(q(1)); got != 2 {
		t.Errorf("readers of q1 = %d, want 2", got)
	}
	// a stops: q1 keeps b; b stops: every queue goes unread until c takes q3.
	o.Apply("a", nil)
	o.Apply("b", nil)
	if got := o.ReadQueues(); got != 0 {
		t.Errorf("queues read after everyone stopped = %d", got)
	}
	o.Apply("c", []allocate.Queue{q(3)})
	gaps := o.Gaps()
	if len(gaps) != 2 || gaps[1].Queue != q(3) || gaps[1].Released != "b" || gaps[1].Took != "c" {
		t.Errorf("gaps = %+v, want q2's from a to b and q3's from b to c", gaps)
	}
	if got := o.Reading("c"); !slices.Equal(got, []allocate.Queue{q(3)}) {
		t.Errorf("c reads %v, want q3", got)
	}
	if got := o.Reading("a"); len(got) != 0 {
		t.Errorf("a, stopped, reads %v", got)
	}
}
