package observe

import (
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/consumergroup-operator/consumergroup-operator/internal/fixture"
)

// TestNodeLeaseLateness checks when a node's kubelet counts as overdue: one renewal interval and a fifth
// (12 s of a 40 s Lease) after a renewal the operator saw happen, or after the time a renewal it saw only
// after the fact states, plus the skew, when that is earlier; a stated time in the future gains nothing.
func TestNodeLeaseLateness(t *testing.T) {
	const skew = time.Second
	at := func(s int) time.Time { return fixture.T0.Add(time.Duration(s) * time.Second) }
	nodeLease := func(renewed time.Time) *coordinationv1.Lease {
		return &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: "n"},
			Spec: coordinationv1.LeaseSpec{LeaseDurationSeconds: ptr.To[int32](40), RenewTime: ptr.To(metav1.NewMicroTime(renewed))}}
	}
	type sight struct {
		at     time.Time
		stated time.Time
	}
	cases := []struct {
		name   string
		sights []sight
		want   time.Time
	}{
		{"first seen after the fact: from the stated time plus the skew", []sight{{at(100), at(90)}}, at(91 + 12)},
		{"first seen with a stated time in the future: from the sighting", []sight{{at(100), at(500)}}, at(100 + 12)},
		{"seen again unchanged: still from the stated time", []sight{{at(100), at(90)}, {at(102), at(90)}}, at(91 + 12)},
		{"a renewal seen as it happens: from the sighting, whatever it states", []sight{{at(100), at(90)}, {at(105), at(0)}}, at(105 + 12)},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var s NodeLeaseSightings
			for _, x := range tc.sights {
				s.Saw(nodeLease(x.stated), x.at, skew)
			}
			if got := s.lateAt(map[string]string{"n": ""}, skew)["n"]; !got.Equal(tc.want) {
				t.Fatalf("the node is late at %v, want %v", got.Sub(fixture.T0), tc.want.Sub(fixture.T0))
			}
		})
	}
}
