package controllers

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"

	corev1 "k8s.io/api/core/v1"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/consumergroup-operator/consumergroup-operator/internal/observe"
)

// podSource is the reconciler's one watch of pods, and the store the passes read them from
// (observe.CachedPods): the observe.CachedPods the pod informer's transform made (CacheByObject), which
// the manager's client cannot read as pods.
//
// Watching every namespace, the store is the informer's own indexer, with observe.PodIndexers added. The
// informer updates its indexer before it hands an event to its handlers, so the pass this source's
// handler queues for a pod's change reads that change, or a newer one. Limited to some namespaces
// (--namespaces), the cache has an informer for each and no one indexer to read: the store is then one
// of the source's own, which its handler feeds before it queues the groups. (A store kept by a second
// handler might be fed after the first had queued the pass, which would plan with the pod's old state,
// with nothing to queue another.) A store of its own holds a second copy of every pod's key and index
// entries: at 20,000 pods about 0.3 KB a pod of the operator's memory.
type podSource struct {
	informer cache.Informer
	store    observe.CachedPods
	// feedStore is set when the store is the source's own, for its handler to keep.
	feedStore bool
	// groupsFor maps a pod to the groups whose selector matches it.
	groupsFor func(context.Context, client.Object) []reconcile.Request
	// registration is the handler's, once Start has added it; until it has synced, the store refuses
	// reads (a pass that saw only some pods would take the others' queues away).
	registration atomic.Pointer[toolscache.ResourceEventHandlerRegistration]
}

// newPodSource is a source that maps each event of c's pod informer to groupsFor, with its store (the
// informer's indexer where there is one). c need not have started: the informer is made, and the node
// index added to it, now.
func newPodSource(ctx context.Context, c cache.Cache, groupsFor func(context.Context, client.Object) []reconcile.Request) (*podSource, error) {
	inf, err := c.GetInformer(ctx, &corev1.Pod{}, cache.BlockUntilSynced(false))
	if err != nil {
		return nil, err
	}
	s := &podSource{informer: inf, groupsFor: groupsFor}
	if shared, ok := inf.(toolscache.SharedIndexInformer); ok {
		if err := inf.AddIndexers(observe.PodIndexers()); err != nil {
			return nil, fmt.Errorf("indexing pods by node: %w", err)
		}
		s.store = observe.CachedPods{Indexer: shared.GetIndexer()}
	} else {
		s.store, s.feedStore = observe.NewCachedPods(), true
	}
	s.store.Synced = s.synced
	return s, nil
}

// synced is whether the store holds the informer's first list.
func (s *podSource) synced() bool {
	reg := s.registration.Load()
	return reg != nil && (*reg).HasSynced()
}

// Start adds the handler to the manager's pod informer.
func (s *podSource) Start(ctx context.Context, q workqueue.TypedRateLimitingInterface[reconcile.Request]) error {
	enqueue := func(obj any) {
		if o, ok := obj.(client.Object); ok {
			for _, req := range s.groupsFor(ctx, o) {
				q.Add(req)
			}
		}
	}
	keep := toolscache.ResourceEventHandler(toolscache.ResourceEventHandlerFuncs{})
	if s.feedStore {
		keep = s.store.Handler()
	}
	reg, err := s.informer.AddEventHandler(toolscache.ResourceEventHandlerDetailedFuncs{
		AddFunc: func(obj any, initial bool) {
			keep.OnAdd(obj, initial)
			enqueue(obj)
		},
		UpdateFunc: func(old, obj any) {
			keep.OnUpdate(old, obj)
			// A pod whose labels no longer match still reaches its old group.
			enqueue(old)
			enqueue(obj)
		},
		DeleteFunc: func(obj any) {
			keep.OnDelete(obj)
			if tombstone, ok := obj.(toolscache.DeletedFinalStateUnknown); ok {
				obj = tombstone.Obj
			}
			enqueue(obj)
		},
	})
	if err != nil {
		return err
	}
	s.registration.Store(&reg)
	return nil
}

// errPodSourceNotStarted is WaitForSync's answer when it is called before Start.
var errPodSourceNotStarted = errors.New("the pod source was not started")

// WaitForSync waits for the handler to have had the informer's first list, which the store then holds:
// the controller starts no pass before.
func (s *podSource) WaitForSync(ctx context.Context) error {
	reg := s.registration.Load()
	if reg == nil {
		return errPodSourceNotStarted
	}
	if !toolscache.WaitForCacheSync(ctx.Done(), (*reg).HasSynced) {
		return ctx.Err()
	}
	return nil
}
