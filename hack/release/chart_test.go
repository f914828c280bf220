package main

import (
	"bytes"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	monitoringv1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"
	"helm.sh/helm/v3/pkg/action"
	"helm.sh/helm/v3/pkg/chart/loader"
	"helm.sh/helm/v3/pkg/chartutil"
	"helm.sh/helm/v3/pkg/lint"
	"helm.sh/helm/v3/pkg/lint/support"
	appsv1 "k8s.io/api/apps/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/yaml"
)

var chartDir = filepath.Join(root, "charts", "consumergroup-operator")

// nonDefaultValues exercises every switch the chart has away from its defaults.
var nonDefaultValues = map[string]any{
	"image":           map[string]any{"repository": "registry.example/cg/operator", "tag": "1.2.3", "pullPolicy": "Always"},
	"replicas":        1,
	"leaderElection":  map[string]any{"enabled": false},
	"watchNamespaces": []any{"orders", "payments"},
	"resources":       map[string]any{"requests": map[string]any{"cpu": "250m", "memory": "256Mi"}, "limits": map[string]any{"memory": "1Gi"}},
	"nodeSelector":    map[string]any{"kubernetes.io/os": "linux"},
	"metrics": map[string]any{
		"port":           9090,
		"serviceMonitor": map[string]any{"enabled": true, "labels": map[string]any{"release": "prometheus"}},
		"prometheusRule": map[string]any{"enabled": true},
	},
	"nameServers": map[string]any{"credentialsNamespace": "rocketmq-credentials", "inlineCIDRs": []any{"10.20.0.0/16", "10.30.0.0/16"}, "inlinePorts": []any{9876, 9877}},
	"networkPolicy": map[string]any{"enabled": true, "apiServerCIDRs": []any{"172.18.0.2/32"},
		"nameServerCIDRs": []any{"10.20.0.0/16"}, "nameServerPorts": []any{9876, 19876}},
	"nodeAgent": map[string]any{
		"enabled":           true,
		"image":             map[string]any{"repository": "registry.example/cg/agent", "tag": "1.2.3", "pullPolicy": "Always"},
		"minReadInterval":   "2s",
		"heartbeat":         "12s",
		"resources":         map[string]any{"requests": map[string]any{"cpu": "20m", "memory": "48Mi"}, "limits": map[string]any{"memory": "96Mi"}},
		"tolerations":       []any{map[string]any{"key": "node-role.kubernetes.io/control-plane", "operator": "Exists", "effect": "NoSchedule"}},
		"nodeSelector":      map[string]any{"consumergroup.io/members": "true"},
		"priorityClassName": "system-node-critical",
	},
}

// renderChart renders the chart as `helm template --include-crds` does, into release namespace ns, and
// returns its objects.
func renderChart(t *testing.T, values map[string]any, ns string) []*unstructured.Unstructured {
	t.Helper()
	manifest, err := renderChartManifest(values, ns)
	must(t, err)
	return decodeAll(t, []byte(manifest))
}

func renderChartManifest(values map[string]any, ns string) (string, error) {
	return renderChartManifestFor(values, ns, nil)
}

// renderChartWithAPIs renders the chart as `helm template --api-versions` does: for a cluster that serves
// apiVersions besides Kubernetes' own (.Capabilities.APIVersions).
func renderChartWithAPIs(t *testing.T, values map[string]any, ns string, apiVersions ...string) []*unstructured.Unstructured {
	t.Helper()
	manifest, err := renderChartManifestFor(values, ns, apiVersions)
	must(t, err)
	return decodeAll(t, []byte(manifest))
}

func renderChartManifestFor(values map[string]any, ns string, apiVersions []string) (string, error) {
	ch, err := loader.LoadDir(chartDir)
	if err != nil {
		return "", err
	}
	install := action.NewInstall(&action.Configuration{})
	install.DryRun, install.ClientOnly, install.Replace, install.IncludeCRDs = true, true, true, true
	install.ReleaseName, install.Namespace = "cgo", ns
	install.APIVersions = apiVersions
	rel, err := install.Run(ch, values)
	if err != nil {
		return "", err
	}
	return rel.Manifest, nil
}

// decodeAll splits a multi-document YAML stream into objects.
func decodeAll(t *testing.T, stream []byte) []*unstructured.Unstructured {
	t.Helper()
	var objs []*unstructured.Unstructured
	dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(stream), 4096)
	for {
		var m map[string]any
		if err := dec.Decode(&m); err != nil {
			if err.Error() == "EOF" {
				return objs
			}
			t.Fatal(err)
		}
		if m != nil {
			objs = append(objs, &unstructured.Unstructured{Object: m})
		}
	}
}

// find returns the objects of kind, by name.
func find(objs []*unstructured.Unstructured, kind string) map[string]*unstructured.Unstructured {
	found := map[string]*unstructured.Unstructured{}
	for _, o := range objs {
		if o.GetKind() == kind {
			found[o.GetName()] = o
		}
	}
	return found
}

// as converts o into the typed object out, refusing fields the type does not have.
// only is objs' one object of kind, decoded strictly into a T; the test fails unless there is exactly one.
func only[T any](t *testing.T, objs []*unstructured.Unstructured, kind string) T {
	t.Helper()
	found := find(objs, kind)
	if len(found) != 1 {
		t.Fatalf("%s objects %v, want exactly one", kind, keys(found))
	}
	var out T
	for _, o := range found {
		as(t, o, &out)
	}
	return out
}

func as(t *testing.T, o *unstructured.Unstructured, out any) {
	t.Helper()
	data, err := yaml.Marshal(o.Object)
	must(t, err)
	if err := yaml.UnmarshalStrict(data, out); err != nil {
		t.Fatalf("%s %s: %v", o.GetKind(), o.GetName(), err)
	}
}

func readYAML(t *testing.T, path string, out any) {
	t.Helper()
	data, err := os.ReadFile(path)
	must(t, err)
	must(t, yaml.Unmarshal(data, out))
}

// TestChartLint is helm lint, with the default values and the non-default ones: no warning, no error.
func TestChartLint(t *testing.T) {
	for name, values := range map[string]map[string]any{"default": nil, "non-default": nonDefaultValues} {
		linter := lint.All(chartDir, values, "consumergroup-system", false)
		for _, m := range linter.Messages {
			if m.Severity > support.InfoSev {
				t.Errorf("%s values: %s", name, m)
			}
		}
	}
}

// TestChartDefaults renders the default values and checks what a user of the defaults gets.
func TestChartDefaults(t *testing.T) {
	objs := renderChart(t, nil, "consumergroup-system")
	ch, err := loader.LoadDir(chartDir)
	must(t, err)

	dep, c := container(t, objs)
	if want := operatorRepository + ":" + ch.Metadata.AppVersion; c.Image != want {
		t.Errorf("image %q, want %q", c.Image, want)
	}
	if *dep.Spec.Replicas != 2 || !slices.Contains(c.Args, "--leader-elect") {
		t.Errorf("replicas %d with args %q, want 2 replicas electing a leader", *dep.Spec.Replicas, c.Args)
	}
	if slices.ContainsFunc(c.Args, func(a string) bool { return strings.HasPrefix(a, "--namespaces") }) {
		t.Errorf("args %q limit the namespaces by default", c.Args)
	}
	if !slices.Contains(c.Args, "--credentials-namespace=consumergroup-system") ||
		slices.ContainsFunc(c.Args, func(a string) bool { return strings.HasPrefix(a, "--inline-name-server-cidrs") }) {
		t.Errorf("args %q: want Secrets read in the release namespace, and no inline name servers", c.Args)
	}
	psc := dep.Spec.Template.Spec.SecurityContext
	if psc == nil || psc.RunAsNonRoot == nil || !*psc.RunAsNonRoot || psc.RunAsUser == nil || *psc.RunAsUser != nonroot {
		t.Errorf("pod security context %+v, want non-root user %d (the images' user)", psc, nonroot)
	}
	if sc := c.SecurityContext; sc == nil || sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem ||
		sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation {
		t.Errorf("container security context %+v, want a read-only root and no privilege escalation", sc)
	}

	// The operator's access is exactly the rules generated from the code's markers, bound cluster-wide.
	var generated rbacv1.ClusterRole
	readYAML(t, filepath.Join(root, "config", "rbac", "role.yaml"), &generated)
	roles := find(objs, "ClusterRole")
	var role rbacv1.ClusterRole
	as(t, roles["cgo-consumergroup-operator-manager"], &role)
	if !reflect.DeepEqual(role.Rules, generated.Rules) {
		t.Errorf("the chart's ClusterRole rules\n%v\ndiffer from config/rbac/role.yaml's\n%v", role.Rules, generated.Rules)
	}
	// Besides: the metrics endpoint's authentication and authorization, bound, and metrics-reader, for
	// scrapers (TestChartMetrics).
	if len(roles) != 3 || len(find(objs, "ClusterRoleBinding")) != 2 || len(find(objs, "Role")) != 2 {
		t.Errorf("%d ClusterRoles, %d ClusterRoleBindings, %d Roles: want the manager's role bound cluster-wide, the metrics auth role bound, metrics-reader, the leader election's and the credentials'",
			len(roles), len(find(objs, "ClusterRoleBinding")), len(find(objs, "Role")))
	}
	// Secrets: get, in the release namespace only.
	checkCredentialsRole(t, objs, "consumergroup-system")
	if len(find(objs, "Service")) != 1 || len(find(objs, "ServiceMonitor")) != 0 || len(find(objs, "PrometheusRule")) != 0 {
		t.Errorf("want the metrics Service and no monitoring.coreos.com objects by default")
	}
	if len(find(objs, "NetworkPolicy")) != 0 {
		t.Errorf("a NetworkPolicy by default")
	}
	// Without cert-manager, the metrics certificate is the chart's, signed by its own CA, and served
	// (TestChartMetricsCertificate).
	checkServesCertificate(t, objs, chartCertSecret(t, objs, metricsService(t, objs)).Name)
	if crds := find(objs, "CustomResourceDefinition"); len(crds) != 2 || crds["consumergroups.messaging.consumergroup.io"] == nil ||
		crds["clusternameservers.messaging.consumergroup.io"] == nil {
		t.Errorf("CRDs %v, want ConsumerGroup's and ClusterNameServer's", keys(crds))
	}
}

// getSecrets is the one rule the operator needs on Secrets.
var getSecrets = []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"secrets"}, Verbs: []string{"get"}}}

// checkCredentialsRole checks that objs hold the Role that lets the operator get Secrets in namespace ns,
// bound to the operator's ServiceAccount, and that no other Role or ClusterRole but inline-credentials
// grants anything on Secrets.
func checkCredentialsRole(t *testing.T, objs []*unstructured.Unstructured, ns string) {
	t.Helper()
	var role rbacv1.Role
	var binding rbacv1.RoleBinding
	for _, o := range objs {
		switch {
		case o.GetKind() == "Role" && o.GetName() == "cgo-consumergroup-operator-credentials":
			as(t, o, &role)
		case o.GetKind() == "RoleBinding" && o.GetName() == "cgo-consumergroup-operator-credentials":
			as(t, o, &binding)
		}
	}
	dep, _ := container(t, objs)
	if role.Namespace != ns || !reflect.DeepEqual(role.Rules, getSecrets) {
		t.Errorf("the credentials Role %s/%s grants %+v, want get on secrets in %s", role.Namespace, role.Name, role.Rules, ns)
	}
	want := []rbacv1.Subject{{Kind: "ServiceAccount", Name: dep.Spec.Template.Spec.ServiceAccountName, Namespace: dep.Namespace}}
	if binding.Namespace != ns || binding.RoleRef.Kind != "Role" || binding.RoleRef.Name != role.Name || !reflect.DeepEqual(binding.Subjects, want) {
		t.Errorf("the credentials RoleBinding %+v, want Role %s bound to %+v in %s", binding, role.Name, want, ns)
	}
	for _, o := range objs {
		if (o.GetKind() != "Role" && o.GetKind() != "ClusterRole") || o.GetName() == role.Name || o.GetName() == "cgo-consumergroup-operator-inline-credentials" {
			continue
		}
		var r rbacv1.ClusterRole // a Role's fields are a ClusterRole's but aggregationRule
		as(t, o, &r)
		for _, rule := range r.Rules {
			if slices.Contains(rule.Resources, "secrets") || slices.Contains(rule.Resources, "*") {
				t.Errorf("%s %s grants %v on %v", o.GetKind(), o.GetName(), rule.Verbs, rule.Resources)
			}
		}
	}
}

// TestChartNonDefaults renders values away from every default and checks each lands.
func TestChartNonDefaults(t *testing.T) {
	objs := renderChart(t, nonDefaultValues, "ops")
	var dep appsv1.Deployment
	for _, d := range find(objs, "Deployment") {
		as(t, d, &dep)
	}
	c := dep.Spec.Template.Spec.Containers[0]
	if c.Image != "registry.example/cg/operator:1.2.3" || c.ImagePullPolicy != "Always" {
		t.Errorf("image %q pulled %s", c.Image, c.ImagePullPolicy)
	}
	if *dep.Spec.Replicas != 1 || slices.Contains(c.Args, "--leader-elect") {
		t.Errorf("replicas %d, args %q: want one replica without leader election", *dep.Spec.Replicas, c.Args)
	}
	for _, want := range []string{"--namespaces=orders,payments", "--metrics-bind-address=:9090", "--node-views-namespace=ops",
		"--credentials-namespace=rocketmq-credentials", "--inline-name-server-cidrs=10.20.0.0/16,10.30.0.0/16", "--inline-name-server-ports=9876,9877"} {
		if !slices.Contains(c.Args, want) {
			t.Errorf("args %q lack %s", c.Args, want)
		}
	}
	if got := c.Resources.Limits.Memory().String(); got != "1Gi" {
		t.Errorf("memory limit %s, want 1Gi", got)
	}
	if dep.Spec.Template.Spec.NodeSelector["kubernetes.io/os"] != "linux" {
		t.Errorf("node selector %v", dep.Spec.Template.Spec.NodeSelector)
	}

	// Namespaced RBAC: the manager's rules and, with inline name servers, get on Secrets bound in each
	// watched namespace; the cluster-scoped reads cluster-wide; the credentials Role in its namespace;
	// the node agent's Role, and the manager's rules, for the node views, in the release namespace (which
	// is not watched); and no leader election Role (TestNodeAgentInChart checks the node agent's).
	bindings := map[string]string{}
	for _, o := range objs {
		if o.GetKind() == "RoleBinding" {
			var rb rbacv1.RoleBinding
			as(t, o, &rb)
			bindings[rb.Namespace+"/"+rb.Name] = rb.RoleRef.Kind + "/" + rb.RoleRef.Name
		}
	}
	want := map[string]string{
		"orders/cgo-consumergroup-operator-manager":                   "ClusterRole/cgo-consumergroup-operator-manager",
		"payments/cgo-consumergroup-operator-manager":                 "ClusterRole/cgo-consumergroup-operator-manager",
		"orders/cgo-consumergroup-operator-inline-credentials":        "ClusterRole/cgo-consumergroup-operator-inline-credentials",
		"payments/cgo-consumergroup-operator-inline-credentials":      "ClusterRole/cgo-consumergroup-operator-inline-credentials",
		"kube-node-lease/cgo-consumergroup-operator-node-leases":      "Role/cgo-consumergroup-operator-node-leases",
		"rocketmq-credentials/cgo-consumergroup-operator-credentials": "Role/cgo-consumergroup-operator-credentials",
		"ops/cgo-consumergroup-operator-node-agent":                   "Role/cgo-consumergroup-operator-node-agent",
		"ops/cgo-consumergroup-operator-manager":                      "ClusterRole/cgo-consumergroup-operator-manager",
	}
	if !reflect.DeepEqual(bindings, want) {
		t.Errorf("RoleBindings %v, want %v", bindings, want)
	}
	crbs := find(objs, "ClusterRoleBinding")
	if len(crbs) != 3 || crbs["cgo-consumergroup-operator-cluster-scoped"] == nil || crbs["cgo-consumergroup-operator-metrics-auth"] == nil ||
		crbs["cgo-consumergroup-operator-node-agent"] == nil {
		t.Errorf("ClusterRoleBindings %v, want only the cluster-scoped reads', the metrics endpoint's and the node agent's", keys(crbs))
	}
	checkClusterScopedRole(t, objs)
	checkCredentialsRole(t, objs, "rocketmq-credentials")
	var inline rbacv1.ClusterRole
	as(t, find(objs, "ClusterRole")["cgo-consumergroup-operator-inline-credentials"], &inline)
	if !reflect.DeepEqual(inline.Rules, getSecrets) {
		t.Errorf("the inline credentials ClusterRole grants %+v, want get on secrets", inline.Rules)
	}
	// The node Leases' Role, the credentials', and the node agent's; there is no leader election Role
	// without leader election.
	roles := find(objs, "Role")
	var nodeLeases rbacv1.Role
	if len(roles) != 3 || roles["cgo-consumergroup-operator-node-leases"] == nil || roles["cgo-consumergroup-operator-credentials"] == nil ||
		roles["cgo-consumergroup-operator-node-agent"] == nil {
		t.Fatalf("Roles %v, want only the node Leases', the credentials' and the node agent's", keys(roles))
	}
	as(t, roles["cgo-consumergroup-operator-node-leases"], &nodeLeases)
	if nodeLeases.Namespace != "kube-node-lease" || len(nodeLeases.Rules) != 1 || !reflect.DeepEqual(nodeLeases.Rules[0].Resources, []string{"leases"}) ||
		!reflect.DeepEqual(nodeLeases.Rules[0].Verbs, []string{"get", "list", "watch"}) {
		t.Errorf("the node Leases Role is %+v, want read access to leases in kube-node-lease only", nodeLeases)
	}

	// The Prometheus Operator's objects decode strictly into its own types.
	var sm monitoringv1.ServiceMonitor
	for _, o := range find(objs, "ServiceMonitor") {
		as(t, o, &sm)
	}
	if sm.Labels["release"] != "prometheus" || len(sm.Spec.Endpoints) != 1 || sm.Spec.Endpoints[0].Port != "metrics" {
		t.Errorf("ServiceMonitor %+v", sm)
	}
	var rule monitoringv1.PrometheusRule
	for _, o := range find(objs, "PrometheusRule") {
		as(t, o, &rule)
	}
	var rules monitoringv1.PrometheusRuleSpec
	readYAML(t, filepath.Join(root, "config", "prometheus", "rules.yaml"), &rules)
	if len(rules.Groups) == 0 || !reflect.DeepEqual(rule.Spec, rules) {
		t.Errorf("the chart's PrometheusRule\n%+v\ndiffers from config/prometheus/rules.yaml\n%+v", rule.Spec, rules)
	}
}

// clusterScoped are the cluster-scoped kinds of config/rbac/role.yaml: with watchNamespaces, a
// RoleBinding of the manager's ClusterRole cannot grant them, so the chart grants them cluster-wide.
var clusterScoped = []string{"nodes", "namespaces", "clusternameservers"}

// checkClusterScopedRole checks that the cluster-scoped ClusterRole grants on clusterScoped exactly what
// role.yaml grants on them, and nothing else.
func checkClusterScopedRole(t *testing.T, objs []*unstructured.Unstructured) {
	t.Helper()
	grants := func(rules []rbacv1.PolicyRule) map[string][]string {
		g := map[string][]string{}
		for _, r := range rules {
			for _, group := range r.APIGroups {
				for _, res := range r.Resources {
					if slices.Contains(clusterScoped, res) {
						g[group+"/"+res] = append(g[group+"/"+res], r.Verbs...)
					}
				}
			}
		}
		return g
	}
	var generated, role rbacv1.ClusterRole
	readYAML(t, filepath.Join(root, "config", "rbac", "role.yaml"), &generated)
	as(t, find(objs, "ClusterRole")["cgo-consumergroup-operator-cluster-scoped"], &role)
	want := grants(generated.Rules)
	if len(want) != len(clusterScoped) {
		t.Errorf("role.yaml grants %v of the cluster-scoped kinds %v: has one gone, or has a new one come that the chart's $clusterScoped must list?", want, clusterScoped)
	}
	for _, r := range role.Rules {
		for _, res := range r.Resources {
			if !slices.Contains(clusterScoped, res) {
				t.Errorf("the cluster-scoped ClusterRole grants %v on %s, which is namespaced", r.Verbs, res)
			}
		}
	}
	if got := grants(role.Rules); !reflect.DeepEqual(got, want) {
		t.Errorf("the cluster-scoped ClusterRole grants %v, want role.yaml's %v", got, want)
	}
}

// TestChartRefusesUnsafeValues: two replicas without leader election would both publish; a
// NetworkPolicy without the API server's addresses would cut the operator off from it.
func TestChartRefusesUnsafeValues(t *testing.T) {
	_, err := renderChartManifest(map[string]any{"replicas": 2, "leaderElection": map[string]any{"enabled": false}}, "ops")
	if err == nil || !strings.Contains(err.Error(), "leaderElection.enabled") {
		t.Errorf("rendering 2 replicas without leader election gave %v, want an error naming leaderElection.enabled", err)
	}
	_, err = renderChartManifest(map[string]any{"networkPolicy": map[string]any{"enabled": true}}, "ops")
	if err == nil || !strings.Contains(err.Error(), "networkPolicy.apiServerCIDRs") {
		t.Errorf("rendering a NetworkPolicy without the API server's addresses gave %v, want an error naming networkPolicy.apiServerCIDRs", err)
	}
}

// TestChartCopiesConfig: the chart's CRD, RBAC rules and alert rules are config/'s, as make manifests
// copies them.
func TestChartCopiesConfig(t *testing.T) {
	for chartFile, configFile := range map[string]string{
		"crds/messaging.consumergroup.io_consumergroups.yaml":     "crd/bases/messaging.consumergroup.io_consumergroups.yaml",
		"crds/messaging.consumergroup.io_clusternameservers.yaml": "crd/bases/messaging.consumergroup.io_clusternameservers.yaml",
		"files/role.yaml":                 "rbac/role.yaml",
		"files/leader_election_role.yaml": "rbac/leader_election_role.yaml",
		"files/metrics_auth_role.yaml":    "rbac/metrics_auth_role.yaml",
		"files/metrics_reader_role.yaml":  "rbac/metrics_reader_role.yaml",
		"files/alert-rules.yaml":          "prometheus/rules.yaml",
	} {
		got, err := os.ReadFile(filepath.Join(chartDir, chartFile))
		must(t, err)
		want, err := os.ReadFile(filepath.Join(root, "config", configFile))
		must(t, err)
		if !bytes.Equal(got, want) {
			t.Errorf("%s differs from config/%s: run make manifests", chartFile, configFile)
		}
	}
}

// TestPackageChart packages the chart for a release and reads it back.
func TestPackageChart(t *testing.T) {
	path, err := packageChart(chartDir, "0.4.2", "registry.example/cg", t.TempDir())
	must(t, err)
	ch, err := loader.Load(path)
	must(t, err)
	if ch.Metadata.Version != "0.4.2" || ch.Metadata.AppVersion != "0.4.2" {
		t.Errorf("packaged version %s, appVersion %s, want 0.4.2", ch.Metadata.Version, ch.Metadata.AppVersion)
	}
	values, err := chartutil.CoalesceValues(ch, nil)
	must(t, err)
	if repo, _ := values.PathValue("image.repository"); repo != "registry.example/cg/consumergroup-operator" {
		t.Errorf("packaged image.repository %v", repo)
	}
	if repo, _ := values.PathValue("nodeAgent.image.repository"); repo != "registry.example/cg/consumergroup-agent" {
		t.Errorf("packaged nodeAgent.image.repository %v", repo)
	}
	if len(ch.CRDObjects()) != 2 {
		t.Errorf("the package holds %d CRDs, want 2: ConsumerGroup's and ClusterNameServer's", len(ch.CRDObjects()))
	}
}

func keys[V any](m map[string]V) []string {
	var ks []string
	for k := range m {
		ks = append(ks, k)
	}
	slices.Sort(ks)
	return ks
}
