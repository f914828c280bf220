// Package scheme holds the API types the operator and its command-line tools read and write: Kubernetes'
// own and the ConsumerGroup. It depends on no controller, so a tool that only reads links none.
package scheme

import (
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"

	"github.com/consumergroup-operator/consumergroup-operator/api/v1alpha1"
)

// New returns a scheme of Kubernetes' types and the ConsumerGroup's.
func New() *runtime.Scheme {
	s := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(s); err != nil {
		panic(err)
	}
	if err := v1alpha1.AddToScheme(s); err != nil {
		panic(err)
	}
	return s
}
