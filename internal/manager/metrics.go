package manager

import (
	"cmp"
	"crypto/tls"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/metrics/filters"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
)

// MetricsServing says how the operator serves its metrics endpoint (/metrics).
type MetricsServing struct {
	// BindAddress is the address the endpoint listens on; "0" disables it.
	BindAddress string
	// Secure serves HTTPS, and answers only requests whose bearer token the API server authenticates (a
	// TokenReview) and authorizes to get the non-resource URL /metrics (a SubjectAccessReview): the
	// operator's ServiceAccount needs config/rbac/metrics_auth_role.yaml, a scraper metrics_reader_role.yaml.
	// Without it the endpoint is plain HTTP that anybody who reaches it may read.
	Secure bool
	// CertDir holds the serving certificate and key, CertName and KeyName in it (tls.crt and tls.key when
	// empty), reloaded when they change (cert-manager renews them in place). Empty: controller-runtime's
	// default directory, <temp dir>/k8s-metrics-server/serving-certs, which holds nothing in the operator's
	// image, so a self-signed certificate is generated at start: enough to encrypt the scrape, not for the
	// scraper to verify whom it talks to.
	CertDir, CertName, KeyName string
	// EnableHTTP2 lets clients speak HTTP/2. Off by default, as in kubebuilder's scaffold: HTTP/2's stream
	// cancellation and rapid reset attacks (CVE-2023-44487, CVE-2023-39325) cost a server more than
	// HTTP/1.1's, and a scrape gains nothing from HTTP/2.
	EnableHTTP2 bool
}

// DefaultMetricsServing is what a cluster install runs: HTTPS with authentication and authorization on port
// 8443, with a self-signed certificate.
var DefaultMetricsServing = MetricsServing{BindAddress: ":8443", Secure: true, CertName: "tls.crt", KeyName: "tls.key"}

// Validate refuses a certificate directory without the certificate or the key: controller-runtime would
// fall back to a self-signed certificate without a word, and scrapers that verify it would fail.
func (m MetricsServing) Validate() error {
	if m.CertDir == "" {
		return nil
	}
	if !m.Secure {
		return errors.New("metrics: a certificate directory needs secure serving")
	}
	var errs []error
	for _, name := range []string{cmp.Or(m.CertName, "tls.crt"), cmp.Or(m.KeyName, "tls.key")} {
		if _, err := os.Stat(filepath.Join(m.CertDir, name)); err != nil {
			errs = append(errs, fmt.Errorf("metrics certificate: %w", err))
		}
	}
	return errors.Join(errs...)
}

// Apply sets opts' metrics server to serve as m says.
func (m MetricsServing) Apply(opts *ctrl.Options) {
	o := metricsserver.Options{BindAddress: m.BindAddress, SecureServing: m.Secure}
	if m.Secure {
		o.FilterProvider = filters.WithAuthenticationAndAuthorization
		o.CertDir, o.CertName, o.KeyName = m.CertDir, m.CertName, m.KeyName
		if !m.EnableHTTP2 {
			o.TLSOpts = []func(*tls.Config){func(c *tls.Config) { c.NextProtos = []string{"http/1.1"} }}
		}
	}
	opts.Metrics = o
}
