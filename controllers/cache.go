package controllers

import (
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/selection"
	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/consumergroup-operator/consumergroup-operator/internal/plan"
	"github.com/consumergroup-operator/consumergroup-operator/pkg/protocol"
)

// CacheByObject restricts the manager's cache to what the reconciler reads: the ConfigMaps the operator
// manages (not every ConfigMap of the cluster), the Leases of group members (not every Lease), pods
// stripped of the fields it never looks at, and nodes of their zone alone. Every other object is cached
// without its managed fields (CacheDefaultTransform).
func CacheByObject() map[client.Object]cache.ByObject {
	memberLease, err := labels.NewRequirement(protocol.GroupLabel, selection.Exists, nil)
	if err != nil {
		panic(err)
	}
	return map[client.Object]cache.ByObject{
		&corev1.ConfigMap{}:     {Label: labels.SelectorFromSet(labels.Set{protocol.ManagedByLabel: protocol.ManagedByValue})},
		&coordinationv1.Lease{}: {Label: labels.NewSelector().Add(*memberLease)},
		&corev1.Pod{}:           {Transform: StripPod},
		&corev1.Node{}:          {Transform: stripNode},
	}
}

// CacheDefaultTransform strips the managed fields of what the cache holds: the operator never reads them,
// and on a member's Lease, renewed every 20 s by its member and annotated by the operator, they are often
// larger than the rest of the object.
func CacheDefaultTransform() toolscache.TransformFunc { return cache.TransformStripManagedFields() }

// stripNode keeps of a node what the operator reads: its name and its zone label. A node's status (its
// images, addresses, conditions) runs to kilobytes, and a cluster has one for every 30 pods or so.
func stripNode(obj any) (any, error) {
	node, ok := obj.(*corev1.Node)
	if !ok {
		return obj, nil
	}
	stripped := &corev1.Node{
		TypeMeta:   node.TypeMeta,
		ObjectMeta: metav1.ObjectMeta{Name: node.Name, UID: node.UID, ResourceVersion: node.ResourceVersion},
	}
	if zone, ok := node.Labels[plan.ZoneLabel]; ok {
		stripped.Labels = map[string]string{plan.ZoneLabel: zone}
	}
	return stripped, nil
}

// StripPod is a cache transform that keeps of a pod only what membership, identity, zone, weight and the
// handoff read: name, namespace, UID, labels, annotations, owner, deletion, node, phase, the Ready
// condition and whether each container runs or has terminated. Container specs, volumes and managed
// fields are most of a pod's size, and an operator that watches every pod of a cluster would otherwise
// hold them all in memory.
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
	strip := func(statuses []corev1.ContainerStatus) []corev1.ContainerStatus {
		out := make([]corev1.ContainerStatus, len(statuses))
		for i, c := range statuses {
			out[i] = corev1.ContainerStatus{Name: c.Name, RestartCount: c.RestartCount}
			if c.State.Running != nil {
				out[i].State.Running = &corev1.ContainerStateRunning{}
			}
			if c.State.Terminated != nil {
				out[i].State.Terminated = &corev1.ContainerStateTerminated{ExitCode: c.State.Terminated.ExitCode}
			}
			if c.LastTerminationState.Terminated != nil {
				out[i].LastTerminationState.Terminated = &corev1.ContainerStateTerminated{ExitCode: c.LastTerminationState.Terminated.ExitCode}
			}
		}
		return out
	}
	stripped.Status.ContainerStatuses = strip(pod.Status.ContainerStatuses)
	stripped.Status.InitContainerStatuses = strip(pod.Status.InitContainerStatuses)
	return stripped, nil
}
