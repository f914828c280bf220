// Package observe reads what one pass of a group needs: its published assignment, its members' Leases
// and pods, their nodes, and the operator's sightings of each over earlier passes.
//
// The package holds no API types. CachedPod, which the pod cache keeps, looks like one to controller-gen
// (TypeMeta and ObjectMeta embedded), so the package is skipped when CRDs are generated:
// +kubebuilder:skip
package observe
