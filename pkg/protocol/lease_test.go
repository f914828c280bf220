package protocol

import (
	"slices"
	"strings"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/utils/ptr"

	"github.com/consumergroup-operator/consumergroup-operator/api/v1alpha1"
)

func TestGroupAPIMatchesTheTypes(t *testing.T) {
	if GroupAPIVersion != v1alpha1.GroupVersion.String() {
		t.Errorf("GroupAPIVersion = %q, the API is %q", GroupAPIVersion, v1alpha1.GroupVersion)
	}
}

func TestLeaseName(t *testing.T) {
	if got := LeaseName("orders", "consumer-0"); got != "orders.consumer-0" {
		t.Errorf("LeaseName(orders, consumer-0) = %q, want orders.consumer-0", got)
	}
	long := strings.Repeat("g", 200)
	// Cuts that would end in '.' or '-' must be trimmed to keep a valid name.
	pods := []string{
		strings.Repeat("p", 100) + "-a",
		strings.Repeat("p", 100) + "-b",
		strings.Repeat("p", 42) + "." + strings.Repeat("q", 60),
		strings.Repeat("p", 41) + "-." + strings.Repeat("q", 60),
		strings.Repeat("p", 52),
	}
	seen := map[string]string{}
	for _, pod := range pods {
		name := LeaseName(long, pod)
		if msgs := validation.IsDNS1123Subdomain(name); len(msgs) > 0 {
			t.Errorf("LeaseName(%d chars, %q) = %q is not a valid name: %v", len(long), pod, name, msgs)
		}
		if other, dup := seen[name]; dup {
			t.Errorf("pods %q and %q share Lease name %q", other, pod, name)
		}
		seen[name] = pod
	}
}

// memberLease is a member's Lease as a member writes it, for group orders.
func memberLease(now time.Time, claim []Queue) *coordinationv1.Lease {
	m := MemberLease{Group: "orders", GroupUID: "group-uid", Pod: "consumer-0", PodUID: "pod-uid", Member: "m-0",
		Duration: 15 * time.Second, Acked: 12, Claim: claim}
	return m.Apply(nil, "shop", &now, &now)
}

func TestReadLeaseReadsWhatAMemberWrites(t *testing.T) {
	now := time.Date(2026, 11, 30, 9, 0, 0, 0, time.UTC)
	claim := []Queue{q("orders", "a", 1), q("orders", "a", 2)}
	lease := memberLease(now, claim)
	if lease.Name != "orders.consumer-0" || lease.Labels[GroupLabel] != "orders" || len(lease.OwnerReferences) != 2 {
		t.Fatalf("Object = %+v", lease.ObjectMeta)
	}
	s := ReadLease(lease)
	if s.Member != "m-0" || s.Pod != "consumer-0" || s.PodUID != "pod-uid" || s.AckedGeneration != 12 ||
		!s.RenewTime.Equal(now) || s.Duration != 15*time.Second || !s.HasClaim || s.ClaimErr != nil || len(s.Claim) != 2 {
		t.Fatalf("ReadLease = %+v", s)
	}
	const skew = 2 * time.Second
	if !s.Stands(now.Add(16*time.Second), skew) {
		t.Error("a claim renewed 16 s ago, duration 15 s, skew 2 s, no longer stands")
	}
	if s.Stands(now.Add(17*time.Second), skew) {
		t.Error("a claim renewed 17 s ago, duration 15 s, skew 2 s, still stands")
	}
	if s.Released() {
		t.Error("a claim of two queues reads as released")
	}
	if !ReadLease(memberLease(now, nil)).Released() {
		t.Error("an empty claim does not read as released")
	}
}

// The garbage collector removes a deleted pod's owner reference from its Lease while the group owns it
// too; the claim is still the pod's, and must be read as such.
func TestReadLeaseAfterThePodOwnerWentAway(t *testing.T) {
	now := time.Date(2026, 11, 30, 9, 0, 0, 0, time.UTC)
	lease := memberLease(now, []Queue{q("orders", "a", 1)})
	lease.OwnerReferences = slices.DeleteFunc(lease.OwnerReferences, func(r metav1.OwnerReference) bool { return r.Kind == "Pod" })
	if s := ReadLease(lease); s.Pod != "consumer-0" || s.PodUID != "pod-uid" || len(s.Claim) != 1 {
		t.Errorf("without the pod owner: ReadLease = %+v", s)
	}
	// A Lease written before PodAnnotation existed: its name says whose it is.
	delete(lease.Annotations, PodAnnotation)
	if s := ReadLease(lease); s.Pod != "consumer-0" || s.PodUID != "pod-uid" {
		t.Errorf("without the pod owner and the annotation: ReadLease = %+v", s)
	}
	// Whatever else is gone, the pod is never nobody.
	delete(lease.Labels, GroupLabel)
	if s := ReadLease(lease); s.Pod == "" {
		t.Errorf("without the pod owner, the annotation and the label: ReadLease = %+v", s)
	}
}

func TestReadLeaseTakesTheSafeSide(t *testing.T) {
	now := time.Date(2026, 11, 30, 9, 0, 0, 0, time.UTC)
	cases := []struct {
		name  string
		edit  func(*coordinationv1.Lease)
		check func(LeaseState) string
	}{
		{"protocol-1 Lease: no claim", func(l *coordinationv1.Lease) { delete(l.Annotations, ClaimAnnotation) }, func(s LeaseState) string {
			if s.HasClaim || s.PodUID != "pod-uid" || s.AckedGeneration != 12 {
				return "want no claim, the owner's pod UID and the acked generation"
			}
			return ""
		}},
		{"junk claim", func(l *coordinationv1.Lease) { l.Annotations[ClaimAnnotation] = "{junk" }, func(s LeaseState) string {
			if !s.HasClaim || s.ClaimErr == nil || s.Released() {
				return "want an unreadable claim, never released"
			}
			return ""
		}},
		{"claim of another incarnation", func(l *coordinationv1.Lease) { l.OwnerReferences[0].UID = "other" }, func(s LeaseState) string {
			if s.ClaimErr == nil {
				return "want an unreadable claim"
			}
			return ""
		}},
		{"acked raised by hand", func(l *coordinationv1.Lease) { l.Annotations[AckedGenerationAnnotation] = "99" }, func(s LeaseState) string {
			if s.AckedGeneration != 12 {
				return "want the lower of the two records, 12"
			}
			return ""
		}},
		{"renewTime and duration removed", func(l *coordinationv1.Lease) {
			l.Spec.RenewTime, l.Spec.LeaseDurationSeconds = nil, nil
		}, func(s LeaseState) string {
			if !s.RenewTime.Equal(now) || s.Duration != DefaultLeaseDuration {
				return "want the acquire time and the default duration"
			}
			return ""
		}},
		{"duration of a year", func(l *coordinationv1.Lease) { l.Spec.LeaseDurationSeconds = ptr.To[int32](365 * 24 * 3600) }, func(s LeaseState) string {
			if s.Duration != MaxLeaseDuration {
				return "want the duration capped"
			}
			return ""
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			lease := memberLease(now, []Queue{q("orders", "a", 1)})
			tc.edit(lease)
			if msg := tc.check(ReadLease(lease)); msg != "" {
				t.Fatalf("%s; got %+v", msg, ReadLease(lease))
			}
		})
	}
}

func TestApplyMovesOnlyTheTimesAsked(t *testing.T) {
	m := MemberLease{Group: "orders", Pod: "consumer-0", PodUID: "pod-uid", Member: "m-0", Duration: 60 * time.Second, Acked: 3,
		Claim: []Queue{q("orders", "a", 1)}}
	t0 := time.Date(2026, 11, 30, 9, 0, 0, 0, time.UTC)
	lease := m.Apply(nil, "shop", &t0, &t0)
	t1 := t0.Add(time.Minute)
	m.Acked = 4
	m.Apply(lease, "shop", nil, nil)
	if !lease.Spec.RenewTime.Time.Equal(t0) || lease.Annotations[AckedGenerationAnnotation] != "4" {
		t.Errorf("an acknowledgement moved renewTime to %v or did not write acked (%q)", lease.Spec.RenewTime, lease.Annotations[AckedGenerationAnnotation])
	}
	m.Apply(lease, "shop", nil, &t1)
	if !lease.Spec.RenewTime.Time.Equal(t1) || !lease.Spec.AcquireTime.Time.Equal(t0) {
		t.Errorf("a renewal wrote renewTime %v, acquireTime %v", lease.Spec.RenewTime, lease.Spec.AcquireTime)
	}
	if !HeldBy(lease, "pod-uid") || HeldBy(lease, "other") {
		t.Error("HeldBy does not tell the incarnations apart")
	}
	lease.OwnerReferences = nil
	if !HeldBy(lease, "pod-uid") {
		t.Error("a Lease whose owners were edited away is not recognised by its claim")
	}
}

// A member's load report rides on its Lease: written when it has one, removed when it stops reporting,
// and an unreadable one costs only the report.
func TestLeaseCarriesTheLoadReport(t *testing.T) {
	now := time.Date(2026, 11, 30, 9, 0, 0, 0, time.UTC)
	claim := []Queue{q("orders", "a", 1), q("orders", "a", 2)}
	m := MemberLease{Group: "orders", Pod: "consumer-0", PodUID: "pod-uid", Member: "m-0", Duration: 15 * time.Second, Acked: 12, Claim: claim,
		Load: map[Queue]float64{claim[0]: 30, claim[1]: 2.5}}
	lease := m.Apply(nil, "ns", &now, &now)
	if s := ReadLease(lease); s.LoadErr != nil || len(s.Load) != 2 || s.Load[claim[0]] != 30 || s.Load[claim[1]] != 2.5 {
		t.Fatalf("ReadLease: load %v, error %v; want orders/a/1 at 30 and orders/a/2 at 2.5", s.Load, s.LoadErr)
	}
	m.Load = nil
	if s := ReadLease(m.Apply(lease, "ns", nil, &now)); s.Load != nil || s.LoadErr != nil {
		t.Errorf("after the member stopped reporting: load %v, error %v; want none", s.Load, s.LoadErr)
	}
	lease.Annotations[LoadAnnotation] = "edited"
	s := ReadLease(lease)
	if s.LoadErr == nil || s.Load != nil || s.ClaimErr != nil || len(s.Claim) != 2 {
		t.Errorf("an edited report: load %v, error %v, claim %v (error %v); want no load, an error, and the claim as it was", s.Load, s.LoadErr, s.Claim, s.ClaimErr)
	}
}

// TestStoppedMemberLease: a member that stopped for good says so in its Lease, and a reader believes it
// only with a claim that reads and lists nothing; a later write that does not say it (another process of
// the pod, claiming) takes the word back.
func TestStoppedMemberLease(t *testing.T) {
	now := time.Date(2026, 12, 5, 9, 0, 0, 0, time.UTC)
	stopped := MemberLease{Group: "orders", Pod: "consumer-0", PodUID: "pod-uid", Member: "m-0", Duration: 15 * time.Second, Acked: 12, Stopped: true}
	lease := stopped.Apply(nil, "shop", &now, &now)
	if got := lease.Annotations[StoppedAnnotation]; got != "true" {
		t.Fatalf("a stopped member's Lease says %s=%q", StoppedAnnotation, got)
	}
	if s := ReadLease(lease); !s.Stopped || !s.Released() {
		t.Errorf("ReadLease of a stopped member's Lease = %+v, want Stopped and released", s)
	}

	claiming := stopped
	claiming.Stopped, claiming.Claim = false, []Queue{q("orders", "a", 1)}
	again := claiming.Apply(lease.DeepCopy(), "shop", nil, &now)
	if _, ok := again.Annotations[StoppedAnnotation]; ok {
		t.Errorf("a write that does not say stopped leaves %s in place", StoppedAnnotation)
	}

	withClaim := stopped
	withClaim.Claim = []Queue{q("orders", "a", 1)}
	if l := withClaim.Apply(nil, "shop", &now, &now); l.Annotations[StoppedAnnotation] != "" {
		t.Errorf("a member claiming queues wrote %s", StoppedAnnotation)
	}

	for _, tc := range []struct {
		name  string
		edit  func(*coordinationv1.Lease)
		wants bool
	}{
		{"as written", func(*coordinationv1.Lease) {}, true},
		{"another value", func(l *coordinationv1.Lease) { l.Annotations[StoppedAnnotation] = "yes" }, false},
		{"a claim listing a queue", func(l *coordinationv1.Lease) {
			l.Annotations[ClaimAnnotation] = NewClaim("pod-uid", 12, []Queue{q("orders", "a", 1)}).Encode()
		}, false},
		{"a claim that cannot be read", func(l *coordinationv1.Lease) { l.Annotations[ClaimAnnotation] = "junk" }, false},
		{"no claim (a protocol-1 Lease)", func(l *coordinationv1.Lease) { delete(l.Annotations, ClaimAnnotation) }, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l := lease.DeepCopy()
			tc.edit(l)
			if got := ReadLease(l).Stopped; got != tc.wants {
				t.Errorf("Stopped = %v, want %v", got, tc.wants)
			}
		})
	}
}

// TestMemberLeaseSaysItConfirmsThroughItsAgent: a member in node mode says so in its Lease, a reader
// believes only the one value, and a write by a process that does not confirm through an agent (a
// restarted member that fell back to its own reads) takes the word back.
func TestMemberLeaseSaysItConfirmsThroughItsAgent(t *testing.T) {
	now := time.Date(2026, 12, 7, 9, 0, 0, 0, time.UTC)
	through := MemberLease{Group: "orders", Pod: "consumer-0", PodUID: "pod-uid", Member: "m-0", Duration: 10 * time.Minute, Acked: 3, ThroughNodeAgent: true}
	lease := through.Apply(nil, "shop", &now, &now)
	if got := lease.Annotations[ConfirmsThroughAnnotation]; got != ConfirmsThroughNodeAgent {
		t.Fatalf("a node-mode member's Lease says %s=%q, want %q", ConfirmsThroughAnnotation, got, ConfirmsThroughNodeAgent)
	}
	if !ReadLeaseTerms(lease).ThroughNodeAgent || !ReadLease(lease).ThroughNodeAgent {
		t.Errorf("a reader does not take the member's word that it confirms through its agent")
	}

	own := through
	own.ThroughNodeAgent = false
	again := own.Apply(lease.DeepCopy(), "shop", nil, &now)
	if v, ok := again.Annotations[ConfirmsThroughAnnotation]; ok {
		t.Errorf("a write by a member with its own reads leaves %s=%q in place", ConfirmsThroughAnnotation, v)
	}

	for _, v := range []string{"", "true", "Node-Agent", "node-agent "} {
		edited := lease.DeepCopy()
		edited.Annotations[ConfirmsThroughAnnotation] = v
		if ReadLeaseTerms(edited).ThroughNodeAgent {
			t.Errorf("%s=%q read as confirming through the agent", ConfirmsThroughAnnotation, v)
		}
	}
}

// TestHeartbeatNode: a heartbeat Lease names its node by annotation, and counts only when labelled and
// named after that node.
func TestHeartbeatNode(t *testing.T) {
	long := strings.Repeat("n", 250)
	heartbeat := func(name, node string, labelled bool) *coordinationv1.Lease {
		l := &coordinationv1.Lease{}
		l.Name, l.Annotations = name, map[string]string{NodeViewNodeAnnotation: node}
		if labelled {
			l.Labels = map[string]string{NodeAgentHeartbeatLabel: "true"}
		}
		return l
	}
	for _, tc := range []struct {
		name  string
		lease *coordinationv1.Lease
		node  string
		ok    bool
	}{
		{"its node's", heartbeat("node-agent.worker-1", "worker-1", true), "worker-1", true},
		{"a long name, cut and hashed", heartbeat(NodeAgentHeartbeatName(long), long, true), long, true},
		{"named after another node", heartbeat("node-agent.worker-2", "worker-1", true), "", false},
		{"not labelled", heartbeat("node-agent.worker-1", "worker-1", false), "", false},
		{"no node", heartbeat("node-agent.", "", true), "", false},
	} {
		node, ok := HeartbeatNode(tc.lease)
		if node != tc.node || ok != tc.ok {
			t.Errorf("%s: HeartbeatNode = %q, %v; want %q, %v", tc.name, node, ok, tc.node, tc.ok)
		}
	}
	if n := NodeAgentHeartbeatName(long); len(n) > 253 {
		t.Errorf("the heartbeat of a node named with 250 characters is %d long", len(n))
	}
}
