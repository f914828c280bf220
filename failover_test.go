//go:build envtest

package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/consumergroup-operator/consumergroup-operator/internal/manager"
	"github.com/consumergroup-operator/consumergroup-operator/internal/testenv"
	"github.com/consumergroup-operator/consumergroup-operator/pkg/protocol"
)

var (
	k8s        client.Client
	kubeconfig []byte
)

func TestMain(m *testing.M) {
	testenv.Main(m, []string{filepath.Join("config", "crd", "bases")}, func(env *envtest.Environment, cfg *rest.Config) error {
		kubeconfig = env.KubeConfig
		var err error
		k8s, err = client.New(cfg, client.Options{Scheme: manager.Scheme()})
		return err
	})
}

// TestFailover runs two replicas of the operator binary, with leader election and its default timings,
// and measures how long the group goes unattended when the leader goes: stopped by SIGTERM, as in a
// rolling update, it releases its Lease and the standby publishes within 2 s; killed with SIGKILL, the
// standby takes over once the lease duration has passed since the last renewal, within about a lease
// duration and a retry period.
func TestFailover(t *testing.T) {
	dir := t.TempDir()
	binary := testenv.Build(t, "consumergroup-operator", ".", testenv.VersionStamp{})
	kc, err := clientcmd.Load(kubeconfig)
	testenv.Must(t, err)
	kcPath := filepath.Join(dir, "kubeconfig")
	testenv.Must(t, clientcmd.WriteToFile(*kc, kcPath))

	ns := fmt.Sprintf("failover-%d", time.Now().UnixNano())
	testenv.Must(t, k8s.Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}))
	testenv.Group(ns, "g").Topic("t", testenv.Broker("b", 12, "")).Create(t, k8s)
	testenv.Pod(ns, "g-0", "g").Create(t, k8s)

	start := func(name string) *exec.Cmd {
		cmd := exec.Command(binary, "--leader-elect", "--leader-election-namespace", ns, "--namespaces", ns,
			"--metrics-bind-address", "0", "--health-probe-bind-address", "0", "--kubeconfig", kcPath)
		log, err := os.Create(filepath.Join(dir, name+".log"))
		testenv.Must(t, err)
		cmd.Stdout, cmd.Stderr = log, log
		testenv.Must(t, cmd.Start())
		t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait(); _ = log.Close() })
		return cmd
	}
	members := func() int {
		var cm corev1.ConfigMap
		if err := k8s.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: protocol.AssignmentName("g")}, &cm); err != nil {
			return -1
		}
		return len(cm.Data)
	}
	// published waits until the assignment lists want members, and says how long that took since t0.
	published := func(want int, t0 time.Time, bound time.Duration) time.Duration {
		t.Helper()
		testenv.Poll(t, bound+30*time.Second, 20*time.Millisecond, nil, func() error {
			if n := members(); n != want {
				return fmt.Errorf("the assignment lists %d members, want %d", n, want)
			}
			return nil
		})
		return time.Since(t0)
	}
	first := start("first")
	published(1, time.Now(), time.Minute)
	second := start("second")
	// The standby is up once it has tried the Lease; give it time to start.
	time.Sleep(3 * time.Second)

	// A rolling update: SIGTERM, and a change to publish at the same moment.
	t0 := time.Now()
	testenv.Must(t, first.Process.Signal(syscall.SIGTERM))
	testenv.Pod(ns, "g-1", "g").Create(t, k8s)
	graceful := published(2, t0, 2*time.Second)
	if err := first.Wait(); err != nil {
		t.Errorf("the replica stopped by SIGTERM exited with %v", err)
	}

	start("third")
	time.Sleep(3 * time.Second)
	// The leader dies at once.
	el := manager.DefaultLeaderElection
	t0 = time.Now()
	testenv.Must(t, second.Process.Signal(syscall.SIGKILL))
	testenv.Pod(ns, "g-2", "g").Create(t, k8s)
	killed := published(3, t0, el.LeaseDuration+el.RetryPeriod)

	t.Logf("SIGTERM: the standby published %v after the leader was stopped; SIGKILL: %v after it was killed (lease duration %v, retry period %v)",
		graceful.Round(time.Millisecond), killed.Round(time.Millisecond), el.LeaseDuration, el.RetryPeriod)
	if graceful > 2*time.Second {
		t.Errorf("after SIGTERM the standby took %v to publish, want under 2 s", graceful)
	}
	// A standby counts the lease from when it saw the last renewal and tries every retry period; the
	// publication itself takes a pass.
	if bound := el.LeaseDuration + 2*el.RetryPeriod + time.Second; killed > bound {
		t.Errorf("after SIGKILL the standby took %v to publish, want under %v", killed, bound)
	}
}
