package controllers

import (
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	"github.com/consumergroup-operator/consumergroup-operator/api/v1alpha1"
	"github.com/consumergroup-operator/consumergroup-operator/pkg/allocate"
	"github.com/consumergroup-operator/consumergroup-operator/pkg/protocol"
)

// The fixtures of the tests that need no API server: decisions are pure functions of a group, an
// observation and a time.

// t0 is the tests' reference time.
var t0 = time.Date(2026, 11, 30, 10, 0, 0, 0, time.UTC)

const testGeneration = 3

// pod is a Running, Ready pod whose UID is "uid-<name>", changed by mods.
func pod(name string, mods ...func(*corev1.Pod)) corev1.Pod {
	p := corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, UID: types.UID("uid-" + name)},
		Status: corev1.PodStatus{Phase: corev1.PodRunning, Conditions: []corev1.PodCondition{
			{Type: corev1.PodScheduled, Status: corev1.ConditionTrue},
			{Type: corev1.PodReady, Status: corev1.ConditionTrue},
		}, ContainerStatuses: []corev1.ContainerStatus{{Name: "c", State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{}}}}},
	}
	for _, m := range mods {
		m(&p)
	}
	return p
}

func withAnnotation(k, v string) func(*corev1.Pod) {
	return func(p *corev1.Pod) {
		if p.Annotations == nil {
			p.Annotations = map[string]string{}
		}
		p.Annotations[k] = v
	}
}

func onNode(n string) func(*corev1.Pod) { return func(p *corev1.Pod) { p.Spec.NodeName = n } }

func withUID(uid string) func(*corev1.Pod) { return func(p *corev1.Pod) { p.UID = types.UID(uid) } }

func notReady(p *corev1.Pod) { p.Status.Conditions[1].Status = corev1.ConditionFalse }

// stopped is a pod whose container the kubelet reports terminated.
func stopped(p *corev1.Pod) {
	notReady(p)
	p.Status.ContainerStatuses[0].State = corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 137}}
}

func mem(id, zone string, weight int32) allocate.Member {
	return allocate.Member{ID: id, Zone: zone, Weight: weight}
}

// qs are queues t/b/<id>.
func qs(ids ...int32) []allocate.Queue {
	out := make([]allocate.Queue, len(ids))
	for i, id := range ids {
		out[i] = allocate.Queue{Topic: "t", Broker: "b", ID: id}
	}
	return out
}

// testGroup is group g with queues t/b/0..queues-1, Cooperative, revoke timeout 30 s.
func testGroup(strategy v1alpha1.Strategy, queues int32) *v1alpha1.ConsumerGroup {
	return &v1alpha1.ConsumerGroup{
		ObjectMeta: metav1.ObjectMeta{Name: "g", Namespace: "ns", UID: types.UID("group-uid"), Generation: testGeneration},
		Spec: v1alpha1.ConsumerGroupSpec{
			Topics:   []v1alpha1.Topic{{Name: "t", Brokers: []v1alpha1.Broker{{Name: "b", Queues: queues}}}},
			Strategy: strategy,
			Handoff:  v1alpha1.Handoff{Mode: v1alpha1.Cooperative, RevokeTimeoutSeconds: ptr.To[int32](30)},
		},
	}
}

// lease is the Lease the member on pod (UID "uid-<pod>") writes: acknowledged acked, claiming claim,
// renewed at renewed, with a 15 s duration.
func lease(pod string, acked int64, claim []allocate.Queue, renewed time.Time) protocol.LeaseState {
	m := protocol.MemberLease{Group: "g", GroupUID: "group-uid", Pod: pod, PodUID: types.UID("uid-" + pod), Member: pod,
		Duration: 15 * time.Second, Acked: acked, Claim: claim}
	l := m.Apply(nil, "ns", &renewed, &renewed)
	l.ResourceVersion, l.UID = "1", types.UID("lease-"+pod)
	return protocol.ReadLease(l)
}

// env is the decision environment at now, with the group's strategy.
func env(group *v1alpha1.ConsumerGroup, now time.Time) decideEnv {
	var c strategyCache
	s, prob := c.get(group)
	return decideEnv{now: now, maxSkew: time.Second, topology: topologyOf(group, group.Status.Routes), strategy: s, strategyProblem: prob}
}

// world is an observation of pods and Leases, with nothing published.
func world(pods []corev1.Pod, leases ...protocol.LeaseState) *observation {
	obs := &observation{pods: pods, podsByName: map[string]*corev1.Pod{}, shards: map[string]*corev1.ConfigMap{}, leases: leases, nodeZones: map[string]string{}}
	for i := range obs.pods {
		obs.podsByName[obs.pods[i].Name] = &obs.pods[i]
	}
	obs.setPublished(protocol.ReadPublished("g", nil, nil))
	return obs
}

// applied is the observation of the next pass: before, with the ConfigMaps d wrote and deleted.
func applied(group *v1alpha1.ConsumerGroup, before *observation, d *decision) *observation {
	obs := *before
	obs.shards = map[string]*corev1.ConfigMap{}
	for name, cm := range before.shards {
		obs.shards[name] = cm
	}
	for _, w := range d.write.configMaps {
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{
			Name: w.Name, Namespace: group.Namespace, Annotations: w.Annotations,
			Labels:          map[string]string{protocol.GroupLabel: group.Name, protocol.ManagedByLabel: protocol.ManagedByValue},
			OwnerReferences: []metav1.OwnerReference{{APIVersion: protocol.GroupAPIVersion, Kind: protocol.GroupKind, Name: group.Name, UID: group.UID, Controller: ptr.To(true)}},
		}, Data: w.Data}
		if cm.Name == assignmentName(group) {
			obs.index = cm
		} else {
			obs.shards[cm.Name] = cm
		}
	}
	for _, cm := range d.write.deleteShards {
		delete(obs.shards, cm.Name)
	}
	obs.setPublished(protocol.ReadPublished(group.Name, obs.index, obs.shards))
	return &obs
}

func metav1Time(t time.Time) metav1.Time { return metav1.NewTime(t) }

// hasCondition reports whether conditions hold typ with status.
func hasCondition(conditions []metav1.Condition, typ, status string) bool {
	for _, c := range conditions {
		if c.Type == typ && string(c.Status) == status {
			return true
		}
	}
	return false
}
