package main

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2"

	"github.com/consumergroup-operator/consumergroup-operator/api/v1alpha1"
	"github.com/consumergroup-operator/consumergroup-operator/pkg/member"
)

// topicsRefresh is how often the agent reads the ConsumerGroup again when no new generation made it.
const topicsRefresh = time.Minute

// topicsReadTimeout bounds one read of the ConsumerGroup.
const topicsReadTimeout = 5 * time.Second

// groupTopics follows which topics the operator assigns in the pod's group, read from the ConsumerGroup,
// so that a client can tell a topic the operator assigns (whose queues it must take from the assignment
// only, even when the pod has none of them) from one it leaves to the client, such as a retry topic the
// group does not assign. Reading the ConsumerGroup needs get on it, which the pod's Role may not grant:
// then the topics are unknown and the API does not report them.
type groupTopics struct {
	// read returns the ConsumerGroup as JSON.
	read func(ctx context.Context) ([]byte, error)

	mu sync.Mutex
	// topics are the topics last read, sorted; nil until a read succeeded, or after the ConsumerGroup was
	// found gone or unreadable for want of permission.
	topics []string
	// lastErr is the last read's error, to log each change of it once.
	lastErr string
}

// newGroupTopics reads the group's ConsumerGroup through cs.
func newGroupTopics(cs kubernetes.Interface, cfg member.Config) *groupTopics {
	return &groupTopics{read: func(ctx context.Context) ([]byte, error) {
		return cs.CoreV1().RESTClient().Get().
			AbsPath("/apis/messaging.consumergroup.io/v1alpha1/namespaces", cfg.Namespace, "consumergroups", cfg.Group).
			DoRaw(ctx)
	}}
}

// get returns the topics the operator assigns, sorted, and whether they are known.
func (g *groupTopics) get() ([]string, bool) {
	if g == nil {
		return nil, false
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.topics, g.topics != nil
}

// refresh reads the ConsumerGroup once. A group that is gone or may not be read makes the topics unknown;
// any other failure keeps those last read.
func (g *groupTopics) refresh(ctx context.Context) {
	ctx, cancel := context.WithTimeout(ctx, topicsReadTimeout)
	defer cancel()
	data, err := g.read(ctx)
	var topics []string
	if err == nil {
		topics, err = assignedTopics(data)
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	switch {
	case err == nil:
		g.topics = topics
	case apierrors.IsNotFound(err), apierrors.IsForbidden(err):
		g.topics = nil
	}
	msg := ""
	if err != nil {
		msg = err.Error()
	}
	if msg != g.lastErr {
		g.lastErr = msg
		if err != nil {
			klog.FromContext(ctx).Info("Cannot read the ConsumerGroup, so the API does not report which topics the operator assigns; "+
				"grant the pod get on it to have them reported", "error", err)
		}
	}
}

// run reads the ConsumerGroup again each time the generation in force changes, and every topicsRefresh,
// until ctx ends.
func (g *groupTopics) run(ctx context.Context, client *member.Client) {
	gen := client.Current().Generation
	for ctx.Err() == nil {
		waitCtx, cancel := context.WithTimeout(ctx, topicsRefresh)
		a, err := client.Next(waitCtx, gen)
		cancel()
		if ctx.Err() != nil {
			return
		}
		if err == nil {
			gen = a.Generation
		}
		g.refresh(ctx)
	}
}

// assignedTopics are the topics the operator assigns in the ConsumerGroup data holds, sorted: those of
// spec.topics and the group's retry topic when the operator assigns it (v1alpha1.ConsumerGroup.RetryTopic).
func assignedTopics(data []byte) ([]string, error) {
	var g v1alpha1.ConsumerGroup
	if err := json.Unmarshal(data, &g); err != nil {
		return nil, fmt.Errorf("decoding the ConsumerGroup: %w", err)
	}
	topics := make([]string, 0, len(g.Spec.Topics)+1)
	for _, t := range g.Spec.Topics {
		if t.Name != "" {
			topics = append(topics, t.Name)
		}
	}
	if retry := g.RetryTopic(); retry != "" {
		topics = append(topics, retry)
	}
	slices.Sort(topics)
	return slices.Compact(topics), nil
}
