// Package v1alpha1 holds the ConsumerGroup API, group messaging.consumergroup.io, version v1alpha1.
// +kubebuilder:object:generate=true
// +groupName=messaging.consumergroup.io
package v1alpha1

import (
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/scheme"
)

var (
	// GroupVersion is the group and version of the ConsumerGroup API.
	GroupVersion = schema.GroupVersion{Group: "messaging.consumergroup.io", Version: "v1alpha1"}

	// SchemeBuilder registers the API's types with a runtime.Scheme.
	SchemeBuilder = &scheme.Builder{GroupVersion: GroupVersion}

	// AddToScheme adds the API's types to a runtime.Scheme.
	AddToScheme = SchemeBuilder.AddToScheme
)
