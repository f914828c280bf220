package plan

import (
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/consumergroup-operator/consumergroup-operator/api/v1alpha1"
	"github.com/consumergroup-operator/consumergroup-operator/pkg/protocol"
)

// env is the decision environment at now, with the group's strategy.
func env(group *v1alpha1.ConsumerGroup, now time.Time) Env {
	s, prob := NewStrategy(group)
	return Env{Now: now, MaxSkew: time.Second, Topology: TopologyOf(group, group.Status.Routes), Strategy: s, StrategyProblem: prob}
}

// world is an observation of pods and Leases, with nothing published.
func world(pods []corev1.Pod, leases ...protocol.LeaseState) *Observation {
	obs := &Observation{Pods: pods, PodsByName: map[string]*corev1.Pod{}, Shards: map[string]*corev1.ConfigMap{}, Leases: leases, NodeZones: map[string]string{}}
	for i := range obs.Pods {
		obs.PodsByName[obs.Pods[i].Name] = &obs.Pods[i]
	}
	obs.SetPublished(protocol.ReadPublished("g", nil, nil))
	return obs
}

// applied is the observation of the next pass: before, with the ConfigMaps d wrote and deleted.
func applied(group *v1alpha1.ConsumerGroup, before *Observation, d *Decision) *Observation {
	obs := *before
	obs.Shards = map[string]*corev1.ConfigMap{}
	for name, cm := range before.Shards {
		obs.Shards[name] = cm
	}
	for _, w := range d.Write.ConfigMaps {
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{
			Name: w.Name, Namespace: group.Namespace, Annotations: w.Annotations,
			Labels:          map[string]string{protocol.GroupLabel: group.Name, protocol.ManagedByLabel: protocol.ManagedByValue},
			OwnerReferences: []metav1.OwnerReference{{APIVersion: protocol.GroupAPIVersion, Kind: protocol.GroupKind, Name: group.Name, UID: group.UID, Controller: ptr.To(true)}},
		}, Data: w.Data}
		if cm.Name == protocol.AssignmentName(group.Name) {
			obs.Index = cm
		} else {
			obs.Shards[cm.Name] = cm
		}
	}
	for _, cm := range d.Write.DeleteShards {
		delete(obs.Shards, cm.Name)
	}
	obs.SetPublished(protocol.ReadPublished(group.Name, obs.Index, obs.Shards))
	return &obs
}
