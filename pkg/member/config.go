package member

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"strings"
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
	// EnvNodeAgent and EnvNodeAgentTokenFile set node mode: the agent's URL (such as
	// "http://$(HOST_IP):9443") and the file of the pod's token for it (a projected service account
	// token).
	EnvNodeAgent          = "NODE_AGENT"
	EnvNodeAgentTokenFile = "NODE_AGENT_TOKEN_FILE"
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
	// LeaseDuration is the Lease's duration, in whole seconds; when zero, protocol.DefaultLeaseDuration,
	// or protocol.DefaultNodeModeLeaseDuration with a NodeAgent.
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
	// NodeAgent is the base URL of the node agent on the pod's node, such as "http://10.0.0.5:9443": the
	// member then confirms its view by asking the agent, which reads one ConfigMap a second for every
	// member on the node, instead of reading the assignment's metadata itself (node mode,
	// docs/protocol.md). Empty for per-member mode. A member whose first request cannot reach the agent
	// runs in per-member mode for the rest of its life.
	NodeAgent string
	// NodeAgentTokenFile is the file that holds the pod's token for the agent (protocol.
	// NodeAgentAudience), bound to the pod. It is read anew for every request: the kubelet rotates it.
	NodeAgentTokenFile string
	// NodeAgentToken returns the token for the agent; when nil, it reads NodeAgentTokenFile.
	NodeAgentToken func() (string, error)
	// NodeAgentClient is the HTTP client the member asks its agent with; nil for one of its own. A
	// process that runs the members of many pods on one node can give them one client, whose transport
	// speaks HTTP/2 to the agent (nodeagent.Protocols) and so holds one connection for them all.
	NodeAgentClient *http.Client
	// NodeAgentCall, when set, asks the agent with a call in this process instead of over HTTP, with the
	// pod's token, and answers with the status the agent's HTTP handler would send; NodeAgent then only
	// names the agent in logs. It is for a program that runs members beside their agents, as hack/scale
	// does with nodeagent.Server.Confirm: a member on a node asks over HTTP.
	NodeAgentCall func(ctx context.Context, token string, req protocol.NodeAgentConfirmRequest) (int, protocol.NodeAgentConfirmResponse, error)
}

// ConfigFromEnv reads a Config from POD_NAME, POD_NAMESPACE, POD_UID, CONSUMER_GROUP, MEMBER_ID
// (optional; the pod name by default), and NODE_AGENT and NODE_AGENT_TOKEN_FILE (optional; node mode).
// The caller may then set the durations and AutoAck.
func ConfigFromEnv() (Config, error) {
	cfg := Config{
		Namespace: os.Getenv(EnvPodNamespace),
		Group:     os.Getenv(EnvConsumerGroup),
		Pod:       os.Getenv(EnvPodName),
		PodUID:    types.UID(os.Getenv(EnvPodUID)),
		MemberID:  os.Getenv(EnvMemberID),

		NodeAgent:          os.Getenv(EnvNodeAgent),
		NodeAgentTokenFile: os.Getenv(EnvNodeAgentTokenFile),
	}
	return cfg, cfg.withDefaults().validate()
}

func (c Config) withDefaults() Config {
	if c.MemberID == "" {
		c.MemberID = c.Pod
	}
	switch {
	case c.LeaseDuration != 0:
	case c.NodeAgent != "":
		c.LeaseDuration = protocol.DefaultNodeModeLeaseDuration
	default:
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
	if c.NodeAgent != "" && c.NodeAgentToken == nil && c.NodeAgentTokenFile != "" {
		c.NodeAgentToken = tokenFromFile(c.NodeAgentTokenFile)
	}
	return c
}

// tokenFromFile reads the token in path on each call: the kubelet rewrites the file before the token
// expires.
func tokenFromFile(path string) func() (string, error) {
	return func() (string, error) {
		raw, err := os.ReadFile(path)
		if err != nil {
			return "", fmt.Errorf("reading the node agent token: %w", err)
		}
		token := strings.TrimSpace(string(raw))
		if token == "" {
			return "", fmt.Errorf("the node agent token file %s is empty", path)
		}
		return token, nil
	}
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
	if c.NodeAgent != "" {
		errs = append(errs, c.validateNodeAgent()...)
	}
	if c.contactFencing() && c.ContactTimeout < 100*time.Millisecond {
		errs = append(errs, fmt.Errorf("contact timeout %v must be at least 100ms", c.ContactTimeout))
	}
	return errors.Join(errs...)
}

// validateNodeAgent checks node mode's settings.
func (c Config) validateNodeAgent() []error {
	var errs []error
	u, err := url.Parse(c.NodeAgent)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Hostname() == "" {
		errs = append(errs, fmt.Errorf("node agent %q is not an http or https URL with a host (environment variable %s)", c.NodeAgent, EnvNodeAgent))
	}
	if c.NodeAgentToken == nil {
		errs = append(errs, fmt.Errorf("node mode needs the pod's token for the node agent: NodeAgentTokenFile is required (environment variable %s)", EnvNodeAgentTokenFile))
	}
	if !c.contactFencing() {
		errs = append(errs, errors.New("node mode confirms the view for contact fencing, which a negative contact timeout turns off"))
	}
	return errs
}

// nodeMode reports whether the member asks a node agent to confirm its view.
func (c Config) nodeMode() bool { return c.NodeAgent != "" }

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
