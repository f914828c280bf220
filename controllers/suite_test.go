//go:build envtest

package controllers

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-logr/logr"
	dto "github.com/prometheus/client_model/go"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/utils/clock"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/config"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/consumergroup-operator/consumergroup-operator/api/v1alpha1"
	"github.com/consumergroup-operator/consumergroup-operator/internal/plan"
	"github.com/consumergroup-operator/consumergroup-operator/internal/testenv"
	"github.com/consumergroup-operator/consumergroup-operator/pkg/protocol"
)

// The package shares one real API server (etcd + kube-apiserver) across its tests; each test works in a
// namespace of its own and runs its own manager scoped to it.
var (
	restConfig *rest.Config
	k8s        client.Client
	testScheme = runtime.NewScheme()
	nsCounter  atomic.Int64
)

func TestMain(m *testing.M) {
	// The operator's logs are noise in a passing run; TEST_LOG=1 shows them.
	logOut := io.Discard
	if os.Getenv("TEST_LOG") != "" {
		logOut = os.Stderr
	}
	logf.SetLogger(logr.New(&errorLog{LogSink: zap.New(zap.WriteTo(logOut), zap.UseDevMode(true)).GetSink()}))
	testenv.Main(m, []string{filepath.Join("..", "config", "crd", "bases")}, func(_ *envtest.Environment, cfg *rest.Config) error {
		if err := clientgoscheme.AddToScheme(testScheme); err != nil {
			return err
		}
		if err := v1alpha1.AddToScheme(testScheme); err != nil {
			return err
		}
		restConfig = cfg
		var err error
		k8s, err = client.New(restConfig, client.Options{Scheme: testScheme})
		return err
	})
}

// reconcilerErrors are the errors the controller logged as "Reconciler error", in this process.
var reconcilerErrors struct {
	sync.Mutex
	messages []string
}

// errorLog is a log sink that keeps the errors the controller logs for failed passes: a test can then
// check that a run logged none, since an error in the log must mean something is wrong.
type errorLog struct{ logr.LogSink }

func (l *errorLog) Error(err error, msg string, kv ...any) {
	if msg == "Reconciler error" {
		reconcilerErrors.Lock()
		reconcilerErrors.messages = append(reconcilerErrors.messages, err.Error())
		reconcilerErrors.Unlock()
	}
	l.LogSink.Error(err, msg, kv...)
}

func (l *errorLog) WithValues(kv ...any) logr.LogSink { return &errorLog{l.LogSink.WithValues(kv...)} }
func (l *errorLog) WithName(name string) logr.LogSink { return &errorLog{l.LogSink.WithName(name)} }

// loggedReconcilerErrors are the "Reconciler error" messages logged since the process started.
func loggedReconcilerErrors() []string {
	reconcilerErrors.Lock()
	defer reconcilerErrors.Unlock()
	return append([]string(nil), reconcilerErrors.messages...)
}

// newNamespace creates a namespace for one test.
func newNamespace(t *testing.T) string {
	t.Helper()
	name := fmt.Sprintf("t%d-%s", nsCounter.Add(1), strings.ToLower(strings.ReplaceAll(t.Name(), "/", "-")))
	if len(name) > 50 {
		name = name[:50]
	}
	name = strings.TrimRight(strings.ReplaceAll(name, "_", "-"), "-")
	must(t, k8s.Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}))
	return name
}

// testClockSkew is the clock skew the tests' operator and members allow for: one API server, one clock.
const testClockSkew = 500 * time.Millisecond

// startManager runs the operator scoped to namespace until the test ends or stop is called; configure, if
// any, adjusts its reconciler.
func startManager(t testing.TB, namespace string, configure ...func(*ConsumerGroupReconciler)) (stop func()) {
	t.Helper()
	return startManagerAs(t, namespace, restConfig, configure...)
}

// startManagerAs runs the operator with the credentials of cfg.
func startManagerAs(t testing.TB, namespace string, cfg *rest.Config, configure ...func(*ConsumerGroupReconciler)) (stop func()) {
	t.Helper()
	return startManagerFor(t, []string{namespace}, cfg, configure...)
}

// startManagerFor runs the operator for namespaces with the credentials of cfg.
func startManagerFor(t testing.TB, namespaces []string, cfg *rest.Config, configure ...func(*ConsumerGroupReconciler)) (stop func()) {
	t.Helper()
	watched := map[string]cache.Config{}
	for _, ns := range namespaces {
		watched[ns] = cache.Config{}
	}
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{
		Scheme: testScheme,
		Cache: cache.Options{
			DefaultNamespaces: watched,
			ByObject:          CacheByObject(),
		},
		Metrics:    metricsserver.Options{BindAddress: "0"},
		Controller: config.Controller{SkipNameValidation: ptr.To(true)},
	})
	must(t, err)
	r := &ConsumerGroupReconciler{
		Client:       mgr.GetClient(),
		APIReader:    mgr.GetAPIReader(),
		Recorder:     mgr.GetEventRecorder("consumergroup-operator"),
		Clock:        clock.RealClock{},
		MaxClockSkew: testClockSkew,
		// The kube-apiserver creates the namespace; tests that lose a node renew its Lease there.
		NodeLeaseNamespace: corev1.NamespaceNodeLease,
	}
	for _, c := range configure {
		c(r)
	}
	ctx, cancel := context.WithCancel(context.Background())
	must(t, r.SetupWithManager(ctx, mgr))
	done := make(chan error, 1)
	go func() { done <- mgr.Start(ctx) }()
	stopped := false
	stop = func() {
		if stopped {
			return
		}
		stopped = true
		cancel()
		if err := <-done; err != nil {
			t.Errorf("manager stopped with an error: %v", err)
		}
	}
	t.Cleanup(stop)
	return stop
}

// reconcileCount is how many passes the consumergroup controller has made, in this process.
func reconcileCount(t *testing.T) float64 {
	t.Helper()
	families, err := ctrlmetrics.Registry.Gather()
	must(t, err)
	total := 0.0
	for _, f := range families {
		if f.GetName() != "controller_runtime_reconcile_total" {
			continue
		}
		for _, m := range f.GetMetric() {
			if labelValue(m, "controller") == "consumergroup" {
				total += m.GetCounter().GetValue()
			}
		}
	}
	return total
}

func labelValue(m *dto.Metric, name string) string {
	for _, l := range m.GetLabel() {
		if l.GetName() == name {
			return l.GetValue()
		}
	}
	return ""
}

// eventually polls check until it returns nil, failing the test with check's last error after timeout.
func eventually(t testing.TB, timeout time.Duration, check func() error) {
	t.Helper()
	testenv.Eventually(t, timeout, check)
}

func must(t testing.TB, err error) {
	t.Helper()
	testenv.Must(t, err)
}

func createNode(t testing.TB, name, zone string) *corev1.Node {
	t.Helper()
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{plan.ZoneLabel: zone}}}
	must(t, k8s.Create(context.Background(), n))
	t.Cleanup(func() { _ = k8s.Delete(context.Background(), n) })
	return n
}

// getGroup reads a group.
func getGroup(t testing.TB, ns, name string) *v1alpha1.ConsumerGroup {
	t.Helper()
	var g v1alpha1.ConsumerGroup
	must(t, k8s.Get(context.Background(), types.NamespacedName{Namespace: ns, Name: name}, &g))
	return &g
}

// getAssignment reads a group's assignment ConfigMap; nil when absent.
func getAssignment(t testing.TB, ns, group string) *corev1.ConfigMap {
	t.Helper()
	var cm corev1.ConfigMap
	err := k8s.Get(context.Background(), types.NamespacedName{Namespace: ns, Name: protocol.AssignmentName(group)}, &cm)
	if apierrors.IsNotFound(err) {
		return nil
	}
	must(t, err)
	return &cm
}
