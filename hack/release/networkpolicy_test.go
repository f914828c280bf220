package main

import (
	"path/filepath"
	"reflect"
	"slices"
	"testing"

	networkingv1 "k8s.io/api/networking/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"sigs.k8s.io/kustomize/kyaml/filesys"
)

// networkPolicy is objs' one NetworkPolicy, checked to select the pods of objs' one Deployment.
func networkPolicy(t *testing.T, objs []*unstructured.Unstructured) networkingv1.NetworkPolicy {
	t.Helper()
	np := only[networkingv1.NetworkPolicy](t, objs, "NetworkPolicy")
	dep, _ := container(t, objs)
	sel := labels.SelectorFromSet(np.Spec.PodSelector.MatchLabels)
	if np.Namespace != dep.Namespace || len(np.Spec.PodSelector.MatchExpressions) != 0 || sel.Empty() ||
		!sel.Matches(labels.Set(dep.Spec.Template.Labels)) {
		t.Errorf("NetworkPolicy %s/%s selects %v, want the operator's pods (%s/%v)", np.Namespace, np.Name, np.Spec.PodSelector, dep.Namespace, dep.Spec.Template.Labels)
	}
	if !reflect.DeepEqual(np.Spec.PolicyTypes, []networkingv1.PolicyType{networkingv1.PolicyTypeEgress}) {
		t.Errorf("NetworkPolicy %s limits %v, want egress only", np.Name, np.Spec.PolicyTypes)
	}
	return np
}

// TestNetworkPolicy: config/networkpolicy, added to config/default as its kustomization says, limits the
// operator's pods' egress; the chart's, with the same addresses, has the same rules; and the chart
// renders none unless asked.
func TestNetworkPolicy(t *testing.T) {
	fsys, err := configInMemory(root)
	must(t, err)
	must(t, fsys.WriteFile("/with-networkpolicy/kustomization.yaml", []byte("resources:\n  - ../config/default\n")))
	// As the kustomization says: ../networkpolicy among config/default's resources.
	def, err := fsys.ReadFile("/config/default/kustomization.yaml")
	must(t, err)
	def = append(def, []byte("  - ../networkpolicy\n")...)
	must(t, fsys.WriteFile("/config/default/kustomization.yaml", def))
	out, err := kustomize(fsys, "/with-networkpolicy")
	must(t, err)
	config := networkPolicy(t, decodeAll(t, out))
	if config.Namespace != "consumergroup-system" || config.Name != "consumergroup-operator-egress" {
		t.Errorf("config/networkpolicy renders %s/%s, want consumergroup-system/consumergroup-operator-egress", config.Namespace, config.Name)
	}
	plain, err := kustomize(filesys.MakeFsOnDisk(), filepath.Join(root, "config", "default"))
	must(t, err)
	if n := len(find(decodeAll(t, plain), "NetworkPolicy")); n != 0 {
		t.Errorf("config/default renders %d NetworkPolicies; it is opt-in", n)
	}

	// The chart, with config/networkpolicy's placeholders as its values.
	var apiServer, nameServers, ports []any
	for i, rule := range config.Spec.Egress {
		if i == 0 {
			continue // DNS
		}
		for _, peer := range rule.To {
			if i == 1 {
				apiServer = append(apiServer, peer.IPBlock.CIDR)
			} else {
				nameServers = append(nameServers, peer.IPBlock.CIDR)
			}
		}
		if i == 2 {
			for _, p := range rule.Ports {
				ports = append(ports, p.Port.IntValue())
			}
		}
	}
	chart := networkPolicy(t, renderChart(t, map[string]any{"networkPolicy": map[string]any{"enabled": true,
		"apiServerCIDRs": apiServer, "nameServerCIDRs": nameServers, "nameServerPorts": ports}}, "ops"))
	if len(config.Spec.Egress) != 3 || !reflect.DeepEqual(chart.Spec.Egress, config.Spec.Egress) {
		t.Errorf("the chart's egress rules\n%+v\ndiffer from config/networkpolicy's\n%+v", chart.Spec.Egress, config.Spec.Egress)
	}
	// DNS to kube-dns on port 53 only; the API server on 443 and 6443.
	dns := config.Spec.Egress[0]
	if len(dns.To) != 1 || dns.To[0].NamespaceSelector == nil || dns.To[0].PodSelector == nil ||
		dns.To[0].PodSelector.MatchLabels["k8s-app"] != "kube-dns" || len(dns.Ports) != 2 ||
		slices.ContainsFunc(dns.Ports, func(p networkingv1.NetworkPolicyPort) bool { return p.Port.IntValue() != 53 }) {
		t.Errorf("the DNS rule %+v, want kube-dns on port 53", dns)
	}
	api := config.Spec.Egress[1]
	if len(api.Ports) != 2 || api.Ports[0].Port.IntValue() != 443 || api.Ports[1].Port.IntValue() != 6443 {
		t.Errorf("the API server rule %+v, want ports 443 and 6443", api)
	}
	for _, rule := range config.Spec.Egress[1:] {
		for _, peer := range rule.To {
			if peer.IPBlock == nil || peer.NamespaceSelector != nil || peer.PodSelector != nil {
				t.Errorf("rule %+v reaches %+v, want ipBlocks only", rule, peer)
			}
		}
	}

	// The chart's values land; no name servers, no rule for them (not one that allows every destination).
	np := networkPolicy(t, renderChart(t, nonDefaultValues, "ops"))
	if got := np.Spec.Egress[2]; len(got.To) != 1 || got.To[0].IPBlock.CIDR != "10.20.0.0/16" || len(got.Ports) != 2 ||
		got.Ports[0].Port.IntValue() != 9876 || got.Ports[1].Port.IntValue() != 19876 {
		t.Errorf("the name servers' rule %+v, want 10.20.0.0/16 on ports 9876 and 19876", got)
	}
	np = networkPolicy(t, renderChart(t, map[string]any{"networkPolicy": map[string]any{"enabled": true, "apiServerCIDRs": []any{"172.18.0.2/32"}}}, "ops"))
	if len(np.Spec.Egress) != 2 {
		t.Errorf("without nameServerCIDRs: egress rules %+v, want DNS and the API server only", np.Spec.Egress)
	}
	for _, rule := range np.Spec.Egress {
		if len(rule.To) == 0 {
			t.Errorf("rule %+v allows every destination", rule)
		}
	}
	if n := len(find(renderChart(t, nil, "ops"), "NetworkPolicy")); n != 0 {
		t.Errorf("the chart renders %d NetworkPolicies by default", n)
	}
}
