// Package testoperator runs the operator inside a test's process. It lives apart from internal/testenv
// because it imports the controllers, whose own tests use testenv.
package testoperator

import (
	"context"
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/consumergroup-operator/consumergroup-operator/controllers"
	"github.com/consumergroup-operator/consumergroup-operator/internal/manager"
	"github.com/consumergroup-operator/consumergroup-operator/internal/testenv"
	"github.com/consumergroup-operator/consumergroup-operator/pkg/nameserver"
)

// Start creates a namespace named after prefix and runs the operator for it, as the manager binary does
// with --namespaces, until the test ends. Each test gets its own operator and namespace, so tests in one
// process do not see each other's groups. It returns the namespace.
func Start(t testing.TB, cfg *rest.Config, c client.Client, prefix string) string {
	t.Helper()
	ns := fmt.Sprintf("%s-%d", prefix, time.Now().UnixNano())
	testenv.Must(t, c.Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}))
	opts := manager.Options("0", "0", false, "", ns)
	// Controller names are unique per process unless told otherwise; here each test has its own.
	opts.Controller.SkipNameValidation = ptr.To(true)
	mgr, err := ctrl.NewManager(cfg, opts)
	testenv.Must(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	testenv.Must(t, manager.Setup(ctx, mgr, manager.Settings{NameServers: NameServers(t)}))
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := mgr.Start(ctx); err != nil {
			t.Errorf("the operator for namespace %s stopped: %v", ns, err)
		}
	}()
	t.Cleanup(func() { cancel(); <-done })
	return ns
}

// NameServers is the name-server policy of the operators Start runs: inline name servers are on for this
// machine's loopback addresses, where the tests' name-server stand-ins listen, and every source is read
// every second, below the API's minimum, so that tests need not wait.
func NameServers(t testing.TB) controllers.NameServerPolicy {
	t.Helper()
	egress, err := nameserver.ParseEgress([]string{"127.0.0.0/8"}, nil)
	testenv.Must(t, err)
	return controllers.NameServerPolicy{Inline: egress, RefreshInterval: time.Second}
}
