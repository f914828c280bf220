//go:build scale

// Package scale measures the operator at the sizes its limits are stated for: one group of 65,536 queues
// and 2,048 members, and one operator serving 1,000 groups of 10 pods. Each test starts a control plane of
// its own (etcd and kube-apiserver from KUBEBUILDER_ASSETS), so that one test's objects and watches do
// not weigh on another's figures. The build tag keeps these minutes-long tests out of `go test ./...`;
// `make test-scale` runs them.
package scale

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	"github.com/consumergroup-operator/consumergroup-operator/internal/manager"
	"github.com/consumergroup-operator/consumergroup-operator/internal/testenv"
)

// moduleRoot is the repository root, relative to this package's directory (go test's working directory).
var moduleRoot = filepath.Join("..", "..")

func TestMain(m *testing.M) {
	if os.Getenv("KUBEBUILDER_ASSETS") == "" {
		fmt.Fprintln(os.Stderr, "KUBEBUILDER_ASSETS is not set: run the scale tests with `make test-scale`, which builds etcd and kube-apiserver (hack/envtest-bins.sh) and sets it")
		os.Exit(1)
	}
	// The in-process operator logs a line per pass; SCALE_LOG=1 shows them.
	logOut := io.Discard
	if os.Getenv("SCALE_LOG") != "" {
		logOut = os.Stderr
	}
	logf.SetLogger(zap.New(zap.WriteTo(logOut)))
	os.Exit(m.Run())
}

// cluster is one test's control plane and an administrator's client of it.
type cluster struct {
	env *envtest.Environment
	// cfg is the administrator's config, without client-side rate limiting worth the name: the tests
	// create thousands of objects and their setup time is not what they measure.
	cfg       *rest.Config
	client    client.Client
	clientset kubernetes.Interface
}

// startCluster starts etcd and kube-apiserver with the operator's CRDs installed, stopped when tb ends.
func startCluster(tb testing.TB) *cluster {
	tb.Helper()
	env := &envtest.Environment{
		CRDDirectoryPaths:     []string{filepath.Join(moduleRoot, "config", "crd", "bases")},
		ErrorIfCRDPathMissing: true,
	}
	cfg, err := env.Start()
	if err != nil {
		tb.Fatalf("starting the control plane: %v", err)
	}
	tb.Cleanup(func() {
		if err := env.Stop(); err != nil {
			tb.Errorf("stopping the control plane: %v", err)
		}
	})
	cfg = rest.CopyConfig(cfg)
	cfg.QPS, cfg.Burst = 5000, 10000
	c, err := client.New(cfg, client.Options{Scheme: manager.Scheme()})
	must(tb, err)
	return &cluster{env: env, cfg: cfg, client: c, clientset: kubernetes.NewForConfigOrDie(cfg)}
}

func (c *cluster) createNamespace(tb testing.TB, name string) {
	tb.Helper()
	must(tb, c.client.Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}))
}

// memberPod is a pod of one container labelled app=<app>, as a consumer Deployment would make it.
func memberPod(ns, name, app string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: map[string]string{"app": app}},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "consumer", Image: "consumer:scale"}}},
	}
}

// createPod creates p and, as the kubelet would once its containers run, writes its status: Running,
// and Ready or not. The test API server runs no kubelet, so the status subresource is written directly.
func (c *cluster) createPod(ctx context.Context, p *corev1.Pod, ready bool) error {
	if err := c.client.Create(ctx, p); err != nil {
		return fmt.Errorf("creating pod %s/%s: %w", p.Namespace, p.Name, err)
	}
	return c.setPodReady(ctx, p, ready)
}

func (c *cluster) setPodReady(ctx context.Context, p *corev1.Pod, ready bool) error {
	status := corev1.ConditionFalse
	if ready {
		status = corev1.ConditionTrue
	}
	p.Status.Phase = corev1.PodRunning
	p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: status, LastTransitionTime: metav1.Now()}}
	if err := c.client.Status().Update(ctx, p); err != nil {
		return fmt.Errorf("writing the status of pod %s/%s: %w", p.Namespace, p.Name, err)
	}
	return nil
}

// createPods creates pods Running and Ready from several goroutines: one at a time, 10,000 pods (two
// requests each) would take minutes of round trips on their own.
func (c *cluster) createPods(tb testing.TB, pods []*corev1.Pod) {
	tb.Helper()
	must(tb, testenv.Parallel(context.Background(), len(pods), 16, func(i int) error {
		return c.createPod(context.Background(), pods[i], true)
	}))
}

func must(tb testing.TB, err error) {
	tb.Helper()
	if err != nil {
		tb.Fatal(err)
	}
}
