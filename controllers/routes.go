package controllers

import (
	"context"
	"fmt"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"

	"github.com/consumergroup-operator/consumergroup-operator/api/v1alpha1"
	"github.com/consumergroup-operator/consumergroup-operator/pkg/nameserver"
)

// Discovered topics. A group with spec.nameServer has the routes of its topics that list no brokers (and
// of its retry topic) read from the name servers, outside its passes: a pass starts a read when one is
// due and never waits for it; the read, bounded by routeReadBudget, hands its answers to the group's next
// pass, which records the routes in status.routes before it plans with them. The status is where the
// routes last read survive a restart of the operator: while no name server answers, they stay in force.

// EventRoutesChanged reports a change of the discovered queues.
const EventRoutesChanged = "RoutesChanged"

// defaultRefreshInterval is spec.nameServer.refreshIntervalSeconds' default, RocketMQ clients'
// pollNameServerInterval.
const defaultRefreshInterval = 30 * time.Second

// absentIntervals is how many refresh intervals the name servers must keep answering that a topic does
// not exist before its queues are dropped.
const absentIntervals = 3

// routeReadBudget bounds one read of a group's routes, every name server and topic included.
const routeReadBudget = 30 * time.Second

// +kubebuilder:rbac:groups="",resources=secrets,verbs=get

// discoveredTopics are the names of the topics whose routes group reads from its name servers: the
// topics of its spec that list no brokers and, unless spec.nameServer.retryTopic is Ignore or the group
// broadcasts, its retry topic. None without spec.nameServer.
func discoveredTopics(group *v1alpha1.ConsumerGroup) []string {
	ns := group.Spec.NameServer
	if ns == nil {
		return nil
	}
	var out []string
	listed := map[string]bool{}
	for _, t := range group.Spec.Topics {
		listed[t.Name] = true
		if len(t.Brokers) == 0 {
			out = append(out, t.Name)
		}
	}
	if retry := group.RetryTopic(); retry != "" && !listed[retry] {
		out = append(out, retry)
	}
	return out
}

// nameServerAddrs are the addresses the operator dials for group, in the order it tries them.
func nameServerAddrs(group *v1alpha1.ConsumerGroup) []string {
	ns := group.Spec.NameServer
	switch {
	case ns == nil:
		return nil
	case ns.Service != nil:
		port := ns.Service.Port
		if port == 0 {
			port = 9876
		}
		return []string{net.JoinHostPort(ns.Service.Name+"."+group.Namespace+".svc", strconv.Itoa(int(port)))}
	}
	return ns.Addresses
}

func refreshInterval(group *v1alpha1.ConsumerGroup) time.Duration {
	if ns := group.Spec.NameServer; ns != nil && ns.RefreshIntervalSeconds != nil && *ns.RefreshIntervalSeconds > 0 {
		return time.Duration(*ns.RefreshIntervalSeconds) * time.Second
	}
	return defaultRefreshInterval
}

// brokerZone is a discovered broker's zone: from spec.nameServer.brokerZones, else <room> of a name
// <room>@<broker>, else none.
func brokerZone(ns *v1alpha1.NameServer, broker string) string {
	for _, z := range ns.BrokerZones {
		if z.Broker == broker {
			return z.Zone
		}
	}
	if room, _, ok := strings.Cut(broker, "@"); ok && len(room) <= 63 {
		return room
	}
	return ""
}

// plannedGroup is group as a pass plans it: its spec's topics, with the brokers and readable queues of
// the discovered ones filled in from routes. Everything else is group's. A group without
// spec.nameServer is returned as it is.
func plannedGroup(group *v1alpha1.ConsumerGroup, routes *v1alpha1.RoutesStatus) *v1alpha1.ConsumerGroup {
	names := discoveredTopics(group)
	if len(names) == 0 {
		return group
	}
	byName := map[string]*v1alpha1.TopicRoute{}
	if routes != nil {
		for i := range routes.Topics {
			byName[routes.Topics[i].Name] = &routes.Topics[i]
		}
	}
	planned := group.DeepCopy()
	planned.Spec.Topics = slices.DeleteFunc(planned.Spec.Topics, func(t v1alpha1.Topic) bool { return len(t.Brokers) == 0 })
	for _, name := range names {
		t := v1alpha1.Topic{Name: name}
		if r := byName[name]; r != nil {
			for _, b := range r.Brokers {
				t.Brokers = append(t.Brokers, v1alpha1.Broker{Name: b.Name, Queues: b.Queues, Zone: brokerZone(group.Spec.NameServer, b.Name)})
			}
		}
		planned.Spec.Topics = append(planned.Spec.Topics, t)
	}
	return planned
}

// PlannedTopics are the topics the operator plans group with: its spec's, the discovered ones with the
// routes of its status.
func PlannedTopics(group *v1alpha1.ConsumerGroup) []v1alpha1.Topic {
	return plannedGroup(group, group.Status.Routes).Spec.Topics
}

// routeRead is what one read of a group's routes found.
type routeRead struct {
	generation int64
	at         time.Time
	answers    map[string]nameserver.Answer
	answeredBy string
	errs       []*nameserver.Error
}

// routeState is what the operator keeps in memory of a group's reads.
type routeState struct {
	inFlight     bool
	attempted    time.Time
	attemptedGen int64
	pending      *routeRead
}

// routeBook runs the reads of the routes of every group with spec.nameServer, one at a time per group.
type routeBook struct {
	mu     sync.Mutex
	groups map[types.NamespacedName]*routeState
	// events wakes a group's pass when its read finished.
	events chan event.GenericEvent
	// read reads a group's routes (readRoutes).
	read func(ctx context.Context, group *v1alpha1.ConsumerGroup) *routeRead
	// ctx ends the reads when the operator stops.
	ctx context.Context
}

// init readies the book to run reads with read until ctx ends.
func (b *routeBook) init(ctx context.Context, read func(ctx context.Context, group *v1alpha1.ConsumerGroup) *routeRead) {
	b.ctx, b.read = ctx, read
	b.events = make(chan event.GenericEvent, 64)
}

// routePass is what a pass knows of its group's routes.
type routePass struct {
	// pending is a read not yet recorded in the status.
	pending *routeRead
	// requeueAfter is when the next read is due, 0 for a group without spec.nameServer.
	requeueAfter time.Duration
}

// pass starts a read of group's routes when one is due, and returns the finished read the pass must
// record. It never waits for a read.
func (b *routeBook) pass(group *v1alpha1.ConsumerGroup, now time.Time) routePass {
	key := client.ObjectKeyFromObject(group)
	b.mu.Lock()
	defer b.mu.Unlock()
	if group.Spec.NameServer == nil {
		delete(b.groups, key)
		return routePass{}
	}
	if b.groups == nil {
		b.groups = map[types.NamespacedName]*routeState{}
	}
	s := b.groups[key]
	if s == nil {
		s = &routeState{}
		b.groups[key] = s
	}
	interval := refreshInterval(group)
	due := s.attempted.Add(interval)
	if !s.inFlight && (s.attemptedGen != group.Generation || !now.Before(due)) {
		s.inFlight, s.attempted, s.attemptedGen = true, now, group.Generation
		due = now.Add(interval)
		go b.run(key, group.DeepCopy())
	}
	return routePass{pending: s.pending, requeueAfter: max(due.Sub(now), time.Millisecond)}
}

func (b *routeBook) run(key types.NamespacedName, group *v1alpha1.ConsumerGroup) {
	ctx, cancel := context.WithTimeout(b.ctx, routeReadBudget)
	defer cancel()
	read := b.read(ctx, group)
	read.generation = group.Generation
	b.mu.Lock()
	if s := b.groups[key]; s != nil {
		s.inFlight, s.pending = false, read
	}
	b.mu.Unlock()
	ev := event.GenericEvent{Object: &v1alpha1.ConsumerGroup{ObjectMeta: metav1.ObjectMeta{Namespace: key.Namespace, Name: key.Name}}}
	select {
	case b.events <- ev:
	case <-b.ctx.Done():
	}
}

// recorded drops read once the status holds it.
func (b *routeBook) recorded(key types.NamespacedName, read *routeRead) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if s := b.groups[key]; s != nil && s.pending == read {
		s.pending = nil
	}
}

func (b *routeBook) forget(key types.NamespacedName) {
	b.mu.Lock()
	defer b.mu.Unlock()
	delete(b.groups, key)
	forgetRouteMetrics(key)
}

// readRoutes reads group's discovered topics from its name servers, with its credentials if it names
// any. A Secret that cannot be read fails the read: unsigned requests would only be refused.
func (r *ConsumerGroupReconciler) readRoutes(ctx context.Context, group *v1alpha1.ConsumerGroup) *routeRead {
	read := &routeRead{at: r.Clock.Now()}
	addrs := nameServerAddrs(group)
	c := &nameserver.Client{Dial: r.NameServerDial, Timeout: r.NameServerTimeout}
	if name := group.Spec.NameServer.CredentialsSecret; name != "" {
		creds, err := r.credentials(ctx, group.Namespace, name)
		if err != nil {
			read.errs = []*nameserver.Error{{Addr: strings.Join(addrs, ","), Reason: v1alpha1.ReasonCredentialsUnreadable, Err: err}}
			return read
		}
		c.Credentials = creds
	}
	read.answers, read.answeredBy, read.errs = c.Routes(ctx, addrs, discoveredTopics(group))
	read.at = r.Clock.Now()
	return read
}

// credentials reads the Secret name: accessKey, secretKey and, optionally, securityToken. It is read
// from the API server, not cached: the operator watches no Secret.
func (r *ConsumerGroupReconciler) credentials(ctx context.Context, namespace, name string) (*nameserver.Credentials, error) {
	var s corev1.Secret
	if err := r.APIReader.Get(ctx, types.NamespacedName{Namespace: namespace, Name: name}, &s); err != nil {
		return nil, fmt.Errorf("reading Secret %s for spec.nameServer.credentialsSecret: %w", name, err)
	}
	ak, sk := string(s.Data["accessKey"]), string(s.Data["secretKey"])
	if ak == "" || sk == "" {
		return nil, fmt.Errorf("secret %s (spec.nameServer.credentialsSecret) lacks accessKey or secretKey", name)
	}
	return &nameserver.Credentials{AccessKey: ak, SecretKey: sk, SecurityToken: string(s.Data["securityToken"])}, nil
}
