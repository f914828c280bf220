package main

import (
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	monitoringv1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
)

// The metrics endpoint is HTTPS with authentication and authorization by default, in install.yaml and in
// the chart (docs/metrics.md); the end-to-end check that a scrape is refused or served is
// internal/manager's TestSecureMetrics, against a real API server.

// container is the operator's container in objs' one Deployment.
func container(t *testing.T, objs []*unstructured.Unstructured) (appsv1.Deployment, corev1.Container) {
	t.Helper()
	deps := find(objs, "Deployment")
	if len(deps) != 1 {
		t.Fatalf("%d Deployments, want 1", len(deps))
	}
	var dep appsv1.Deployment
	for _, d := range deps {
		as(t, d, &dep)
	}
	return dep, dep.Spec.Template.Spec.Containers[0]
}

// configRules reads the rules of a ClusterRole in config/rbac.
func configRules(t *testing.T, file string) []rbacv1.PolicyRule {
	t.Helper()
	var role rbacv1.ClusterRole
	readYAML(t, filepath.Join(root, "config", "rbac", file), &role)
	if len(role.Rules) == 0 {
		t.Fatalf("config/rbac/%s has no rules", file)
	}
	return role.Rules
}

// checkSecureMetrics checks objs (install.yaml's or the chart's) for a metrics endpoint on port 8443 served
// secure, a Service in front, and the ClusterRoles of config/rbac: the auth role bound to the operator's
// ServiceAccount, and metrics-reader.
func checkSecureMetrics(t *testing.T, objs []*unstructured.Unstructured, authRole, authBinding, readerRole string) {
	t.Helper()
	dep, c := container(t, objs)
	for _, want := range []string{"--metrics-bind-address=:8443"} {
		if !slices.Contains(c.Args, want) {
			t.Errorf("args %q lack %s", c.Args, want)
		}
	}
	if !slices.Contains(c.Args, "--metrics-secure") && !slices.Contains(c.Args, "--metrics-secure=true") {
		t.Errorf("args %q do not serve the metrics secure", c.Args)
	}
	if !slices.ContainsFunc(c.Ports, func(p corev1.ContainerPort) bool { return p.Name == "metrics" && p.ContainerPort == 8443 }) {
		t.Errorf("container ports %+v, want metrics on 8443", c.Ports)
	}
	var svc corev1.Service
	for _, o := range find(objs, "Service") {
		as(t, o, &svc)
	}
	if len(svc.Spec.Ports) != 1 || svc.Spec.Ports[0].Port != 8443 || svc.Spec.Ports[0].TargetPort.String() != "metrics" {
		t.Errorf("metrics Service ports %+v, want 8443 to the container's metrics port", svc.Spec.Ports)
	}

	roles := find(objs, "ClusterRole")
	for name, file := range map[string]string{authRole: "metrics_auth_role.yaml", readerRole: "metrics_reader_role.yaml"} {
		var role rbacv1.ClusterRole
		if roles[name] == nil {
			t.Errorf("no ClusterRole %s, of %v", name, keys(roles))
			continue
		}
		as(t, roles[name], &role)
		if want := configRules(t, file); !reflect.DeepEqual(role.Rules, want) {
			t.Errorf("ClusterRole %s grants %v, want config/rbac/%s's %v", name, role.Rules, file, want)
		}
	}
	var binding rbacv1.ClusterRoleBinding
	if o := find(objs, "ClusterRoleBinding")[authBinding]; o != nil {
		as(t, o, &binding)
	}
	want := []rbacv1.Subject{{Kind: "ServiceAccount", Name: dep.Spec.Template.Spec.ServiceAccountName, Namespace: dep.Namespace}}
	if binding.RoleRef.Name != authRole || !reflect.DeepEqual(binding.Subjects, want) {
		t.Errorf("ClusterRoleBinding %s: %+v, want %s bound to %+v", authBinding, binding, authRole, want)
	}
}

// TestInstallMetrics: install.yaml serves the metrics secure, and config/prometheus/servicemonitor.yaml
// scrapes its Service over HTTPS with a token.
func TestInstallMetrics(t *testing.T) {
	install, err := renderInstall(root, "registry.example/cg/consumergroup-operator", "0.1.0")
	must(t, err)
	objs := decodeAll(t, install)
	checkSecureMetrics(t, objs, "consumergroup-metrics-auth-role", "consumergroup-metrics-auth-rolebinding", "consumergroup-metrics-reader")

	var svc corev1.Service
	for _, o := range find(objs, "Service") {
		as(t, o, &svc)
	}
	var u unstructured.Unstructured
	readYAML(t, filepath.Join(root, "config", "prometheus", "servicemonitor.yaml"), &u.Object)
	var sm monitoringv1.ServiceMonitor
	as(t, &u, &sm)
	sel, err := labels.ValidatedSelectorFromSet(sm.Spec.Selector.MatchLabels)
	must(t, err)
	if sm.Namespace != svc.Namespace || !sel.Matches(labels.Set(svc.Labels)) {
		t.Errorf("the ServiceMonitor in %s selects %v, not the Service %s/%s labelled %v", sm.Namespace, sel, svc.Namespace, svc.Name, svc.Labels)
	}
	checkHTTPSEndpoint(t, sm, svc.Spec.Ports[0].Name)
}

// checkHTTPSEndpoint checks that sm scrapes port over HTTPS with the Prometheus ServiceAccount's token.
func checkHTTPSEndpoint(t *testing.T, sm monitoringv1.ServiceMonitor, port string) {
	t.Helper()
	if len(sm.Spec.Endpoints) != 1 {
		t.Fatalf("ServiceMonitor endpoints %+v, want 1", sm.Spec.Endpoints)
	}
	e := sm.Spec.Endpoints[0]
	if e.Port != port || e.Scheme == nil || string(*e.Scheme) != "https" || e.Path != "/metrics" {
		t.Errorf("ServiceMonitor endpoint port %q, scheme %v, path %q: want https on %q, /metrics", e.Port, e.Scheme, e.Path, port)
	}
	if e.BearerTokenFile != "/var/run/secrets/kubernetes.io/serviceaccount/token" { //nolint:staticcheck // Prometheus's own token has no Secret to reference.
		t.Errorf("ServiceMonitor sends no ServiceAccount token")
	}
	if e.TLSConfig == nil {
		t.Errorf("ServiceMonitor has no TLS config")
	}
}

// TestChartMetrics renders the chart's metrics values: secure by default, a certificate Secret, readers,
// and plain HTTP when secure is off.
func TestChartMetrics(t *testing.T) {
	t.Run("defaults", func(t *testing.T) {
		objs := renderChart(t, map[string]any{"metrics": map[string]any{"serviceMonitor": map[string]any{"enabled": true}}}, "ops")
		checkSecureMetrics(t, objs, "cgo-consumergroup-operator-metrics-auth", "cgo-consumergroup-operator-metrics-auth", "cgo-consumergroup-operator-metrics-reader")
		if _, c := container(t, objs); slices.ContainsFunc(c.Args, func(a string) bool { return strings.HasPrefix(a, "--metrics-cert-path") }) {
			t.Errorf("args %q name a certificate without metrics.certSecret", c.Args)
		}
		sm := serviceMonitor(t, objs)
		checkHTTPSEndpoint(t, sm, "metrics")
		if tls := sm.Spec.Endpoints[0].TLSConfig; tls == nil || tls.InsecureSkipVerify == nil || !*tls.InsecureSkipVerify {
			t.Errorf("the self-signed certificate cannot be verified: want insecureSkipVerify, got %+v", tls)
		}
		if crb := find(objs, "ClusterRoleBinding")["cgo-consumergroup-operator-metrics-reader"]; crb != nil {
			t.Errorf("metrics-reader bound to %v without metrics.readers", crb.Object["subjects"])
		}
	})

	t.Run("certificate and readers", func(t *testing.T) {
		objs := renderChart(t, map[string]any{"metrics": map[string]any{
			"certSecret":     "metrics-tls",
			"readers":        []any{map[string]any{"name": "prometheus-k8s", "namespace": "monitoring"}},
			"serviceMonitor": map[string]any{"enabled": true},
		}}, "ops")
		dep, c := container(t, objs)
		if !slices.Contains(c.Args, "--metrics-cert-path=/etc/consumergroup-operator/metrics-certs") ||
			len(c.VolumeMounts) != 1 || c.VolumeMounts[0].MountPath != "/etc/consumergroup-operator/metrics-certs" {
			t.Errorf("args %q, mounts %+v: want the certificate mounted and named", c.Args, c.VolumeMounts)
		}
		if v := dep.Spec.Template.Spec.Volumes; len(v) != 1 || v[0].Secret == nil || v[0].Secret.SecretName != "metrics-tls" {
			t.Errorf("volumes %+v, want the Secret metrics-tls", v)
		}
		tls := serviceMonitor(t, objs).Spec.Endpoints[0].TLSConfig
		if tls == nil || tls.InsecureSkipVerify != nil || tls.CA.Secret == nil || tls.CA.Secret.Name != "metrics-tls" || tls.CA.Secret.Key != "ca.crt" ||
			tls.ServerName == nil || *tls.ServerName != "cgo-consumergroup-operator-metrics.ops.svc" {
			t.Errorf("ServiceMonitor TLS %+v, want the certificate verified against metrics-tls's ca.crt for the Service's name", tls)
		}
		var crb rbacv1.ClusterRoleBinding
		if o := find(objs, "ClusterRoleBinding")["cgo-consumergroup-operator-metrics-reader"]; o != nil {
			as(t, o, &crb)
		}
		want := []rbacv1.Subject{{Kind: "ServiceAccount", Name: "prometheus-k8s", Namespace: "monitoring"}}
		if crb.RoleRef.Name != "cgo-consumergroup-operator-metrics-reader" || !reflect.DeepEqual(crb.Subjects, want) {
			t.Errorf("metrics-reader binding %+v, want it bound to %+v", crb, want)
		}
	})

	t.Run("plain HTTP", func(t *testing.T) {
		objs := renderChart(t, map[string]any{"metrics": map[string]any{"secure": false, "serviceMonitor": map[string]any{"enabled": true}}}, "ops")
		if _, c := container(t, objs); !slices.Contains(c.Args, "--metrics-secure=false") {
			t.Errorf("args %q, want --metrics-secure=false", c.Args)
		}
		for _, name := range []string{"cgo-consumergroup-operator-metrics-auth", "cgo-consumergroup-operator-metrics-reader"} {
			if find(objs, "ClusterRole")[name] != nil {
				t.Errorf("ClusterRole %s without secure metrics", name)
			}
		}
		if e := serviceMonitor(t, objs).Spec.Endpoints[0]; e.Scheme != nil || e.TLSConfig != nil || e.BearerTokenFile != "" { //nolint:staticcheck // see checkHTTPSEndpoint.
			t.Errorf("plain HTTP endpoint %+v scrapes with TLS or a token", e)
		}
	})
}

func serviceMonitor(t *testing.T, objs []*unstructured.Unstructured) monitoringv1.ServiceMonitor {
	t.Helper()
	sms := find(objs, "ServiceMonitor")
	if len(sms) != 1 {
		t.Fatalf("%d ServiceMonitors, want 1", len(sms))
	}
	var sm monitoringv1.ServiceMonitor
	for _, o := range sms {
		as(t, o, &sm)
	}
	return sm
}
