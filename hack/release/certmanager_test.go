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
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/kustomize/kyaml/filesys"
)

// cmIssuer and cmCertificate are the fields of cert-manager.io/v1's Issuer and Certificate that the chart
// and config/certmanager set, named as github.com/cert-manager/cert-manager/pkg/apis/certmanager/v1 names
// them, so that decoding strictly (as) refuses a misspelt or unknown field. The module itself is not a
// dependency: it would bring Kubernetes libraries of its own.
type cmIssuer struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata"`
	Spec              struct {
		SelfSigned *struct{} `json:"selfSigned,omitempty"`
		CA         *struct {
			SecretName string `json:"secretName"`
		} `json:"ca,omitempty"`
	} `json:"spec"`
}

type cmCertificate struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata"`
	Spec              struct {
		IsCA       bool             `json:"isCA,omitempty"`
		CommonName string           `json:"commonName,omitempty"`
		Duration   *metav1.Duration `json:"duration,omitempty"`
		DNSNames   []string         `json:"dnsNames,omitempty"`
		SecretName string           `json:"secretName"`
		Usages     []string         `json:"usages,omitempty"`
		PrivateKey *struct {
			Algorithm      string `json:"algorithm,omitempty"`
			Size           int    `json:"size,omitempty"`
			RotationPolicy string `json:"rotationPolicy,omitempty"`
		} `json:"privateKey,omitempty"`
		IssuerRef struct {
			Name  string `json:"name"`
			Kind  string `json:"kind,omitempty"`
			Group string `json:"group,omitempty"`
		} `json:"issuerRef"`
	} `json:"spec"`
}

// serviceNames are the DNS names of Service svc in its namespace.
func serviceNames(svc corev1.Service) []string {
	n := svc.Name + "." + svc.Namespace
	return []string{svc.Name, n, n + ".svc", n + ".svc.cluster.local"}
}

// checkCertManagerChain checks that objs hold exactly cert-manager's chain for the metrics Service svc: a
// self-signed Issuer, the CA Certificate it signs, the CA's Issuer and the serving Certificate that Issuer
// signs, for svc's names, into a Secret; it returns that Secret's name.
func checkCertManagerChain(t *testing.T, objs []*unstructured.Unstructured, svc corev1.Service) string {
	t.Helper()
	issuers := map[string]cmIssuer{}
	certs := map[string]cmCertificate{}
	for _, o := range objs {
		if o.GetAPIVersion() != "cert-manager.io/v1" {
			continue
		}
		switch o.GetKind() {
		case "Issuer":
			var i cmIssuer
			as(t, o, &i)
			issuers[i.Name] = i
		case "Certificate":
			var c cmCertificate
			as(t, o, &c)
			certs[c.Name] = c
		default:
			t.Errorf("unexpected cert-manager object %s %s", o.GetKind(), o.GetName())
		}
	}
	if len(issuers) != 2 || len(certs) != 2 {
		t.Fatalf("Issuers %v and Certificates %v, want two of each", keys(issuers), keys(certs))
	}
	var names []metav1.ObjectMeta
	for _, i := range issuers {
		names = append(names, i.ObjectMeta)
	}
	for _, c := range certs {
		names = append(names, c.ObjectMeta)
	}
	for _, m := range names {
		if m.Namespace != svc.Namespace {
			t.Errorf("%s is in namespace %q, want the metrics Service's %q", m.Name, m.Namespace, svc.Namespace)
		}
	}
	issuerOf := func(c cmCertificate) (cmIssuer, bool) {
		i, ok := issuers[c.Spec.IssuerRef.Name]
		return i, ok && (c.Spec.IssuerRef.Kind == "" || c.Spec.IssuerRef.Kind == "Issuer") &&
			(c.Spec.IssuerRef.Group == "" || c.Spec.IssuerRef.Group == "cert-manager.io")
	}
	var ca, serving *cmCertificate
	for _, c := range certs {
		if c.Spec.IsCA {
			ca = &c
		} else {
			serving = &c
		}
	}
	if ca == nil || serving == nil {
		t.Fatalf("Certificates %v, want a CA and a serving certificate", certs)
	}
	if i, ok := issuerOf(*ca); !ok || i.Spec.SelfSigned == nil || i.Spec.CA != nil {
		t.Errorf("the CA Certificate %s is issued by %+v, want a self-signed Issuer", ca.Name, ca.Spec.IssuerRef)
	}
	if i, ok := issuerOf(*serving); !ok || i.Spec.CA == nil || i.Spec.CA.SecretName != ca.Spec.SecretName || i.Spec.SelfSigned != nil {
		t.Errorf("the serving Certificate %s is issued by %+v, want the Issuer of the CA in Secret %s", serving.Name, serving.Spec.IssuerRef, ca.Spec.SecretName)
	}
	if !reflect.DeepEqual(serving.Spec.DNSNames, serviceNames(svc)) {
		t.Errorf("the serving Certificate is for %v, want the metrics Service's names %v", serving.Spec.DNSNames, serviceNames(svc))
	}
	if !slices.Contains(serving.Spec.Usages, "server auth") {
		t.Errorf("the serving Certificate's usages %v lack server auth", serving.Spec.Usages)
	}
	if serving.Spec.SecretName == "" || serving.Spec.SecretName == ca.Spec.SecretName {
		t.Errorf("the serving Certificate writes Secret %q, the CA %q", serving.Spec.SecretName, ca.Spec.SecretName)
	}
	return serving.Spec.SecretName
}

// checkServesCertificate checks that objs' Deployment mounts Secret secret and serves it as the metrics
// certificate.
func checkServesCertificate(t *testing.T, objs []*unstructured.Unstructured, secret string) {
	t.Helper()
	dep, c := container(t, objs)
	checkMountsCertificate(t, dep, c, secret)
}

func checkMountsCertificate(t *testing.T, dep appsv1.Deployment, c corev1.Container, secret string) {
	t.Helper()
	const dir = "/etc/consumergroup-operator/metrics-certs"
	var volume string
	for _, v := range dep.Spec.Template.Spec.Volumes {
		if v.Secret != nil && v.Secret.SecretName == secret {
			volume = v.Name
		}
	}
	if volume == "" || !slices.ContainsFunc(c.VolumeMounts, func(m corev1.VolumeMount) bool {
		return m.Name == volume && m.MountPath == dir && m.ReadOnly
	}) {
		t.Errorf("volumes %+v, mounts %+v: want Secret %s mounted at %s", dep.Spec.Template.Spec.Volumes, c.VolumeMounts, secret, dir)
	}
	if !slices.Contains(c.Args, "--metrics-cert-path="+dir) {
		t.Errorf("args %q do not serve the certificate in %s", c.Args, dir)
	}
}

// checkVerifies checks that sm's one endpoint verifies the certificate against ca.crt of Secret secret,
// for the .svc name of Service svc, and does not skip verifying.
func checkVerifies(t *testing.T, sm monitoringv1.ServiceMonitor, secret string, svc corev1.Service) {
	t.Helper()
	tls := sm.Spec.Endpoints[0].TLSConfig
	if tls == nil {
		t.Fatalf("ServiceMonitor %s has no TLS config", sm.Name)
	}
	want := svc.Name + "." + svc.Namespace + ".svc"
	if tls.InsecureSkipVerify != nil || tls.CA.Secret == nil || tls.CA.Secret.Name != secret || tls.CA.Secret.Key != "ca.crt" ||
		tls.ServerName == nil || *tls.ServerName != want {
		serverName := "<none>"
		if tls.ServerName != nil {
			serverName = *tls.ServerName
		}
		t.Errorf("ServiceMonitor %s verifies against %+v for %s (insecureSkipVerify %v), want %s's ca.crt for %s",
			sm.Name, tls.CA.Secret, serverName, tls.InsecureSkipVerify, secret, want)
	}
}

// TestConfigCertManager: config/certmanager, added to config/default as its kustomization says, has
// cert-manager issue a certificate for the metrics Service, mounts it into the operator, and
// config/prometheus/servicemonitor.yaml verifies it with that Secret's CA; without it config/default
// serves a self-signed certificate, which only servicemonitor-insecure.yaml scrapes.
func TestConfigCertManager(t *testing.T) {
	objs := renderWithCertManager(t)
	svc := metricsService(t, objs)
	secret := checkCertManagerChain(t, objs, svc)
	checkServesCertificate(t, objs, secret)
	checkVerifies(t, configServiceMonitor(t, "servicemonitor.yaml"), secret, svc)

	// Without the component: no cert-manager object, no certificate mounted, and the explicitly named
	// insecure ServiceMonitor skips verifying the self-signed certificate.
	plain, err := kustomize(filesys.MakeFsOnDisk(), filepath.Join(root, "config", "default"))
	must(t, err)
	objs = decodeAll(t, plain)
	for _, o := range objs {
		if o.GetAPIVersion() == "cert-manager.io/v1" {
			t.Errorf("config/default renders %s %s; config/certmanager is opt-in", o.GetKind(), o.GetName())
		}
	}
	dep, c := container(t, objs)
	if len(dep.Spec.Template.Spec.Volumes) != 0 || slices.ContainsFunc(c.Args, func(a string) bool { return strings.HasPrefix(a, "--metrics-cert-path") }) {
		t.Errorf("config/default mounts %+v with args %q, want the self-signed certificate", dep.Spec.Template.Spec.Volumes, c.Args)
	}
	insecure := configServiceMonitor(t, "servicemonitor-insecure.yaml")
	if tls := insecure.Spec.Endpoints[0].TLSConfig; tls == nil || tls.InsecureSkipVerify == nil || !*tls.InsecureSkipVerify || tls.CA.Secret != nil {
		t.Errorf("servicemonitor-insecure.yaml TLS %+v, want insecureSkipVerify", tls)
	}
	verified := configServiceMonitor(t, "servicemonitor.yaml")
	verified.Spec.Endpoints[0].TLSConfig, insecure.Spec.Endpoints[0].TLSConfig = nil, nil
	if !reflect.DeepEqual(verified, insecure) {
		t.Errorf("servicemonitor-insecure.yaml differs from servicemonitor.yaml in more than its TLS config:\n%+v\n%+v", insecure, verified)
	}
}

// renderWithCertManager renders config/default with config/certmanager added as its kustomization says.
func renderWithCertManager(t *testing.T) []*unstructured.Unstructured {
	t.Helper()
	fsys, err := configInMemory(root)
	must(t, err)
	must(t, fsys.WriteFile("/with-certmanager/kustomization.yaml", []byte("resources:\n  - ../config/default\n")))
	def, err := fsys.ReadFile("/config/default/kustomization.yaml")
	must(t, err)
	def = append(def, []byte("components:\n  - ../certmanager\n")...)
	must(t, fsys.WriteFile("/config/default/kustomization.yaml", def))
	out, err := kustomize(fsys, "/with-certmanager")
	must(t, err)
	return decodeAll(t, out)
}

// metricsService is objs' one Service.
func metricsService(t *testing.T, objs []*unstructured.Unstructured) corev1.Service {
	t.Helper()
	return only[corev1.Service](t, objs, "Service")
}

// configServiceMonitor reads the ServiceMonitor in config/prometheus/file.
func configServiceMonitor(t *testing.T, file string) monitoringv1.ServiceMonitor {
	t.Helper()
	var u unstructured.Unstructured
	readYAML(t, filepath.Join(root, "config", "prometheus", file), &u.Object)
	var sm monitoringv1.ServiceMonitor
	as(t, &u, &sm)
	if len(sm.Spec.Endpoints) != 1 {
		t.Fatalf("%s: endpoints %+v, want one", file, sm.Spec.Endpoints)
	}
	return sm
}
