package observe

import (
	"fmt"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/consumergroup-operator/consumergroup-operator/internal/fixture"
	"github.com/consumergroup-operator/consumergroup-operator/internal/plan"
	"github.com/consumergroup-operator/consumergroup-operator/pkg/protocol"
)

// TestNodeLeaseLateness checks when a node's kubelet counts as overdue: one renewal interval and a fifth
// (12 s of a 40 s Lease) after a renewal the operator saw happen, or after the time a renewal it saw only
// after the fact states, plus the skew, when that is earlier; a stated time in the future gains nothing.
func TestNodeLeaseLateness(t *testing.T) {
	const skew = time.Second
	at := func(s int) time.Time { return fixture.T0.Add(time.Duration(s) * time.Second) }
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
				s.Saw(kubeletLease("n", x.stated), x.at, skew)
			}
			// One node alone is never a disruption (TestNodeLeasesDisruptedAtOnceAreNotBelieved).
			if got := s.lateAt(map[string]string{"n": ""}, tc.sights[len(tc.sights)-1].at, skew)["n"]; !got.Equal(tc.want) {
				t.Fatalf("the node is late at %v, want %v", got.Sub(fixture.T0), tc.want.Sub(fixture.T0))
			}
		})
	}
}

// TestAgentHeartbeatLateness: a node agent's heartbeat counts for the node it names, and is overdue two
// renewal intervals after it was seen (4 s of an 8 s heartbeat); a Lease that is no heartbeat is not
// counted, and a deleted heartbeat is forgotten.
func TestAgentHeartbeatLateness(t *testing.T) {
	const skew = time.Second
	at := func(s int) time.Time { return fixture.T0.Add(time.Duration(s) * time.Second) }
	s := NodeLeaseSightings{Heartbeats: true}
	s.Saw(heartbeatLease("n1", 8, at(90)), at(100), skew)
	s.Saw(heartbeatLease("n1", 8, at(101)), at(101), skew) // renewed, seen as it happens
	s.Saw(heartbeatLease("n2", 0, at(99)), at(100), skew)  // no duration: the default
	notOne := heartbeatLease("n3", 8, at(100))
	notOne.Labels = nil
	s.Saw(notOne, at(100), skew)
	got := s.heartbeats(map[string]string{"n1": "", "n2": "", "n3": ""}, at(102), skew)
	want := map[string]plan.Heartbeat{
		"n1": {RenewedBy: at(101), LateAt: at(105), Duration: 8 * time.Second},
		"n2": {RenewedBy: at(100), LateAt: at(108), Duration: protocol.DefaultNodeAgentHeartbeat}, // 16 s: renewed every 4 s, late after two
	}
	if len(got) != len(want) {
		t.Fatalf("heartbeats of %v, want of n1 and n2 only", got)
	}
	for node, w := range want {
		if g := got[node]; !g.RenewedBy.Equal(w.RenewedBy) || !g.LateAt.Equal(w.LateAt) || g.Duration != w.Duration {
			t.Errorf("%s: %+v, want %+v", node, g, w)
		}
	}
	if late, ok := s.LateAt("n1", skew); !ok || !late.Equal(at(105)) {
		t.Errorf("LateAt(n1) = %v, %v; want %v", late, ok, at(105))
	}
	s.Forget(heartbeatLease("n1", 8, at(101)))
	if _, ok := s.LateAt("n1", skew); ok {
		t.Errorf("a deleted heartbeat is still timed")
	}
}

// TestNodeLeasesDisruptedAtOnceAreNotBelieved: while more than two heartbeats, and more than a tenth of
// them, are overdue at once, none counts (the API server, not the nodes, is failing), and the kubelets
// time the nodes alone; one node late among many, or two of a few, still counts. The kubelets' Leases
// are judged alike beyond 55 % of them, and while they are disrupted no node is late; a zone of three
// lost with its nodes still counts.
func TestNodeLeasesDisruptedAtOnceAreNotBelieved(t *testing.T) {
	const skew = time.Second
	at := func(s int) time.Time { return fixture.T0.Add(time.Duration(s) * time.Second) }
	// An 8 s heartbeat is renewed every 2 s, overdue 4 s after a renewal; a kubelet's 40 s Lease every 10 s,
	// overdue 12 s after.
	heartbeat := func(node string, renewed time.Time) *coordinationv1.Lease { return heartbeatLease(node, 8, renewed) }
	kinds := []struct {
		name       string
		heartbeats bool
		lease      func(node string, renewed time.Time) *coordinationv1.Lease
		// late and onTime are when the late nodes and the others last renewed; judged is when they are
		// judged: after the late nodes' deadline, before the others'.
		late, onTime, judged time.Time
		// believed says whether the late node n0 counts as late.
		believed func(s *NodeLeaseSightings, now time.Time) bool
	}{
		{"agents' heartbeats", true, heartbeat, at(100), at(103), at(105), func(s *NodeLeaseSightings, now time.Time) bool {
			_, ok := s.heartbeats(map[string]string{"n0": ""}, now, skew)["n0"]
			return ok
		}},
		{"kubelets' Leases", false, kubeletLease, at(100), at(110), at(113), func(s *NodeLeaseSightings, now time.Time) bool {
			lateAt, ok := s.lateAt(map[string]string{"n0": ""}, now, skew)["n0"]
			return ok && !now.Before(lateAt)
		}},
	}
	cases := []struct {
		name        string
		nodes, late int
		// believed is whether the late node counts, of heartbeats and of kubelets' Leases.
		believed [2]bool
	}{
		{"one late of two", 2, 1, [2]bool{true, true}},
		{"two late of two", 2, 2, [2]bool{true, true}},
		{"three late of three", 3, 3, [2]bool{false, false}},
		{"three late of thirty", 30, 3, [2]bool{true, true}},
		{"four late of thirty", 30, 4, [2]bool{false, true}},
		{"a zone of three: ten late of thirty", 30, 10, [2]bool{false, true}},
		{"sixteen late of thirty", 30, 16, [2]bool{false, true}},
		{"seventeen late of thirty", 30, 17, [2]bool{false, false}},
		{"one late of two hundred", 200, 1, [2]bool{true, true}},
		{"twenty late of two hundred", 200, 20, [2]bool{true, true}},
		{"twenty-one late of two hundred", 200, 21, [2]bool{false, true}},
		{"a hundred and ten late of two hundred", 200, 110, [2]bool{false, true}},
		{"a hundred and eleven late of two hundred", 200, 111, [2]bool{false, false}},
	}
	for k, kind := range kinds {
		for _, tc := range cases {
			want := tc.believed[k]
			s := NodeLeaseSightings{Heartbeats: kind.heartbeats}
			for i := range tc.nodes {
				renewed := kind.onTime
				if i < tc.late {
					renewed = kind.late
				}
				s.Saw(kind.lease(fmt.Sprintf("n%d", i), renewed), renewed, skew) // seen as renewed
			}
			if got := kind.believed(&s, kind.judged); got != want {
				t.Errorf("%s, %s: the late node counts as late: %v, want %v", kind.name, tc.name, got, want)
			}
			if got := s.Disrupted(kind.judged, skew); got == want {
				t.Errorf("%s, %s: Disrupted = %v, want %v", kind.name, tc.name, got, !want)
			}
		}
	}
}

// kubeletLease is node's Lease as its kubelet keeps it: 40 s, renewed at renewed.
func kubeletLease(node string, renewed time.Time) *coordinationv1.Lease {
	return &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: node},
		Spec: coordinationv1.LeaseSpec{LeaseDurationSeconds: ptr.To[int32](40), RenewTime: ptr.To(metav1.NewMicroTime(renewed))}}
}

// heartbeatLease is node's agent's heartbeat of seconds (0: none stated), renewed at renewed.
func heartbeatLease(node string, seconds int32, renewed time.Time) *coordinationv1.Lease {
	return &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Name: protocol.NodeAgentHeartbeatName(node),
			Labels:      map[string]string{protocol.NodeAgentHeartbeatLabel: "true"},
			Annotations: map[string]string{protocol.NodeViewNodeAnnotation: node}},
		Spec: coordinationv1.LeaseSpec{LeaseDurationSeconds: ptr.To(seconds), RenewTime: ptr.To(metav1.NewMicroTime(renewed))}}
}
