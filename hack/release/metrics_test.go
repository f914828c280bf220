package main

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
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
	dep := only[appsv1.Deployment](t, objs, "Deployment")
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
		sm := serviceMonitor(t, objs)
		checkHTTPSEndpoint(t, sm, "metrics")
		// Without cert-manager, the chart's own CA (TestChartMetricsCertificate).
		checkVerifies(t, sm, "cgo-consumergroup-operator-metrics-chart-cert", metricsService(t, objs))
		if crb := find(objs, "ClusterRoleBinding")["cgo-consumergroup-operator-metrics-reader"]; crb != nil {
			t.Errorf("metrics-reader bound to %v without metrics.readers", crb.Object["subjects"])
		}
	})

	t.Run("certificate and readers", func(t *testing.T) {
		// With cert-manager's API served, too: the user's Secret wins over every metrics.certificate.
		objs := renderChartWithAPIs(t, map[string]any{"metrics": map[string]any{
			"certSecret":     "metrics-tls",
			"readers":        []any{map[string]any{"name": "prometheus-k8s", "namespace": "monitoring"}},
			"serviceMonitor": map[string]any{"enabled": true},
		}}, "ops", "cert-manager.io/v1")
		dep, c := container(t, objs)
		if len(c.VolumeMounts) != 1 || len(dep.Spec.Template.Spec.Volumes) != 1 {
			t.Errorf("mounts %+v of volumes %+v, want the certificate's only", c.VolumeMounts, dep.Spec.Template.Spec.Volumes)
		}
		checkMountsCertificate(t, dep, c, "metrics-tls")
		checkVerifies(t, serviceMonitor(t, objs), "metrics-tls", metricsService(t, objs))
		checkNoGeneratedCertificate(t, objs)
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
		checkNoGeneratedCertificate(t, objs)
		if dep, c := container(t, objs); len(dep.Spec.Template.Spec.Volumes) != 0 || hasCertPath(c) {
			t.Errorf("plain HTTP with volumes %+v, args %q", dep.Spec.Template.Spec.Volumes, c.Args)
		}
		// Nor with cert-manager's API served.
		checkNoGeneratedCertificate(t, renderChartWithAPIs(t, map[string]any{"metrics": map[string]any{"secure": false}}, "ops", "cert-manager.io/v1"))
	})
}

func serviceMonitor(t *testing.T, objs []*unstructured.Unstructured) monitoringv1.ServiceMonitor {
	t.Helper()
	return only[monitoringv1.ServiceMonitor](t, objs, "ServiceMonitor")
}

func hasCertPath(c corev1.Container) bool {
	return slices.ContainsFunc(c.Args, func(a string) bool { return strings.HasPrefix(a, "--metrics-cert-path") })
}

// checkNoGeneratedCertificate checks that objs hold neither a Secret nor a cert-manager object.
func checkNoGeneratedCertificate(t *testing.T, objs []*unstructured.Unstructured) {
	t.Helper()
	for _, o := range objs {
		if o.GetKind() == "Secret" || o.GetAPIVersion() == "cert-manager.io/v1" {
			t.Errorf("%s %s rendered, want no generated certificate", o.GetKind(), o.GetName())
		}
	}
}

// chartCertSecret is objs' one Secret, which must be the metrics certificate the chart generated, checked:
// a kubernetes.io/tls Secret whose tls.crt, a server certificate with the key tls.key, verifies against
// the CA in ca.crt for each of the metrics Service svc's names, and for no other name.
func chartCertSecret(t *testing.T, objs []*unstructured.Unstructured, svc corev1.Service) corev1.Secret {
	t.Helper()
	s := only[corev1.Secret](t, objs, "Secret")
	if s.Type != corev1.SecretTypeTLS || s.Namespace != svc.Namespace {
		t.Errorf("Secret %s/%s of type %s, want kubernetes.io/tls in %s", s.Namespace, s.Name, s.Type, svc.Namespace)
	}
	if _, err := tls.X509KeyPair(s.Data["tls.crt"], s.Data["tls.key"]); err != nil {
		t.Errorf("tls.crt and tls.key: %v", err)
	}
	ca, cert := parseCert(t, s.Data["ca.crt"]), parseCert(t, s.Data["tls.crt"])
	if !ca.IsCA || cert.IsCA || bytes.Equal(ca.Raw, cert.Raw) {
		t.Errorf("ca.crt (CA %v) and tls.crt (CA %v): want a CA and a certificate it signs", ca.IsCA, cert.IsCA)
	}
	roots := x509.NewCertPool()
	roots.AddCert(ca)
	for _, name := range serviceNames(svc) {
		opts := x509.VerifyOptions{DNSName: name, Roots: roots, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
		if _, err := cert.Verify(opts); err != nil {
			t.Errorf("tls.crt does not verify against ca.crt for %s: %v", name, err)
		}
	}
	if _, err := cert.Verify(x509.VerifyOptions{DNSName: "metrics.example", Roots: roots}); err == nil {
		t.Errorf("tls.crt verifies for metrics.example, a name that is not the Service's")
	}
	return s
}

func parseCert(t *testing.T, data []byte) *x509.Certificate {
	t.Helper()
	block, rest := pem.Decode(data)
	if block == nil || block.Type != "CERTIFICATE" || len(bytes.TrimSpace(rest)) != 0 {
		t.Fatalf("want one PEM certificate, got %q", data)
	}
	cert, err := x509.ParseCertificate(block.Bytes)
	must(t, err)
	return cert
}

// TestChartMetricsCertificate renders each way metrics.certificate provides the metrics endpoint's
// certificate, and checks that the operator serves it and the ServiceMonitor verifies it, or, with a
// self-signed certificate, that the chart renders a ServiceMonitor that skips verifying only when told to.
func TestChartMetricsCertificate(t *testing.T) {
	monitored := func(metrics map[string]any) map[string]any {
		sm := map[string]any{"enabled": true}
		if v, ok := metrics["insecureSkipVerify"]; ok {
			sm["insecureSkipVerify"] = v
			delete(metrics, "insecureSkipVerify")
		}
		metrics["serviceMonitor"] = sm
		return map[string]any{"metrics": metrics}
	}

	t.Run("chart: the default without cert-manager", func(t *testing.T) {
		for name, values := range map[string]map[string]any{
			"auto":  monitored(map[string]any{}),
			"chart": monitored(map[string]any{"certificate": "chart"}),
		} {
			apis := map[string][]string{"auto": nil, "chart": {"cert-manager.io/v1"}}[name]
			objs := renderChartWithAPIs(t, values, "ops", apis...)
			svc := metricsService(t, objs)
			s := chartCertSecret(t, objs, svc)
			if s.Name != "cgo-consumergroup-operator-metrics-chart-cert" {
				t.Errorf("%s: Secret %s", name, s.Name)
			}
			checkServesCertificate(t, objs, s.Name)
			checkVerifies(t, serviceMonitor(t, objs), s.Name, svc)
			for _, o := range objs {
				if o.GetAPIVersion() == "cert-manager.io/v1" {
					t.Errorf("%s: %s %s rendered without metrics.certificate: certManager", name, o.GetKind(), o.GetName())
				}
			}
		}
	})

	t.Run("certManager", func(t *testing.T) {
		for name, objs := range map[string][]*unstructured.Unstructured{
			"auto, cert-manager served": renderChartWithAPIs(t, monitored(map[string]any{}), "ops", "cert-manager.io/v1"),
			"asked for":                 renderChart(t, monitored(map[string]any{"certificate": "certManager"}), "ops"),
		} {
			t.Run(name, func(t *testing.T) {
				svc := metricsService(t, objs)
				secret := checkCertManagerChain(t, objs, svc)
				if secret != "cgo-consumergroup-operator-metrics-cert" {
					t.Errorf("the certificate's Secret is %s, want cgo-consumergroup-operator-metrics-cert", secret)
				}
				if n := len(find(objs, "Secret")); n != 0 {
					t.Errorf("%d Secrets rendered: cert-manager writes the certificate's", n)
				}
				checkServesCertificate(t, objs, secret)
				checkVerifies(t, serviceMonitor(t, objs), secret, svc)
			})
		}
	})

	t.Run("selfSigned", func(t *testing.T) {
		_, err := renderChartManifest(monitored(map[string]any{"certificate": "selfSigned"}), "ops")
		if err == nil || !strings.Contains(err.Error(), "metrics.serviceMonitor.insecureSkipVerify: true") ||
			!strings.Contains(err.Error(), "metrics.certificate") || !strings.Contains(err.Error(), "metrics.certSecret") {
			t.Errorf("a ServiceMonitor for the self-signed certificate without insecureSkipVerify gave %v, want an error naming the values to set", err)
		}

		objs := renderChart(t, monitored(map[string]any{"certificate": "selfSigned", "insecureSkipVerify": true}), "ops")
		checkNoGeneratedCertificate(t, objs)
		if dep, c := container(t, objs); len(dep.Spec.Template.Spec.Volumes) != 0 || hasCertPath(c) {
			t.Errorf("volumes %+v, args %q: want the operator's self-signed certificate", dep.Spec.Template.Spec.Volumes, c.Args)
		}
		sm := serviceMonitor(t, objs)
		checkHTTPSEndpoint(t, sm, "metrics")
		if tc := sm.Spec.Endpoints[0].TLSConfig; tc.InsecureSkipVerify == nil || !*tc.InsecureSkipVerify || tc.CA.Secret != nil || tc.ServerName != nil {
			t.Errorf("ServiceMonitor TLS %+v, want insecureSkipVerify only", tc)
		}

		// Without a ServiceMonitor there is nothing to refuse.
		checkNoGeneratedCertificate(t, renderChart(t, map[string]any{"metrics": map[string]any{"certificate": "selfSigned"}}, "ops"))
	})

	t.Run("insecureSkipVerify does not undo a verifiable certificate", func(t *testing.T) {
		objs := renderChart(t, monitored(map[string]any{"insecureSkipVerify": true}), "ops")
		checkVerifies(t, serviceMonitor(t, objs), chartCertSecret(t, objs, metricsService(t, objs)).Name, metricsService(t, objs))
	})

	t.Run("metrics off", func(t *testing.T) {
		for _, apis := range [][]string{nil, {"cert-manager.io/v1"}} {
			objs := renderChartWithAPIs(t, map[string]any{"metrics": map[string]any{"enabled": false}}, "ops", apis...)
			checkNoGeneratedCertificate(t, objs)
			if dep, c := container(t, objs); len(dep.Spec.Template.Spec.Volumes) != 0 || hasCertPath(c) {
				t.Errorf("metrics off, with volumes %+v, args %q", dep.Spec.Template.Spec.Volumes, c.Args)
			}
		}
	})

	t.Run("unknown", func(t *testing.T) {
		_, err := renderChartManifest(map[string]any{"metrics": map[string]any{"certificate": "letsEncrypt"}}, "ops")
		if err == nil || !strings.Contains(err.Error(), "metrics.certificate") {
			t.Errorf("metrics.certificate: letsEncrypt gave %v, want an error naming metrics.certificate", err)
		}
	})
}
