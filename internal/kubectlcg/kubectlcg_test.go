//go:build envtest

package kubectlcg

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/cli-runtime/pkg/genericiooptions"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	corev1 "k8s.io/api/core/v1"

	"github.com/consumergroup-operator/consumergroup-operator/api/v1alpha1"
	"github.com/consumergroup-operator/consumergroup-operator/internal/manager"
	"github.com/consumergroup-operator/consumergroup-operator/internal/testenv"
	"github.com/consumergroup-operator/consumergroup-operator/internal/testoperator"
	"github.com/consumergroup-operator/consumergroup-operator/pkg/allocate"
	"github.com/consumergroup-operator/consumergroup-operator/pkg/protocol"
)

var (
	restConfig *rest.Config
	k8s        client.Client
	kubeconfig string
)

func TestMain(m *testing.M) {
	testenv.Main(m, []string{filepath.Join("..", "..", "config", "crd", "bases")}, func(env *envtest.Environment, cfg *rest.Config) error {
		restConfig = cfg
		dir, err := os.MkdirTemp("", "kubectl-cg-")
		if err != nil {
			return err
		}
		kubeconfig = filepath.Join(dir, "kubeconfig")
		kc, err := clientcmd.Load(env.KubeConfig)
		if err != nil {
			return err
		}
		if err := clientcmd.WriteToFile(*kc, kubeconfig); err != nil {
			return err
		}
		k8s, err = client.New(cfg, client.Options{Scheme: manager.Scheme()})
		return err
	})
}

// run runs kubectl cg with args against the test's API server, in namespace ns, and returns what it
// printed and its error.
func run(t *testing.T, ns string, args ...string) (string, error) {
	t.Helper()
	var out, errOut bytes.Buffer
	cmd := NewCommand(genericiooptions.IOStreams{In: strings.NewReader(""), Out: &out, ErrOut: &errOut})
	cmd.SetArgs(append([]string{"--kubeconfig", kubeconfig, "-n", ns}, args...))
	err := cmd.ExecuteContext(context.Background())
	return out.String(), err
}

func mustRun(t *testing.T, ns string, args ...string) string {
	t.Helper()
	out, err := run(t, ns, args...)
	if err != nil {
		t.Fatalf("kubectl cg %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return out
}

// settled starts the operator for ns and a Sticky group g of 12 queues, with the default Cooperative
// handoff, and members on three pods that acknowledge, and waits until each reads 4 queues.
func settled(t *testing.T) (string, *testenv.Ownership, []*testenv.SimMember) {
	t.Helper()
	ns := testoperator.Start(t, restConfig, k8s, "cg")

	testenv.Group(ns, "g").Topic("t", testenv.Broker("b", 12, "")).Strategy(v1alpha1.Strategy{Type: v1alpha1.Sticky}).
		Handoff(v1alpha1.Handoff{Mode: v1alpha1.Cooperative}).Create(t, k8s)
	own := testenv.NewOwnership()
	var members []*testenv.SimMember
	for i := range 3 {
		p := testenv.Pod(ns, fmt.Sprintf("g-%d", i), "g").Create(t, k8s)
		// A 6 s Lease is renewed every 2 s, so a load report shows within that.
		members = append(members, testenv.StartMember(t, restConfig, "g", p, own, testenv.MemberOptions{LeaseDuration: 6 * time.Second}))
	}
	testenv.AwaitEachReading(t, own, members, 4, 30*time.Second)
	return ns, own, members
}

func TestDescribe(t *testing.T) {
	ns, own, members := settled(t)
	var d Description
	testenv.Must(t, json.Unmarshal([]byte(mustRun(t, ns, "describe", "g", "-o", "json")), &d))
	if len(d.Members) != 3 {
		t.Fatalf("describe lists %d members, want 3: %+v", len(d.Members), d.Members)
	}
	for i, m := range d.Members {
		reads := own.Reading(members[i].Reader())
		if m.Pod != members[i].Pod.Name || m.ID != m.Pod || m.Count != 4 || m.Queues != ranges(reads) {
			t.Errorf("member %d: %+v, want pod %s with the 4 queues it reads, %s", i, m, members[i].Pod.Name, ranges(reads))
		}
		if m.AckedGeneration != d.Generation || m.LeaseAge == "" || m.Load != nil {
			t.Errorf("member %s: acknowledged %d with Lease age %q and load %v, want generation %d, an age and no load", m.Pod, m.AckedGeneration, m.LeaseAge, m.Load, d.Generation)
		}
	}

	// g-1 reports the load of its queues, and of one it does not read, which is left out.
	reads := own.Reading(members[1].Reader())
	testenv.Must(t, members[1].Client.ReportLoad(map[allocate.Queue]float64{reads[0]: 100, reads[1]: 23.25, {Topic: "t", Broker: "elsewhere", ID: 0}: 1000}))
	testenv.Eventually(t, 10*time.Second, func() error {
		testenv.Must(t, json.Unmarshal([]byte(mustRun(t, ns, "describe", "g", "-o", "json")), &d))
		if l := d.Members[1].Load; l == nil || *l != 123.25 {
			return fmt.Errorf("describe says g-1 reports a load of %v, want 123.25", l)
		}
		return nil
	})
	table := mustRun(t, ns, "describe", "g")
	if !strings.Contains(table, "123.2") {
		t.Errorf("describe's table lacks g-1's load, 123.2:\n%s", table)
	}
	t.Logf("kubectl cg describe g:\n%s", table)
	for _, want := range []string{"ConsumerGroup " + ns + "/g: strategy Sticky", "g-0", "g-1", "g-2", "t/b/", "Ready", "Assigned"} {
		if !strings.Contains(table, want) {
			t.Errorf("describe's table lacks %q:\n%s", want, table)
		}
	}
	if out, err := run(t, ns, "describe", "nope"); err == nil || !strings.Contains(err.Error(), "not found") {
		t.Errorf("describe of a group that does not exist: %v\n%s", err, out)
	}
}

func TestWhoHas(t *testing.T) {
	ns, own, members := settled(t)
	q := allocate.Queue{Topic: "t", Broker: "b", ID: 7}
	var reader string
	for _, m := range members {
		if slices.Contains(own.Reading(m.Reader()), q) {
			reader = m.Pod.Name
		}
	}
	var w WhoHas
	testenv.Must(t, json.Unmarshal([]byte(mustRun(t, ns, "who-has", "g", "t/b/7", "-o", "json")), &w))
	if w.Pod != reader || w.Member != reader || !slices.Equal(w.ClaimedBy, []string{reader}) {
		t.Errorf("who-has t/b/7: %+v, want %s, the member that reads it, alone claiming it", w, reader)
	}
	out := mustRun(t, ns, "who-has", "g", "t/b/7")
	t.Logf("kubectl cg who-has g t/b/7:\n%s", out)
	if !strings.HasPrefix(out, "t/b/7: "+reader+" (member "+reader+")") {
		t.Errorf("who-has table: %q", out)
	}
	for _, bad := range []struct{ queue, want string }{
		{"t/b/x", "not a whole number"},
		{"t/b", "want TOPIC/BROKER/ID"},
		{"t/b/12", "not a queue of consumergroup"},
		{"other/b/0", "not a queue of consumergroup"},
	} {
		if _, err := run(t, ns, "who-has", "g", bad.queue); err == nil || !strings.Contains(err.Error(), bad.want) {
			t.Errorf("who-has %s: %v, want an error saying %q", bad.queue, err, bad.want)
		}
	}
}

func TestPlan(t *testing.T) {
	ns, _, _ := settled(t)
	plan := func(args ...string) Plan {
		t.Helper()
		var p Plan
		testenv.Must(t, json.Unmarshal([]byte(mustRun(t, ns, append([]string{"plan", "g", "-o", "json"}, args...)...)), &p))
		return p
	}
	if p := plan(); p.Moved != 0 || len(p.Members) != 3 || p.MinLoad != 4 || p.MaxLoad != 4 {
		t.Errorf("plan as it is: %d moves over %d members reading %d to %d, want nothing to move", p.Moved, len(p.Members), p.MinLoad, p.MaxLoad)
	}
	// Sticky moves only what balance forces: 12 queues over 4 members, each of the three gives one up.
	p := plan("--replicas", "4")
	if p.Moved != 3 || len(p.Members) != 4 || p.MinLoad != 3 || p.MaxLoad != 3 {
		t.Errorf("plan --replicas 4: %d moves, %d members reading %d to %d; want 3 moves, 4 members of 3", p.Moved, len(p.Members), p.MinLoad, p.MaxLoad)
	}
	for _, m := range p.Moves {
		if m.From == "" || !strings.Contains(m.To, "planned") {
			t.Errorf("plan --replicas 4 moves %+v, want a queue from a member to the new pod", m)
		}
	}
	if p := plan("--replicas", "2"); p.Moved != 4 || len(p.Members) != 2 || p.MaxLoad != 6 {
		t.Errorf("plan --replicas 2: %d moves over %d members up to %d, want the last member's 4 queues to move to 2 members of 6", p.Moved, len(p.Members), p.MaxLoad)
	}
	if p := plan("--strategy", "Averagely"); len(p.Members) != 3 || p.MaxLoad != 4 || p.Reason != "" {
		t.Errorf("plan --strategy Averagely: %+v", p)
	}
	table := mustRun(t, ns, "plan", "g", "--replicas", "4")
	t.Logf("kubectl cg plan g --replicas 4:\n%s", table)
	if !strings.Contains(table, "3 of 12 queues move") || !strings.Contains(table, "QUEUE") {
		t.Errorf("plan's table:\n%s", table)
	}

	// -f: a changed spec, as the user would apply it.
	dir := t.TempDir()
	changed := filepath.Join(dir, "changed.yaml")
	testenv.Must(t, os.WriteFile(changed, []byte(fmt.Sprintf(`apiVersion: messaging.consumergroup.io/v1alpha1
kind: ConsumerGroup
metadata: {name: g, namespace: %s}
spec:
  selector: {matchLabels: {app: g}}
  topics: [{name: t, brokers: [{name: b, queues: 15}]}]
  strategy: {type: Sticky}
`, ns)), 0o644))
	if p := plan("-f", changed); p.Queues != 15 || p.Moved != 3 || p.MaxLoad != 5 {
		t.Errorf("plan -f with 15 queues: %d queues, %d moves, up to %d each; want the 3 new queues placed, 5 each", p.Queues, p.Moved, p.MaxLoad)
	}
	rejected := filepath.Join(dir, "rejected.yaml")
	testenv.Must(t, os.WriteFile(rejected, []byte(`apiVersion: messaging.consumergroup.io/v1alpha1
kind: ConsumerGroup
metadata: {name: g}
spec:
  selector: {matchLabels: {app: g}}
  topics: [{name: t, brokers: [{name: b, queues: 70000}]}]
`), 0o644))
	if _, err := run(t, ns, "plan", "g", "-f", rejected); err == nil || !strings.Contains(err.Error(), "spec.topics[0].brokers[0].queues") {
		t.Errorf("plan -f with 70000 queues: %v, want the API server's refusal naming the field", err)
	}
	if _, err := run(t, ns, "plan", "g", "--strategy", "Nope"); err == nil || !strings.Contains(err.Error(), "spec.strategy.type") {
		t.Errorf("plan --strategy Nope: %v, want the API server's refusal naming the field", err)
	}
	if _, err := run(t, ns, "plan", "g", "--replicas", "2", "--strategy", "Averagely"); err == nil {
		t.Errorf("plan with two changes at once was accepted")
	}
	// plan writes nothing.
	g := &v1alpha1.ConsumerGroup{}
	testenv.Must(t, k8s.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: "g"}, g))
	if g.Spec.Topics[0].Brokers[0].Queues != 12 || g.Spec.Strategy.Type != v1alpha1.Sticky {
		t.Errorf("plan changed the group: %+v", g.Spec)
	}
}

func TestPauseResume(t *testing.T) {
	ns, _, _ := settled(t)
	condition := func(want metav1.ConditionStatus) {
		t.Helper()
		testenv.Poll(t, 30*time.Second, 50*time.Millisecond, nil, func() error {
			var g v1alpha1.ConsumerGroup
			if err := k8s.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: "g"}, &g); err != nil {
				return err
			}
			if c := meta.FindStatusCondition(g.Status.Conditions, "Paused"); c == nil || c.Status != want {
				return fmt.Errorf("Paused is %+v, want %s", c, want)
			}
			return nil
		})
	}
	if out := mustRun(t, ns, "pause", "g"); out != "consumergroup "+ns+"/g paused\n" {
		t.Errorf("pause printed %q", out)
	}
	condition(metav1.ConditionTrue)
	before := generation(t, ns)
	testenv.Pod(ns, "g-3", "g").Create(t, k8s)
	time.Sleep(time.Second)
	if after := generation(t, ns); after != before {
		t.Errorf("a paused group published generation %d after %d", after, before)
	}
	mustRun(t, ns, "resume", "g")
	condition(metav1.ConditionFalse)
	if _, err := run(t, ns, "pause", "nope"); err == nil {
		t.Errorf("pausing a group that does not exist succeeded")
	}
}

func generation(t *testing.T, ns string) int64 {
	t.Helper()
	var cm corev1.ConfigMap
	testenv.Must(t, k8s.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: protocol.AssignmentName("g")}, &cm))
	return protocol.ReadPublished("g", &cm, nil).Generation
}

// TestHandoffInFlight: a member that stops acknowledging while another joins keeps a queue it must give
// up. describe lists the handoff, and who-has names the member that still claims the queue that no entry
// lists any more.
func TestHandoffInFlight(t *testing.T) {
	ns, own, members := settled(t)
	members[0].Acking.Store(false)
	p := testenv.Pod(ns, "g-3", "g").Create(t, k8s)
	testenv.StartMember(t, restConfig, "g", p, own, testenv.MemberOptions{})
	var d Description
	t.Cleanup(func() {
		if v := own.Violations(); len(v) > 0 {
			t.Errorf("queues with two readers: %v", v)
		}
	})
	testenv.Poll(t, 30*time.Second, 100*time.Millisecond, nil, func() error {
		d = Description{}
		if err := json.Unmarshal([]byte(mustRun(t, ns, "describe", "g", "-o", "json")), &d); err != nil {
			return err
		}
		if len(d.Pending) != 1 || d.Pending[0].Pod != "g-0" {
			return fmt.Errorf("pending handoffs %+v, want one from g-0", d.Pending)
		}
		return nil
	})
	held, err := protocol.Expand(nil)
	testenv.Must(t, err)
	for _, q := range own.Reading(members[0].Reader()) {
		var w WhoHas
		testenv.Must(t, json.Unmarshal([]byte(mustRun(t, ns, "who-has", "g", q.String(), "-o", "json")), &w))
		if w.Pod == "" {
			held = append(held, q)
			if !slices.Equal(w.ClaimedBy, []string{"g-0"}) {
				t.Errorf("who-has %s: %+v, want it claimed by g-0, which has not let go", q, w)
			}
		}
	}
	if len(held) != 1 || !strings.Contains(d.Pending[0].Queues, held[0].String()[len("t/b/"):]) {
		t.Errorf("g-0 still reads %v that no entry lists; describe says it reads %q until it acknowledges", held, d.Pending[0].Queues)
	}
	table := mustRun(t, ns, "describe", "g")
	if !strings.Contains(table, "HANDOFFS IN FLIGHT") {
		t.Errorf("describe's table does not show the handoff:\n%s", table)
	}
}

// TestBadInputExitsNonZero runs the built plugin, as kubectl does: a command that fails prints one error
// line and exits with status 1, which scripts and kubectl see.
func TestBadInputExitsNonZero(t *testing.T) {
	plugin := testenv.Build(t, "kubectl-cg", "./cmd/kubectl-cg", testenv.VersionStamp{})
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"describe", "nope"}, `consumergroups.messaging.consumergroup.io "nope" not found`},
		{[]string{"who-has", "nope", "t/b/x"}, "not a whole number"},
		{[]string{"plan", "nope", "--replicas", "2", "--strategy", "Averagely"}, "give one of -f, --replicas and --strategy"},
		{[]string{"describe"}, "accepts 1 arg(s), received 0"},
	} {
		cmd := exec.Command(plugin, append([]string{"--kubeconfig", kubeconfig, "-n", "default"}, c.args...)...)
		var stdout, stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		err := cmd.Run()
		var exit *exec.ExitError
		if !errors.As(err, &exit) || exit.ExitCode() != 1 {
			t.Errorf("kubectl cg %s: %v, want exit status 1", strings.Join(c.args, " "), err)
		}
		if got := stderr.String(); !strings.HasPrefix(got, "error: ") || !strings.Contains(got, c.want) || strings.Count(got, "\n") != 1 {
			t.Errorf("kubectl cg %s printed %q on stderr, want one error line saying %q", strings.Join(c.args, " "), got, c.want)
		}
		if stdout.Len() != 0 {
			t.Errorf("kubectl cg %s printed %q on stdout, want nothing", strings.Join(c.args, " "), stdout.String())
		}
	}
}
