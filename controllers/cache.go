package controllers

import (
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/selection"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/consumergroup-operator/consumergroup-operator/api/v1alpha1"
)

// CacheByObject restricts the manager's cache to what the reconciler reads: the ConfigMaps the operator
// manages (not every ConfigMap of the cluster), the Leases of group members (not every Lease), and pods
// stripped of the fields it never looks at.
func CacheByObject() map[client.Object]cache.ByObject {
	memberLease, err := labels.NewRequirement(v1alpha1.GroupLabel, selection.Exists, nil)
	if err != nil {
		panic(err)
	}
	return map[client.Object]cache.ByObject{
		&corev1.ConfigMap{}:     {Label: labels.SelectorFromSet(labels.Set{ManagedByLabel: ManagedByValue})},
		&coordinationv1.Lease{}: {Label: labels.NewSelector().Add(*memberLease)},
		&corev1.Pod{}:           {Transform: StripPod},
	}
}

// StripPod is a cache transform that keeps of a pod only what membership, identity, zone and weight are
// read from: name, namespace, labels, annotations, owner, deletion, node, phase and the Ready condition.
// Containers, volumes and managed fields are most of a pod's size, and an operator that watches every pod
// of a cluster would otherwise hold them all in memory.
func StripPod(obj any) (any, error) {
	pod, ok := obj.(*corev1.Pod)
	if !ok {
		return obj, nil
	}
	stripped := &corev1.Pod{
		TypeMeta: pod.TypeMeta,
		Spec:     corev1.PodSpec{NodeName: pod.Spec.NodeName},
		Status:   corev1.PodStatus{Phase: pod.Status.Phase},
	}
	stripped.ObjectMeta = *pod.ObjectMeta.DeepCopy()
	stripped.ManagedFields = nil
	for _, c := range pod.Status.Conditions {
		if c.Type == corev1.PodReady {
			stripped.Status.Conditions = []corev1.PodCondition{{Type: c.Type, Status: c.Status}}
		}
	}
	return stripped, nil
}
