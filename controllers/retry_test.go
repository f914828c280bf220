package controllers

import (
	"context"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
)

// A write that meets a newer object is retried quickly a few times, then through the controller's
// exponential backoff; a pass that gets through starts the count again.
func TestRetryBacksOffWhenAWriteKeepsFailing(t *testing.T) {
	r := &ConsumerGroupReconciler{}
	key := types.NamespacedName{Namespace: "ns", Name: "g"}
	exists := apierrors.NewAlreadyExists(schema.GroupResource{Resource: "configmaps"}, "g-assignment-0")
	for i := 1; i <= maxQuickRetries; i++ {
		if res, err := r.retry(context.Background(), key, "assignment", exists); err != nil || res.RequeueAfter != conflictRetry {
			t.Fatalf("retry %d: %v, %v; want a quick retry", i, res, err)
		}
	}
	if _, err := r.retry(context.Background(), key, "assignment", exists); err == nil {
		t.Fatalf("retry %d was quick again: a write in the way would be retried every %v for ever", maxQuickRetries+1, conflictRetry)
	}
	r.memory.resetRetries(key)
	if res, err := r.retry(context.Background(), key, "assignment", exists); err != nil || res.RequeueAfter != conflictRetry {
		t.Fatalf("after a pass that got through: %v, %v; want a quick retry", res, err)
	}
}
