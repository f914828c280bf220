package testenv

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/kubernetes"
	coordinationv1client "k8s.io/client-go/kubernetes/typed/coordination/v1"
	corev1client "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/util/flowcontrol"

	"github.com/consumergroup-operator/consumergroup-operator/pkg/allocate"
	"github.com/consumergroup-operator/consumergroup-operator/pkg/member"
	"github.com/consumergroup-operator/consumergroup-operator/pkg/protocol"
)

// Ownership records which member pod incarnations read which queue, from the members' own records: each
// reports the queues it reads whenever its application applies an assignment. It keeps every instant at
// which a queue had two readers.
type Ownership struct {
	mu      sync.Mutex
	holders map[allocate.Queue]map[string]bool
	// reads is holders by reader: what each reads now, so that an application touches its own queues only,
	// not every queue of the run.
	reads map[string]map[allocate.Queue]bool
	// since is when each queue last lost its last reader; absent while it has one.
	since      map[allocate.Queue]time.Time
	violations []string
	// longestGap is the longest time a queue went without a reader; longest says which queue, when and
	// between which readers.
	longestGap time.Duration
	longest    Gap
	// lastReader is who last stopped reading each queue that has no reader now.
	lastReader map[allocate.Queue]string
	holdings   int
	observers  []func(reader string, queues []allocate.Queue)
	// gaps are every time a queue went unread between two readers, in the order they ended.
	gaps []Gap
}

// Observe calls observe with every application of an assignment recorded from now on, in order, under the
// record's lock: a test checks where queues went at each instant, not only at the end.
func (o *Ownership) Observe(observe func(reader string, queues []allocate.Queue)) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.observers = append(o.observers, observe)
}

// NewOwnership is an empty record.
func NewOwnership() *Ownership {
	return &Ownership{holders: map[allocate.Queue]map[string]bool{}, reads: map[string]map[allocate.Queue]bool{},
		since: map[allocate.Queue]time.Time{}, lastReader: map[allocate.Queue]string{}}
}

// Apply records that reader (a pod incarnation) now reads exactly queues.
func (o *Ownership) Apply(reader string, queues []allocate.Queue) {
	o.mu.Lock()
	defer o.mu.Unlock()
	for _, observe := range o.observers {
		observe(reader, queues)
	}
	now := time.Now()
	want := map[allocate.Queue]bool{}
	for _, q := range queues {
		want[q] = true
	}
	for q := range o.reads[reader] {
		if hs := o.holders[q]; !want[q] {
			delete(hs, reader)
			if len(hs) == 0 {
				o.since[q] = now
				o.lastReader[q] = reader
			}
		}
	}
	if len(want) == 0 {
		delete(o.reads, reader)
	} else {
		o.reads[reader] = want
	}
	for q := range want {
		hs := o.holders[q]
		if hs == nil {
			hs = map[string]bool{}
			o.holders[q] = hs
		}
		if hs[reader] {
			continue
		}
		o.holdings++
		for other := range hs {
			o.violations = append(o.violations, fmt.Sprintf("%s: %s started reading while %s still read it (%s)", q, reader, other, now.Format("15:04:05.000")))
		}
		if t, ok := o.since[q]; ok {
			g := Gap{Queue: q, From: t, To: now, Released: o.lastReader[q], Took: reader}
			o.gaps = append(o.gaps, g)
			if gap := now.Sub(t); gap > o.longestGap {
				o.longestGap = gap
				o.longest = g
			}
			delete(o.since, q)
			delete(o.lastReader, q)
		}
		hs[reader] = true
	}
}

// Reading lists the queues reader reads now, in the order of entries and claims (protocol.CompareCanonical),
// so that two readings compare as sets and protocol's set operations take them as they are.
func (o *Ownership) Reading(reader string) []allocate.Queue {
	o.mu.Lock()
	defer o.mu.Unlock()
	// The reader's own record, not a look at every queue's holders: hack/scale asks this of each of
	// 20,000 members, and 32,000 queues each took it minutes under the lock the members' applications
	// wait on.
	out := slices.Collect(maps.Keys(o.reads[reader]))
	slices.SortFunc(out, protocol.CompareCanonical)
	return out
}

// ReadingByPod counts the queues the incarnations of pod read now.
func (o *Ownership) ReadingByPod(pod string) int {
	o.mu.Lock()
	defer o.mu.Unlock()
	n := 0
	for _, hs := range o.holders {
		for reader := range hs {
			if strings.HasPrefix(reader, pod+"/") {
				n++
			}
		}
	}
	return n
}

// ReadQueues counts the queues that have a reader now.
func (o *Ownership) ReadQueues() int {
	o.mu.Lock()
	defer o.mu.Unlock()
	n := 0
	for _, hs := range o.holders {
		if len(hs) > 0 {
			n++
		}
	}
	return n
}

// Readers is how many incarnations read q now.
func (o *Ownership) Readers(q allocate.Queue) int {
	o.mu.Lock()
	defer o.mu.Unlock()
	return len(o.holders[q])
}

// Violations are the instants at which a queue had two readers.
func (o *Ownership) Violations() []string {
	o.mu.Lock()
	defer o.mu.Unlock()
	return append([]string(nil), o.violations...)
}

// LongestGap is the longest a queue went unread between two readers; Holdings counts the times an
// incarnation started reading a queue.
func (o *Ownership) LongestGap() time.Duration {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.longestGap
}

// Gap is a time a queue went unread: from when Released stopped reading it to when Took started.
type Gap struct {
	Queue          allocate.Queue
	From, To       time.Time
	Released, Took string
}

// Length is how long the queue went unread.
func (g Gap) Length() time.Duration { return g.To.Sub(g.From) }

func (g Gap) String() string {
	return fmt.Sprintf("%s unread for %s, from %s (%s let go) to %s (%s took it)", g.Queue, g.Length(),
		g.From.Format("15:04:05.000"), g.Released, g.To.Format("15:04:05.000"), g.Took)
}

// Longest is the longest gap so far: the queue, the instants and the readers.
func (o *Ownership) Longest() Gap {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.longest
}

// Gaps are every time a queue went unread between two readers so far, in the order they ended.
func (o *Ownership) Gaps() []Gap {
	o.mu.Lock()
	defer o.mu.Unlock()
	return slices.Clone(o.gaps)
}

// Holdings counts the times an incarnation started reading a queue.
func (o *Ownership) Holdings() int {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.holdings
}

// MemberOptions tune a simulated member.
type MemberOptions struct {
	LeaseDuration, MaxClockSkew, DrainAckTimeout time.Duration
	// ContactTimeout and StopTimeout are member.Config's: the member's defaults when zero.
	ContactTimeout, StopTimeout time.Duration
	// NodeAgent, NodeAgentToken, NodeAgentClient and NodeAgentCall are member.Config's: node mode when
	// NodeAgent is set.
	NodeAgent       string
	NodeAgentToken  func() (string, error)
	NodeAgentClient *http.Client
	NodeAgentCall   func(context.Context, string, protocol.NodeAgentConfirmRequest) (int, protocol.NodeAgentConfirmResponse, error)
}

// SimMember is a member pod's application: it runs pkg/member, reads what it is given, records it in an
// Ownership, and acknowledges it, unless told to stop acknowledging. Its connection to the API server can
// be cut, as a partition would.
type SimMember struct {
	Pod    *corev1.Pod
	Client *member.Client
	// Acking is cleared to make the application stop acknowledging: it keeps reading what it had.
	Acking atomic.Bool
	// LastSeen is the last generation delivered.
	LastSeen atomic.Int64
	// ApplyDelay is how long the application takes to apply an assignment, reading what it had meanwhile.
	ApplyDelay atomic.Int64

	partitioned atomic.Bool
	cancel      context.CancelFunc
	done        chan struct{}
	own         *Ownership
	reader      string
}

// StartMember runs a member of group for pod, with the credentials of cfg, until the test ends or Stop.
func StartMember(t testing.TB, cfg *rest.Config, group string, pod *corev1.Pod, own *Ownership, opts MemberOptions) *SimMember {
	t.Helper()
	m, err := RunMember(cfg, group, pod, own, opts)
	Must(t, err)
	// Every member ends with its test; stopping one that already stopped does nothing.
	t.Cleanup(m.Stop)
	return m
}

// RunMember runs a member of group for pod, with the credentials of cfg, until Stop: StartMember for a
// program that is not a test (hack/scale).
func RunMember(cfg *rest.Config, group string, pod *corev1.Pod, own *Ownership, opts MemberOptions) (*SimMember, error) {
	m := &SimMember{Pod: pod, done: make(chan struct{}), own: own, reader: pod.Name + "/" + string(pod.UID)}
	cfg = rest.CopyConfig(cfg)
	cfg.DisableCompression = true // as the member sidecar asks (cmd/consumergroup-agent)
	cfg.Wrap(func(rt http.RoundTripper) http.RoundTripper { return Partitionable(rt, &m.partitioned) })
	cs, err := memberClientsetFor(cfg)
	if err != nil {
		return nil, err
	}
	c, err := member.New(cs, member.Config{
		Namespace: pod.Namespace, Group: group, Pod: pod.Name, PodUID: pod.UID,
		LeaseDuration: opts.LeaseDuration, MaxClockSkew: opts.MaxClockSkew, DrainAckTimeout: opts.DrainAckTimeout,
		ContactTimeout: opts.ContactTimeout, StopTimeout: opts.StopTimeout,
		NodeAgent: opts.NodeAgent, NodeAgentToken: opts.NodeAgentToken, NodeAgentClient: opts.NodeAgentClient, NodeAgentCall: opts.NodeAgentCall,
	})
	if err != nil {
		return nil, err
	}
	m.Client = c
	ctx, cancel := context.WithCancel(context.Background())
	m.cancel = cancel
	m.Acking.Store(true)
	go func() { _ = c.Run(ctx) }()
	go func() {
		defer close(m.done)
		for {
			select {
			case <-ctx.Done():
				return
			case a := <-c.Updates():
				m.LastSeen.Store(a.Generation)
				if !m.Acking.Load() {
					// An application that stopped acknowledging keeps reading what it had.
					continue
				}
				if d := time.Duration(m.ApplyDelay.Load()); d > 0 {
					select {
					case <-ctx.Done():
						return
					case <-time.After(d):
					}
				}
				own.Apply(m.reader, a.Queues)
				if a.Generation > 0 {
					_ = c.Ack(ctx, a.Generation)
				}
			}
		}
	}()
	return m, nil
}

// memberClientset is a clientset of the two API groups a member calls, core and coordination (ConfigMaps
// and Leases): kubernetes.NewForConfig builds a REST client for each of some fifty groups, 17 KB a member,
// which hack/scale's 20,000 members in one process paid 340 MB of live heap for. A call of any other group
// panics on the nil Interface, which a test would show at once.
type memberClientset struct {
	kubernetes.Interface
	core         corev1client.CoreV1Interface
	coordination coordinationv1client.CoordinationV1Interface
}

func (c memberClientset) CoreV1() corev1client.CoreV1Interface { return c.core }
func (c memberClientset) CoordinationV1() coordinationv1client.CoordinationV1Interface {
	return c.coordination
}

// memberClientsetFor is a memberClientset with cfg's credentials, both groups over one HTTP client and,
// as kubernetes.NewForConfig shares it, one rate limiter when cfg sets a rate.
func memberClientsetFor(cfg *rest.Config) (kubernetes.Interface, error) {
	cfg = rest.CopyConfig(cfg)
	if cfg.RateLimiter == nil && cfg.QPS > 0 {
		if cfg.Burst <= 0 {
			return nil, errors.New("burst is required to be greater than 0 when RateLimiter is not set and QPS is set to greater than 0")
		}
		cfg.RateLimiter = flowcontrol.NewTokenBucketRateLimiter(cfg.QPS, cfg.Burst)
	}
	httpClient, err := rest.HTTPClientFor(cfg)
	if err != nil {
		return nil, err
	}
	core, err := corev1client.NewForConfigAndClient(cfg, httpClient)
	if err != nil {
		return nil, err
	}
	coordination, err := coordinationv1client.NewForConfigAndClient(cfg, httpClient)
	if err != nil {
		return nil, err
	}
	return memberClientset{core: core, coordination: coordination}, nil
}

// Reader is the member's name in the Ownership: its pod's name and UID.
func (m *SimMember) Reader() string { return m.reader }

// Stop ends the member's process: it reads nothing from then on. Calling it again does nothing more.
func (m *SimMember) Stop() {
	m.cancel()
	<-m.done
	m.own.Apply(m.reader, nil)
}

// Partition cuts (or restores) the member's connection to the API server: requests fail and open watches
// stop delivering. The member goes on reading what it was given until its Lease runs out.
func (m *SimMember) Partition(cut bool) { m.partitioned.Store(cut) }

// Partitionable is next, failing requests, and the reads of responses already open, while cut is set: a
// client cut off from the API server, as a partition would.
func Partitionable(next http.RoundTripper, cut *atomic.Bool) http.RoundTripper {
	return partitionable{next: next, cut: cut}
}

// partitionable fails requests, and the reads of responses already open, while cut is set.
type partitionable struct {
	next http.RoundTripper
	cut  *atomic.Bool
}

var errPartitioned = errors.New("connection refused (partitioned by the test)")

func (p partitionable) RoundTrip(req *http.Request) (*http.Response, error) {
	if p.cut.Load() {
		return nil, errPartitioned
	}
	resp, err := p.next.RoundTrip(req)
	if err != nil {
		return resp, err
	}
	resp.Body = partitionedBody{ReadCloser: resp.Body, cut: p.cut}
	return resp, nil
}

type partitionedBody struct {
	io.ReadCloser
	cut *atomic.Bool
}

func (b partitionedBody) Read(p []byte) (int, error) {
	if b.cut.Load() {
		return 0, errPartitioned
	}
	n, err := b.ReadCloser.Read(p)
	if b.cut.Load() {
		// What arrived after the cut is lost with it.
		return 0, errPartitioned
	}
	return n, err
}

// AwaitEachReading waits, up to within, until each of members reads n queues by own's record, and fails
// the test with what each reads if that does not happen.
func AwaitEachReading(t testing.TB, own *Ownership, members []*SimMember, n int, within time.Duration) {
	t.Helper()
	Poll(t, within, 50*time.Millisecond, nil, func() error {
		for _, m := range members {
			if got := len(own.Reading(m.Reader())); got != n {
				return fmt.Errorf("%s reads %d queues, want %d", m.Pod.Name, got, n)
			}
		}
		return nil
	})
}
