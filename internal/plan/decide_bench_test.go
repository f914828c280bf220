package plan

import (
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/consumergroup-operator/consumergroup-operator/api/v1alpha1"
	"github.com/consumergroup-operator/consumergroup-operator/internal/fixture"
	"github.com/consumergroup-operator/consumergroup-operator/pkg/protocol"
)

// BenchmarkDecideSteadyLargeGroup is one pass over a large group that finds the world as published: 65,536
// queues (16 brokers × 4,096) over 2,048 members with Sticky, every member claiming its entry. It reads the
// published assignment back (digests, entries) and decides, as a pass after any event does.
//
//	go test ./controllers -run '^$' -bench DecideSteadyLargeGroup -benchtime 10x -benchmem
func BenchmarkDecideSteadyLargeGroup(b *testing.B) {
	group := fixture.Group(v1alpha1.Strategy{Type: v1alpha1.Sticky}, 4096)
	for i := 1; i < 16; i++ {
		group.Spec.Topics[0].Brokers = append(group.Spec.Topics[0].Brokers, v1alpha1.Broker{Name: fmt.Sprintf("b%d", i), Queues: 4096})
	}
	var pods []corev1.Pod
	for i := range 2048 {
		pods = append(pods, fixture.Pod(fmt.Sprintf("consumer-%04d", i)))
	}
	obs := world(pods)
	e := env(group, fixture.T0)
	d := Decide(group, obs, e)
	obs = applied(group, obs, d)
	var leases []protocol.LeaseState
	for _, p := range pods {
		leases = append(leases, fixture.Lease(p.Name, d.Report.Generation, obs.Published.Entries[p.Name].Queues, fixture.T0))
	}
	obs.Leases = leases
	b.ResetTimer()
	for b.Loop() {
		obs.SetPublished(protocol.ReadPublished("g", obs.Index, obs.Shards))
		d := Decide(group, obs, Env{Now: fixture.T0.Add(time.Second), MaxSkew: time.Second, Topology: TopologyOf(group, nil), Strategy: e.Strategy})
		if len(d.Write.ConfigMaps) != 0 {
			b.Fatal("steady state wrote")
		}
	}
}
