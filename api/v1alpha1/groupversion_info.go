// Package v1alpha1 holds the ConsumerGroup API, group messaging.consumergroup.io, version v1alpha1.
// +kubebuilder:object:generate=true
// +groupName=messaging.consumergroup.io
package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

var (
	// GroupVersion is the group and version of the ConsumerGroup API.
	GroupVersion = schema.GroupVersion{Group: "messaging.consumergroup.io", Version: "v1alpha1"}

	// SchemeBuilder registers the API's types with a runtime.Scheme. It depends on apimachinery only, so
	// that consumers can import the API without controller-runtime.
	SchemeBuilder = runtime.NewSchemeBuilder(addKnownTypes)

	// AddToScheme adds the API's types to a runtime.Scheme.
	AddToScheme = SchemeBuilder.AddToScheme
)

func addKnownTypes(s *runtime.Scheme) error {
	s.AddKnownTypes(GroupVersion, &ConsumerGroup{}, &ConsumerGroupList{}, &ClusterNameServer{}, &ClusterNameServerList{})
	metav1.AddToGroupVersion(s, GroupVersion)
	return nil
}
