//go:build envtest

package controllers

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/consumergroup-operator/consumergroup-operator/api/v1alpha1"
	"github.com/consumergroup-operator/consumergroup-operator/internal/testenv"
	"github.com/consumergroup-operator/consumergroup-operator/pkg/protocol"
)

// protocol1Member is a member written against protocol 1: its Lease carries the acknowledged generation
// and the pod as owner, and no claim; it reads its entry ignoring the fields protocol 2 added.
type protocol1Member struct {
	pod    *corev1.Pod
	cancel context.CancelFunc
	done   chan struct{}
}

func startProtocol1Member(t *testing.T, group string, pod *corev1.Pod, own *testenv.Ownership) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	m := &protocol1Member{pod: pod, cancel: cancel, done: make(chan struct{})}
	reader := pod.Name + "/" + string(pod.UID)
	now := metav1.NewMicroTime(time.Now())
	lease := &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Namespace: pod.Namespace, Name: protocol.LeaseName(group, pod.Name),
			Labels:          map[string]string{protocol.GroupLabel: group},
			Annotations:     map[string]string{protocol.AckedGenerationAnnotation: "0"},
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "v1", Kind: "Pod", Name: pod.Name, UID: pod.UID}}},
		Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To(pod.Name), LeaseDurationSeconds: ptr.To[int32](3), AcquireTime: &now, RenewTime: &now},
	}
	must(t, k8s.Create(ctx, lease))
	patch := func(p map[string]any) {
		data, _ := json.Marshal(p)
		_ = k8s.Patch(ctx, &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: pod.Namespace, Name: lease.Name}}, client.RawPatch(types.MergePatchType, data))
	}
	go func() {
		defer close(m.done)
		var seen int64
		renew := time.NewTicker(time.Second)
		defer renew.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-renew.C:
				patch(map[string]any{"spec": map[string]any{"renewTime": metav1.NewMicroTime(time.Now())}})
			case <-time.After(20 * time.Millisecond):
			}
			var cm corev1.ConfigMap
			err := k8s.Get(ctx, types.NamespacedName{Namespace: pod.Namespace, Name: protocol.AssignmentName(group)}, &cm)
			if apierrors.IsNotFound(err) {
				own.Apply(reader, nil) // protocol 1: no assignment, consume nothing
				continue
			}
			gen, _ := strconv.ParseInt(cm.Annotations[protocol.GenerationAnnotation], 10, 64)
			if err != nil || gen == seen {
				continue
			}
			var entry struct {
				Version    int                     `json:"version"`
				Generation int64                   `json:"generation"`
				Queues     []protocol.BrokerQueues `json:"queues"`
			}
			if raw, ok := cm.Data[pod.Name]; ok {
				if json.Unmarshal([]byte(raw), &entry) != nil || entry.Version != 1 {
					continue
				}
			}
			queues, err := protocol.Expand(entry.Queues)
			if err != nil {
				continue
			}
			own.Apply(reader, queues)
			seen = gen
			patch(map[string]any{"metadata": map[string]any{"annotations": map[string]string{protocol.AckedGenerationAnnotation: strconv.FormatInt(gen, 10)}}})
		}
	}()
	t.Cleanup(func() { m.stop(own) })
}

func (m *protocol1Member) stop(own *testenv.Ownership) {
	m.cancel()
	<-m.done
	own.Apply(m.pod.Name+"/"+string(m.pod.UID), nil)
}

// TestProtocol1MembersInteroperate runs members written against protocol 1 with this operator: they get
// protocol 1's guarantees (handoffs wait for their acknowledgements), and a deleted assignment is
// recovered from without two readers, since they acknowledge the generation published after it.
func TestProtocol1MembersInteroperate(t *testing.T) {
	ns := newNamespace(t)
	startManager(t, ns)
	own := testenv.NewOwnership()
	cooperativeGroup(ns, "v", 12, 30).Create(t, k8s)
	for i := range 2 {
		startProtocol1Member(t, "v", testenv.Pod(ns, fmt.Sprintf("v-%d", i), "v").Create(t, k8s), own)
	}
	waitForSettled(t, ns, "v", own, 12, 2)
	startProtocol1Member(t, "v", testenv.Pod(ns, "v-2", "v").Create(t, k8s), own)
	waitForSettled(t, ns, "v", own, 12, 3)
	assertNoOverlap(t, own)

	must(t, k8s.Delete(context.Background(), getAssignment(t, ns, "v")))
	waitForEvent(t, ns, "v", v1alpha1.ReasonAssignmentDeleted)
	waitForSettled(t, ns, "v", own, 12, 3)
	assertNoOverlap(t, own)
}
