package controllers

import (
	"context"
	"errors"
	"sync/atomic"

	corev1 "k8s.io/api/core/v1"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/consumergroup-operator/consumergroup-operator/internal/observe"
)

// podSource is the reconciler's one watch of pods. Its one handler on the manager's pod informer first
// keeps the store the passes read pods from (observe.CachedPods), then queues the groups the pod belongs
// to: a pass that a pod's change queued reads that change. (A store kept by a second handler on the same
// informer may be updated after the first has queued the pass, and that pass would plan with the pod's
// old state, with nothing to queue another.) The store holds the informer's own objects, the
// observe.CachedPods its transform made (CacheByObject), which the manager's client cannot read as pods.
type podSource struct {
	cache cache.Cache
	store observe.CachedPods
	// groupsFor maps a pod to the groups whose selector matches it.
	groupsFor func(context.Context, client.Object) []reconcile.Request
	// registration is the handler's, once Start has added it; until it has synced, the store refuses
	// reads (a pass that saw only some pods would take the others' queues away).
	registration atomic.Pointer[toolscache.ResourceEventHandlerRegistration]
}

// newPodSource is a source that keeps store from c's pod informer and maps each pod to groupsFor.
func newPodSource(c cache.Cache, groupsFor func(context.Context, client.Object) []reconcile.Request) *podSource {
	s := &podSource{cache: c, groupsFor: groupsFor}
	s.store = observe.NewCachedPods()
	s.store.Synced = s.synced
	return s
}

// synced is whether the store holds the informer's first list.
func (s *podSource) synced() bool {
	reg := s.registration.Load()
	return reg != nil && (*reg).HasSynced()
}

// Start adds the handler to the manager's pod informer.
func (s *podSource) Start(ctx context.Context, q workqueue.TypedRateLimitingInterface[reconcile.Request]) error {
	inf, err := s.cache.GetInformer(ctx, &corev1.Pod{})
	if err != nil {
		return err
	}
	enqueue := func(obj any) {
		if o, ok := obj.(client.Object); ok {
			for _, req := range s.groupsFor(ctx, o) {
				q.Add(req)
			}
		}
	}
	keep := s.store.Handler()
	reg, err := inf.AddEventHandler(toolscache.ResourceEventHandlerDetailedFuncs{
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

// WaitForSync waits for the store to hold the informer's first list: the controller starts no pass
// before.
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
