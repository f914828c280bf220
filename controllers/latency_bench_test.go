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
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/consumergroup-operator/consumergroup-operator/api/v1alpha1"
	"github.com/consumergroup-operator/consumergroup-operator/internal/testenv"
	"github.com/consumergroup-operator/consumergroup-operator/pkg/protocol"
)

// BenchmarkReadyToAssigned measures, on a real API server with 100 member pods, the time from a pod
// becoming Ready to its queues appearing in the assignment ConfigMap, and the operator's API writes per
// rebalance. Each iteration takes one pod out of the group (NotReady), waits for the plan without it, then
// marks it Ready and times until its entry is published.
//
//	go test ./controllers -run '^$' -bench ReadyToAssigned -benchtime 200x
func BenchmarkReadyToAssigned(b *testing.B) {
	const members = 100
	ns := fmt.Sprintf("bench-ready-%d", time.Now().UnixNano())
	if err := k8s.Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
		b.Fatal(err)
	}

	counter := &testenv.WriteCounter{}
	cfg := rest.CopyConfig(restConfig)
	cfg.QPS, cfg.Burst = 1000, 2000
	counter.Wrap(cfg)
	stop := startManagerAs(b, ns, cfg)
	defer stop()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	testenv.Group(ns, "lat").Topic("t", testenv.Broker("a", 256, ""), testenv.Broker("b", 256, "")).Strategy(v1alpha1.Strategy{Type: v1alpha1.Sticky}).Create(b, k8s)
	pods := make([]*corev1.Pod, members)
	for i := range pods {
		pods[i] = testenv.Pod(ns, fmt.Sprintf("lat-%03d", i), "lat").Create(b, k8s)
	}

	clientset := kubernetes.NewForConfigOrDie(restConfig)
	w, err := clientset.CoreV1().ConfigMaps(ns).Watch(ctx, metav1.ListOptions{FieldSelector: fields.OneTermEqualSelector("metadata.name", protocol.AssignmentName("lat")).String()})
	if err != nil {
		b.Fatal(err)
	}
	defer w.Stop()
	// waitFor blocks until the published ConfigMap holds pod's key (present) or not.
	waitFor := func(pod string, present bool) {
		timeout := time.After(30 * time.Second)
		for {
			select {
			case ev := <-w.ResultChan():
				if ev.Type != watch.Added && ev.Type != watch.Modified {
					continue
				}
				cm := ev.Object.(*corev1.ConfigMap)
				if _, ok := cm.Data[pod]; ok == present && len(cm.Data) == members-btoi(!present) {
					return
				}
			case <-timeout:
				b.Fatalf("pod %s never became present=%v in the assignment", pod, present)
			}
		}
	}
	waitFor(pods[0].Name, true)

	var latencies []time.Duration
	var writes, rebalances int64
	i := 0
	for b.Loop() {
		p := pods[i%members]
		i++
		b.StopTimer()
		testenv.SetReady(b, k8s, p, false)
		waitFor(p.Name, false)
		// The status write and event of the rebalance that removed the pod must not count against the next.
		time.Sleep(100 * time.Millisecond)
		before := counter.Writes()
		b.StartTimer()

		start := time.Now()
		testenv.SetReady(b, k8s, p, true)
		waitFor(p.Name, true)
		latencies = append(latencies, time.Since(start))

		b.StopTimer()
		// Let the status write of this rebalance land before counting.
		time.Sleep(100 * time.Millisecond)
		writes += counter.Writes() - before
		rebalances++
		b.StartTimer()
	}
	slices.Sort(latencies)
	b.ReportMetric(float64(percentile(latencies, 50).Microseconds())/1000, "p50-ms")
	b.ReportMetric(float64(percentile(latencies, 99).Microseconds())/1000, "p99-ms")
	b.ReportMetric(float64(writes)/float64(rebalances), "writes/rebalance")
}

func btoi(v bool) int {
	if v {
		return 1
	}
	return 0
}

func percentile(sorted []time.Duration, p int) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	i := (len(sorted)*p + 99) / 100
	return sorted[min(max(i-1, 0), len(sorted)-1)]
}
