package plan

import (
	"encoding/json"
	"flag"
	"fmt"
	"hash/fnv"
	"maps"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/consumergroup-operator/consumergroup-operator/api/v1alpha1"
	"github.com/consumergroup-operator/consumergroup-operator/internal/fixture"
	"github.com/consumergroup-operator/consumergroup-operator/pkg/allocate"
	"github.com/consumergroup-operator/consumergroup-operator/pkg/protocol"
)

// updateDecide rewrites testdata/decide.golden from the current code. Do so only when a change of what a
// pass decides is intended, and say why in the commit.
var updateDecide = flag.Bool("update-decide", false, "rewrite testdata/decide.golden from the current code")

const (
	decideGoldenPath = "testdata/decide.golden"
	// decideGoldenChains random chains of decideGoldenPasses passes each: every pass decides on what the
	// last one published, after the pods, their Leases and the clock changed at random.
	decideGoldenChains = 1000
	decideGoldenPasses = 4
)

// TestDecideUnchanged pins what decide does for decideGoldenChains × decideGoldenPasses random passes:
// each line of testdata/decide.golden digests one pass's whole output, every ConfigMap it writes, every
// shard and Lease it deletes, the status its report gives and when it looks again. A change that means
// to move code without changing a decision (the plan as values) must leave every line as it is.
func TestDecideUnchanged(t *testing.T) {
	var got []string
	for c := range decideGoldenChains {
		for p, digest := range decideChain(rand.New(rand.NewPCG(uint64(c), 0x64656369))) {
			got = append(got, fmt.Sprintf("%d.%d %016x", c, p, digest))
		}
	}
	checkPinned(t, decideGoldenPath, got, *updateDecide, "decide", "-update-decide")
}

// TestDecideChainsAreDeterministic: the same chain decides the same twice, so that the pins can fail only
// when the code changes.
func TestDecideChainsAreDeterministic(t *testing.T) {
	for c := range 50 {
		a := decideChain(rand.New(rand.NewPCG(uint64(c), 0x64656369)))
		b := decideChain(rand.New(rand.NewPCG(uint64(c), 0x64656369)))
		if !slices.Equal(a, b) {
			t.Fatalf("chain %d decided %x, then %x", c, a, b)
		}
	}
}

// decideChain plays decideGoldenPasses passes of a random group and returns the digest of each.
func decideChain(rng *rand.Rand) []uint64 {
	strategies := []v1alpha1.StrategyType{v1alpha1.Averagely, v1alpha1.AveragelyByCircle, v1alpha1.ConsistentHash, v1alpha1.Sticky}
	group := fixture.Group(v1alpha1.Strategy{Type: strategies[rng.IntN(len(strategies))]}, int32(1+rng.IntN(12)))
	if rng.IntN(4) == 0 {
		group.Spec.Handoff.Mode = v1alpha1.Immediate
	}
	now := fixture.T0
	pods := map[string]corev1.Pod{}
	leases := map[string]protocol.LeaseState{}
	var obs *Observation
	var digests []uint64
	for range decideGoldenPasses {
		randomWorldChange(rng, pods, leases, obs, now)
		var podList []corev1.Pod
		for _, name := range slices.Sorted(maps.Keys(pods)) {
			podList = append(podList, pods[name])
		}
		var leaseList []protocol.LeaseState
		for _, name := range slices.Sorted(maps.Keys(leases)) {
			leaseList = append(leaseList, leases[name])
		}
		next := world(podList, leaseList...)
		next.NodeZones = map[string]string{"n0": "zone-a", "n1": "zone-b"}
		if obs != nil {
			next.Index, next.Shards = obs.Index, obs.Shards
			next.SetPublished(protocol.ReadPublished(group.Name, obs.Index, obs.Shards))
		}
		d := Decide(group, next, env(group, now))
		digests = append(digests, decisionDigest(group, d, now))
		obs = applied(group, next, d)
		group.Status = StatusFor(group, &d.Report, metav1.NewTime(now))
		now = now.Add(time.Duration(rng.IntN(40)) * time.Second)
	}
	return digests
}

// randomWorldChange adds, removes and changes pods and their Leases at random: members acknowledge what
// the last pass published for them (or an older generation), claim it or not, renew or go silent.
func randomWorldChange(rng *rand.Rand, pods map[string]corev1.Pod, leases map[string]protocol.LeaseState, obs *Observation, now time.Time) {
	for i := range 5 {
		name := fmt.Sprintf("p%d", i)
		switch r := rng.IntN(10); {
		case r < 5:
			if _, ok := pods[name]; !ok {
				var mods []func(*corev1.Pod)
				mods = append(mods, fixture.OnNode(fmt.Sprintf("n%d", rng.IntN(2))))
				if rng.IntN(4) == 0 {
					mods = append(mods, fixture.WithAnnotation(v1alpha1.WeightAnnotation, fmt.Sprint(1+rng.IntN(3))))
				}
				pods[name] = fixture.Pod(name, mods...)
			}
		case r < 6:
			delete(pods, name)
		case r < 7:
			if p, ok := pods[name]; ok {
				fixture.NotReady(&p)
				pods[name] = p
			}
		}
		if _, ok := pods[name]; !ok || rng.IntN(4) == 0 {
			continue // no renewal this time
		}
		var acked int64
		var claim []allocate.Queue
		if obs != nil && obs.Published.Exists {
			if e, ok := obs.Published.Entries[name]; ok && rng.IntN(3) > 0 {
				acked, claim = obs.Published.Generation, e.Queues
			} else if old, ok := leases[name]; ok {
				acked, claim = old.AckedGeneration, old.Claim
			}
		}
		leases[name] = fixture.Lease(name, acked, claim, now.Add(-time.Duration(rng.IntN(20))*time.Second))
	}
}

// decisionDigest digests a pass's whole output: the ConfigMaps it writes, in order, the shards and
// Leases it deletes, the status its report gives at now, and when it looks again.
func decisionDigest(group *v1alpha1.ConsumerGroup, d *Decision, now time.Time) uint64 {
	h := fnv.New64a()
	for _, part := range d.Write.ConfigMaps {
		raw, _ := json.Marshal(part)
		_, _ = fmt.Fprintf(h, "write %s\n", raw)
	}
	for _, cm := range d.Write.DeleteShards {
		_, _ = fmt.Fprintf(h, "delete shard %s\n", cm.Name)
	}
	for _, l := range d.Write.DeleteLeases {
		_, _ = fmt.Fprintf(h, "delete lease %s\n", l.Name)
	}
	status, _ := json.Marshal(StatusFor(group, &d.Report, metav1.NewTime(now)))
	// The members' deadline was part of RequeueAfter before it had a field of its own: folded back in,
	// the digests pin that moving it changed nothing a pass decides.
	requeue := d.RequeueAfter
	if !d.MemberDeadline.IsZero() {
		requeue = soonerRequeue(requeue, now, d.MemberDeadline)
	}
	_, _ = fmt.Fprintf(h, "status %s\nrequeue %v\n", status, requeue)
	return h.Sum64()
}
