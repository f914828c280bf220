package controllers

import (
	corev1 "k8s.io/api/core/v1"
)

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
