package config

import (
	"os"
	"reflect"
	"slices"
	"testing"

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
