//go:build envtest

package controllers

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/yaml"

	"github.com/consumergroup-operator/consumergroup-operator/api/v1alpha1"
	"github.com/consumergroup-operator/consumergroup-operator/internal/testenv"
)

// TestOperatorRunsWithItsGeneratedRole runs the operator as a ServiceAccount bound to nothing but the
// ClusterRole that controller-gen writes from the RBAC markers (config/rbac/role.yaml), and checks that it
// still publishes, rebalances, restores and shards: the markers grant what the code calls.
func TestOperatorRunsWithItsGeneratedRole(t *testing.T) {
	ns := newNamespace(t)
	raw, err := os.ReadFile(filepath.Join("..", "config", "rbac", "role.yaml"))
	must(t, err)
	var role rbacv1.ClusterRole
	must(t, yaml.Unmarshal(raw, &role))
	role.Name = "operator-" + ns
	must(t, k8s.Create(context.Background(), &role))
	t.Cleanup(func() { _ = k8s.Delete(context.Background(), &role) })
	binding := &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: role.Name},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role.Name},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: "operator", Namespace: ns}},
	}
	must(t, k8s.Create(context.Background(), binding))
	t.Cleanup(func() { _ = k8s.Delete(context.Background(), binding) })

	// The manager's client acts as the ServiceAccount; anything the role lacks fails with Forbidden.
	saConfig := rest.CopyConfig(restConfig)
	saConfig.Impersonate = rest.ImpersonationConfig{UserName: fmt.Sprintf("system:serviceaccount:%s:operator", ns)}
	startManagerAs(t, ns, saConfig)

	testenv.Group(ns, "rbac").Topic("t", testenv.Broker("b", 6, "")).Create(t, k8s)
	testenv.Pod(ns, "rbac-0", "rbac").Create(t, k8s)
	p1 := testenv.Pod(ns, "rbac-1", "rbac").Create(t, k8s)
	waitForAssignment(t, ns, "rbac", []string{"rbac-0", "rbac-1"}, partitionOf(6))
	waitForCondition(t, ns, "rbac", v1alpha1.ConditionReady, metav1.ConditionTrue, v1alpha1.ReasonAssigned)
	waitForEvent(t, ns, "rbac", EventRebalanced)
	must(t, k8s.Delete(context.Background(), p1))
	waitForAssignment(t, ns, "rbac", []string{"rbac-0"}, partitionOf(6))
	must(t, k8s.Delete(context.Background(), getAssignment(t, ns, "rbac")))
	waitForAssignment(t, ns, "rbac", []string{"rbac-0"}, partitionOf(6))
}
