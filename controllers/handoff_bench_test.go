//go:build envtest

package controllers

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/consumergroup-operator/consumergroup-operator/internal/testenv"
	"github.com/consumergroup-operator/consumergroup-operator/pkg/protocol"
)

// BenchmarkCooperativeJoin measures, on a real API server, a member joining a Cooperative group of 10
// members that run the member package: the time from its pod becoming Ready to its first queue delivered
// to its application, and the handoff inside it, from the generation that revokes the queues it is to get
// from their owners to the generation that grants them, after the owners acknowledged.
//
//	go test ./controllers -run '^$' -bench CooperativeJoin -benchtime 200x
func BenchmarkCooperativeJoin(b *testing.B) {
	const members, queues = 10, 64
	ns := fmt.Sprintf("bench-join-%d", time.Now().UnixNano())
	must(b, k8s.Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}))
	counter := &testenv.WriteCounter{}
	cfg := rest.CopyConfig(restConfig)
	counter.Wrap(cfg)
	stop := startManagerAs(b, ns, cfg)
	defer stop()
	cs := newClientset(b)
	own := testenv.NewOwnership()
	cooperativeGroup(ns, "j", queues, 30).Create(b, k8s)
	for i := range members {
		startSimMember(b, "j", testenv.Pod(ns, fmt.Sprintf("j-%d", i), "j").OnNode("n").Create(b, k8s), own)
	}

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	w, err := cs.CoreV1().ConfigMaps(ns).Watch(ctx, metav1.ListOptions{FieldSelector: fields.OneTermEqualSelector("metadata.name", protocol.AssignmentName("j")).String()})
	must(b, err)
	defer w.Stop()
	type sighting struct {
		listed, granted time.Time
	}
	// watchJoin reports when pod's key first appears and when it first lists a queue.
	watchJoin := func(pod string) <-chan sighting {
		out := make(chan sighting, 1)
		go func() {
			var s sighting
			for ev := range w.ResultChan() {
				if ev.Type != watch.Added && ev.Type != watch.Modified {
					continue
				}
				value, ok := ev.Object.(*corev1.ConfigMap).Data[pod]
				if !ok {
					continue
				}
				now := time.Now()
				if s.listed.IsZero() {
					s.listed = now
				}
				if e, _, err := protocol.DecodeEntry([]byte(value)); err == nil && len(e.Queues) > 0 {
					s.granted = now
					out <- s
					return
				}
			}
		}()
		return out
	}

	acks := countAcks(b, ns)

	var firstQueue, handoffs []time.Duration
	var joinAcks, joinWrites int64
	for i := 0; b.Loop(); i++ {
		b.StopTimer()
		name := fmt.Sprintf("j-new-%d", i)
		seen := watchJoin(name)
		p := testenv.Pod(ns, name, "j").OnNode("n").NotReady().Create(b, k8s)
		m := startSimMember(b, "j", p, own)
		time.Sleep(200 * time.Millisecond)
		acksBefore, writesBefore := acks.Load(), counter.Writes()
		b.StartTimer()

		start := time.Now()
		testenv.SetReady(b, k8s, p, true)
		for len(m.Client.Current().Queues) == 0 {
			time.Sleep(time.Millisecond)
		}
		firstQueue = append(firstQueue, time.Since(start))
		s := <-seen
		handoffs = append(handoffs, s.granted.Sub(s.listed))

		b.StopTimer()
		// Let the last acknowledgements of the join land before counting.
		time.Sleep(200 * time.Millisecond)
		joinAcks += acks.Load() - acksBefore
		joinWrites += counter.Writes() - writesBefore
		// Leave again, drained, so that every iteration joins a group of the same size.
		must(b, k8s.Delete(context.Background(), p))
		dctx, dcancel := context.WithTimeout(context.Background(), 30*time.Second)
		err := m.Client.Drain(dctx)
		dcancel()
		must(b, err)
		m.Stop()
		must(b, client.IgnoreNotFound(k8s.Delete(context.Background(), p, client.GracePeriodSeconds(0))))
		// Wait for the group to settle at 10 members, and for the watch goroutine of this iteration to end.
		for getGroup(b, ns, "j").Status.MemberCount != members {
			time.Sleep(10 * time.Millisecond)
		}
		b.StartTimer()
	}
	b.StopTimer()
	if len(own.Violations()) > 0 {
		b.Fatalf("queues had two readers at once: %v", own.Violations())
	}
	slices.Sort(firstQueue)
	slices.Sort(handoffs)
	b.ReportMetric(ms64(percentile(firstQueue, 50)), "ready-to-queue-p50-ms")
	b.ReportMetric(ms64(percentile(firstQueue, 99)), "ready-to-queue-p99-ms")
	b.ReportMetric(ms64(percentile(handoffs, 50)), "handoff-p50-ms")
	b.ReportMetric(ms64(percentile(handoffs, 99)), "handoff-p99-ms")
	b.ReportMetric(float64(joinAcks)/float64(len(firstQueue)), "member-acks/join")
	b.ReportMetric(float64(joinWrites)/float64(len(firstQueue)), "operator-writes/join")
}

func ms64(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
