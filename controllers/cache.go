package controllers

import (
	"slices"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/selection"
	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/consumergroup-operator/consumergroup-operator/internal/observe"
	"github.com/consumergroup-operator/consumergroup-operator/internal/plan"
	"github.com/consumergroup-operator/consumergroup-operator/pkg/protocol"
)

// CacheByObject restricts the manager's cache to what the reconciler reads: the ConfigMaps the operator
// manages (not every ConfigMap of the cluster), the Leases of group members (not every Lease), pods as
// observe.CachedPods (what a pass reads of them, which the reconciler reads from podSource's store),
// and nodes of their zone alone. Every other object is cached
// without its managed fields (CacheDefaultTransform).
func CacheByObject() map[client.Object]cache.ByObject {
	memberLease, err := labels.NewRequirement(protocol.GroupLabel, selection.Exists, nil)
	if err != nil {
		panic(err)
	}
	return map[client.Object]cache.ByObject{
		&corev1.ConfigMap{}:     {Label: labels.SelectorFromSet(labels.Set{protocol.ManagedByLabel: protocol.ManagedByValue})},
		&coordinationv1.Lease{}: {Label: labels.NewSelector().Add(*memberLease), Transform: cacheMemberLease},
		&corev1.Pod{}:           {Transform: observe.CachePod},
		&corev1.Node{}:          {Transform: stripNode},
	}
}

// CacheDefaultTransform strips the managed fields of what the cache holds: the operator never reads them,
// and on a member's Lease, renewed every 20 s by its member and annotated by the operator, they are often
// larger than the rest of the object.
func CacheDefaultTransform() toolscache.TransformFunc { return cache.TransformStripManagedFields() }

// cacheMemberLease is the cache transform of member Leases: their managed fields dropped, as every other
// object's (CacheDefaultTransform, which a type's own transform replaces), and the strings that many
// Leases repeat shared (observe.Intern): the namespace, the group label, the annotations' keys, and the
// owners' API versions, kinds and group names. The claims and load reports are each Lease's own.
func cacheMemberLease(obj any) (any, error) {
	lease, ok := obj.(*coordinationv1.Lease)
	if !ok {
		return obj, nil
	}
	lease.ManagedFields = nil
	lease.Namespace = observe.Intern(lease.Namespace)
	lease.Labels = observe.SharedMap(lease.Labels)
	// Of the owners, the pod is read (protocol.ReadLeaseIn), and compared to see a new incarnation take
	// over (claimChanged); the group's reference, which its member adds once it knows the group's UID,
	// is for the garbage collector, and the operator reads it nowhere.
	var pod string
	lease.OwnerReferences = slices.Clone(slices.DeleteFunc(lease.OwnerReferences, func(ref metav1.OwnerReference) bool {
		return !protocol.IsPodOwner(ref)
	}))
	for i := range lease.OwnerReferences {
		ref := &lease.OwnerReferences[i]
		ref.APIVersion, ref.Kind, pod = observe.Intern(ref.APIVersion), observe.Intern(ref.Kind), ref.Name
	}
	lease.Annotations = leaseAnnotations(lease.Annotations, pod)
	// A member's id is its pod's name unless it was given another.
	if h := lease.Spec.HolderIdentity; h != nil && *h == pod {
		*h = pod
	}
	return lease, nil
}

// leaseAnnotations is a member Lease's annotations with the keys interned, and the values that repeat
// across Leases too: the acknowledged generation and the promise, one number for a whole group (or all
// groups) most of the time, and the pod's name, which the Lease's owner reference holds already. Claims
// and load reports are each Lease's own.
func leaseAnnotations(m map[string]string, pod string) map[string]string {
	return observe.InternKeysWith(m, func(k, v string) string {
		switch {
		case k == protocol.AckedGenerationAnnotation, k == protocol.StopsWithinAnnotation, k == protocol.StoppedAnnotation,
			k == protocol.ConfirmsThroughAnnotation:
			return observe.Intern(v)
		case k == protocol.PodAnnotation && v == pod:
			return pod
		}
		return v
	})
}

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
