package main

import (
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"testing"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/kustomize/kyaml/filesys"
	"sigs.k8s.io/yaml"
)

// admissionPolicies are config/admission's policies, by the name they carry there (before kustomize's
// namePrefix), and the file the chart copies each into.
var admissionPolicies = map[string]string{
	"member-lease":           "member_lease_policy.yaml",
	"member-writes":          "member_writes_policy.yaml",
	"assignment-configmaps":  "assignment_policy.yaml",
	"node-views":             "node_view_policy.yaml",
	"node-agent-heartbeats":  "node_agent_heartbeat_policy.yaml",
	"nameserver-credentials": "nameserver_credentials_policy.yaml",
}

// shippedAdmission is what one install carries of the admission policies.
type shippedAdmission struct {
	policies map[string]admissionregistrationv1.ValidatingAdmissionPolicy // by name
	bindings map[string]admissionregistrationv1.ValidatingAdmissionPolicyBinding
	// operator is the namespace and name of the ServiceAccount the operator's Deployment runs as.
	operatorNamespace, operatorServiceAccount string
}

func admissionOf(t *testing.T, objs []*unstructured.Unstructured) shippedAdmission {
	t.Helper()
	s := shippedAdmission{
		policies: map[string]admissionregistrationv1.ValidatingAdmissionPolicy{},
		bindings: map[string]admissionregistrationv1.ValidatingAdmissionPolicyBinding{},
	}
	for name, o := range find(objs, "ValidatingAdmissionPolicy") {
		var p admissionregistrationv1.ValidatingAdmissionPolicy
		as(t, o, &p)
		if p.Namespace != "" {
			t.Errorf("ValidatingAdmissionPolicy %s has namespace %s; it is cluster-scoped", name, p.Namespace)
		}
		s.policies[name] = p
	}
	for name, o := range find(objs, "ValidatingAdmissionPolicyBinding") {
		var b admissionregistrationv1.ValidatingAdmissionPolicyBinding
		as(t, o, &b)
		if b.Namespace != "" {
			t.Errorf("ValidatingAdmissionPolicyBinding %s has namespace %s; it is cluster-scoped", name, b.Namespace)
		}
		s.bindings[name] = b
	}
	for _, o := range find(objs, "Deployment") {
		var dep appsv1.Deployment
		as(t, o, &dep)
		s.operatorNamespace, s.operatorServiceAccount = dep.Namespace, dep.Spec.Template.Spec.ServiceAccountName
	}
	return s
}

// configPolicy reads config/admission's policy named name.
func configPolicy(t *testing.T, name string) admissionregistrationv1.ValidatingAdmissionPolicy {
	t.Helper()
	var p admissionregistrationv1.ValidatingAdmissionPolicy
	data, err := os.ReadFile(filepath.Join(root, "config", "admission", admissionPolicies[name]))
	must(t, err)
	must(t, yaml.UnmarshalStrict(data, &p))
	if p.Name != name {
		t.Fatalf("config/admission/%s holds policy %s, want %s", admissionPolicies[name], p.Name, name)
	}
	return p
}

// serviceAccountUser is the expression of a policy's variable operator or nodeAgent that names the
// ServiceAccount namespace/name.
func serviceAccountUser(namespace, name string) string {
	return "'system:serviceaccount:" + namespace + ":" + name + "'"
}

// withUsers returns spec with its variables operator and nodeAgent set to the expressions operator and
// nodeAgent (when it has those variables).
func withUsers(spec admissionregistrationv1.ValidatingAdmissionPolicySpec, operator, nodeAgent string) admissionregistrationv1.ValidatingAdmissionPolicySpec {
	spec = *spec.DeepCopy()
	for i, v := range spec.Variables {
		switch v.Name {
		case "operator":
			spec.Variables[i].Expression = operator
		case "nodeAgent":
			spec.Variables[i].Expression = nodeAgent
		}
	}
	return spec
}

// check checks that the install carries config/admission's policies under prefix+name, unchanged but for
// the operator of the assignment-configmaps and node-views policies, which must be the ServiceAccount the
// operator's Deployment runs as, and the node agent of the node-agent-heartbeats policy, which must be
// the node agent's ServiceAccount (prefix+"node-agent", in the operator's namespace: TestNodeAgentInConfig
// and TestNodeAgentInChart check that the DaemonSet runs as it), and each bound with Deny; the node
// views' and the heartbeats' bindings hold in the operator's namespace.
func (s shippedAdmission) check(t *testing.T, prefix string) {
	t.Helper()
	if len(s.policies) != len(admissionPolicies) || len(s.bindings) != len(admissionPolicies) {
		t.Fatalf("%d policies %v and %d bindings %v, want %d of each", len(s.policies), keys(s.policies),
			len(s.bindings), keys(s.bindings), len(admissionPolicies))
	}
	if s.operatorServiceAccount == "" {
		t.Fatal("no operator Deployment, or it names no ServiceAccount")
	}
	operator := serviceAccountUser(s.operatorNamespace, s.operatorServiceAccount)
	nodeAgent := serviceAccountUser(s.operatorNamespace, prefix+"node-agent")
	for name := range admissionPolicies {
		p, ok := s.policies[prefix+name]
		if !ok {
			t.Errorf("no policy %s%s, of %v", prefix, name, keys(s.policies))
			continue
		}
		if want := withUsers(configPolicy(t, name).Spec, operator, nodeAgent); !reflect.DeepEqual(p.Spec, want) {
			t.Errorf("policy %s differs from config/admission/%s with the operator %s and the node agent %s (in the chart: copy it into files/admission)",
				p.Name, admissionPolicies[name], operator, nodeAgent)
		}
		b, ok := s.bindings[prefix+name]
		if !ok {
			t.Errorf("no binding %s%s, of %v", prefix, name, keys(s.bindings))
			continue
		}
		if b.Spec.PolicyName != p.Name || !reflect.DeepEqual(b.Spec.ValidationActions, []admissionregistrationv1.ValidationAction{admissionregistrationv1.Deny}) {
			t.Errorf("binding %s binds %q with %v, want %s with [Deny]", b.Name, b.Spec.PolicyName, b.Spec.ValidationActions, p.Name)
		}
		if (p.Spec.ParamKind != nil) != (b.Spec.ParamRef != nil) {
			t.Errorf("policy %s has paramKind %v, its binding paramRef %v", p.Name, p.Spec.ParamKind, b.Spec.ParamRef)
		}
	}
	// The policy with a parameter keeps out of the namespaces of node heartbeats and the control plane.
	sel := s.bindings[prefix+"member-writes"].Spec.MatchResources
	if sel == nil || sel.NamespaceSelector == nil || len(sel.NamespaceSelector.MatchExpressions) != 1 ||
		sel.NamespaceSelector.MatchExpressions[0].Operator != "NotIn" ||
		!slices.Equal(sel.NamespaceSelector.MatchExpressions[0].Values, []string{"kube-system", "kube-node-lease"}) {
		t.Errorf("binding %smember-writes matches %+v, want every namespace but kube-system and kube-node-lease", prefix, sel)
	}
	if b := s.bindings[prefix+"member-lease"]; b.Spec.MatchResources != nil {
		t.Errorf("binding %s is limited to %+v; pods are confined to their own member Lease in every namespace", b.Name, b.Spec.MatchResources)
	}
	// The node views and the heartbeats are in the operator's namespace: their rules hold there, and only
	// there, so that another release keeps writing its own.
	for _, name := range []string{"node-views", "node-agent-heartbeats"} {
		sel = s.bindings[prefix+name].Spec.MatchResources
		if sel == nil || sel.NamespaceSelector == nil || len(sel.NamespaceSelector.MatchLabels) != 0 || len(sel.NamespaceSelector.MatchExpressions) != 1 ||
			sel.NamespaceSelector.MatchExpressions[0].Key != "kubernetes.io/metadata.name" || sel.NamespaceSelector.MatchExpressions[0].Operator != "In" ||
			!slices.Equal(sel.NamespaceSelector.MatchExpressions[0].Values, []string{s.operatorNamespace}) {
			t.Errorf("binding %s%s matches %+v, want the operator's namespace %s only", prefix, name, sel, s.operatorNamespace)
		}
	}
}

// TestAdmissionPoliciesInInstall: install.yaml (kustomize's config/default) carries config/admission's
// policies under the consumergroup- prefix, their bindings point at them, and the assignment ConfigMaps'
// policy names the ServiceAccount the operator runs as.
func TestAdmissionPoliciesInInstall(t *testing.T) {
	install, err := renderInstall(root, "registry.example/cg/consumergroup-operator", "0.1.0")
	must(t, err)
	admissionOf(t, decodeAll(t, install)).check(t, "consumergroup-")

	plain, err := kustomize(filesys.MakeFsOnDisk(), filepath.Join(root, "config", "default"))
	must(t, err)
	admissionOf(t, decodeAll(t, plain)).check(t, "consumergroup-")
}

// TestAdmissionPoliciesInChart: the chart carries the same policies, on by default; the assignment
// ConfigMaps' policy names the release's ServiceAccount and, with watchNamespaces, its binding holds in
// those namespaces only; admissionPolicies.enabled=false leaves them all out.
func TestAdmissionPoliciesInChart(t *testing.T) {
	admissionOf(t, renderChart(t, nil, "consumergroup-system")).check(t, "cgo-consumergroup-operator-")

	s := admissionOf(t, renderChart(t, nonDefaultValues, "ops"))
	s.check(t, "cgo-consumergroup-operator-")
	sel := s.bindings["cgo-consumergroup-operator-assignment-configmaps"].Spec.MatchResources
	if sel == nil || sel.NamespaceSelector == nil || len(sel.NamespaceSelector.MatchExpressions) != 1 ||
		sel.NamespaceSelector.MatchExpressions[0].Key != "kubernetes.io/metadata.name" ||
		sel.NamespaceSelector.MatchExpressions[0].Operator != "In" ||
		!slices.Equal(sel.NamespaceSelector.MatchExpressions[0].Values, []string{"orders", "payments"}) {
		t.Errorf("with watchNamespaces, the assignment ConfigMaps' binding matches %+v, want namespaces orders and payments", sel)
	}

	// The operator is the release's ServiceAccount, also one the chart does not create.
	own := admissionOf(t, renderChart(t, map[string]any{"serviceAccount": map[string]any{"create": false, "name": "ops-operator"}}, "ops"))
	own.check(t, "cgo-consumergroup-operator-")
	if own.operatorServiceAccount != "ops-operator" {
		t.Errorf("the Deployment runs as %s, want ops-operator", own.operatorServiceAccount)
	}

	off := renderChart(t, map[string]any{"admissionPolicies": map[string]any{"enabled": false}}, "ops")
	if n := len(find(off, "ValidatingAdmissionPolicy")) + len(find(off, "ValidatingAdmissionPolicyBinding")); n != 0 {
		t.Errorf("admissionPolicies.enabled=false renders %d policies and bindings", n)
	}

	// Inline name servers need nameserver-credentials, even with the others off.
	inline := admissionOf(t, renderChart(t, map[string]any{"admissionPolicies": map[string]any{"enabled": false},
		"nameServers": map[string]any{"inlineCIDRs": []any{"10.20.0.0/16"}}}, "ops"))
	const name = "cgo-consumergroup-operator-nameserver-credentials"
	p, ok := inline.policies[name]
	if len(inline.policies) != 1 || len(inline.bindings) != 1 || !ok {
		t.Fatalf("with inline name servers and admissionPolicies.enabled=false: policies %v, bindings %v, want only %s",
			keys(inline.policies), keys(inline.bindings), name)
	}
	if !reflect.DeepEqual(p.Spec, configPolicy(t, "nameserver-credentials").Spec) {
		t.Errorf("policy %s differs from config/admission/%s", name, admissionPolicies["nameserver-credentials"])
	}
	if b := inline.bindings[name]; b.Spec.PolicyName != name ||
		!reflect.DeepEqual(b.Spec.ValidationActions, []admissionregistrationv1.ValidationAction{admissionregistrationv1.Deny}) {
		t.Errorf("binding %s binds %q with %v, want %s with [Deny]", b.Name, b.Spec.PolicyName, b.Spec.ValidationActions, name)
	}
}
