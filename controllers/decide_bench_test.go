package controllers

import (
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/consumergroup-operator/consumergroup-operator/api/v1alpha1"
	"github.com/consumergroup-operator/consumergroup-operator/pkg/protocol"
)

// BenchmarkDecideSteadyLargeGroup is one pass over a large group that finds the world as published: 65,536
// queues (16 brokers × 4,096) over 2,048 members with Sticky, every member claiming its entry. It reads the
// published assignment back (digests, entries) and decides, as a pass after any event does.
//
//	go test ./controllers -run '^$' -bench DecideSteadyLargeGroup -benchtime 10x -benchmem
func BenchmarkDecideSteadyLargeGroup(b *testing.B) {
	group := testGroup(v1alpha1.Strategy{Type: v1alpha1.Sticky}, 4096)
	for i := 1; i < 16; i++ {
		group.Spec.Topics[0].Brokers = append(group.Spec.Topics[0].Brokers, v1alpha1.Broker{Name: fmt.Sprintf("b%d", i), Queues: 4096})
	}
	var pods []corev1.Pod
	for i := range 2048 {
		pods = append(pods, pod(fmt.Sprintf("consumer-%04d", i)))
	}
	obs := world(pods)
	e := env(group, t0)
	d := decide(group, obs, e)
	obs = applied(group, obs, d)
	var leases []protocol.LeaseState
	for _, p := range pods {
		leases = append(leases, lease(p.Name, d.report.generation, obs.published.Entries[p.Name].Queues, t0))
	}
	obs.leases = leases
	b.ResetTimer()
	for b.Loop() {
		obs.setPublished(protocol.ReadPublished("g", obs.index, obs.shards))
		d := decide(group, obs, decideEnv{now: t0.Add(time.Second), maxSkew: time.Second, topology: topologyOf(group, nil), strategy: e.strategy})
		if len(d.write.configMaps) != 0 {
			b.Fatal("steady state wrote")
		}
	}
}
