//go:build envtest

package controllers

import (
	"context"
	"maps"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/workqueue"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/consumergroup-operator/consumergroup-operator/internal/observe"
	"github.com/consumergroup-operator/consumergroup-operator/internal/testenv"
)

// TestPodSourceQueuesAfterTheStoreHasTheChange runs the pod source on the operator's own cache settings
// against the API server, watching every namespace (the store is the informer's indexer) and one
// (--namespaces: the store is the source's own): the store holds the pods there before it reports
// synced, finds them by node, and every time the source maps a pod event to its groups (and so queues a
// pass), the store already holds that event's pod, at that resourceVersion or a newer one. A store kept
// by a second handler could still hold the older pod there.
func TestPodSourceQueuesAfterTheStoreHasTheChange(t *testing.T) {
	for _, tc := range []struct {
		name         string
		oneNamespace bool
		wantOwnStore bool
	}{
		{name: "every namespace", oneNamespace: false, wantOwnStore: false},
		{name: "one namespace", oneNamespace: true, wantOwnStore: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ns := newNamespace(t)
			opts := cache.Options{Scheme: testScheme, ByObject: CacheByObject(), DefaultTransform: CacheDefaultTransform()}
			if tc.oneNamespace {
				opts.DefaultNamespaces = map[string]cache.Config{ns: {}}
			}
			checkPodSource(t, ns, opts, tc.wantOwnStore)
		})
	}
}

// checkPodSource is TestPodSourceQueuesAfterTheStoreHasTheChange for a cache of opts, in namespace ns.
func checkPodSource(t *testing.T, ns string, opts cache.Options, wantOwnStore bool) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	create := func(name string) *corev1.Pod { return testenv.Pod(ns, name, "a").OnNode("n1").Create(t, k8s) }
	before := []*corev1.Pod{create("before-0"), create("before-1"), create("before-2")}

	c, err := cache.New(restConfig, opts)
	if err != nil {
		t.Fatal(err)
	}
	var (
		mu       sync.Mutex
		mapped   int
		problems []string
		src      *podSource
		deleted  atomic.Bool
	)
	src, err = newPodSource(ctx, c, func(_ context.Context, o client.Object) []reconcile.Request {
		if o.GetNamespace() != ns {
			return nil // another test's, when every namespace is watched
		}
		mu.Lock()
		defer mu.Unlock()
		mapped++
		if _, isPod := o.(*observe.CachedPod); !isPod {
			problems = append(problems, "an event of a "+o.GetObjectKind().GroupVersionKind().Kind+", not an observe.CachedPod")
		}
		// The store itself, which refuses reads through it until its first list is in, as this may be.
		obj, held, err := src.store.Indexer.GetByKey(o.GetNamespace() + "/" + o.GetName())
		switch {
		case err != nil:
			problems = append(problems, o.GetName()+" at "+o.GetResourceVersion()+": store: "+err.Error())
		case !held && o.GetName() == "after" && deleted.Load():
			// Its deletion: gone from the store before its groups are queued.
		case !held:
			problems = append(problems, o.GetName()+" at "+o.GetResourceVersion()+": not in the store")
		case resourceVersion(obj.(*observe.CachedPod).ResourceVersion) < resourceVersion(o.GetResourceVersion()):
			problems = append(problems, o.GetName()+" at "+o.GetResourceVersion()+": the store holds "+obj.(*observe.CachedPod).ResourceVersion)
		}
		return []reconcile.Request{{NamespacedName: types.NamespacedName{Namespace: o.GetNamespace(), Name: o.GetName()}}}
	})
	if err != nil {
		t.Fatal(err)
	}
	if src.feedStore != wantOwnStore {
		t.Fatalf("the source keeps a store of its own: %t, want %t", src.feedStore, wantOwnStore)
	}
	go func() { _ = c.Start(ctx) }()
	q := workqueue.NewTypedRateLimitingQueue(workqueue.DefaultTypedControllerRateLimiter[reconcile.Request]())
	defer q.ShutDown()
	if err := src.WaitForSync(ctx); err != errPodSourceNotStarted {
		t.Fatalf("WaitForSync before Start = %v, want errPodSourceNotStarted", err)
	}
	if err := src.Start(ctx, q); err != nil {
		t.Fatal(err)
	}
	syncCtx, syncCancel := context.WithTimeout(ctx, 30*time.Second)
	defer syncCancel()
	if err := src.WaitForSync(syncCtx); err != nil {
		t.Fatal(err)
	}
	if held, err := src.store.ListPods(ctx, ns, labels.Everything()); err != nil || len(held) != len(before) {
		t.Fatalf("once synced, the store holds %d pods (%v), want the %d created before", len(held), err, len(before))
	}
	onNode, err := src.store.LabelsOnNode("n1")
	if err != nil || !slices.ContainsFunc(onNode, func(l observe.PodLabels) bool { return l.Namespace == ns }) {
		t.Fatalf("the store's pods on n1 are %v (%v), want those of %s among them", onNode, err, ns)
	}

	// Changes in quick succession, each to be seen by the pass it queues.
	const updates = 30
	added := create("after")
	want := map[string]string{}
	for i := 1; i <= updates; i++ {
		pod := before[i%len(before)]
		pod.Labels["v"] = strconv.Itoa(i)
		if err := k8s.Update(ctx, pod); err != nil {
			t.Fatal(err)
		}
		want[pod.Name] = pod.Labels["v"]
	}
	deleted.Store(true)
	if err := k8s.Delete(ctx, added, client.GracePeriodSeconds(0)); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		held, err := src.store.ListPods(ctx, ns, labels.Everything())
		got := map[string]string{}
		for _, p := range held {
			got[p.Name] = p.Labels["v"]
		}
		if err == nil && maps.Equal(got, want) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the store did not reach the API server's pods: %d pods, %v", len(held), err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	mu.Lock()
	defer mu.Unlock()
	// Each update maps the old and the new pod; the pods listed first and the one created and deleted map
	// at least once each.
	if min := len(before) + 2*updates + 2; mapped < min {
		t.Errorf("mapped %d pod events to groups, want at least %d", mapped, min)
	}
	for _, p := range problems {
		t.Error(p)
	}
	if q.Len() == 0 {
		t.Error("nothing was queued")
	}
}

// resourceVersion is rv as a number: the API server's resourceVersions are etcd revisions, so a newer
// object has a larger one.
func resourceVersion(rv string) int64 {
	n, _ := strconv.ParseInt(rv, 10, 64)
	return n
}
