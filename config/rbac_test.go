package config

import (
	"os"
	"reflect"
	"slices"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"sigs.k8s.io/yaml"

	"github.com/consumergroup-operator/consumergroup-operator/internal/manager"
)

// The leader election Role lets the operator read and renew only its own Lease: whoever else's Lease
// shares its namespace is out of its reach.
func TestLeaderElectionRoleNamesTheOperatorsLease(t *testing.T) {
	raw, err := os.ReadFile("rbac/leader_election_role.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var role rbacv1.Role
	if err := yaml.UnmarshalStrict(raw, &role); err != nil {
		t.Fatal(err)
	}
	for _, rule := range role.Rules {
		if !slices.Contains(rule.Resources, "leases") {
			continue
		}
		unnamed := len(rule.ResourceNames) == 0
		switch {
		case unnamed && !slices.Equal(rule.Verbs, []string{"create"}):
			t.Errorf("a rule grants %v on every Lease of the namespace; only create cannot be limited by name", rule.Verbs)
		case !unnamed && !slices.Equal(rule.ResourceNames, []string{manager.LeaderElectionID}):
			t.Errorf("a rule names Leases %v, want only %s", rule.ResourceNames, manager.LeaderElectionID)
		}
	}
}

// grantsSecrets reports whether rule grants anything on Secrets: the core group's secrets, or a wildcard
// of group or resource that covers them.
func grantsSecrets(rule rbacv1.PolicyRule) bool {
	core := slices.Contains(rule.APIGroups, "") || slices.Contains(rule.APIGroups, rbacv1.APIGroupAll)
	return core && (slices.Contains(rule.Resources, "secrets") || slices.Contains(rule.Resources, rbacv1.ResourceAll))
}

// The ClusterRole grants no Secret: a ConsumerGroup in any namespace cannot make the operator read a
// Secret there. The Secrets ClusterNameServers name are read in the operator's own namespace, through
// the credentials Role, which grants get on Secrets and nothing else, and is bound to the operator.
func TestSecretsAreReadInTheCredentialsNamespaceOnly(t *testing.T) {
	var cluster rbacv1.ClusterRole
	readStrict(t, "rbac/role.yaml", &cluster)
	for _, rule := range cluster.Rules {
		if grantsSecrets(rule) {
			t.Errorf("the ClusterRole %s grants %v on %v of %v: it must grant no Secret", cluster.Name, rule.Verbs, rule.Resources, rule.APIGroups)
		}
	}

	var role rbacv1.Role
	readStrict(t, "rbac/credentials_role.yaml", &role)
	want := []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"secrets"}, Verbs: []string{"get"}}}
	if !reflect.DeepEqual(role.Rules, want) {
		t.Errorf("the credentials Role grants %+v, want only get on secrets", role.Rules)
	}

	var binding rbacv1.RoleBinding
	readStrict(t, "rbac/credentials_role_binding.yaml", &binding)
	var sa corev1.ServiceAccount
	readStrict(t, "rbac/service_account.yaml", &sa)
	if binding.Namespace != role.Namespace || binding.RoleRef != (rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: role.Name}) ||
		len(binding.Subjects) != 1 || binding.Subjects[0].Kind != rbacv1.ServiceAccountKind || binding.Subjects[0].Name != sa.Name {
		t.Errorf("the credentials RoleBinding %+v, want Role %s bound to ServiceAccount %s in namespace %s", binding, role.Name, sa.Name, role.Namespace)
	}
}

// The node agent (config/nodeagent) creates TokenReviews, to learn which pod a member's token is bound
// to; gets ConfigMaps in the operator's namespace, to read its node's view; and gets, creates and updates
// Leases there, to renew its heartbeat (the admission policy node-agent-heartbeats confines it to its own
// node's); nothing else. Both are bound to its own ServiceAccount, which its DaemonSet runs as, with that
// token mounted.
func TestNodeAgentReviewsTokensReadsItsNodeViewAndRenewsItsHeartbeatOnly(t *testing.T) {
	var sa corev1.ServiceAccount
	readStrict(t, "nodeagent/service_account.yaml", &sa)
	subjects := []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: sa.Name, Namespace: sa.Namespace}}

	var cluster rbacv1.ClusterRole
	readStrict(t, "nodeagent/cluster_role.yaml", &cluster)
	want := []rbacv1.PolicyRule{{APIGroups: []string{"authentication.k8s.io"}, Resources: []string{"tokenreviews"}, Verbs: []string{"create"}}}
	if !reflect.DeepEqual(cluster.Rules, want) {
		t.Errorf("the node agent's ClusterRole grants %+v, want only create on tokenreviews", cluster.Rules)
	}
	var clusterBinding rbacv1.ClusterRoleBinding
	readStrict(t, "nodeagent/cluster_role_binding.yaml", &clusterBinding)
	if clusterBinding.RoleRef != (rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: cluster.Name}) || !reflect.DeepEqual(clusterBinding.Subjects, subjects) {
		t.Errorf("the node agent's ClusterRoleBinding %+v, want ClusterRole %s bound to %+v", clusterBinding, cluster.Name, subjects)
	}

	var role rbacv1.Role
	readStrict(t, "nodeagent/role.yaml", &role)
	want = []rbacv1.PolicyRule{
		{APIGroups: []string{""}, Resources: []string{"configmaps"}, Verbs: []string{"get"}},
		{APIGroups: []string{"coordination.k8s.io"}, Resources: []string{"leases"}, Verbs: []string{"get", "create", "update"}},
	}
	if !reflect.DeepEqual(role.Rules, want) {
		t.Errorf("the node agent's Role grants %+v, want only get on configmaps, and get, create and update on leases", role.Rules)
	}
	var binding rbacv1.RoleBinding
	readStrict(t, "nodeagent/role_binding.yaml", &binding)
	// Where kustomize puts the operator's own objects, and so its node views.
	var operatorSA corev1.ServiceAccount
	readStrict(t, "rbac/service_account.yaml", &operatorSA)
	if role.Namespace != operatorSA.Namespace || binding.Namespace != role.Namespace ||
		binding.RoleRef != (rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: role.Name}) || !reflect.DeepEqual(binding.Subjects, subjects) {
		t.Errorf("the node agent's Role %s/%s and RoleBinding %+v, want the Role bound to %+v in the operator's namespace %s",
			role.Namespace, role.Name, binding, subjects, operatorSA.Namespace)
	}

	var ds appsv1.DaemonSet
	readStrict(t, "nodeagent/daemonset.yaml", &ds)
	if pod := ds.Spec.Template.Spec; pod.ServiceAccountName != sa.Name || pod.AutomountServiceAccountToken == nil || !*pod.AutomountServiceAccountToken {
		t.Errorf("the node agent runs as %q with its token mounted %v, want %s, mounted", pod.ServiceAccountName, pod.AutomountServiceAccountToken, sa.Name)
	}
}

func readStrict(t *testing.T, path string, out any) {
	t.Helper()
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.UnmarshalStrict(raw, out); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
}
