package config

import (
	"os"
	"slices"
	"testing"

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
