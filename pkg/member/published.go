package member

import (
	"fmt"
	"slices"
	"strconv"

	corev1 "k8s.io/api/core/v1"

	"github.com/consumergroup-operator/consumergroup-operator/pkg/allocate"
	"github.com/consumergroup-operator/consumergroup-operator/pkg/assignment"
)

// Queue is one message queue: topic, broker name and queue id, as RocketMQ's MessageQueue.
type Queue = allocate.Queue

// Assignment is what a member consumes: the queues one generation of the group's assignment lists for
// it. Generation 0 means no assignment is in force and the member must consume nothing: none has been
// published yet, the group is gone, or the member could not renew its Lease.
type Assignment struct {
	// Generation is the assignment generation; it only grows while the group exists.
	Generation int64
	// Member is the member id the operator published the entry for.
	Member string
	// Queues are the member's queues, sorted by topic, broker and id.
	Queues []Queue
}

func (a Assignment) equal(b Assignment) bool {
	return a.Generation == b.Generation && a.Member == b.Member && slices.Equal(a.Queues, b.Queues)
}

// published is the pod's view of the assignment ConfigMap.
type published struct {
	// exists is false while there is no assignment ConfigMap.
	exists bool
	// resourceVersion is the ConfigMap's, "" when it does not exist; it tells whether the view is current.
	resourceVersion string
	generation      int64
	member          string
	queues          []Queue
	// err is set when the pod's entry cannot be read; the pod then holds nothing.
	err error
}

// publishedFrom reads pod's entry from the assignment ConfigMap cm, which may be nil. A missing key means
// the pod has no queues at the ConfigMap's generation. The entry's own generation counts when the
// annotation is missing or behind it, so a hand-edited ConfigMap cannot make the generation go back.
func publishedFrom(cm *corev1.ConfigMap, pod string) published {
	if cm == nil {
		return published{}
	}
	p := published{exists: true, resourceVersion: cm.ResourceVersion}
	if v, ok := cm.Annotations[GenerationAnnotation]; ok {
		gen, err := strconv.ParseInt(v, 10, 64)
		if err != nil || gen < 0 {
			p.err = fmt.Errorf("the ConfigMap %s has annotation %s=%q, which is not a generation", cm.Name, GenerationAnnotation, v)
			return p
		}
		p.generation = gen
	}
	value, ok := cm.Data[pod]
	if !ok {
		return p
	}
	entry, queues, err := assignment.Decode([]byte(value))
	if err != nil {
		p.err = fmt.Errorf("the ConfigMap %s, key %s: %w", cm.Name, pod, err)
		return p
	}
	p.generation = max(p.generation, entry.Generation)
	p.member = entry.Member
	p.queues = queues
	return p
}
