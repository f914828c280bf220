package cluster

import (
	"context"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"
)

// Process is a pod's consumer process, the one thing kwok does not run.
type Process interface {
	// Drain is its preStop hook: it returns once the process has handed its work off, or ctx ends (the
	// end of the pod's grace period).
	Drain(ctx context.Context) error
	// Stop ends the process.
	Stop()
}

// Spawn starts the process of a pod kwok reports running.
type Spawn func(pod *corev1.Pod) (Process, error)

// Consumers runs a Process for every running pod in a namespace that a label selector selects, as the
// pods' containers would: it starts one when kwok reports the pod Running, and when the pod is being
// deleted it calls Drain, bounded by the pod's deletion deadline (when the kubelet would kill the
// container), then Stop. A pod object that vanishes before its process has finished draining does not
// stop the process early: the process, not the object, decides when it is done, as on a real node where
// a pod object can be force-deleted under a running container.
type Consumers struct {
	spawn Spawn
	ctx   context.Context
	wg    sync.WaitGroup

	mu      sync.Mutex
	running map[types.UID]*running
}

type running struct {
	process  Process
	draining bool
}

// RunConsumers watches the pods of namespace that selector (a label selector string) selects and runs their
// processes until ctx ends; then it stops them all. Wait returns once they have stopped.
func RunConsumers(ctx context.Context, cs kubernetes.Interface, namespace, selector string, spawn Spawn) *Consumers {
	c := &Consumers{spawn: spawn, ctx: ctx, running: map[types.UID]*running{}}
	factory := informers.NewSharedInformerFactoryWithOptions(cs, 0, informers.WithNamespace(namespace),
		informers.WithTweakListOptions(func(o *metav1.ListOptions) { o.LabelSelector = selector }))
	inf := factory.Core().V1().Pods().Informer()
	_, _ = inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { c.observe(obj) },
		UpdateFunc: func(_, obj any) { c.observe(obj) },
		DeleteFunc: func(obj any) {
			if tomb, ok := obj.(cache.DeletedFinalStateUnknown); ok {
				obj = tomb.Obj
			}
			if pod, ok := obj.(*corev1.Pod); ok {
				c.drain(pod)
			}
		},
	})
	c.wg.Go(func() {
		factory.Start(ctx.Done())
		<-ctx.Done()
		factory.Shutdown()
		c.mu.Lock()
		for uid, r := range c.running {
			if !r.draining {
				r.process.Stop()
				delete(c.running, uid)
			}
		}
		c.mu.Unlock()
	})
	return c
}

// Wait returns once every process has stopped, after ctx ended.
func (c *Consumers) Wait() { c.wg.Wait() }

// Running counts the processes running now, draining or not.
func (c *Consumers) Running() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.running)
}

func (c *Consumers) observe(obj any) {
	pod, ok := obj.(*corev1.Pod)
	if !ok {
		return
	}
	if pod.DeletionTimestamp != nil {
		c.drain(pod)
		return
	}
	if pod.Status.Phase != corev1.PodRunning || !containersRunning(pod) {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.running[pod.UID]; ok || c.ctx.Err() != nil {
		return
	}
	p, err := c.spawn(pod.DeepCopy())
	if err != nil {
		klog.ErrorS(err, "Failed to start a pod's consumer", "pod", klog.KObj(pod))
		return
	}
	c.running[pod.UID] = &running{process: p}
}

// drain runs the pod's preStop hook, then stops its process, once.
func (c *Consumers) drain(pod *corev1.Pod) {
	c.mu.Lock()
	r, ok := c.running[pod.UID]
	if !ok || r.draining {
		c.mu.Unlock()
		return
	}
	r.draining = true
	c.mu.Unlock()
	deadline := time.Now()
	if pod.DeletionTimestamp != nil {
		deadline = pod.DeletionTimestamp.Time
	}
	c.wg.Go(func() {
		// The end of the run ends the drain too.
		ctx, cancel := context.WithDeadline(c.ctx, deadline)
		defer cancel()
		if err := r.process.Drain(ctx); err != nil {
			klog.InfoS("The pod's consumer did not finish draining before its grace period ended", "pod", klog.KObj(pod), "err", err)
		}
		r.process.Stop()
		c.mu.Lock()
		delete(c.running, pod.UID)
		c.mu.Unlock()
	})
}

// containersRunning tells whether every container of pod is reported running.
func containersRunning(pod *corev1.Pod) bool {
	if len(pod.Status.ContainerStatuses) < len(pod.Spec.Containers) {
		return false
	}
	for _, s := range pod.Status.ContainerStatuses {
		if s.State.Running == nil {
			return false
		}
	}
	return true
}
