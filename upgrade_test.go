//go:build envtest

package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/consumergroup-operator/consumergroup-operator/api/v1alpha1"
	"github.com/consumergroup-operator/consumergroup-operator/internal/manager"
	"github.com/consumergroup-operator/consumergroup-operator/internal/testenv"
	"github.com/consumergroup-operator/consumergroup-operator/pkg/allocate"
)

// TestUpgradeMovesNothing replaces a running operator with a build stamped with another version, as a
// rolling update of the operator's Deployment does, under a group whose members consume: the new
// operator takes the lead and reconciles the group, and it writes nothing (no ConfigMap, status, Lease or
// event) and no member's queues change.
func TestUpgradeMovesNothing(t *testing.T) {
	dir := t.TempDir()
	binaries := map[string]string{}
	for _, v := range []string{"0.1.0", "0.2.0"} {
		binaries[v] = testenv.Build(t, "consumergroup-operator", ".", testenv.VersionStamp{Version: v, Commit: "test" + v})
	}
	kcPath := writeKubeconfig(t, dir)
	cfg, err := clientcmd.RESTConfigFromKubeConfig(kubeconfig)
	testenv.Must(t, err)

	ctx := context.Background()
	ns := fmt.Sprintf("upgrade-%d", time.Now().UnixNano())
	testenv.Must(t, k8s.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}))
	testenv.Group(ns, "g").Topic("t", testenv.Broker("b", 24, "")).Strategy(v1alpha1.Strategy{Type: v1alpha1.Sticky}).
		Handoff(v1alpha1.Handoff{Mode: v1alpha1.Cooperative}).Create(t, k8s)
	own := testenv.NewOwnership()
	var members []*testenv.SimMember
	for i := range 4 {
		p := testenv.Pod(ns, fmt.Sprintf("g-%d", i), "g").Create(t, k8s)
		members = append(members, testenv.StartMember(t, rest.CopyConfig(cfg), "g", p, own, testenv.MemberOptions{}))
	}

	start := func(version string) (*exec.Cmd, string, string) {
		port := freePort(t)
		logPath := filepath.Join(dir, version+".log")
		log, err := os.Create(logPath)
		testenv.Must(t, err)
		cmd := exec.Command(binaries[version], "--leader-elect", "--leader-election-namespace", ns, "--namespaces", ns,
			// Plain HTTP on loopback: the test reads the pass count from the metrics.
			"--metrics-bind-address", "127.0.0.1:"+port, "--metrics-secure=false", "--health-probe-bind-address", "0", "--kubeconfig", kcPath)
		cmd.Stdout, cmd.Stderr = log, log
		testenv.Must(t, cmd.Start())
		t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait(); _ = log.Close() })
		return cmd, "http://127.0.0.1:" + port + "/metrics", logPath
	}
	old, _, _ := start("0.1.0")

	// Settled: every queue read by one member, every member reading its share, the status showing each
	// member's acknowledgement of the generation in force (a loaded machine can hold the pass that
	// records the last of them back for more than the second of quiet below), and nothing written for a
	// while.
	testenv.Poll(t, 60*time.Second, 50*time.Millisecond, nil, func() error {
		for _, m := range members {
			if n := len(own.Reading(m.Reader())); n != 6 {
				return fmt.Errorf("%s reads %d queues, want 6", m.Pod.Name, n)
			}
		}
		var g v1alpha1.ConsumerGroup
		if err := k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: "g"}, &g); err != nil {
			return err
		}
		for _, m := range g.Status.Members {
			if m.AckedGeneration == nil || *m.AckedGeneration != g.Status.AssignmentGeneration {
				return fmt.Errorf("the status shows %s's acknowledgement of generation %v, want %d", m.Pod, m.AckedGeneration, g.Status.AssignmentGeneration)
			}
		}
		if len(g.Status.Members) != len(members) {
			return fmt.Errorf("the status lists %d members, want %d", len(g.Status.Members), len(members))
		}
		return nil
	})
	snapshot := func() string { return operatorState(t, ns) }
	settled := snapshot()
	testenv.Poll(t, 30*time.Second, time.Second, nil, func() error {
		now := snapshot()
		if now != settled {
			settled = now
			return fmt.Errorf("still writing")
		}
		return nil
	})

	// From here on, every application a member makes is a move if it changes what the member reads.
	var moves atomic.Int64
	var watching atomic.Bool
	watching.Store(true)
	reading := map[string][]allocate.Queue{}
	for _, m := range members {
		reading[m.Reader()] = own.Reading(m.Reader())
	}
	own.Observe(func(reader string, queues []allocate.Queue) {
		if watching.Load() && !sameQueues(reading[reader], queues) {
			moves.Add(1)
			t.Logf("%s now reads %v, read %v", reader, queues, reading[reader])
		}
	})

	// The rolling update: the new build starts, the old one is stopped and hands over its Lease.
	_, metrics, logPath := start("0.2.0")
	testenv.Must(t, old.Process.Signal(syscall.SIGTERM))
	if err := old.Wait(); err != nil {
		t.Errorf("the old operator exited with %v", err)
	}
	// The new build leads once it reconciles the group.
	testenv.Poll(t, 60*time.Second, 100*time.Millisecond, nil, func() error {
		if n := reconcilePasses(metrics); n < 1 {
			return fmt.Errorf("the new operator has made %v passes", n)
		}
		return nil
	})
	if log, err := os.ReadFile(logPath); err != nil || !strings.Contains(string(log), "0.2.0") {
		t.Errorf("the new operator's log does not name version 0.2.0 (%v)", err)
	}
	// Give any write the new operator would make time to land, and members time to apply it.
	time.Sleep(3 * time.Second)

	watching.Store(false)
	if after := snapshot(); after != settled {
		t.Errorf("the upgrade wrote:\nbefore %s\nafter  %s", settled, after)
	}
	if n := moves.Load(); n != 0 {
		t.Errorf("%d applications changed a member's queues during the upgrade", n)
	}
	if v := own.Violations(); len(v) > 0 {
		t.Errorf("queues with two readers: %v", v)
	}
}

// operatorState is a fingerprint of everything the operator writes in ns: the group (spec and status),
// its ConfigMaps, the member Leases' existence and the events. Member Leases are renewed by the members,
// so only their names count.
func operatorState(t *testing.T, ns string) string {
	t.Helper()
	ctx := context.Background()
	var b strings.Builder
	var groups v1alpha1.ConsumerGroupList
	testenv.Must(t, k8s.List(ctx, &groups, client.InNamespace(ns)))
	for _, g := range groups.Items {
		// The status too, so that a failure says what was written.
		status, err := json.Marshal(g.Status)
		testenv.Must(t, err)
		fmt.Fprintf(&b, "group %s@%s %s; ", g.Name, g.ResourceVersion, status)
	}
	var cms corev1.ConfigMapList
	testenv.Must(t, k8s.List(ctx, &cms, client.InNamespace(ns)))
	for _, cm := range cms.Items {
		if cm.Name != "kube-root-ca.crt" {
			fmt.Fprintf(&b, "configmap %s@%s; ", cm.Name, cm.ResourceVersion)
		}
	}
	var leases coordinationv1.LeaseList
	testenv.Must(t, k8s.List(ctx, &leases, client.InNamespace(ns)))
	var names []string
	for _, l := range leases.Items {
		// The leader election Lease changes hands in an upgrade; it is not the groups' state.
		if l.Name != manager.LeaderElectionID {
			names = append(names, l.Name)
		}
	}
	slices.Sort(names)
	fmt.Fprintf(&b, "member leases %v; ", names)
	var events eventsv1.EventList
	testenv.Must(t, k8s.List(ctx, &events, client.InNamespace(ns)))
	n := 0
	for _, e := range events.Items {
		if e.Reason != "LeaderElection" {
			n++
		}
	}
	fmt.Fprintf(&b, "%d events", n)
	return b.String()
}

func sameQueues(a, b []allocate.Queue) bool {
	a, b = slices.Clone(a), slices.Clone(b)
	slices.SortFunc(a, allocate.CompareRocketMQ)
	slices.SortFunc(b, allocate.CompareRocketMQ)
	return slices.Equal(a, b)
}

// freePort is a TCP port nothing listens on now.
func freePort(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	testenv.Must(t, err)
	defer func() { _ = l.Close() }()
	return strconv.Itoa(l.Addr().(*net.TCPAddr).Port)
}

// reconcilePasses is how many passes of the consumergroup controller that did not fail a metrics endpoint
// counts (a pass ends in success, or asks to be called again at a time, as one waiting on a Lease does);
// -1 when it cannot be read.
func reconcilePasses(url string) float64 {
	resp, err := http.Get(url)
	if err != nil {
		return -1
	}
	defer func() { _ = resp.Body.Close() }()
	total := 0.0
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, `controller_runtime_reconcile_total{controller="consumergroup",`) || strings.Contains(line, `result="error"`) {
			continue
		}
		_, v, _ := strings.Cut(line, "} ")
		if f, err := strconv.ParseFloat(v, 64); err == nil {
			total += f
		}
	}
	return total
}
