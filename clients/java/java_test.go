//go:build envtest

// Package java tests clients/java, the RocketMQ push consumers' OperatorAllocateStrategy, as it runs in
// a pod: compiled with javac against the RocketMQ stand-ins, driven by RebalanceDriver (a stand-in for
// RocketMQ's rebalance thread), talking to the real consumergroup-agent binary, which follows the protocol
// against a real kube-apiserver and the operator, beside simulated members that run pkg/member.
package java

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/go-logr/logr"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/clientcmd"
	watchtools "k8s.io/client-go/tools/watch"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/consumergroup-operator/consumergroup-operator/api/v1alpha1"
	"github.com/consumergroup-operator/consumergroup-operator/internal/manager"
	"github.com/consumergroup-operator/consumergroup-operator/internal/rocketmqstandin"
	"github.com/consumergroup-operator/consumergroup-operator/internal/testenv"
	"github.com/consumergroup-operator/consumergroup-operator/internal/testoperator"
	"github.com/consumergroup-operator/consumergroup-operator/pkg/allocate"
	"github.com/consumergroup-operator/consumergroup-operator/pkg/protocol"
)

var (
	restConfig *rest.Config
	k8s        client.Client
	cs         kubernetes.Interface
	kubeconfig []byte
)

func TestMain(m *testing.M) {
	// The tests judge the operators they run by what they publish, not by their logs.
	ctrl.SetLogger(logr.Discard())
	testenv.Main(m, []string{filepath.Join("..", "..", "config", "crd", "bases")}, func(env *envtest.Environment, cfg *rest.Config) error {
		restConfig, kubeconfig = cfg, env.KubeConfig
		var err error
		if k8s, err = client.New(cfg, client.Options{Scheme: manager.Scheme()}); err != nil {
			return err
		}
		cs, err = kubernetes.NewForConfig(cfg)
		return err
	})
}

// The group every test runs: Sticky, with the Cooperative handoff, in which a queue moves only once its
// reader acknowledged letting it go; and the Java member's pod.
const (
	group   = "g"
	javaPod = "java-0"
	// revokeTimeout is the group's revokeTimeoutSeconds: a member that does not acknowledge a revocation
	// is fenced after it, which would show as a handoff slower than the bounds below.
	revokeTimeout = 30
	// retryTopic is the retry topic RocketMQ subscribes a clustering consumer to, besides its topics. A
	// group with static topics does not assign it: the strategy hands it to another strategy. A group
	// that discovers its topics from a name server assigns it, and the strategy follows the operator.
	retryTopic = "%RETRY%g"
)

var (
	// topics are the group's topics, which the operator assigns: 12 queues in all.
	topics = []v1alpha1.Topic{
		{Name: "orders", Brokers: []v1alpha1.Broker{testenv.Broker("broker-a", 4, ""), testenv.Broker("broker-b", 4, "")}},
		{Name: "audit", Brokers: []v1alpha1.Broker{testenv.Broker("broker-a", 4, "")}},
	}
	allQueues  = queuesOf(topics)
	retryQueue = retryTopic + "/broker-a/0"
)

// world is what a case runs: the group, the topics the driver subscribes to, and which of them the
// operator assigns.
type world struct {
	// group is the ConsumerGroup, in namespace ns.
	group func(ns string) *v1alpha1.ConsumerGroup
	// driverArgs are RebalanceDriver's subscriptions.
	driverArgs []string
	// assigned are the topics the operator assigns, whose queues the ownership record follows.
	assigned map[string]bool
	// allQueues are the queues the operator assigns, sorted.
	allQueues []allocate.Queue
}

// staticWorld is the group with static topics: the operator assigns orders and audit, not the retry topic.
func staticWorld() world {
	return world{
		group: func(ns string) *v1alpha1.ConsumerGroup {
			g := testenv.Group(ns, group)
			for _, topic := range topics {
				g.Topic(topic.Name, topic.Brokers...)
			}
			return g.Strategy(v1alpha1.Strategy{Type: v1alpha1.Sticky}).
				Handoff(v1alpha1.Handoff{Mode: v1alpha1.Cooperative, RevokeTimeoutSeconds: ptr.To[int32](revokeTimeout)}).Obj()
		},
		driverArgs: driverArgs(topics),
		assigned:   map[string]bool{"orders": true, "audit": true},
		allQueues:  allQueues,
	}
}

// queuesOf lists the queues of topics, sorted.
func queuesOf(topics []v1alpha1.Topic) []allocate.Queue {
	var out []allocate.Queue
	for _, topic := range topics {
		for _, b := range topic.Brokers {
			for id := range b.Queues {
				out = append(out, allocate.Queue{Topic: topic.Name, Broker: b.Name, ID: id})
			}
		}
	}
	return sorted(out)
}

// driverArgs are the subscriptions as RebalanceDriver takes them: topics, and the retry topic with one
// queue.
func driverArgs(topics []v1alpha1.Topic) []string {
	args := []string{"--other-topic=" + retryTopic + ":broker-a=1"}
	for _, topic := range topics {
		var brokers []string
		for _, b := range topic.Brokers {
			brokers = append(brokers, fmt.Sprintf("%s=%d", b.Name, b.Queues))
		}
		args = append(args, "--topic="+topic.Name+":"+strings.Join(brokers, ","))
	}
	return args
}

// TestOperatorAllocateStrategy builds the agent and the Java classes once, then runs each case against an
// operator, a group and an agent of its own.
func TestOperatorAllocateStrategy(t *testing.T) {
	tools := buildTools(t)
	t.Run("HoldsWhatTheOperatorPublished", func(t *testing.T) { testHoldsWhatTheOperatorPublished(t, tools) })
	t.Run("HandsQueuesOverOnRebalance", func(t *testing.T) { testHandsQueuesOverOnRebalance(t, tools) })
	t.Run("Drains", func(t *testing.T) { testDrains(t, tools) })
	t.Run("ConsumesNothingWithoutTheAgent", func(t *testing.T) { testConsumesNothingWithoutTheAgent(t, tools) })
	t.Run("FollowsTheOperatorOnTheRetryTopic", func(t *testing.T) { testFollowsTheOperatorOnTheRetryTopic(t, tools) })
}

// testHoldsWhatTheOperatorPublished: the driver, through the strategy, holds exactly the queues the
// operator published for its pod, the simulated member the rest, and the pod's Lease acknowledges the
// generation only once the driver held it.
func testHoldsWhatTheOperatorPublished(t *testing.T, tools tools) {
	f := setUp(t, tools)
	sim := f.startSim("sim-1")
	gen := f.waitSettled(30*time.Second, sim)
	holding, _ := f.driver.last()
	t.Logf("at generation %d the driver holds %v", gen, holding)
	f.checkNoTwoReaders()
	f.checkAcksFollowHoldings()
	// The agent reports that the operator assigns orders and audit: the retry topic is left to the other
	// strategy, which, with this one consumer, gives it every queue.
	if !slices.Contains(holding, retryQueue) {
		t.Errorf("the driver holds %v, without %s: the strategy did not hand the retry topic, which the operator does not assign, to its other strategy", holding, retryQueue)
	}
}

// testHandsQueuesOverOnRebalance: a member joins; the driver gives up queues and acknowledges, and the new
// member gets them, without any queue read twice at any instant, in rounds the strategy's watcher started
// rather than RocketMQ's 20 s period.
func testHandsQueuesOverOnRebalance(t *testing.T, tools tools) {
	f := setUp(t, tools)
	sim1 := f.startSim("sim-1")
	f.waitSettled(30*time.Second, sim1)
	before := f.own.Reading(f.reader)
	_, linesBefore := f.driver.last()

	t0 := time.Now()
	sim2 := f.startSim("sim-2")
	// The handoff: the driver lets go of the new member's share, acknowledges, and the new member reads it.
	share := len(f.allQueues) / 3
	testenv.Poll(t, 15*time.Second, 20*time.Millisecond, f.describe, func() error {
		if n := len(f.own.Reading(sim2.Reader())); n != share {
			return fmt.Errorf("the new member reads %d queues, want %d", n, share)
		}
		return nil
	})
	took := time.Since(t0)
	gen := f.waitSettled(15*time.Second, sim1, sim2)
	t.Logf("the new member read its %d queues %v after it started; settled at generation %d:\n%s", share, took.Round(time.Millisecond), gen, f.timeline())

	after := f.own.Reading(f.reader)
	released := protocol.SubtractQueues(before, after)
	if len(released) == 0 || len(after) == 0 {
		t.Errorf("the driver read %v before the new member and %v after: want it to give up some queues and keep some", before, after)
	}
	newcomer := f.own.Reading(sim2.Reader())
	if missing := protocol.SubtractQueues(released, newcomer); len(missing) > 0 {
		t.Errorf("the driver gave up %v, but the new member reads %v: %v went elsewhere", released, newcomer, missing)
	}
	lines := f.driver.linesSince(linesBefore)
	if len(lines) == 0 {
		t.Errorf("the driver printed nothing during the handoff")
	}
	for _, l := range lines {
		if l.Cause != "woken" {
			t.Errorf("the driver changed its queues in a %q round during the handoff, want only rounds the strategy's rebalanceNow started: %+v", l.Cause, l)
		}
	}
	if took > 10*time.Second {
		t.Errorf("the handoff took %v: want it well within RocketMQ's 20 s rebalance period, from the rounds rebalanceNow starts", took)
	}
	f.checkNoTwoReaders()
	f.checkAcksFollowHoldings()
}

// testDrains: the pod is deleted and its preStop hook drains through the agent while the driver runs; the
// driver lets go of every queue the operator assigned and acknowledges that itself (the agent is told not
// to acknowledge for it), the drain returns 200, and the other member reads every queue.
func testDrains(t *testing.T, tools tools) {
	f := setUp(t, tools)
	sim := f.startSim("sim-1")
	f.waitSettled(30*time.Second, sim)

	testenv.Must(t, k8s.Delete(context.Background(), f.pod))
	t0 := time.Now()
	resp, err := http.Post(f.agentURL+"/v1/drain?timeout=30s", "application/json", nil)
	testenv.Must(t, err)
	body, err := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	testenv.Must(t, err)
	t.Logf("POST /v1/drain: %d %s after %v", resp.StatusCode, strings.TrimSpace(string(body)), time.Since(t0).Round(time.Millisecond))
	var drained struct {
		Drained bool  `json:"drained"`
		Acked   int64 `json:"acked"`
	}
	if resp.StatusCode != http.StatusOK || json.Unmarshal(body, &drained) != nil || !drained.Drained {
		t.Fatalf("POST /v1/drain: %d %s, want 200 with drained true", resp.StatusCode, body)
	}

	returned := time.Now()
	// The driver printed that it let go before the strategy acknowledged it; its line may still be in the pipe.
	testenv.Eventually(t, 5*time.Second, func() error {
		if n := f.own.Reading(f.reader); len(n) != 0 {
			return fmt.Errorf("the driver reads %v after the drain", n)
		}
		return nil
	})
	if held := f.driver.holdingAt(returned); len(held) != 0 {
		t.Errorf("the drain returned while the driver still read %v", held)
	}
	holding, _ := f.driver.last()
	if q := f.driver.managed(holding); len(q) != 0 {
		t.Errorf("the driver's last line holds %v after the drain, want none of the group's queues", q)
	}
	_, entries := f.history.snapshot(f.pod.UID)
	if q, ok := entries[drained.Acked]; !ok || len(q) != 0 {
		t.Errorf("the drain acknowledged generation %d, which gives %s %v (published: %t), want none", drained.Acked, javaPod, q, ok)
	}
	if acked := f.leaseAcked(); acked != drained.Acked {
		t.Errorf("the Lease acknowledges generation %d, the drain said %d", acked, drained.Acked)
	}
	testenv.Eventually(t, 15*time.Second, func() error {
		if n := len(f.own.Reading(sim.Reader())); n != len(f.allQueues) {
			return fmt.Errorf("the other member reads %d of %d queues", n, len(f.allQueues))
		}
		return nil
	})
	f.checkNoTwoReaders()
	f.checkAcksFollowHoldings()
}

// testConsumesNothingWithoutTheAgent: the agent goes away; the strategy's watcher notices and starts a
// rebalance in which allocate, unable to reach the agent, gives no queues. Topics the operator does not
// assign keep theirs.
func testConsumesNothingWithoutTheAgent(t *testing.T, tools tools) {
	f := setUp(t, tools)
	sim := f.startSim("sim-1")
	f.waitSettled(30*time.Second, sim)
	_, linesBefore := f.driver.last()

	t0 := time.Now()
	f.stopAgent()
	testenv.Poll(t, 15*time.Second, 20*time.Millisecond, f.describe, func() error {
		if q := f.own.Reading(f.reader); len(q) != 0 {
			return fmt.Errorf("the driver reads %v with the agent gone", q)
		}
		return nil
	})
	took := time.Since(t0)
	t.Logf("the driver let go of the group's queues %v after the agent stopped", took.Round(time.Millisecond))
	if took > 10*time.Second {
		t.Errorf("the driver let go %v after the agent stopped: want it well within RocketMQ's 20 s rebalance period", took)
	}
	for _, l := range f.driver.linesSince(linesBefore) {
		if l.Cause != "woken" {
			t.Errorf("the driver changed its queues in a %q round, want only rounds the strategy's rebalanceNow started: %+v", l.Cause, l)
		}
	}
	if holding, _ := f.driver.last(); !slices.Contains(holding, retryQueue) {
		t.Errorf("the driver holds %v without the agent, want %s still: that topic does not depend on the agent", holding, retryQueue)
	}
}

// testFollowsTheOperatorOnTheRetryTopic: a group that discovers its topic from a name server assigns its
// retry topic too. The strategy, given only orders, learns from the agent that the operator assigns the
// retry topic and holds exactly the retry queue the operator publishes for the pod: the queue while the
// pod is alone, none once the operator gives it to another member. With Averagely over the sorted queues
// and members, the retry topic's queue, first of the queues, goes to a-sim, first of the members; were the
// retry topic left to the other strategy, the driver would go on holding it and two members would read it.
func testFollowsTheOperatorOnTheRetryTopic(t *testing.T, tools tools) {
	nsrv := rocketmqstandin.Start(t)
	nsrv.SetTopic("orders", rocketmqstandin.Broker{Name: "broker-a", Queues: 4})
	nsrv.SetTopic(retryTopic, rocketmqstandin.Broker{Name: "broker-a", Queues: 1})
	discovered := []v1alpha1.Topic{
		{Name: "orders", Brokers: []v1alpha1.Broker{testenv.Broker("broker-a", 4, "")}},
		{Name: retryTopic, Brokers: []v1alpha1.Broker{testenv.Broker("broker-a", 1, "")}},
	}
	f := setUpWorld(t, tools, world{
		group: func(ns string) *v1alpha1.ConsumerGroup {
			g := testenv.Group(ns, group).Strategy(v1alpha1.Strategy{Type: v1alpha1.Averagely}).
				Handoff(v1alpha1.Handoff{Mode: v1alpha1.Cooperative, RevokeTimeoutSeconds: ptr.To[int32](revokeTimeout)}).Obj()
			g.Spec.Topics = []v1alpha1.Topic{{Name: "orders"}}
			g.Spec.NameServer = &v1alpha1.NameServer{Addresses: []string{nsrv.Addr}} // read every second by the test operator (testoperator.NameServers)
			return g
		},
		// The strategy is given orders only: that the retry topic is the operator's it learns from the agent.
		driverArgs: []string{"--other-topic=" + retryTopic + ":broker-a=1", "--topic=orders:broker-a=4"},
		assigned:   map[string]bool{"orders": true, retryTopic: true},
		allQueues:  queuesOf(discovered),
	})

	f.waitSettled(30 * time.Second)
	p, err := f.published()
	testenv.Must(t, err)
	holding, _ := f.driver.last()
	if !slices.Contains(queueStrings(p.entries[javaPod]), retryQueue) || !slices.Contains(holding, retryQueue) {
		t.Fatalf("alone, at generation %d the pod is given %v and the driver holds %v; want both to have %s", p.generation, p.entries[javaPod], holding, retryQueue)
	}

	sim := f.startSim("a-sim")
	gen := f.waitSettled(30*time.Second, sim)
	p, err = f.published()
	testenv.Must(t, err)
	holding, _ = f.driver.last()
	t.Logf("at generation %d the operator gives %s %v and a-sim %v; the driver holds %v", gen, javaPod, p.entries[javaPod], p.entries["a-sim"], holding)
	if !slices.Contains(queueStrings(p.entries["a-sim"]), retryQueue) {
		t.Fatalf("generation %d gives a-sim %v, without %s: the case needs the operator to give the retry queue to the other member", p.generation, p.entries["a-sim"], retryQueue)
	}
	if slices.Contains(holding, retryQueue) {
		t.Errorf("the driver holds %v, with %s, which the operator gives a-sim: the strategy did not follow the operator on the retry topic", holding, retryQueue)
	}
	f.checkNoTwoReaders()
	f.checkAcksFollowHoldings()
}

// queueStrings are queues as "topic/broker/id".
func queueStrings(qs []allocate.Queue) []string {
	out := make([]string, len(qs))
	for i, q := range qs {
		out[i] = q.String()
	}
	return out
}

// tools are what the tests run: the agent binary, the compiled classes, java, and a kubeconfig file.
type tools struct {
	agent, java, classes, kubeconfig string
}

func buildTools(t *testing.T) tools {
	t.Helper()
	javac, java := jdk(t)
	dir := t.TempDir()
	classes := filepath.Join(dir, "classes")
	var sources []string
	for _, root := range []string{"rocketmq-stand-ins", "src", "test"} {
		testenv.Must(t, filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
			if err == nil && !d.IsDir() && strings.HasSuffix(path, ".java") {
				sources = append(sources, path)
			}
			return err
		}))
	}
	compiled := make(chan error, 1)
	go func() {
		out, err := exec.Command(javac, append([]string{"--release", "17", "-Xlint:all", "-Werror", "-d", classes}, sources...)...).CombinedOutput()
		if err != nil {
			err = fmt.Errorf("%s: %w\n%s(a JDK 17 or later is needed: run `make jdk`)", javac, err, out)
		}
		compiled <- err
	}()
	agent := testenv.Build(t, "consumergroup-agent", "./cmd/consumergroup-agent", testenv.VersionStamp{})
	testenv.Must(t, <-compiled)

	kc, err := clientcmd.Load(kubeconfig)
	testenv.Must(t, err)
	kcPath := filepath.Join(dir, "kubeconfig")
	testenv.Must(t, clientcmd.WriteToFile(*kc, kcPath))
	return tools{agent: agent, java: java, classes: classes, kubeconfig: kcPath}
}

// jdk finds javac and java in $JAVA_HOME/bin, or else on PATH.
func jdk(t *testing.T) (javac, java string) {
	t.Helper()
	const how = "run `make jdk`, which finds or installs a JDK 17 or later (hack/jdk.sh), and set JAVA_HOME to the directory it prints (make test does)"
	if home := os.Getenv("JAVA_HOME"); home != "" {
		javac, java = filepath.Join(home, "bin", "javac"), filepath.Join(home, "bin", "java")
		for _, p := range []string{javac, java} {
			if _, err := exec.LookPath(p); err != nil {
				t.Fatalf("JAVA_HOME=%s has no usable %s (%v): %s", home, filepath.Base(p), err, how)
			}
		}
		return javac, java
	}
	javac, errc := exec.LookPath("javac")
	java, errj := exec.LookPath("java")
	if err := errors.Join(errc, errj); err != nil {
		t.Fatalf("the Java tests need javac and java, and JAVA_HOME is not set and PATH lacks them (%v): %s", err, how)
	}
	return javac, java
}

// fixture is one test's world: a namespace, an operator for it, the group, the Java member's pod with its
// agent and driver, and the record of who reads what.
type fixture struct {
	t        *testing.T
	tools    tools
	ns       string
	pod      *corev1.Pod
	reader   string
	own      *testenv.Ownership
	agentURL string
	// stopAgent stops the agent with SIGTERM, as the kubelet would; again, it does nothing.
	stopAgent func()
	driver    *driver
	history   *history
	// allQueues are the queues the operator assigns, sorted.
	allQueues []allocate.Queue
}

func setUp(t *testing.T, tools tools) *fixture {
	t.Helper()
	return setUpWorld(t, tools, staticWorld())
}

func setUpWorld(t *testing.T, tools tools, w world) *fixture {
	t.Helper()
	f := &fixture{t: t, tools: tools, ns: testoperator.Start(t, restConfig, k8s, "java"), own: testenv.NewOwnership(), allQueues: w.allQueues}

	// The pod's ConfigMap and Lease, from before the group exists: every generation and acknowledgement.
	f.history = watchHistory(t, f.ns)

	testenv.Must(t, k8s.Create(context.Background(), w.group(f.ns)))
	// On a node, so that deleting it leaves it Terminating while its preStop hook drains, as a kubelet does.
	f.pod = testenv.Pod(f.ns, javaPod, group).OnNode("node-0").Create(t, k8s)
	f.reader = f.pod.Name + "/" + string(f.pod.UID)
	f.startAgent()
	f.driver = startDriver(t, tools, f.agentURL, f.own, f.reader, w)
	return f
}

func (f *fixture) startSim(name string) *testenv.SimMember {
	return testenv.StartMember(f.t, restConfig, group, testenv.Pod(f.ns, name, group).Create(f.t, k8s), f.own, testenv.MemberOptions{})
}

// startAgent runs the agent binary for the Java pod, as its sidecar would, and waits until it is healthy.
// It never acknowledges a drain for the application: only the strategy acknowledges.
func (f *fixture) startAgent() {
	t := f.t
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	testenv.Must(t, err)
	addr := ln.Addr().String()
	testenv.Must(t, ln.Close())
	logPath := filepath.Join(t.TempDir(), "agent.log")
	logFile, err := os.Create(logPath)
	testenv.Must(t, err)
	cmd := exec.Command(f.tools.agent, "-kubeconfig", f.tools.kubeconfig, "-listen", addr, "-drain-ack-timeout", "10m")
	cmd.Env = append(os.Environ(), "CONSUMER_GROUP="+group, "POD_NAME="+f.pod.Name, "POD_NAMESPACE="+f.ns, "POD_UID="+string(f.pod.UID))
	cmd.Stdout, cmd.Stderr = logFile, logFile
	testenv.Must(t, cmd.Start())
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	var once sync.Once
	f.stopAgent = func() {
		once.Do(func() {
			_ = cmd.Process.Signal(syscall.SIGTERM)
			select {
			case <-exited:
			case <-time.After(10 * time.Second):
				_ = cmd.Process.Kill()
				<-exited
			}
		})
	}
	t.Cleanup(func() {
		f.stopAgent()
		_ = logFile.Close()
		if t.Failed() {
			out, _ := os.ReadFile(logPath)
			t.Logf("agent log:\n%s", out)
		}
	})
	f.agentURL = "http://" + addr
	testenv.Eventually(t, 30*time.Second, func() error {
		select {
		case <-exited:
			out, _ := os.ReadFile(logPath)
			t.Fatalf("the agent exited:\n%s", out)
		default:
		}
		resp, err := http.Get(f.agentURL + "/healthz")
		if err != nil {
			return err
		}
		defer func() { _ = resp.Body.Close() }()
		if resp.StatusCode != http.StatusOK {
			body, _ := io.ReadAll(resp.Body)
			return fmt.Errorf("agent /healthz: %d %s", resp.StatusCode, body)
		}
		return nil
	})
}

// published is the group's assignment: its generation and every pod's queues.
type published struct {
	generation int64
	entries    map[string][]allocate.Queue
}

func (f *fixture) published() (published, error) {
	var cm corev1.ConfigMap
	if err := k8s.Get(context.Background(), client.ObjectKey{Namespace: f.ns, Name: protocol.AssignmentName(group)}, &cm); err != nil {
		return published{}, err
	}
	if cm.Annotations[protocol.ShardsAnnotation] != "" {
		return published{}, fmt.Errorf("the assignment is sharded; these tests read one ConfigMap")
	}
	gen, err := strconv.ParseInt(cm.Annotations[protocol.GenerationAnnotation], 10, 64)
	if err != nil {
		return published{}, fmt.Errorf("generation annotation: %w", err)
	}
	p := published{generation: gen, entries: map[string][]allocate.Queue{}}
	for pod, value := range cm.Data {
		e, queues, err := protocol.DecodeEntry([]byte(value))
		if err != nil {
			return published{}, fmt.Errorf("entry of %s: %w", pod, err)
		}
		if e.Generation != gen {
			return published{}, fmt.Errorf("entry of %s has generation %d in generation %d", pod, e.Generation, gen)
		}
		p.entries[pod] = queues
	}
	return p, nil
}

func (f *fixture) leaseAcked() int64 {
	lease, err := cs.CoordinationV1().Leases(f.ns).Get(context.Background(), protocol.LeaseName(group, javaPod), metav1.GetOptions{})
	if err != nil {
		return -1
	}
	n, err := strconv.ParseInt(lease.Annotations[protocol.AckedGenerationAnnotation], 10, 64)
	if err != nil {
		return -1
	}
	return n
}

// waitSettled waits until the operator has published a generation for the Java pod and sims, every
// member reads exactly its entry, every queue has one reader, and the Java pod's Lease acknowledges the
// generation. It returns the generation.
func (f *fixture) waitSettled(timeout time.Duration, sims ...*testenv.SimMember) int64 {
	f.t.Helper()
	var gen int64
	testenv.Poll(f.t, timeout, 50*time.Millisecond, f.describe, func() error {
		if err := f.driver.failure(); err != nil {
			f.t.Fatal(err)
		}
		p, err := f.published()
		if err != nil {
			return err
		}
		if len(p.entries) != 1+len(sims) {
			return fmt.Errorf("generation %d has %d entries, want %d", p.generation, len(p.entries), 1+len(sims))
		}
		readers := map[string]string{javaPod: f.reader}
		for _, s := range sims {
			readers[s.Pod.Name] = s.Reader()
		}
		for pod, reader := range readers {
			want := p.entries[pod]
			if len(want) == 0 {
				return fmt.Errorf("generation %d gives %s no queues", p.generation, pod)
			}
			if got := f.own.Reading(reader); !slices.Equal(got, want) {
				return fmt.Errorf("%s reads %v, generation %d gives it %v", pod, got, p.generation, want)
			}
		}
		for _, q := range f.allQueues {
			if n := f.own.Readers(q); n != 1 {
				return fmt.Errorf("%s has %d readers", q, n)
			}
		}
		if acked := f.leaseAcked(); acked != p.generation {
			return fmt.Errorf("the Lease of %s acknowledges generation %d, published is %d", javaPod, acked, p.generation)
		}
		gen = p.generation
		return nil
	})
	return gen
}

func (f *fixture) describe() string {
	holding, n := f.driver.last()
	return fmt.Sprintf("the driver printed %d lines, the last holding %v; Lease acknowledges %d", n, holding, f.leaseAcked())
}

// timeline is what happened, in order: generations published, the driver's changes, acknowledgements.
func (f *fixture) timeline() string {
	type event struct {
		at   time.Time
		what string
	}
	var events []event
	f.history.mu.Lock()
	for g, e := range f.history.entries {
		events = append(events, event{e.at, fmt.Sprintf("generation %d published, %s: %d queues", g, javaPod, len(e.queues))})
	}
	for _, a := range f.history.acks {
		events = append(events, event{a.at, fmt.Sprintf("Lease acknowledges %d", a.generation)})
	}
	f.history.mu.Unlock()
	for _, l := range f.driver.linesSince(0) {
		events = append(events, event{time.UnixMicro(l.At), fmt.Sprintf("driver holds %d queues (%s round)", len(f.driver.managed(l.Holding)), l.Cause)})
	}
	slices.SortFunc(events, func(a, b event) int { return a.at.Compare(b.at) })
	var b strings.Builder
	for _, e := range events {
		fmt.Fprintf(&b, "%s %s\n", e.at.Format("15:04:05.000"), e.what)
	}
	return b.String()
}

func (f *fixture) checkNoTwoReaders() {
	f.t.Helper()
	if v := f.own.Violations(); len(v) > 0 {
		f.t.Errorf("queues had two readers at once:\n%s", strings.Join(v, "\n"))
	}
}

// checkAcksFollowHoldings checks every acknowledgement the Java pod's Lease showed: when it acknowledged
// generation N, the driver held, on each topic the operator assigns, what generation N (or a later one
// it had been handed; the claim covers those) lists for the pod. The driver stamps its lines with the
// time it applied them, which precedes the acknowledgement the strategy sends in a later round.
func (f *fixture) checkAcksFollowHoldings() {
	f.t.Helper()
	// The watches deliver what the test already read from the API server a moment later.
	testenv.Eventually(f.t, 5*time.Second, func() error {
		acks, entries := f.history.snapshot(f.pod.UID)
		p, err := f.published()
		if err != nil {
			return err
		}
		if _, ok := entries[p.generation]; !ok {
			return fmt.Errorf("the ConfigMap watch has not delivered generation %d", p.generation)
		}
		if acked := f.leaseAcked(); acked > 0 && (len(acks) == 0 || acks[len(acks)-1].generation != acked) {
			return fmt.Errorf("the Lease watch has not delivered the acknowledgement of generation %d", acked)
		}
		return nil
	})
	acks, entries := f.history.snapshot(f.pod.UID)
	if len(acks) == 0 {
		f.t.Errorf("the Lease of %s never acknowledged a generation", javaPod)
	}
	for _, a := range acks {
		at := a.at.Format("15:04:05.000000")
		if _, known := entries[a.generation]; !known {
			f.t.Errorf("the Lease acknowledged generation %d at %s, which was never published", a.generation, at)
			continue
		}
		held := f.driver.holdingAt(a.at)
		for topic := range f.driver.assigned {
			got := byTopic(held, topic)
			ok := false
			for gen, queues := range entries {
				ok = ok || gen >= a.generation && slices.Equal(got, byTopic(queues, topic))
			}
			if !ok {
				f.t.Errorf("the Lease acknowledged generation %d at %s while the driver held %v of topic %s; generation %d lists %v",
					a.generation, at, got, topic, a.generation, byTopic(entries[a.generation], topic))
			}
		}
	}
}

// history records, from watches, the Java pod's entry in each generation and each change of its Lease's
// acknowledged generation, with when the watch delivered it.
type history struct {
	mu   sync.Mutex
	acks []ack
	// entries are the pod's entry in each generation, with the pod UID it names; none when it has none.
	entries map[int64]entry
}

type entry struct {
	uid    types.UID
	queues []allocate.Queue
	// at is when the watch delivered the generation first.
	at time.Time
}

type ack struct {
	generation int64
	at         time.Time
}

func watchHistory(t *testing.T, ns string) *history {
	h := &history{entries: map[int64]entry{}}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	t.Cleanup(func() { cancel(); wg.Wait() })
	follow := func(lw *cache.ListWatch, list func(context.Context) (string, error), handle func(watch.Event)) {
		rv, err := list(ctx)
		testenv.Must(t, err)
		w, err := watchtools.NewRetryWatcherWithContext(ctx, rv, lw)
		testenv.Must(t, err)
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer w.Stop()
			for {
				select {
				case <-ctx.Done():
					return
				case ev, ok := <-w.ResultChan():
					if !ok {
						return
					}
					handle(ev)
				}
			}
		}()
	}
	cmSelector := fields.OneTermEqualSelector("metadata.name", protocol.AssignmentName(group)).String()
	follow(&cache.ListWatch{WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
		o.FieldSelector = cmSelector
		return cs.CoreV1().ConfigMaps(ns).Watch(ctx, o)
	}}, func(ctx context.Context) (string, error) {
		l, err := cs.CoreV1().ConfigMaps(ns).List(ctx, metav1.ListOptions{FieldSelector: cmSelector})
		if err != nil {
			return "", err
		}
		return l.ResourceVersion, nil
	}, func(ev watch.Event) {
		cm, ok := ev.Object.(*corev1.ConfigMap)
		if !ok || ev.Type == watch.Deleted {
			return
		}
		gen, err := strconv.ParseInt(cm.Annotations[protocol.GenerationAnnotation], 10, 64)
		if err != nil {
			return
		}
		e := entry{at: time.Now()}
		if value, ok := cm.Data[javaPod]; ok {
			if decoded, queues, err := protocol.DecodeEntry([]byte(value)); err == nil {
				e.uid, e.queues = types.UID(decoded.PodUID), queues
			}
		}
		h.mu.Lock()
		if first, ok := h.entries[gen]; ok {
			e.at = first.at
		}
		h.entries[gen] = e
		h.mu.Unlock()
	})
	leaseSelector := fields.OneTermEqualSelector("metadata.name", protocol.LeaseName(group, javaPod)).String()
	follow(&cache.ListWatch{WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
		o.FieldSelector = leaseSelector
		return cs.CoordinationV1().Leases(ns).Watch(ctx, o)
	}}, func(ctx context.Context) (string, error) {
		l, err := cs.CoordinationV1().Leases(ns).List(ctx, metav1.ListOptions{FieldSelector: leaseSelector})
		if err != nil {
			return "", err
		}
		return l.ResourceVersion, nil
	}, func(ev watch.Event) {
		lease, ok := ev.Object.(*coordinationv1.Lease)
		if !ok || ev.Type == watch.Deleted {
			return
		}
		now := time.Now()
		gen, err := strconv.ParseInt(lease.Annotations[protocol.AckedGenerationAnnotation], 10, 64)
		if err != nil || gen == 0 {
			return
		}
		h.mu.Lock()
		defer h.mu.Unlock()
		if n := len(h.acks); n == 0 || h.acks[n-1].generation != gen {
			h.acks = append(h.acks, ack{generation: gen, at: now})
		}
	})
	return h
}

// snapshot is the acknowledgements so far, and the queues each generation gave the pod incarnation uid.
func (h *history) snapshot(uid types.UID) ([]ack, map[int64][]allocate.Queue) {
	h.mu.Lock()
	defer h.mu.Unlock()
	entries := make(map[int64][]allocate.Queue, len(h.entries))
	for g, e := range h.entries {
		if e.uid == uid {
			entries[g] = e.queues
		} else {
			entries[g] = nil
		}
	}
	return slices.Clone(h.acks), entries
}

// driver is a running RebalanceDriver: its lines, applied to an Ownership as they come.
type driver struct {
	// assigned are the topics the operator assigns; the driver's other queues are not followed.
	assigned map[string]bool

	mu     sync.Mutex
	lines  []line
	failed error
}

// line is one line the driver printed: when it applied a change, the round's cause, and what it holds.
type line struct {
	At      int64    `json:"at"`
	Cause   string   `json:"cause"`
	Holding []string `json:"holding"`
	Error   string   `json:"error"`
}

func startDriver(t *testing.T, tools tools, agentURL string, own *testenv.Ownership, reader string, w world) *driver {
	t.Helper()
	args := append([]string{"-XX:TieredStopAtLevel=1", "-XX:+UseSerialGC", "-cp", tools.classes, "io.consumergroup.rocketmq.RebalanceDriver",
		"--agent=" + agentURL, "--group=" + group, "--cid=" + javaPod}, w.driverArgs...)
	cmd := exec.Command(tools.java, args...)
	stdin, err := cmd.StdinPipe()
	testenv.Must(t, err)
	stdout, err := cmd.StdoutPipe()
	testenv.Must(t, err)
	errPath := filepath.Join(t.TempDir(), "driver.stderr")
	errFile, err := os.Create(errPath)
	testenv.Must(t, err)
	cmd.Stderr = errFile
	testenv.Must(t, cmd.Start())

	d := &driver{assigned: w.assigned}
	read := make(chan struct{})
	go func() {
		defer close(read)
		sc := bufio.NewScanner(stdout)
		sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
		for sc.Scan() {
			var l line
			if err := json.Unmarshal(sc.Bytes(), &l); err != nil || l.Error != "" {
				d.fail(fmt.Errorf("the driver printed %q", sc.Text()))
				continue
			}
			queues, err := parseQueues(d.managed(l.Holding))
			if err != nil {
				d.fail(err)
				continue
			}
			own.Apply(reader, queues)
			d.mu.Lock()
			d.lines = append(d.lines, l)
			d.mu.Unlock()
		}
	}()
	exited := make(chan struct{})
	stopping := make(chan struct{})
	go func() {
		<-read
		err := cmd.Wait()
		select {
		case <-stopping:
		default:
			d.fail(fmt.Errorf("the driver exited: %v", err))
		}
		close(exited)
	}()
	t.Cleanup(func() {
		close(stopping)
		_ = stdin.Close() // the driver exits when stdin closes
		select {
		case <-exited:
		case <-time.After(10 * time.Second):
			_ = cmd.Process.Kill()
			<-exited
		}
		_ = errFile.Close()
		if t.Failed() {
			out, _ := os.ReadFile(errPath)
			t.Logf("driver stderr:\n%s", out)
		}
	})
	return d
}

func (d *driver) fail(err error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.failed == nil {
		d.failed = err
	}
}

func (d *driver) failure() error {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.failed
}

// last is what the driver's last line holds, and how many lines it printed.
func (d *driver) last() ([]string, int) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if len(d.lines) == 0 {
		return nil, 0
	}
	return d.lines[len(d.lines)-1].Holding, len(d.lines)
}

func (d *driver) linesSince(n int) []line {
	d.mu.Lock()
	defer d.mu.Unlock()
	return slices.Clone(d.lines[n:])
}

// holdingAt is the group's queues the driver held at t, by the times it stamped its lines with.
func (d *driver) holdingAt(t time.Time) []allocate.Queue {
	d.mu.Lock()
	defer d.mu.Unlock()
	var holding []string
	for _, l := range d.lines {
		if time.UnixMicro(l.At).Before(t) {
			holding = l.Holding
		}
	}
	queues, _ := parseQueues(d.managed(holding))
	return queues
}

// managed keeps the queues of the topics the operator assigns.
func (d *driver) managed(holding []string) []string {
	var out []string
	for _, q := range holding {
		if i := strings.Index(q, "/"); i > 0 && d.assigned[q[:i]] {
			out = append(out, q)
		}
	}
	return out
}

// parseQueues parses "topic/broker/id" strings, sorted.
func parseQueues(ss []string) ([]allocate.Queue, error) {
	out := make([]allocate.Queue, 0, len(ss))
	for _, s := range ss {
		q, err := protocol.ParseQueue(s)
		if err != nil {
			return nil, err
		}
		out = append(out, q)
	}
	return sorted(out), nil
}

func sorted(qs []allocate.Queue) []allocate.Queue {
	qs = slices.Clone(qs)
	slices.SortFunc(qs, protocol.CompareCanonical)
	return qs
}

func byTopic(qs []allocate.Queue, topic string) []allocate.Queue {
	var out []allocate.Queue
	for _, q := range qs {
		if q.Topic == topic {
			out = append(out, q)
		}
	}
	return out
}
