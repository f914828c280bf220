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

	"github.com/consumergroup-operator/consumergroup-operator/api/v1alpha1"
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

// writeKubeconfig writes the test control plane's kubeconfig into dir, for the operator binaries, and
// returns its path.
func writeKubeconfig(t *testing.T, dir string) string {
	t.Helper()
	kc, err := clientcmd.Load(kubeconfig)
	testenv.Must(t, err)
	path := filepath.Join(dir, "kubeconfig")
	testenv.Must(t, clientcmd.WriteToFile(*kc, path))
	return path
}

// startReplica starts a replica of the operator binary with leader election in ns, logging to logPath,
// until the test ends.
func startReplica(t *testing.T, binary, ns, kcPath, logPath string) *exec.Cmd {
	t.Helper()
	cmd := exec.Command(binary, "--leader-elect", "--leader-election-namespace", ns, "--namespaces", ns,
		"--metrics-bind-address", "0", "--health-probe-bind-address", "0", "--kubeconfig", kcPath)
	log, err := os.Create(logPath)
	testenv.Must(t, err)
	cmd.Stdout, cmd.Stderr = log, log
	testenv.Must(t, cmd.Start())
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait(); _ = log.Close() })
	return cmd
}

// TestFailover runs two replicas of the operator binary, with leader election and its default timings,
// and measures how long the group goes unattended when the leader goes: stopped by SIGTERM, as in a
// rolling update, it releases its Lease and the standby publishes within 2 s; killed with SIGKILL, the
// standby takes over once the lease duration has passed since the last renewal, within about a lease
// duration and a retry period.
func TestFailover(t *testing.T) {
	dir := t.TempDir()
	binary := testenv.Build(t, "consumergroup-operator", ".", testenv.VersionStamp{})
	kcPath := writeKubeconfig(t, dir)

	ns := fmt.Sprintf("failover-%d", time.Now().UnixNano())
	testenv.Must(t, k8s.Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}))
	testenv.Group(ns, "g").Topic("t", testenv.Broker("b", 12, "")).Create(t, k8s)
	testenv.Pod(ns, "g-0", "g").Create(t, k8s)

	start := func(name string) *exec.Cmd {
		return startReplica(t, binary, ns, kcPath, filepath.Join(dir, name+".log"))
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

// TestFailoverMidHandoff kills the leader (SIGKILL) the moment it has published a revocation: a member
// joined a Cooperative group, and the leader took 4 of the other member's 8 queues from it. The old reader
// takes 3 s to apply that, so it acknowledges only after the leader is dead, and the standby, once it
// leads, must resume the handoff from what the API server holds: the ConfigMap, its bookkeeping and the
// Leases. From the members' own records, the revoked queues are read again within 20 s of the kill, and no
// queue has two readers.
func TestFailoverMidHandoff(t *testing.T) {
	dir := t.TempDir()
	binary := testenv.Build(t, "consumergroup-operator", ".", testenv.VersionStamp{})
	kcPath := writeKubeconfig(t, dir)
	restConfig, err := clientcmd.RESTConfigFromKubeConfig(kubeconfig)
	testenv.Must(t, err)

	ns := fmt.Sprintf("failover-handoff-%d", time.Now().UnixNano())
	testenv.Must(t, k8s.Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}))
	testenv.Group(ns, "h").Topic("t", testenv.Broker("b", 8, "")).Strategy(v1alpha1.Strategy{Type: v1alpha1.Sticky}).
		Handoff(v1alpha1.Handoff{Mode: v1alpha1.Cooperative}).Create(t, k8s)
	leader := startReplica(t, binary, ns, kcPath, filepath.Join(dir, "leader.log"))
	own := testenv.NewOwnership()
	opts := testenv.MemberOptions{DrainAckTimeout: time.Second}
	old := testenv.StartMember(t, restConfig, "h", testenv.Pod(ns, "h-0", "h").Create(t, k8s), own, opts)
	testenv.Poll(t, time.Minute, 20*time.Millisecond, nil, func() error {
		if n := len(own.Reading(old.Reader())); n != 8 {
			return fmt.Errorf("h-0 reads %d queues, want 8", n)
		}
		return nil
	})
	startReplica(t, binary, ns, kcPath, filepath.Join(dir, "standby.log"))
	// The standby is up once it has tried the Lease; give it time to start.
	time.Sleep(3 * time.Second)

	old.ApplyDelay.Store(int64(3 * time.Second))
	joined := testenv.StartMember(t, restConfig, "h", testenv.Pod(ns, "h-1", "h").Create(t, k8s), own, opts)
	// The revocation is published: h-0's entry lists 4 queues, h-1's none yet.
	var revoked []protocol.Queue
	testenv.Poll(t, time.Minute, 5*time.Millisecond, nil, func() error {
		var cm corev1.ConfigMap
		if err := k8s.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: protocol.AssignmentName("h")}, &cm); err != nil {
			return err
		}
		pub := protocol.ReadPublished("h", &cm, nil)
		if e, ok := pub.Entries["h-0"]; !ok || len(e.Queues) != 4 {
			return fmt.Errorf("h-0's entry is %v", e.Queues)
		}
		revoked = protocol.SubtractQueues(own.Reading(old.Reader()), pub.Entries["h-0"].Queues)
		return nil
	})
	t0 := time.Now()
	testenv.Must(t, leader.Process.Signal(syscall.SIGKILL))
	if len(revoked) != 4 {
		t.Fatalf("the leader was killed with %d queues revoked from h-0, want 4: it had already been told", len(revoked))
	}
	testenv.Poll(t, time.Minute, 20*time.Millisecond, nil, func() error {
		if missing := protocol.SubtractQueues(revoked, own.Reading(joined.Reader())); len(missing) > 0 {
			return fmt.Errorf("h-1 does not read %v yet", missing)
		}
		return nil
	})
	took := time.Since(t0)
	if v := own.Violations(); len(v) > 0 {
		t.Fatalf("queues had two readers at once: %v", v)
	}
	t.Logf("the revoked queues were read by the new member %v after the leader was killed; longest unread: %s", took.Round(time.Millisecond), own.Longest())
	if took > 20*time.Second {
		t.Fatalf("the revoked queues took %v after the leader was killed to be read again; want within 20 s", took)
	}
}
