package member

import (
	"errors"
	"fmt"
	"os"
	"time"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/utils/clock"

	"github.com/consumergroup-operator/consumergroup-operator/pkg/protocol"
)

// Environment variables ConfigFromEnv reads. The pod sets the first three from the downward API.
const (
	EnvPodName       = "POD_NAME"
	EnvPodNamespace  = "POD_NAMESPACE"
	EnvPodUID        = "POD_UID"
	EnvConsumerGroup = "CONSUMER_GROUP"
	EnvMemberID      = "MEMBER_ID"
)

// DefaultDrainAckTimeout is how long Drain waits for the application to acknowledge the release of its
// queues before acknowledging it itself.
const DefaultDrainAckTimeout = 5 * time.Second

// Config says which member of which group a Client speaks for.
type Config struct {
	// Namespace is the namespace of the pod and of its ConsumerGroup.
	Namespace string
	// Group is the ConsumerGroup's name.
	Group string
	// Pod is the pod's name: its key in the assignment ConfigMap.
	Pod string
	// PodUID is the pod's UID: entries and claims belong to one pod incarnation, not to a name.
	PodUID types.UID
	// MemberID is the member id written as the Lease's holder; the pod name when empty. It should be the
	// id the group's spec.memberIdentity gives the pod.
	MemberID string
	// LeaseDuration is the Lease's duration, in whole seconds; protocol.DefaultLeaseDuration when zero.
	// The member renews every third of it and holds no queues once it has not renewed for all of it.
	LeaseDuration time.Duration
	// MaxClockSkew is how far this pod's clock may differ from others'; protocol.DefaultMaxClockSkew when
	// zero. A new pod under the name of one that may still run waits this much past the old pod's Lease.
	MaxClockSkew time.Duration
	// AutoAck acknowledges each assignment as soon as it is delivered, for applications that apply an
	// assignment before they read the next one.
	AutoAck bool
	// DrainAckTimeout is how long Drain waits for the application to acknowledge the release of its
	// queues before acknowledging it itself; DefaultDrainAckTimeout when zero.
	DrainAckTimeout time.Duration
	// ContactTimeout is how long the member lets its application read without confirming that its view
	// of the assignment is current (contact fencing, protocol.ContactInterval); protocol.
	// DefaultContactTimeout when zero; negative turns contact fencing off, and the member then stops only
	// when its Lease runs out. StopTimeout is how long the application takes, at most, to stop reading a
	// queue once handed an assignment without it; protocol.DefaultStopTimeout when zero. The member
	// promises the operator, in its Lease, to read no queue later than their sum after an assignment
	// without it is published: the operator can then hand a partitioned or hung member's queues on that
	// long after it revoked them, instead of waiting for its Lease to run out.
	ContactTimeout, StopTimeout time.Duration
	// Clock is the client's clock; the real one when nil. Tests set a fake one.
	Clock clock.WithTickerAndDelayedExecution
}

// ConfigFromEnv reads a Config from POD_NAME, POD_NAMESPACE, POD_UID, CONSUMER_GROUP and MEMBER_ID
// (optional; the pod name by default). The caller may then set the durations and AutoAck.
func ConfigFromEnv() (Config, error) {
	cfg := Config{
		Namespace: os.Getenv(EnvPodNamespace),
		Group:     os.Getenv(EnvConsumerGroup),
		Pod:       os.Getenv(EnvPodName),
		PodUID:    types.UID(os.Getenv(EnvPodUID)),
		MemberID:  os.Getenv(EnvMemberID),
	}
	return cfg, cfg.withDefaults().validate()
}

func (c Config) withDefaults() Config {
	if c.MemberID == "" {
		c.MemberID = c.Pod
	}
	if c.LeaseDuration == 0 {
		c.LeaseDuration = protocol.DefaultLeaseDuration
	}
	if c.MaxClockSkew == 0 {
		c.MaxClockSkew = protocol.DefaultMaxClockSkew
	}
	if c.DrainAckTimeout == 0 {
		c.DrainAckTimeout = DefaultDrainAckTimeout
	}
	if c.ContactTimeout == 0 {
		c.ContactTimeout = protocol.DefaultContactTimeout
	}
	if c.StopTimeout == 0 {
		c.StopTimeout = protocol.DefaultStopTimeout
	}
	if c.Clock == nil {
		c.Clock = clock.RealClock{}
	}
	return c
}

// validate names every missing or malformed field at once, with the environment variable that sets it.
func (c Config) validate() error {
	var errs []error
	required := []struct{ value, field, env string }{
		{c.Namespace, "Namespace", EnvPodNamespace},
		{c.Group, "Group", EnvConsumerGroup},
		{c.Pod, "Pod", EnvPodName},
		{string(c.PodUID), "PodUID", EnvPodUID},
	}
	for _, r := range required {
		if r.value == "" {
			errs = append(errs, fmt.Errorf("%s is required (environment variable %s)", r.field, r.env))
		}
	}
	if c.Group != "" {
		if msgs := validation.IsDNS1123Subdomain(c.Group); len(msgs) > 0 {
			errs = append(errs, fmt.Errorf("group %q is not a valid object name: %v", c.Group, msgs))
		}
	}
	if c.LeaseDuration < time.Second || c.LeaseDuration%time.Second != 0 || c.LeaseDuration > protocol.MaxLeaseDuration {
		errs = append(errs, fmt.Errorf("lease duration %v must be a whole number of seconds, from 1s to %v", c.LeaseDuration, protocol.MaxLeaseDuration))
	}
	if c.MaxClockSkew < 0 {
		errs = append(errs, fmt.Errorf("max clock skew %v must not be negative", c.MaxClockSkew))
	}
	if c.DrainAckTimeout < 0 {
		errs = append(errs, fmt.Errorf("drain ack timeout %v must not be negative", c.DrainAckTimeout))
	}
	if c.StopTimeout < 0 {
		errs = append(errs, fmt.Errorf("stop timeout %v must not be negative", c.StopTimeout))
	}
	if c.contactFencing() && c.ContactTimeout+c.StopTimeout > protocol.MaxStopsWithin {
		errs = append(errs, fmt.Errorf("contact timeout %v plus stop timeout %v must not exceed %v", c.ContactTimeout, c.StopTimeout, protocol.MaxStopsWithin))
	}
	if c.contactFencing() && c.ContactTimeout < 100*time.Millisecond {
		errs = append(errs, fmt.Errorf("contact timeout %v must be at least 100ms", c.ContactTimeout))
	}
	return errors.Join(errs...)
}

// contactFencing reports whether the member fences itself when it cannot confirm its view.
func (c Config) contactFencing() bool { return c.ContactTimeout > 0 }

// leaseName is the name of the member's Lease.
func (c Config) leaseName() string { return protocol.LeaseName(c.Group, c.Pod) }

// renewEvery is how often the member renews its Lease.
func (c Config) renewEvery() time.Duration { return protocol.RenewInterval(c.LeaseDuration) }

// stopsWithin is the promise the member writes in its Lease: 0 without contact fencing.
func (c Config) stopsWithin() time.Duration {
	if !c.contactFencing() {
		return 0
	}
	return c.ContactTimeout + c.StopTimeout
}
