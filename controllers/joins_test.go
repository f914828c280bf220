//go:build envtest

package controllers

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/consumergroup-operator/consumergroup-operator/internal/testenv"
	"github.com/consumergroup-operator/consumergroup-operator/pkg/protocol"
)

// TestPodsReadyTogetherJoinInOneRebalance: ten member pods of a Cooperative group become Ready 50 ms
// apart, as a Deployment's do. With the join window, the first is published alone and the other nine
// together when the window closes: four generations (the group's with no member yet, the first pod's, the
// revocation and the grant). Without it, each join is published as it comes, and every member
// acknowledges each generation. Either way every queue ends with one reader, and none had two.
func TestPodsReadyTogetherJoinInOneRebalance(t *testing.T) {
	const members, queues = 10, 16
	fill := func(t *testing.T, window time.Duration) (generation int64, acks int64) {
		ns := newNamespace(t)
		startManager(t, ns, func(r *ConsumerGroupReconciler) { r.JoinWindow = window })
		written := countAcks(t, ns)
		own := testenv.NewOwnership()
		cooperativeGroup(ns, "j", queues, 30).Create(t, k8s)
		pods := make([]*corev1.Pod, members)
		for i := range pods {
			pods[i] = testenv.Pod(ns, fmt.Sprintf("j-%d", i), "j").NotReady().Create(t, k8s)
			startSimMember(t, "j", pods[i], own)
		}
		time.Sleep(200 * time.Millisecond) // the members have started and wait for their pods' readiness
		for _, p := range pods {
			testenv.SetReady(t, k8s, p, true)
			time.Sleep(50 * time.Millisecond)
		}
		waitForSettled(t, ns, "j", own, queues, members)
		if v := own.Violations(); len(v) > 0 {
			t.Fatalf("queues had two readers: %v", v)
		}
		time.Sleep(300 * time.Millisecond) // the last acknowledgements land
		return getGroup(t, ns, "j").Status.AssignmentGeneration, written.Load()
	}
	var withGen, withAcks int64
	t.Run("window", func(t *testing.T) {
		withGen, withAcks = fill(t, 2*time.Second)
		if withGen > 4 {
			t.Fatalf("generation %d after the pods joined within the window; want at most 4: no member, the first, the revocation and the grant", withGen)
		}
	})
	t.Run("no window", func(t *testing.T) {
		gen, acks := fill(t, 0)
		t.Logf("generations %d (window: %d), acknowledgements %d (window: %d)", gen, withGen, acks, withAcks)
		if gen <= withGen || acks <= withAcks {
			t.Fatalf("without the window: generation %d and %d acknowledgements, with it %d and %d; the window saves nothing here", gen, acks, withGen, withAcks)
		}
	})
}

// countAcks counts, from a watch of ns's Leases until the test ends, the acknowledgements as the API server
// sees them: Lease writes that change the acknowledged generation of a Lease already seen (a Lease's
// creation, which acknowledges nothing, is not one). Renewals write the Lease too, on their own schedule,
// and are not counted.
func countAcks(t testing.TB, ns string) *atomic.Int64 {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	w, err := newClientset(t).CoordinationV1().Leases(ns).Watch(ctx, metav1.ListOptions{})
	must(t, err)
	t.Cleanup(w.Stop)
	var n atomic.Int64
	go func() {
		acked := map[string]string{}
		for ev := range w.ResultChan() {
			l, ok := ev.Object.(*coordinationv1.Lease)
			if !ok {
				continue
			}
			if a := l.Annotations[protocol.AckedGenerationAnnotation]; a != acked[l.Name] {
				if _, seen := acked[l.Name]; seen {
					n.Add(1)
				}
				acked[l.Name] = a
			}
		}
	}()
	return &n
}
