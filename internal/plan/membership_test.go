package plan

import (
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	"github.com/consumergroup-operator/consumergroup-operator/api/v1alpha1"
	"github.com/consumergroup-operator/consumergroup-operator/internal/fixture"
	"github.com/consumergroup-operator/consumergroup-operator/pkg/protocol"
)

func TestMembersFor(t *testing.T) {
	byPodName := &v1alpha1.ConsumerGroup{}
	byAnnotation := &v1alpha1.ConsumerGroup{Spec: v1alpha1.ConsumerGroupSpec{MemberIdentity: v1alpha1.MemberIdentity{Annotation: ptr.To("client-id")}}}
	zones := map[string]string{"n1": "zone-a", "n2": "zone-b"}
	fresh, expired := fixture.Lease("a", 0, nil, fixture.T0.Add(-time.Second)), fixture.Lease("a", 0, nil, fixture.T0.Add(-20*time.Second))
	m := func(id, zone string, weight int32, pod string) Member {
		return Member{Member: fixture.Mem(id, zone, weight), Pod: pod, UID: pod0(pod).UID}
	}
	cases := []struct {
		name       string
		group      *v1alpha1.ConsumerGroup
		pods       []corev1.Pod
		leases     map[string]*protocol.LeaseState
		want       []Member
		wantReason string
	}{
		{name: "no pods", group: byPodName, want: []Member{}},
		{
			name:  "sorted by pod name, zone from node, weight default 1",
			group: byPodName,
			pods:  []corev1.Pod{fixture.Pod("b", fixture.OnNode("n2")), fixture.Pod("a", fixture.OnNode("n1")), fixture.Pod("c")},
			want:  []Member{m("a", "zone-a", 1, "a"), m("b", "zone-b", 1, "b"), m("c", "", 1, "c")},
		},
		{
			name:  "not running, not ready, being deleted, no ready condition",
			group: byPodName,
			pods: []corev1.Pod{
				fixture.Pod("pending", func(p *corev1.Pod) { p.Status.Phase = corev1.PodPending }),
				fixture.Pod("unready", fixture.NotReady),
				fixture.Pod("deleting", func(p *corev1.Pod) { p.DeletionTimestamp = &metav1.Time{Time: time.Unix(1, 0)} }),
				fixture.Pod("nocondition", func(p *corev1.Pod) { p.Status.Conditions = nil }),
				fixture.Pod("ok"),
			},
			want: []Member{m("ok", "", 1, "ok")},
		},
		{
			name:   "own fresh Lease",
			group:  byPodName,
			pods:   []corev1.Pod{fixture.Pod("a")},
			leases: map[string]*protocol.LeaseState{"a": &fresh},
			want:   []Member{m("a", "", 1, "a")},
		},
		{
			name:   "own Lease not renewed for its duration: the member has stopped",
			group:  byPodName,
			pods:   []corev1.Pod{fixture.Pod("a")},
			leases: map[string]*protocol.LeaseState{"a": &expired},
			want:   []Member{},
		},
		{
			name:   "a pod under a name whose Lease an earlier pod holds waits",
			group:  byPodName,
			pods:   []corev1.Pod{fixture.Pod("a", fixture.WithUID("uid-a-new"))},
			leases: map[string]*protocol.LeaseState{"a": &fresh},
			want:   []Member{},
		},
		{
			name:  "zone and weight annotations",
			group: byPodName,
			pods:  []corev1.Pod{fixture.Pod("a", fixture.OnNode("n1"), fixture.WithAnnotation(v1alpha1.ZoneAnnotation, "zone-x"), fixture.WithAnnotation(v1alpha1.WeightAnnotation, " 3 "))},
			want:  []Member{m("a", "zone-x", 3, "a")},
		},
		{name: "weight not a number", group: byPodName, pods: []corev1.Pod{fixture.Pod("a", fixture.WithAnnotation(v1alpha1.WeightAnnotation, "heavy"))}, wantReason: v1alpha1.ReasonInvalidMemberAnnotation},
		{name: "weight zero", group: byPodName, pods: []corev1.Pod{fixture.Pod("a", fixture.WithAnnotation(v1alpha1.WeightAnnotation, "0"))}, wantReason: v1alpha1.ReasonInvalidMemberAnnotation},
		{name: "weight above the bound", group: byPodName, pods: []corev1.Pod{fixture.Pod("a", fixture.WithAnnotation(v1alpha1.WeightAnnotation, "1001"))}, wantReason: v1alpha1.ReasonInvalidMemberAnnotation},
		{
			name:  "invalid annotation on a pod that is not a member is ignored",
			group: byPodName,
			pods:  []corev1.Pod{fixture.Pod("a", fixture.WithAnnotation(v1alpha1.WeightAnnotation, "x"), func(p *corev1.Pod) { p.Status.Phase = corev1.PodPending })},
			want:  []Member{},
		},
		{
			name:  "identity from annotation",
			group: byAnnotation,
			pods:  []corev1.Pod{fixture.Pod("p1", fixture.WithAnnotation("client-id", "10.0.0.1@1"))},
			want:  []Member{m("10.0.0.1@1", "", 1, "p1")},
		},
		{name: "identity annotation missing", group: byAnnotation, pods: []corev1.Pod{fixture.Pod("p1")}, wantReason: v1alpha1.ReasonInvalidMemberAnnotation},
		{
			name:       "duplicate identity",
			group:      byAnnotation,
			pods:       []corev1.Pod{fixture.Pod("p1", fixture.WithAnnotation("client-id", "x")), fixture.Pod("p2", fixture.WithAnnotation("client-id", "x"))},
			wantReason: v1alpha1.ReasonDuplicateMemberID,
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, _, prob := membersFor(tc.group, tc.pods, zones, kubeletSignals{}, tc.leases, fixture.T0)
			if tc.wantReason != "" {
				if prob == nil || prob.Reason != tc.wantReason || prob.Message == "" {
					t.Fatalf("problem %v, want reason %s with a message", prob, tc.wantReason)
				}
				return
			}
			if prob != nil {
				t.Fatalf("unexpected problem %v", prob)
			}
			if len(got) != len(tc.want) {
				t.Fatalf("got %d members %v, want %v", len(got), got, tc.want)
			}
			for i := range got {
				if got[i] != tc.want[i] {
					t.Errorf("member %d is %+v, want %+v", i, got[i], tc.want[i])
				}
			}
		})
	}
}

func pod0(name string) corev1.Pod { return fixture.Pod(name) }

func TestStoppedByKubelet(t *testing.T) {
	restarted := func(p *corev1.Pod) {
		p.Status.ContainerStatuses[0].State = corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "CrashLoopBackOff"}}
		p.Status.ContainerStatuses[0].LastTerminationState = corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 1}}
	}
	sidecar := func(p *corev1.Pod) {
		p.Status.InitContainerStatuses = []corev1.ContainerStatus{{Name: "agent", State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{}}}}
	}
	cases := []struct {
		name string
		pod  corev1.Pod
		want bool
	}{
		{"running", fixture.Pod("a"), false},
		{"only NotReady", fixture.Pod("a", fixture.NotReady), false},
		{"no container status yet: a kubelet cut off may have started it", fixture.Pod("a", func(p *corev1.Pod) { p.Status.ContainerStatuses = nil }), false},
		{"terminated", fixture.Pod("a", fixture.Stopped), true},
		{"crash-looping, not running now", fixture.Pod("a", restarted), true},
		{"terminated, but its sidecar runs", fixture.Pod("a", fixture.Stopped, sidecar), false},
		{"failed", fixture.Pod("a", func(p *corev1.Pod) { p.Status.Phase = corev1.PodFailed }), true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if got := StoppedByKubelet(&tc.pod); got != tc.want {
				t.Errorf("%s: StoppedByKubelet = %v, want %v", tc.name, got, tc.want)
			}
		})
	}
}

// TestMembersForLooksAgainAtTheMembersOwnDeadlines: a pass looks again when a member's own deadlines fall
// (its renewal overdue, an unanswered restart's grace), not at its node's kubelet deadline, which every
// renewal of the kubelet moves 10 s on: the operator wakes a node's groups itself once it is overdue. A
// node already overdue still ends the membership.
func TestMembersForLooksAgainAtTheMembersOwnDeadlines(t *testing.T) {
	group := &v1alpha1.ConsumerGroup{}
	pods := []corev1.Pod{fixture.Pod("a", fixture.OnNode("n1"))}
	lease := fixture.Lease("a", 0, nil, fixture.T0)
	lease.PodUID, lease.StopsWithin = pods[0].UID, 6*time.Second
	leases := map[string]*protocol.LeaseState{"a": &lease}
	own := membershipEnds(&lease, time.Time{}, time.Time{})
	restart := fixture.T0.Add(3 * time.Second) // past the slack a renewal answers a restart within
	cases := []struct {
		name     string
		kubelets kubeletSignals
		member   bool
		next     time.Time
	}{
		{name: "no signal of the kubelet", member: true, next: own},
		{name: "the kubelet overdue before the member's own deadline", kubelets: kubeletSignals{nodeLateAt: map[string]time.Time{"n1": own.Add(-2 * time.Second)}}, member: true, next: own},
		{name: "the kubelet overdue already", kubelets: kubeletSignals{nodeLateAt: map[string]time.Time{"n1": fixture.T0}}, member: false},
		{name: "a restart no renewal answered", kubelets: kubeletSignals{restartedAt: map[types.UID]time.Time{pods[0].UID: restart}},
			member: true, next: restart.Add(RestartRenewGrace)},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, next, prob := membersFor(group, pods, nil, tc.kubelets, leases, fixture.T0)
			if prob != nil || (len(got) == 1) != tc.member || !next.Equal(tc.next) {
				t.Fatalf("members %v, next look %v, problem %v; want a member: %v, next look %v", got, next, prob, tc.member, tc.next)
			}
		})
	}
}

// TestNodeLateCountsTheAgentsHeartbeatForItsMembers: a member that confirms through its node's agent is
// late when the agent's heartbeat is, if sooner than the kubelet; a member with its own reads is not,
// and neither is one whose agent's heartbeat was last seen more than a heartbeat's duration before the
// member's own last renewal (an agent that answers without renewing it).
func TestNodeLateCountsTheAgentsHeartbeatForItsMembers(t *testing.T) {
	at := func(s int) time.Time { return fixture.T0.Add(time.Duration(s) * time.Second) }
	const hb = 8 * time.Second
	member := func(through bool, renewed time.Time) *protocol.LeaseState {
		return &protocol.LeaseState{ThroughNodeAgent: through, RenewedBy: renewed}
	}
	agent := func(renewed time.Time) map[string]Heartbeat {
		return map[string]Heartbeat{"n1": {RenewedBy: renewed, LateAt: renewed.Add(hb / 2), Duration: hb}}
	}
	kubelet := map[string]time.Time{"n1": at(112)}
	cases := []struct {
		name    string
		signals kubeletSignals
		lease   *protocol.LeaseState
		want    time.Time
	}{
		{"no signal", kubeletSignals{}, member(true, at(0)), time.Time{}},
		{"the kubelet alone", kubeletSignals{nodeLateAt: kubelet}, member(true, at(0)), at(112)},
		{"through the agent: its heartbeat, sooner", kubeletSignals{nodeLateAt: kubelet, agents: agent(at(100))}, member(true, at(0)), at(104)},
		{"through the agent, no kubelet seen", kubeletSignals{agents: agent(at(100))}, member(true, at(0)), at(104)},
		{"through the agent: the kubelet, sooner", kubeletSignals{nodeLateAt: kubelet, agents: agent(at(110))}, member(true, at(0)), at(112)},
		{"own reads: the agent's heartbeat says nothing of it", kubeletSignals{nodeLateAt: kubelet, agents: agent(at(100))}, member(false, at(0)), at(112)},
		{"through the agent, its heartbeat seen a heartbeat before the member's renewal", kubeletSignals{nodeLateAt: kubelet, agents: agent(at(100))}, member(true, at(108)), at(104)},
		{"through the agent, its heartbeat older than that: not renewed any more", kubeletSignals{nodeLateAt: kubelet, agents: agent(at(100))}, member(true, at(109)), at(112)},
		{"another node's agent", kubeletSignals{nodeLateAt: kubelet, agents: map[string]Heartbeat{"n2": agent(at(100))["n1"]}}, member(true, at(0)), at(112)},
	}
	for _, tc := range cases {
		if got := tc.signals.nodeLate(tc.lease, "n1"); !got.Equal(tc.want) {
			t.Errorf("%s: nodeLate = %v, want %v", tc.name, got, tc.want)
		}
	}
}
