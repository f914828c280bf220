package controllers

import (
	"fmt"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	"github.com/consumergroup-operator/consumergroup-operator/api/v1alpha1"
	"github.com/consumergroup-operator/consumergroup-operator/pkg/allocate"
	"github.com/consumergroup-operator/consumergroup-operator/pkg/assignment"
	podmember "github.com/consumergroup-operator/consumergroup-operator/pkg/member"
)

func qs(ids ...int32) []allocate.Queue {
	out := make([]allocate.Queue, len(ids))
	for i, id := range ids {
		out[i] = allocate.Queue{Topic: "t", Broker: "b", ID: id}
	}
	return out
}

func members(pods ...string) []member {
	out := make([]member, len(pods))
	for i, p := range pods {
		out[i] = member{Member: allocate.Member{ID: p, Weight: 1}, Pod: p}
	}
	return out
}

func uids(pods ...string) map[string]types.UID {
	out := map[string]types.UID{}
	for _, p := range pods {
		out[p] = types.UID("uid-" + p)
	}
	return out
}

// assertPartition fails when plan lists a queue twice.
func assertPartition(t *testing.T, plan map[string][]allocate.Queue) {
	t.Helper()
	seen := map[allocate.Queue]string{}
	for pod, queues := range plan {
		for _, q := range queues {
			if other, dup := seen[q]; dup {
				t.Fatalf("queue %s listed for %s and %s", q, other, pod)
			}
			seen[q] = pod
		}
	}
}

func TestHandoffCooperativeMove(t *testing.T) {
	t0 := time.Date(2026, 11, 30, 10, 0, 0, 0, time.UTC)
	spec := v1alpha1.Handoff{Mode: v1alpha1.Cooperative, RevokeTimeoutSeconds: ptr.To[int32](30)}
	published := map[string]podPlan{"a": {member: "a", queues: qs(0, 1, 2, 3)}, "b": {member: "b", queues: qs(4, 5, 6, 7)}}
	// c joins; the target takes 3 from a and 7 from b.
	target := allocate.Plan{"a": qs(0, 1, 2), "b": qs(4, 5, 6), "c": qs(3, 7)}
	in := handoffInput{spec: spec, now: t0, nextGeneration: 5, published: published, target: target,
		members: members("a", "b", "c"), pods: uids("a", "b", "c"), leases: map[string]podmember.LeaseState{}}

	step1 := handoff(in)
	assertPartition(t, step1.plan)
	if len(step1.plan["c"]) != 0 || fmt.Sprint(step1.plan["a"]) != fmt.Sprint(qs(0, 1, 2)) {
		t.Fatalf("step 1 gave c %v and a %v; want c nothing yet, a without queue 3", step1.plan["c"], step1.plan["a"])
	}
	if len(step1.state.Revocations) != 2 || step1.withheld != 2 || step1.revokedFromMembers != 2 || step1.requeueAfter != 30*time.Second {
		t.Fatalf("revocations %+v, withheld %d, requeue %s", step1.state.Revocations, step1.withheld, step1.requeueAfter)
	}

	// Step 2: the plan of step 1 is published; a has acknowledged generation 5, b not yet.
	in.published = map[string]podPlan{"a": {"a", step1.plan["a"]}, "b": {"b", step1.plan["b"]}, "c": {"c", nil}}
	in.state, in.nextGeneration, in.now = step1.state, 6, t0.Add(time.Second)
	in.leases = map[string]podmember.LeaseState{"a": {AckedGeneration: 5}, "b": {AckedGeneration: 4}}
	step2 := handoff(in)
	assertPartition(t, step2.plan)
	if fmt.Sprint(step2.plan["c"]) != fmt.Sprint(qs(3)) || len(step2.state.Revocations) != 1 || step2.state.Revocations[0].Pod != "b" {
		t.Fatalf("step 2 gave c %v with revocations %+v; want queue 3 only, b still pending", step2.plan["c"], step2.state.Revocations)
	}

	// Step 3: b never acknowledges; past the timeout it is fenced and queue 7 goes to c.
	in.published["c"] = podPlan{"c", step2.plan["c"]}
	in.state, in.now = step2.state, t0.Add(31*time.Second)
	step3 := handoff(in)
	assertPartition(t, step3.plan)
	if fmt.Sprint(step3.plan["c"]) != fmt.Sprint(qs(3, 7)) || len(step3.fenced) != 1 || len(step3.state.Fenced) != 1 || len(step3.state.Revocations) != 0 {
		t.Fatalf("step 3: c %v, fenced %v, state %+v", step3.plan["c"], step3.fenced, step3.state)
	}

	// Step 4: once b acknowledges a later generation it is no longer listed as fenced.
	in.state, in.leases["b"] = step3.state, podmember.LeaseState{AckedGeneration: 6}
	if s := handoff(in).state; len(s.Fenced) != 0 {
		t.Fatalf("b caught up but stays fenced: %+v", s.Fenced)
	}
}

func TestHandoffReleases(t *testing.T) {
	t0 := time.Date(2026, 11, 30, 10, 0, 0, 0, time.UTC)
	pending := handoffState{Revocations: []revocation{{Pod: "a", UID: "uid-a", Generation: 5, RevokedAt: t0, Queues: assignment.Compact(qs(3))}}}
	base := handoffInput{spec: v1alpha1.Handoff{}, now: t0.Add(time.Second), nextGeneration: 6,
		published: map[string]podPlan{"a": {"a", qs(0, 1, 2)}, "c": {"c", nil}},
		target:    allocate.Plan{"c": qs(0, 1, 2, 3)}, members: members("c"), state: pending}
	cases := []struct {
		name    string
		pods    map[string]types.UID
		leases  map[string]podmember.LeaseState
		granted string
	}{
		// a is no member but still runs (draining): it keeps nothing, and 3 waits for its acknowledgement.
		{"old owner still runs", uids("a", "c"), nil, fmt.Sprint([]allocate.Queue(nil))},
		{"old owner acknowledged", uids("a", "c"), map[string]podmember.LeaseState{"a": {AckedGeneration: 5}}, fmt.Sprint(qs(3))},
		{"old owner's pod is gone", uids("c"), nil, fmt.Sprint(qs(0, 1, 2, 3))},
		{"old owner replaced under the same name", map[string]types.UID{"a": "uid-new", "c": "uid-c"}, nil, fmt.Sprint(qs(3))},
		{"old owner's Lease expired", uids("a", "c"), map[string]podmember.LeaseState{"a": {RenewTime: t0.Add(-time.Minute), Duration: 15 * time.Second}}, fmt.Sprint(qs(3))},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			in := base
			in.pods, in.leases = tc.pods, tc.leases
			got := handoff(in)
			assertPartition(t, got.plan)
			if fmt.Sprint(got.plan["c"]) != tc.granted {
				t.Fatalf("c got %v, want %s", got.plan["c"], tc.granted)
			}
		})
	}
}

func TestHandoffImmediateAndRestartGrace(t *testing.T) {
	t0 := time.Date(2026, 11, 30, 10, 0, 0, 0, time.UTC)
	published := map[string]podPlan{"a": {"a", qs(0, 1)}, "b": {"b", qs(2, 3)}}

	immediate := handoff(handoffInput{spec: v1alpha1.Handoff{Mode: v1alpha1.Immediate}, now: t0, nextGeneration: 2, published: published,
		target: allocate.Plan{"a": qs(0), "b": qs(2, 3, 1)}, members: members("a", "b"), pods: uids("a", "b")})
	if fmt.Sprint(immediate.plan["b"]) != fmt.Sprint(qs(2, 3, 1)) || !immediate.state.empty() {
		t.Fatalf("immediate: b %v, state %+v", immediate.plan["b"], immediate.state)
	}

	// b leaves (its pod is gone) with a grace of 60 s: its queues go to nobody.
	grace := v1alpha1.Handoff{Mode: v1alpha1.Cooperative, RestartGraceSeconds: ptr.To[int32](60)}
	in := handoffInput{spec: grace, now: t0, nextGeneration: 2, published: published,
		target: allocate.Plan{"a": qs(0, 1, 2, 3)}, members: members("a"), pods: uids("a")}
	left := handoff(in)
	if fmt.Sprint(left.plan["a"]) != fmt.Sprint(qs(0, 1)) || len(left.state.Reserved) != 1 || left.withheld != 2 {
		t.Fatalf("during grace a got %v, reserved %+v", left.plan["a"], left.state.Reserved)
	}
	// b returns within the grace: its queues are free for it (the strategy gives them back from the
	// previous plan, which holds the reservation).
	in.published = map[string]podPlan{"a": {"a", left.plan["a"]}}
	in.state, in.now, in.members, in.pods = left.state, t0.Add(30*time.Second), members("a", "b"), uids("a", "b")
	in.target = allocate.Plan{"a": qs(0, 1), "b": qs(2, 3)}
	back := handoff(in)
	if fmt.Sprint(back.plan["b"]) != fmt.Sprint(qs(2, 3)) || len(back.state.Reserved) != 0 {
		t.Fatalf("returning b got %v, reserved %+v", back.plan["b"], back.state.Reserved)
	}
	// Had it not returned, the grace ends and a takes them.
	in.state, in.now, in.members, in.pods = left.state, t0.Add(61*time.Second), members("a"), uids("a")
	in.target = allocate.Plan{"a": qs(0, 1, 2, 3)}
	if after := handoff(in); fmt.Sprint(after.plan["a"]) != fmt.Sprint(qs(0, 1, 2, 3)) {
		t.Fatalf("after the grace a got %v", after.plan["a"])
	}
}
