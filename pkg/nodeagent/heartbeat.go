package nodeagent

import (
	"context"
	"sync/atomic"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	coordinationv1client "k8s.io/client-go/kubernetes/typed/coordination/v1"
	"k8s.io/component-helpers/apimachinery/lease"
	"k8s.io/klog/v2"

	"github.com/consumergroup-operator/consumergroup-operator/pkg/protocol"
)

// runHeartbeat renews the agent's heartbeat Lease, protocol.NodeAgentHeartbeatName(node) in the operator's
// namespace, until ctx ends: every quarter of its duration, with the kubelet's own lease controller, as a
// kubelet renews its node's Lease. It leaves the Lease behind when it stops: during a rollout the new agent
// on the node renews the same Lease (either's renewal counts, whoever holds it), and an agent that stops
// for good stops renewing it, which is what tells the operator that it is gone.
func runHeartbeat(ctx context.Context, cfg Config) {
	seconds := heartbeatSeconds(cfg.Heartbeat)
	name := protocol.NodeAgentHeartbeatName(cfg.Node)
	logger := klog.FromContext(ctx).WithValues("lease", klog.KRef(cfg.Namespace, name))
	spell := &failingSpell{logger: logger, duration: time.Duration(seconds) * time.Second}
	c := lease.NewController(cfg.Clock, renewals{Interface: cfg.Client, renewed: spell.ended}, cfg.Pod, seconds, spell.failed,
		time.Duration(seconds)*time.Second/4, name, cfg.Namespace, heartbeatMarks(cfg.Node, cfg.Pod))
	// Run, never Start and Stop, which delete the Lease: Start would delete the heartbeat that a rollout's
	// old agent still renews, and Stop one that must be left to go stale, which is what tells the operator
	// (a Lease that is gone tells it nothing).
	c.Run(klog.NewContext(ctx, logger))
}

// heartbeatSeconds is d in the whole seconds a Lease holds.
func heartbeatSeconds(d time.Duration) int32 {
	return int32(d.Round(time.Second) / time.Second)
}

// heartbeatMarks sets, on every write of the heartbeat Lease, what protocol.HeartbeatNode reads (the
// label, and node in the annotation) and pod as its holder: a Lease that lost them, or that another pod of
// the node's agent held (before a restart, or beside it in a rollout), gets them back. The lease controller
// sets the holder only when it creates the Lease.
func heartbeatMarks(node, pod string) lease.ProcessLeaseFunc {
	return func(l *coordinationv1.Lease) error {
		metav1.SetMetaDataLabel(&l.ObjectMeta, protocol.NodeAgentHeartbeatLabel, "true")
		metav1.SetMetaDataAnnotation(&l.ObjectMeta, protocol.NodeViewNodeAnnotation, node)
		l.Spec.HolderIdentity = &pod
		return nil
	}
}

// failingSpell logs a spell of failed renewals once, at its first repeated failure, and its end, at the
// first renewal after it. The lease controller logs each failed write itself.
type failingSpell struct {
	logger   klog.Logger
	duration time.Duration
	failing  atomic.Bool
}

func (s *failingSpell) failed() {
	if s.failing.CompareAndSwap(false, true) {
		s.logger.Error(nil, "Failed to renew the heartbeat Lease repeatedly: two renewal intervals after the last, the operator takes the node for lost, for the members that confirm through this agent",
			"duration", s.duration)
	}
}

func (s *failingSpell) ended() {
	if s.failing.CompareAndSwap(true, false) {
		s.logger.Info("Renewed the heartbeat Lease again")
	}
}

// renewals is the agent's client as its lease controller uses it: a Lease it creates or updates calls
// renewed. The controller says when renewals fail, not when they succeed again.
type renewals struct {
	kubernetes.Interface
	renewed func()
}

func (r renewals) CoordinationV1() coordinationv1client.CoordinationV1Interface {
	return renewalsV1{CoordinationV1Interface: r.Interface.CoordinationV1(), renewed: r.renewed}
}

type renewalsV1 struct {
	coordinationv1client.CoordinationV1Interface
	renewed func()
}

func (r renewalsV1) Leases(namespace string) coordinationv1client.LeaseInterface {
	return renewedLeases{LeaseInterface: r.CoordinationV1Interface.Leases(namespace), renewed: r.renewed}
}

type renewedLeases struct {
	coordinationv1client.LeaseInterface
	renewed func()
}

func (l renewedLeases) Create(ctx context.Context, lease *coordinationv1.Lease, opts metav1.CreateOptions) (*coordinationv1.Lease, error) {
	written, err := l.LeaseInterface.Create(ctx, lease, opts)
	if err == nil {
		l.renewed()
	}
	return written, err
}

func (l renewedLeases) Update(ctx context.Context, lease *coordinationv1.Lease, opts metav1.UpdateOptions) (*coordinationv1.Lease, error) {
	written, err := l.LeaseInterface.Update(ctx, lease, opts)
	if err == nil {
		l.renewed()
	}
	return written, err
}
