// Package member is the pod side of a ConsumerGroup: it tells the application in a member pod which
// queues to consume, and tells the operator which assignment the application has applied.
//
// A Client watches the group's assignment ConfigMap through the API server (a mounted ConfigMap volume
// lags by a minute or more), keeps the member's Lease alive, writes the generation the application
// acknowledges into that Lease, and waits for the operator to take the pod's queues away when the pod is
// shutting down. The protocol, the RBAC a pod needs and how clients in other languages follow it are in
// docs/protocol.md.
//
// Typical use:
//
//	cfg, err := member.ConfigFromEnv()
//	c, err := member.New(clientset, cfg)
//	go c.Run(ctx)
//	for a := range c.Updates() {
//		consume(a.Queues)                 // start and stop consumers to match
//		c.Ack(ctx, a.Generation)
//	}
//
// A preStop hook calls Drain, which returns once the operator has released the pod's queues.
package member

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"
)

// ErrUnknownGeneration is returned by Ack for a generation the pod has not seen published.
var ErrUnknownGeneration = errors.New("generation not published")

// Client is one member pod's view of its group's assignment, and its voice to the operator.
// Its methods are safe for concurrent use; Run must be running for anything to be delivered.
type Client struct {
	cs            kubernetes.Interface
	cfg           Config
	leaseName     string
	configMapName string
	renewEvery    time.Duration

	running atomic.Bool
	// updates holds the newest undelivered assignment: a slow reader skips to the latest.
	updates chan Assignment
	// autoAck wakes the loop that acknowledges delivered assignments when Config.AutoAck is set.
	autoAck chan struct{}
	// leaseKick makes the Lease loop write now rather than at its next tick.
	leaseKick chan struct{}

	// writeMu serialises writes to the Lease, so that the acknowledged generation it holds only grows
	// (except for the reset described at ackedToWriteLocked).
	writeMu sync.Mutex

	mu sync.Mutex
	// synced is set once the informer has listed the ConfigMap.
	synced bool
	pub    published
	// leaseAdopted is set once this process has created the Lease or taken it over.
	leaseAdopted bool
	// freshUntil is when the last successful renewal stops covering the member: after it, the operator
	// may count the member as gone, so it holds nothing.
	freshUntil time.Time
	renewedAt  time.Time
	leaseErr   error
	fenceTimer *time.Timer
	acked      int64
	inForce    Assignment
	reason     string
	// suspects maps a watched ConfigMap whose resourceVersion differed from the API server's at the
	// last check to the resourceVersion this client had then.
	suspects map[string]string
	// runCtx is Run's context, for the shard informers started while it runs.
	runCtx context.Context
	// index is the assignment ConfigMap as last seen; nil when it does not exist.
	index *corev1.ConfigMap
	// shard is the shard ConfigMap holding the pod's entry, when the assignment is sharded.
	shard          shardWatch
	shardFactories []informers.SharedInformerFactory
	// changed is closed and replaced whenever the view, the assignment in force or the ack changes.
	changed chan struct{}
}

// New returns a Client for the member cfg describes. It checks cfg and talks to nothing until Run.
func New(cs kubernetes.Interface, cfg Config) (*Client, error) {
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, fmt.Errorf("member configuration: %w", err)
	}
	return &Client{
		cs:            cs,
		cfg:           cfg,
		leaseName:     LeaseName(cfg.Group, cfg.Pod),
		configMapName: AssignmentConfigMapName(cfg.Group),
		renewEvery:    cfg.LeaseDuration / 3,
		updates:       make(chan Assignment, 1),
		autoAck:       make(chan struct{}, 1),
		leaseKick:     make(chan struct{}, 1),
		changed:       make(chan struct{}),
		suspects:      map[string]string{},
		reason:        "the assignment has not been read yet",
	}, nil
}

// Config is the client's configuration, with defaults filled in.
func (c *Client) Config() Config { return c.cfg }

// LeaseName is the name of the member's Lease.
func (c *Client) LeaseName() string { return c.leaseName }

// Run watches the assignment and keeps the Lease until ctx ends, then returns nil. A Client runs once: a
// second call returns an error at once. Failed API calls are logged and retried; while the Lease cannot be renewed,
// the member holds no queues.
func (c *Client) Run(ctx context.Context) error {
	if !c.running.CompareAndSwap(false, true) {
		return errors.New("member client is already running")
	}
	logger := klog.FromContext(ctx).WithValues("group", c.cfg.Group, "pod", c.cfg.Pod)
	ctx = klog.NewContext(ctx, logger)

	c.mu.Lock()
	c.runCtx = ctx
	c.mu.Unlock()
	factory, informer, err := c.watchConfigMap(ctx, c.configMapName, c.setIndex)
	if err != nil {
		return err
	}
	factory.Start(ctx.Done())

	var wg sync.WaitGroup
	wg.Go(func() {
		if cache.WaitForCacheSync(ctx.Done(), informer.HasSynced) {
			c.mu.Lock()
			c.synced = true
			c.evaluateLocked()
			c.mu.Unlock()
			logger.V(1).Info("Read assignment ConfigMap", "configMap", c.configMapName)
		}
	})
	wg.Go(func() { c.leaseLoop(ctx) })
	if c.cfg.AutoAck {
		wg.Go(func() { c.autoAckLoop(ctx) })
	}
	<-ctx.Done()
	factory.Shutdown()
	wg.Wait()
	c.mu.Lock()
	if c.fenceTimer != nil {
		c.fenceTimer.Stop()
	}
	shardFactories := c.shardFactories
	c.mu.Unlock()
	for _, f := range shardFactories {
		f.Shutdown()
	}
	return nil
}

// watchConfigMap starts an informer on the one ConfigMap called name, calling set with each new state of
// it (nil once deleted). The field selector on the name lets the pod's Role grant list and watch on it by
// resourceNames.
func (c *Client) watchConfigMap(ctx context.Context, name string, set func(*corev1.ConfigMap)) (informers.SharedInformerFactory, cache.SharedIndexInformer, error) {
	factory := informers.NewSharedInformerFactoryWithOptions(c.cs, 0,
		informers.WithNamespace(c.cfg.Namespace),
		informers.WithTweakListOptions(func(o *metav1.ListOptions) {
			o.FieldSelector = fields.OneTermEqualSelector("metadata.name", name).String()
		}))
	informer := factory.Core().V1().ConfigMaps().Informer()
	onObject := func(obj any) {
		if cm, ok := obj.(*corev1.ConfigMap); ok {
			set(cm)
		}
	}
	if _, err := informer.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    onObject,
		UpdateFunc: func(_, obj any) { onObject(obj) },
		DeleteFunc: func(any) { set(nil) },
	}); err != nil {
		return nil, nil, fmt.Errorf("watching ConfigMap %s: %w", name, err)
	}
	factory.Start(ctx.Done())
	return factory, informer, nil
}

// setIndex takes a new state of the assignment ConfigMap, and follows it to the shard that holds the
// pod's entry when the assignment is sharded.
func (c *Client) setIndex(cm *corev1.ConfigMap) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.index = cm
	c.followShardLocked()
	c.resolveLocked()
}

// setShard takes a new state of the shard ConfigMap called name.
func (c *Client) setShard(name string, cm *corev1.ConfigMap) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.shard.name != name {
		return // an event from a shard no longer followed
	}
	c.shard.cm = cm
	c.resolveLocked()
}

// resolveLocked recomputes the pod's published entry from the ConfigMaps seen, and what is in force.
func (c *Client) resolveLocked() {
	p, ok := resolve(c.index, c.shard, c.cfg.Pod)
	if !ok {
		return
	}
	c.pub = p
	if p.exists && p.generation < c.acked {
		// The group was deleted and created again: its generations start over, and the acknowledged
		// generation in the Lease must not claim generations this application never saw.
		c.kickLease()
	}
	c.evaluateLocked()
}

// evaluateLocked recomputes the assignment in force and delivers it if it changed.
func (c *Client) evaluateLocked() {
	var a Assignment
	switch {
	case !c.synced:
		c.reason = fmt.Sprintf("ConfigMap %s has not been read yet", c.configMapName)
	case !c.pub.exists:
		c.reason = fmt.Sprintf("ConfigMap %s does not exist: the group has published no assignment", c.configMapName)
	case c.pub.err != nil:
		c.reason = c.pub.err.Error()
	case !c.leaseAdopted:
		c.reason = fmt.Sprintf("Lease %s has not been written yet", c.leaseName)
	case !time.Now().Before(c.freshUntil):
		c.reason = fmt.Sprintf("Lease %s has not been renewed for %v, so the operator may have handed the queues on", c.leaseName, c.cfg.LeaseDuration)
	default:
		c.reason = ""
		a = Assignment{Generation: c.pub.generation, Member: c.pub.member, Queues: c.pub.queues}
		if a.Member == "" {
			a.Member = c.cfg.MemberID
		}
	}
	if a.equal(c.inForce) {
		return
	}
	c.inForce = a
	c.notifyLocked()
	// One producer, under c.mu: after emptying the buffer the send cannot block.
	select {
	case <-c.updates:
	default:
	}
	c.updates <- a
	if c.cfg.AutoAck && a.Generation > c.acked {
		select {
		case c.autoAck <- struct{}{}:
		default:
		}
	}
}

func (c *Client) notifyLocked() {
	close(c.changed)
	c.changed = make(chan struct{})
}

func (c *Client) kickLease() {
	select {
	case c.leaseKick <- struct{}{}:
	default:
	}
}

// Current is the assignment in force now. Its Queues are shared: do not modify them.
func (c *Client) Current() Assignment {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.inForce
}

// Updates delivers each new assignment in force. It holds only the newest one: a reader that falls
// behind skips to it. Use one reader; others should use Next.
func (c *Client) Updates() <-chan Assignment { return c.updates }

// Next waits until the assignment in force has a generation other than after, and returns it. Generations
// grow, so this is the next generation, except that generation 0 (hold nothing) is returned when the
// member loses its assignment or its Lease, and a lower one when the group was deleted and created again.
func (c *Client) Next(ctx context.Context, after int64) (Assignment, error) {
	for {
		c.mu.Lock()
		a, changed := c.inForce, c.changed
		c.mu.Unlock()
		if a.Generation != after {
			return a, nil
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return a, fmt.Errorf("waiting for an assignment after generation %d: %w", after, ctx.Err())
		}
	}
}

// Ack records that the application has applied generation: it consumes exactly the queues that generation
// lists for it. It writes the generation into the Lease, where the operator reads it. Acknowledging a
// generation at or below the last acknowledged one does nothing; one that was never published is an error
// wrapping ErrUnknownGeneration.
func (c *Client) Ack(ctx context.Context, generation int64) error {
	if generation < 0 {
		return fmt.Errorf("generation %d is negative", generation)
	}
	if generation == 0 {
		return nil
	}
	c.writeMu.Lock()
	defer c.writeMu.Unlock()
	c.mu.Lock()
	newest, acked, adopted := c.pub.generation, c.acked, c.leaseAdopted
	c.mu.Unlock()
	if generation > newest {
		return fmt.Errorf("%w: generation %d, but the newest generation this pod has seen is %d", ErrUnknownGeneration, generation, newest)
	}
	if generation <= acked && acked <= newest {
		return nil
	}
	if !adopted {
		return fmt.Errorf("the Lease %s has not been written yet; Run writes it when it starts", c.leaseName)
	}
	if err := c.patchAcked(ctx, generation); err != nil {
		return fmt.Errorf("acknowledging generation %d in Lease %s: %w", generation, c.leaseName, err)
	}
	c.mu.Lock()
	c.acked = generation
	c.notifyLocked()
	c.mu.Unlock()
	return nil
}

// Acked is the last generation acknowledged in the Lease.
func (c *Client) Acked() int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.acked
}

func (c *Client) autoAckLoop(ctx context.Context) {
	logger := klog.FromContext(ctx)
	retry := time.NewTimer(0)
	<-retry.C
	for {
		select {
		case <-ctx.Done():
			retry.Stop()
			return
		case <-c.autoAck:
		case <-retry.C:
		}
		a := c.Current()
		if a.Generation == 0 {
			continue
		}
		if err := c.Ack(ctx, a.Generation); err != nil && ctx.Err() == nil {
			logger.Error(err, "Failed to acknowledge assignment; retrying", "generation", a.Generation)
			retry.Reset(c.renewEvery)
		}
	}
}

// Drain waits until the operator has released the pod's queues: the assignment lists no queues for the
// pod (or the pod has no entry, or there is no assignment), and that generation is acknowledged. If the
// application does not acknowledge it within Config.DrainAckTimeout, Drain acknowledges it. A preStop
// hook calls Drain; the operator releases the queues of a pod once the pod is being deleted. Drain returns
// an error wrapping ctx.Err() saying what it was still waiting for when ctx ends.
func (c *Client) Drain(ctx context.Context) error {
	var releasedGen int64
	var releasedAt time.Time
	var ackErr error
	for {
		c.mu.Lock()
		synced, pub, acked, changed := c.synced, c.pub, c.acked, c.changed
		c.mu.Unlock()

		var wait <-chan time.Time
		var timer *time.Timer
		var waitingFor string
		switch {
		case !synced:
			waitingFor = fmt.Sprintf("ConfigMap %s has not been read yet", c.configMapName)
		case pub.err != nil:
			waitingFor = fmt.Sprintf("the pod's entry cannot be read: %v", pub.err)
		case len(pub.queues) > 0:
			waitingFor = fmt.Sprintf("generation %d still gives this pod %d queues", pub.generation, len(pub.queues))
		case !pub.exists || pub.generation == 0 || acked == pub.generation:
			// acked above the generation is a floor left from an earlier incarnation of the group, not an ack.
			return nil
		default:
			if releasedGen != pub.generation {
				releasedGen, releasedAt = pub.generation, time.Now()
			}
			waitingFor = fmt.Sprintf("generation %d releases this pod's queues but is not acknowledged", pub.generation)
			remaining := c.cfg.DrainAckTimeout - time.Since(releasedAt)
			if c.cfg.AutoAck || remaining <= 0 {
				if ackErr = c.Ack(ctx, pub.generation); ackErr == nil {
					continue
				}
				waitingFor += ": " + ackErr.Error()
				remaining = c.renewEvery / 4
			}
			timer = time.NewTimer(remaining)
			wait = timer.C
		}
		select {
		case <-changed:
		case <-wait:
		case <-ctx.Done():
			return fmt.Errorf("draining pod %s from group %s: %s: %w", c.cfg.Pod, c.cfg.Group, waitingFor, ctx.Err())
		}
		if timer != nil {
			timer.Stop()
		}
	}
}

// Status is a snapshot of the client's state, for health checks and diagnostics.
type Status struct {
	// Synced is set once the assignment ConfigMap has been read.
	Synced bool
	// PublishedGeneration is the newest generation seen in the ConfigMap.
	PublishedGeneration int64
	// AckedGeneration is the last generation acknowledged in the Lease.
	AckedGeneration int64
	// InForce is the assignment in force.
	InForce Assignment
	// Reason says why no assignment is in force; "" when one is.
	Reason string
	// LeaseRenewedAt is when the Lease was last renewed; zero when never.
	LeaseRenewedAt time.Time
	// LeaseError is the last failure to renew the Lease; nil after a success.
	LeaseError error
}

// Status returns a snapshot of the client's state.
func (c *Client) Status() Status {
	c.mu.Lock()
	defer c.mu.Unlock()
	return Status{
		Synced:              c.synced,
		PublishedGeneration: c.pub.generation,
		AckedGeneration:     c.acked,
		InForce:             c.inForce,
		Reason:              c.reason,
		LeaseRenewedAt:      c.renewedAt,
		LeaseError:          c.leaseErr,
	}
}
