package observe

import (
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/consumergroup-operator/consumergroup-operator/internal/plan"
)

// A member cut off from the API server while its node answers cannot renew its Lease, and the operator
// would only notice when a renewal is overdue (membershipEnds): 30 s of a 60 s Lease. Its kubelet can say
// so sooner. The member's liveness probe fails once it cannot confirm its view (contact fencing: the
// agent's /healthz answers 503, `consumergroup-agent probe` exits 1), the kubelet restarts the container,
// and the pod's status shows the restart. A restarted process that can reach the API server writes its
// Lease at once; one that cannot stays silent. So a restart that no renewal answers within
// restartRenewGrace ends the member's membership: its queues are revoked and move on when its promise
// runs out. Like every other way to stop being a member, it only starts a revocation: a member that was
// merely slow loses its queues, never shares them.

// restartSighting is what the operator saw of one pod's container restarts: how many there were when it
// last looked, and when it first saw one that no renewal of the member's Lease has answered since (zero
// for none).
type restartSighting struct {
	count  int32
	seenAt time.Time
}

// containerRestarts is how often the kubelet has restarted pod's containers, native sidecars (init
// containers that keep running, such as the agent) included.
func containerRestarts(pod *corev1.Pod) int32 {
	var n int32
	for _, c := range append(slices.Clone(pod.Status.InitContainerStatuses), pod.Status.ContainerStatuses...) {
		n += c.RestartCount
	}
	return n
}

// sightRestarts is the rule of the restart sightings, without the memory: from the previous sightings,
// the pods read at now and when each pod's Lease was last renewed (by pod UID, on the operator's clock),
// the next sightings and, by pod UID, when each restart that no renewal answered was first seen. A pod
// seen for the first time shows no restart: what happened before the operator looked is unknown, and its
// Lease's renewals decide as before. Further restarts with no renewal between them keep the first one's
// time, so that a member the kubelet keeps restarting does not come back for another grace each time.
// Only the pods read are remembered.
func sightRestarts(prev map[types.UID]restartSighting, pods []corev1.Pod, renewedAt map[types.UID]time.Time, now time.Time) (map[types.UID]restartSighting, map[types.UID]time.Time) {
	next := make(map[types.UID]restartSighting, len(pods))
	unanswered := map[types.UID]time.Time{}
	for i := range pods {
		pod := &pods[i]
		n := containerRestarts(pod)
		p, known := prev[pod.UID]
		switch {
		case !known || n < p.count:
			p = restartSighting{count: n}
		case n > p.count:
			if p.seenAt.IsZero() || plan.Answers(renewedAt[pod.UID], p.seenAt) {
				p.seenAt = now
			}
			p.count = n
		}
		next[pod.UID] = p
		if !p.seenAt.IsZero() && !plan.Answers(renewedAt[pod.UID], p.seenAt) {
			unanswered[pod.UID] = p.seenAt
		}
	}
	return next, unanswered
}

// observeRestarts records the restarts of the group's pods as read at now and returns, by pod UID, when
// the operator first saw each restart that no renewal answered (sightRestarts); renewedAt is when each
// pod's Lease was last renewed, on the operator's clock.
func (g *Sightings) observeRestarts(pods []corev1.Pod, renewedAt map[types.UID]time.Time, now time.Time) map[types.UID]time.Time {
	var unanswered map[types.UID]time.Time
	g.restarts, unanswered = sightRestarts(g.restarts, pods, renewedAt, now)
	return unanswered
}
