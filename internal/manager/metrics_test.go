//go:build envtest

package manager

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/yaml"

	"github.com/consumergroup-operator/consumergroup-operator/internal/testenv"
)

// TestSecureMetrics runs the operator as a cluster does: as its own ServiceAccount, with the access
// config/rbac gives it (role.yaml and metrics_auth_role.yaml), and its metrics served as main.go serves
// them by default. Each scrape is then checked by the real API server: no token is refused, a
// ServiceAccount not bound to config/rbac/metrics_reader_role.yaml is forbidden, one bound to it reads the
// operator's metrics, and plain HTTP gets no metrics at all.
func TestSecureMetrics(t *testing.T) {
	ctx := context.Background()
	ns := fmt.Sprintf("metrics-%d", time.Now().UnixNano())
	testenv.Must(t, k8s.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}))
	cs, err := kubernetes.NewForConfig(restConfig)
	testenv.Must(t, err)
	for _, sa := range []string{"operator", "prometheus", "stranger"} {
		testenv.Must(t, k8s.Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: sa}}))
	}
	bindConfigRole(t, ns, "operator", "role.yaml")
	bindConfigRole(t, ns, "operator", "metrics_auth_role.yaml")
	bindConfigRole(t, ns, "prometheus", "metrics_reader_role.yaml")

	// The operator, with its ServiceAccount's token instead of the tests' administrator.
	operatorCfg := rest.AnonymousClientConfig(restConfig)
	operatorCfg.BearerToken = token(t, cs, ns, "operator")
	addr := freeLoopbackAddress(t)
	opts := Options("0", "0", false, "", ns)
	// Other tests of this package run managers in this process; in a cluster each has its own.
	opts.Controller.SkipNameValidation = ptr.To(true)
	serving := DefaultMetricsServing
	serving.BindAddress = addr
	serving.Apply(&opts)
	mgr, err := ctrl.NewManager(DefaultClientRateLimit.Apply(operatorCfg), opts)
	testenv.Must(t, err)
	mgrCtx, cancel := context.WithCancel(ctx)
	testenv.Must(t, Setup(mgrCtx, mgr, Settings{}))
	done := make(chan error, 1)
	go func() { done <- mgr.Start(mgrCtx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("the manager stopped with an error: %v", err)
		}
	})
	testenv.Group(ns, "orders").Topic("orders", testenv.Broker("broker-a", 4, "")).Create(t, k8s)

	// Prometheus reads the group's series, once the operator has reconciled it.
	prometheus := token(t, cs, ns, "prometheus")
	series := fmt.Sprintf(`consumergroup_queues{group="orders",namespace=%q} 4`, ns)
	testenv.Eventually(t, 30*time.Second, func() error {
		code, body, err := scrape("https", addr, prometheus)
		switch {
		case err != nil:
			return err
		case code != http.StatusOK:
			return fmt.Errorf("a scrape with a metrics-reader token got %d: %s", code, body)
		case !strings.Contains(body, series):
			return fmt.Errorf("the metrics lack %s", series)
		}
		return nil
	})

	for _, tc := range []struct {
		name, token string
		want        int
	}{
		{"no token", "", http.StatusUnauthorized},
		// The TokenReview rejects it with an error, which controller-runtime's filter answers with 500
		// "Authentication failed" rather than 401: refused all the same.
		{"a token the API server did not issue", "not-a-token", http.StatusInternalServerError},
		{"a token of a ServiceAccount not bound to metrics-reader", token(t, cs, ns, "stranger"), http.StatusForbidden},
	} {
		code, body, err := scrape("https", addr, tc.token)
		if err != nil {
			t.Errorf("%s: %v", tc.name, err)
		} else if code != tc.want || strings.Contains(body, "consumergroup_") {
			t.Errorf("%s: status %d, want %d, with no metrics; body %.200q", tc.name, code, tc.want, body)
		}
	}

	// Plain HTTP gets nothing, even with a good token: the endpoint speaks TLS only.
	if code, body, err := scrape("http", addr, prometheus); err == nil && (code == http.StatusOK || strings.Contains(body, "consumergroup_")) {
		t.Errorf("plain HTTP got status %d and %.200q", code, body)
	}
}

// scrape GETs /metrics at addr with a bearer token (none when empty). The operator's certificate is
// self-signed, so it is not verified.
func scrape(scheme, addr, token string) (int, string, error) {
	req, err := http.NewRequest(http.MethodGet, scheme+"://"+addr+"/metrics", nil)
	if err != nil {
		return 0, "", err
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	c := &http.Client{
		Timeout:   10 * time.Second,
		Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}, // the certificate is self-signed
	}
	resp, err := c.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer func() { _ = resp.Body.Close() }()
	body, err := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body), err
}

// bindConfigRole creates the ClusterRole of config/rbac/file, named for ns, and binds it to the
// ServiceAccount ns/sa, as install.yaml does.
func bindConfigRole(t *testing.T, ns, sa, file string) {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("..", "..", "config", "rbac", file))
	testenv.Must(t, err)
	var role rbacv1.ClusterRole
	testenv.Must(t, yaml.UnmarshalStrict(data, &role))
	if role.Kind != "ClusterRole" || len(role.Rules) == 0 {
		t.Fatalf("config/rbac/%s is not a ClusterRole with rules", file)
	}
	name := ns + "-" + role.Name
	role.ObjectMeta = metav1.ObjectMeta{Name: name}
	binding := &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: name},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: ns, Name: sa}},
	}
	ctx := context.Background()
	testenv.Must(t, k8s.Create(ctx, &role))
	testenv.Must(t, k8s.Create(ctx, binding))
	t.Cleanup(func() {
		_ = k8s.Delete(ctx, binding)
		_ = k8s.Delete(ctx, &role)
	})
}

// token is a token of the ServiceAccount ns/sa, from the TokenRequest API, as the kubelet mounts in a pod.
func token(t *testing.T, cs kubernetes.Interface, ns, sa string) string {
	t.Helper()
	tr, err := cs.CoreV1().ServiceAccounts(ns).CreateToken(context.Background(), sa,
		&authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr.To[int64](3600)}}, metav1.CreateOptions{})
	testenv.Must(t, err)
	return tr.Status.Token
}

// freeLoopbackAddress is an address on 127.0.0.1 with a port nothing listens on now.
func freeLoopbackAddress(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	testenv.Must(t, err)
	addr := l.Addr().String()
	testenv.Must(t, l.Close())
	return addr
}
