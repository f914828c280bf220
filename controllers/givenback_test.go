//go:build envtest

package controllers

import (
	"context"
	"fmt"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"k8s.io/utils/ptr"

	"github.com/consumergroup-operator/consumergroup-operator/api/v1alpha1"
	"github.com/consumergroup-operator/consumergroup-operator/internal/testenv"
	"github.com/consumergroup-operator/consumergroup-operator/pkg/allocate"
)

// TestQueueGivenBackAndRevokedAgainHasOneReader drives a live member x, whose Lease writes are refused
// (or held back 8 s) while its reads pass, through revoke → give back → revoke of queue q0, with
// spec.strategy.byConfig, and the last revocation applied by x's application 1.8 s after it was served
// it (within its 2 s stop timeout). x may read q0 until the last revocation's publication plus its
// promise: q0 reaches y only after that, and no instant has two readers. Counted from the first
// revocation instead, q0 would reach y while x still reads it.
func TestQueueGivenBackAndRevokedAgainHasOneReader(t *testing.T) {
	for _, tc := range []struct {
		name  string
		delay time.Duration
	}{{"writes refused", 0}, {"writes held back 8 s", 8 * time.Second}} {
		t.Run(tc.name, func(t *testing.T) {
			ns := newNamespace(t)
			startManager(t, ns)
			q0, q1 := allocate.Queue{Topic: "t", Broker: "b", ID: 0}, allocate.Queue{Topic: "t", Broker: "b", ID: 1}
			assign := func(x, y []int32) *v1alpha1.ByConfigParameters {
				ref := func(ids []int32) []v1alpha1.QueueReference {
					out := []v1alpha1.QueueReference{}
					for _, id := range ids {
						out = append(out, v1alpha1.QueueReference{Topic: "t", Broker: "b", QueueID: id})
					}
					return out
				}
				return &v1alpha1.ByConfigParameters{Assignments: []v1alpha1.MemberAssignment{{Member: "x", Queues: ref(x)}, {Member: "y", Queues: ref(y)}}}
			}
			testenv.Group(ns, "back").Topic("t", testenv.Broker("b", 2, "")).
				Strategy(v1alpha1.Strategy{Type: v1alpha1.ByConfig, ByConfig: assign([]int32{0}, []int32{1})}).
				Handoff(v1alpha1.Handoff{Mode: v1alpha1.Cooperative, RevokeTimeoutSeconds: ptr.To[int32](30)}).Create(t, k8s)
			own := testenv.NewOwnership()
			opts := testenv.MemberOptions{LeaseDuration: 20 * time.Second, MaxClockSkew: testClockSkew, DrainAckTimeout: time.Second}
			var writes atomic.Bool
			x := testenv.StartMember(t, testenv.LeaseWrites(restConfig, &writes, tc.delay), "back", testenv.Pod(ns, "x", "back").Create(t, k8s), own, opts)
			y := testenv.StartMember(t, restConfig, "back", testenv.Pod(ns, "y", "back").Create(t, k8s), own, opts)
			readBy := func(q allocate.Queue, m *testenv.SimMember) func() error {
				return func() error {
					if !slices.Contains(own.Reading(m.Pod.Name+"/"+string(m.Pod.UID)), q) {
						return fmt.Errorf("%s does not read %v (%d readers)", m.Pod.Name, q, own.Readers(q))
					}
					return nil
				}
			}
			eventually(t, waitFor, readBy(q0, x))
			eventually(t, waitFor, readBy(q1, y))
			setAssignment := func(p *v1alpha1.ByConfigParameters) {
				g := getGroup(t, ns, "back")
				g.Spec.Strategy.ByConfig = p
				must(t, k8s.Update(context.Background(), g))
			}

			writes.Store(true)
			start := time.Now()
			at := func(d time.Duration) { time.Sleep(time.Until(start.Add(d))) }
			at(500 * time.Millisecond)
			setAssignment(assign(nil, []int32{0, 1})) // revoke q0 from x
			eventually(t, waitFor, func() error {
				if n := own.Readers(q0); n != 0 {
					return fmt.Errorf("q0 has %d readers", n)
				}
				return nil
			})
			at(4 * time.Second)
			setAssignment(assign([]int32{0}, []int32{1})) // give it back
			eventually(t, waitFor, readBy(q0, x))
			at(6500 * time.Millisecond)
			x.ApplyDelay.Store(int64(1800 * time.Millisecond))
			revokedAgain := time.Now()
			setAssignment(assign(nil, []int32{0, 1})) // revoke it again
			eventually(t, 30*time.Second, readBy(q0, y))
			t.Logf("q0 reached y %v after it was revoked from x again", time.Since(revokedAgain).Round(time.Millisecond))
			if v := own.Violations(); len(v) > 0 {
				t.Fatalf("queues had two readers at once: %v", v)
			}
		})
	}
}
