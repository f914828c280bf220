package nodeagent

import (
	"cmp"
	"errors"
	"fmt"
	"math"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/clock"
)

// Defaults of Config's optional fields.
const (
	DefaultMinReadInterval  = time.Second
	DefaultReadTimeout      = 5 * time.Second
	DefaultTokenCacheTTL    = 10 * time.Minute
	DefaultMaxIdentities    = 4096
	DefaultMaxWaiting       = 4096
	DefaultReviewsPerSecond = 10
	DefaultReviewBurst      = 256
	// MinHeartbeat is the shortest heartbeat: its Lease holds whole seconds, and is renewed every quarter
	// of them.
	MinHeartbeat = 4 * time.Second
	// maxHeartbeat is the longest duration a Lease holds, in int32 seconds.
	maxHeartbeat = math.MaxInt32 * time.Second
)

// Config says which node an agent serves and how it reads.
type Config struct {
	// Node is the node the agent runs on: it reads that node's view, and serves only pods on it.
	Node string
	// Namespace is the namespace of the node views: the operator's.
	Namespace string
	// Client reads the node view and reviews tokens.
	Client kubernetes.Interface
	// Clock is the agent's clock; the real one when nil.
	Clock clock.Clock
	// MinReadInterval is the shortest time between two reads of the node view: the cost of the agent to
	// the API server, and up to how long a request waits; DefaultMinReadInterval when zero.
	MinReadInterval time.Duration
	// ReadTimeout bounds one read of the node view; DefaultReadTimeout when zero. The requests it answers
	// wait for it, so a hung read answers them "not confirmed" once it ends rather than never.
	ReadTimeout time.Duration
	// TokenCacheTTL is how long a token, once reviewed, is trusted without another review (never past its
	// expiry); DefaultTokenCacheTTL when zero.
	TokenCacheTTL time.Duration
	// MaxIdentities bounds the reviewed tokens kept (the oldest go first); DefaultMaxIdentities when zero.
	MaxIdentities int
	// MaxWaiting bounds the requests waiting for a read; one more is refused with 503.
	// DefaultMaxWaiting when zero.
	MaxWaiting int
	// ReviewsPerSecond and ReviewBurst bound the TokenReviews the agent sends for tokens it has not
	// accepted before: a pod on the node that sends junk tokens makes the API server review at most that
	// many, and the rest are refused with 503. DefaultReviewsPerSecond and DefaultReviewBurst when zero:
	// the burst covers every member of a full node starting at once.
	ReviewsPerSecond float32
	ReviewBurst      int
	// Heartbeat is the duration of the agent's heartbeat Lease (protocol.NodeAgentHeartbeatName(Node), in
	// Namespace), rounded to whole seconds, which the agent renews every quarter of it: at least
	// MinHeartbeat. Zero or negative: no heartbeat. consumergroup-agent node sets
	// protocol.DefaultNodeAgentHeartbeat unless told otherwise; the zero value is off so that a program
	// that runs agents in its own process (hack/scale, tests) writes no Leases it did not ask for.
	Heartbeat time.Duration
	// Pod is the agent's pod name: the holder of its heartbeat Lease. Required with a heartbeat.
	Pod string
}

func (c Config) withDefaults() Config {
	if c.Clock == nil {
		c.Clock = clock.RealClock{}
	}
	c.MinReadInterval = cmp.Or(c.MinReadInterval, DefaultMinReadInterval)
	c.ReadTimeout = cmp.Or(c.ReadTimeout, DefaultReadTimeout)
	c.TokenCacheTTL = cmp.Or(c.TokenCacheTTL, DefaultTokenCacheTTL)
	c.MaxIdentities = cmp.Or(c.MaxIdentities, DefaultMaxIdentities)
	c.MaxWaiting = cmp.Or(c.MaxWaiting, DefaultMaxWaiting)
	c.ReviewsPerSecond = cmp.Or(c.ReviewsPerSecond, DefaultReviewsPerSecond)
	c.ReviewBurst = cmp.Or(c.ReviewBurst, DefaultReviewBurst)
	return c
}

// validate names every missing or malformed field at once.
func (c Config) validate() error {
	var errs []error
	if c.Node == "" {
		errs = append(errs, errors.New("the node name is required"))
	}
	if c.Namespace == "" {
		errs = append(errs, errors.New("the namespace of the node views is required"))
	}
	if c.Client == nil {
		errs = append(errs, errors.New("a Kubernetes client is required"))
	}
	for _, d := range []struct {
		name  string
		value time.Duration
	}{{"minimum read interval", c.MinReadInterval}, {"read timeout", c.ReadTimeout}, {"token cache TTL", c.TokenCacheTTL}} {
		if d.value < 0 {
			errs = append(errs, fmt.Errorf("the %s %v must not be negative", d.name, d.value))
		}
	}
	if c.MaxIdentities < 0 || c.MaxWaiting < 0 {
		errs = append(errs, fmt.Errorf("the bounds (%d identities, %d waiting requests) must not be negative", c.MaxIdentities, c.MaxWaiting))
	}
	// A negative rate or burst would make the token bucket refuse every review, and every member with it.
	if c.ReviewsPerSecond < 0 || c.ReviewBurst < 0 {
		errs = append(errs, fmt.Errorf("the review rate %v a second and burst %d must not be negative", c.ReviewsPerSecond, c.ReviewBurst))
	}
	return errors.Join(append(errs, c.validateHeartbeat()...)...)
}

// validateHeartbeat names what is wrong with the heartbeat's fields, when it is on.
func (c Config) validateHeartbeat() []error {
	if c.Heartbeat <= 0 {
		return nil
	}
	var errs []error
	switch {
	case c.Heartbeat < MinHeartbeat:
		errs = append(errs, fmt.Errorf("the heartbeat %v must be at least %v: its Lease holds whole seconds, and is renewed every quarter of them", c.Heartbeat, MinHeartbeat))
	case c.Heartbeat > maxHeartbeat:
		errs = append(errs, fmt.Errorf("the heartbeat %v must be at most %d seconds, what a Lease holds", c.Heartbeat, math.MaxInt32))
	}
	if c.Pod == "" {
		errs = append(errs, errors.New("the agent's pod name, the holder of its heartbeat Lease, is required with a heartbeat"))
	}
	return errs
}
