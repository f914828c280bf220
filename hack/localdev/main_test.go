//go:build e2e

package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/consumergroup-operator/consumergroup-operator/api/v1alpha1"
	"github.com/consumergroup-operator/consumergroup-operator/internal/manager"
	"github.com/consumergroup-operator/consumergroup-operator/internal/testenv"
	"github.com/consumergroup-operator/consumergroup-operator/pkg/allocate"
	"github.com/consumergroup-operator/consumergroup-operator/pkg/protocol"
)

// TestDemo runs what `make run` runs without a cluster, and runs the README's demo commands as written, in
// its order: describe the group and the routes it discovered from the demo's name-server stand-in, grow the
// topic on the stand-in, scale the Deployment to five, restart it, drain a node, and delete the group.
// After each step every pod must hold its share of the topic's queues (12, then 16), each queue exactly
// once; the deleted group's ConfigMaps must be garbage-collected; at the end the demo must stop cleanly.
func TestDemo(t *testing.T) {
	assets := os.Getenv("KUBEBUILDER_ASSETS")
	if assets == "" {
		t.Fatal("KUBEBUILDER_ASSETS is not set: run the tests with `make test`, which builds the cluster's binaries (hack/envtest-bins.sh) and sets it")
	}
	assets, err := filepath.Abs(assets)
	if err != nil {
		t.Fatal(err)
	}
	// The demo reads config/ from the repository's root, as make run does.
	t.Chdir(filepath.Join("..", ".."))
	dir := t.TempDir()
	kubeconfig := filepath.Join(dir, "kubeconfig")

	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	stopped := make(chan struct{})
	// However the test ends, the demo stops its cluster before the test binary exits.
	t.Cleanup(func() {
		cancel()
		select {
		case <-stopped:
		case <-time.After(time.Minute):
		}
	})
	go func() {
		defer close(stopped)
		done <- run(ctx, assets, filepath.Join("config", "samples", "demo", "orders.yaml"),
			filepath.Join("config", "samples", "demo", "order-consumer.yaml"), "demo", dir)
	}()

	var c client.Client
	waitFor(t, done, "the demo's kubeconfig", func() error {
		cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
		if err != nil {
			return err
		}
		c, err = client.New(cfg, client.Options{Scheme: manager.Scheme()})
		if err != nil {
			return err
		}
		return c.Get(context.Background(), client.ObjectKey{Namespace: "demo", Name: "orders"}, &v1alpha1.ConsumerGroup{})
	})
	// kubectl finds the plugin kubectl-cg on the PATH, as a user's would once installed.
	plugin := testenv.Build(t, "kubectl-cg", "./cmd/kubectl-cg", testenv.VersionStamp{})
	kubectl := func(args ...string) string {
		t.Helper()
		cmd := exec.Command(filepath.Join(assets, "kubectl"), args...)
		cmd.Env = append(os.Environ(), "KUBECONFIG="+kubeconfig, "PATH="+filepath.Dir(plugin)+string(os.PathListSeparator)+os.Getenv("PATH"))
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("kubectl %v: %v\n%s", args, err, out)
		}
		t.Logf("kubectl %v:\n%s", args, out)
		return string(out)
	}
	// The README's commands, run as written, in its order (readmeCommands); the checks between them are
	// what the README says the reader sees.
	readme := readmeCommands(t)
	step := func(command string) string {
		t.Helper()
		if len(readme) == 0 || readme[0] != command {
			t.Fatalf("the README's next demo command is %q; the test runs %q", readme, command)
		}
		readme = readme[1:]
		if strings.HasPrefix(command, "curl ") {
			return putControl(t, dir, command)
		}
		return kubectl(strings.Fields(command)[1:]...)
	}
	expectMembers(t, done, c, 3, "", 12)
	// The group's queues come from the name server: two brokers of 6.
	if out := step("kubectl cg describe orders"); !strings.Contains(out, "broker-a") || !strings.Contains(out, "broker-b") {
		t.Errorf("kubectl cg describe orders shows no routes:\n%s", out)
	}
	checkRoutes(t, kubectl("cg", "describe", "orders", "-o", "json"), 6)

	// The topic grows on the name server: the group follows within its ClusterNameServer's refresh
	// interval (10 s), with no edit of its spec.
	grown := time.Now()
	if out := step(`curl -sS -X PUT "$(cat bin/localdev/nameserver-control)/topics/orders?queues=8"`); !strings.Contains(out, `"queues":8`) {
		t.Errorf("the control endpoint answered %s", out)
	}
	expectMembers(t, done, c, 3, "", 16)
	t.Logf("the group assigned the grown topic's 16 queues %v after it grew", time.Since(grown).Round(100*time.Millisecond))
	if queues := column(t, step("kubectl get cg orders"), "QUEUES"); queues != "16" {
		t.Errorf("kubectl get cg orders shows %s queues, want 16", queues)
	}
	checkRoutes(t, kubectl("cg", "describe", "orders", "-o", "json"), 8)

	step("kubectl scale deployment/order-consumer --replicas=5")
	expectMembers(t, done, c, 5, "", 16)
	step("kubectl rollout restart deployment/order-consumer")
	kubectl("rollout", "status", "deployment/order-consumer", "--timeout=3m")
	expectMembers(t, done, c, 5, "", 16)
	// A rollout moves every queue anyway: once it settles, no more queues are read outside their broker's
	// zone than a balanced plan of the new pods must.
	waitFor(t, done, "cross-zone reads at the fewest balance allows", func() error {
		return crossZoneAtMinimum(kubeconfig, assets, plugin)
	})
	step("kubectl drain kwok-zone-a-0 --ignore-daemonsets")
	expectMembers(t, done, c, 5, "kwok-zone-a-0", 16)
	step("kubectl uncordon kwok-zone-a-0")

	// The plugin answers who reads what, who reads one queue, and what scaling would move.
	var cm corev1.ConfigMap
	testenv.Must(t, c.Get(context.Background(), client.ObjectKey{Namespace: "demo", Name: "orders-assignment"}, &cm))
	published := protocol.ReadPublished("orders", &cm, nil)
	described := kubectl("cg", "describe", "orders")
	for pod, e := range published.Entries {
		if !strings.Contains(described, pod) || !strings.Contains(described, protocol.Compact(e.Queues)[0].IDs) {
			t.Errorf("kubectl cg describe does not show %s reading %v:\n%s", pod, e.Queues, described)
		}
	}
	q := allocate.Queue{Topic: "orders", Broker: "broker-b", ID: 3}
	for pod, e := range published.Entries {
		if slices.Contains(e.Queues, q) {
			if out := kubectl("cg", "who-has", "orders", q.String()); !strings.HasPrefix(out, q.String()+": "+pod+" ") {
				t.Errorf("kubectl cg who-has %s says %q, want %s", q, out, pod)
			}
		}
	}
	// Sticky with maxSkew 0 from 5 members of 3 or 4 queues to 8 of 2 moves the fewest queues that keep as
	// few outside their broker's zone as balance allows. How many that is depends on where the scheduler
	// put the pods: 6 (the members give up all they hold above 2) when that keeps the zones, one more for
	// each queue a chain of moves keeps in its zone.
	table := kubectl("cg", "plan", "orders", "--replicas", "8")
	var planned struct {
		Moved, MinLoad, MaxLoad, CrossZone, MinCrossZone int
		Members                                          []struct{ Pod, Zone string }
	}
	if err := json.Unmarshal([]byte(kubectl("cg", "plan", "orders", "--replicas", "8", "-o", "json")), &planned); err != nil {
		t.Fatal(err)
	}
	zoneOf := map[string]string{}
	for _, m := range planned.Members {
		zoneOf[m.Pod] = m.Zone
	}
	current := map[string][]allocate.Queue{}
	for pod, e := range published.Entries {
		current[pod] = e.Queues
	}
	brokerZones := map[string]string{"broker-a": "zone-a", "broker-b": "zone-b"}
	wantMoved, wantCross := fewestMoves(current, zoneOf, brokerZones, 2)
	if len(planned.Members) != 8 || planned.MinLoad != 2 || planned.MaxLoad != 2 || planned.CrossZone != wantCross ||
		planned.MinCrossZone != wantCross || planned.Moved != wantMoved {
		t.Errorf("kubectl cg plan orders --replicas 8 plans %+v; want 8 members of 2 queues, %d outside their zone, %d moved",
			planned, wantCross, wantMoved)
	}
	// The summary names the moves, then (when Sticky makes locality moves) how many of them are beyond the
	// bound, then the members' loads.
	for _, want := range []string{fmt.Sprintf("%d of 16 queues move", wantMoved), "8 members read 2 to 2 queues each"} {
		if !strings.Contains(table, want) {
			t.Errorf("kubectl cg plan orders --replicas 8 says:\n%s\nwant %q", table, want)
		}
	}

	step("kubectl delete cg orders")
	if len(readme) > 0 {
		t.Errorf("the README's demo commands %q are not run", readme)
	}
	// The members' Leases belong to their pods as well, and go with them.
	waitFor(t, done, "the group's ConfigMaps to be garbage-collected", func() error {
		var cms corev1.ConfigMapList
		if err := c.List(context.Background(), &cms, client.InNamespace("demo"), client.MatchingLabels{protocol.GroupLabel: "orders"}); err != nil {
			return err
		}
		if n := len(cms.Items); n > 0 {
			return fmt.Errorf("%d ConfigMaps left", n)
		}
		return nil
	})

	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("the demo stopped with an error: %v", err)
		}
	case <-time.After(time.Minute):
		t.Fatal("the demo did not stop within a minute of being interrupted")
	}
	if _, err := os.Stat(kubeconfig); !os.IsNotExist(err) {
		t.Errorf("the demo left its kubeconfig behind (stat: %v); it names a server that is gone", err)
	}
	if _, err := os.Stat(filepath.Join(dir, controlURLFile)); !os.IsNotExist(err) {
		t.Errorf("the demo left its name server's control URL behind (stat: %v)", err)
	}
}

// readmeCommands are the commands of the README's demo block (the sh block after <!-- demo-commands -->),
// one a line, without their comments.
func readmeCommands(t *testing.T) []string {
	t.Helper()
	data, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	_, after, found := strings.Cut(string(data), "<!-- demo-commands -->\n```sh\n")
	block, _, closed := strings.Cut(after, "```")
	if !found || !closed {
		t.Fatal("README.md has no sh block after <!-- demo-commands -->")
	}
	var out []string
	for _, line := range strings.Split(block, "\n") {
		if command, _, _ := strings.Cut(line, " #"); strings.TrimSpace(command) != "" {
			out = append(out, strings.TrimSpace(command))
		}
	}
	return out
}

// putControl does what the README's curl command does: a PUT to the path it names on the demo's control
// endpoint, whose URL the demo wrote into dir (bin/localdev for make run). It returns the answer's body.
func putControl(t *testing.T, dir, command string) string {
	t.Helper()
	const prefix = `curl -sS -X PUT "$(cat bin/localdev/nameserver-control)`
	path, ok := strings.CutPrefix(command, prefix)
	if !ok || !strings.HasSuffix(path, `"`) {
		t.Fatalf("the README's curl command %q does not PUT to the control endpoint as %s...\"", command, prefix)
	}
	url, err := os.ReadFile(filepath.Join(dir, controlURLFile))
	if err != nil {
		t.Fatal(err)
	}
	req, err := http.NewRequest(http.MethodPut, strings.TrimSpace(string(url))+strings.TrimSuffix(path, `"`), nil)
	if err != nil {
		t.Fatal(err)
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(res.Body)
	_ = res.Body.Close()
	if res.StatusCode != http.StatusOK {
		t.Fatalf("%s: %s: %s", command, res.Status, body)
	}
	t.Logf("%s:\n%s", command, body)
	return string(body)
}

// column is the value in the named column of the first row of kubectl's table output.
func column(t *testing.T, table, name string) string {
	t.Helper()
	lines := strings.Split(strings.TrimSpace(table), "\n")
	if len(lines) < 2 {
		t.Fatalf("no row in:\n%s", table)
	}
	header, row := strings.Fields(lines[0]), strings.Fields(lines[1])
	i := slices.Index(header, name)
	if i < 0 || i >= len(row) {
		t.Fatalf("no column %s in:\n%s", name, table)
	}
	return row[i]
}

// checkRoutes checks, in kubectl cg describe's JSON, that the group read its routes from a name server:
// the topic orders on broker-a and broker-b, with queues queues each.
func checkRoutes(t *testing.T, describeJSON string, queues int32) {
	t.Helper()
	var d struct {
		NameServer string
		Routes     []struct {
			Topic, Broker string
			Queues        int32
		}
	}
	if err := json.Unmarshal([]byte(describeJSON), &d); err != nil {
		t.Fatal(err)
	}
	want := fmt.Sprintf("[{orders broker-a %d} {orders broker-b %d}]", queues, queues)
	if got := fmt.Sprint(d.Routes); d.NameServer == "" || got != want {
		t.Errorf("kubectl cg describe shows routes %s from name server %q; want %s, read from the demo's name server", got, d.NameServer, want)
	}
}

// fewestMoves is, for members (pod to zone) that each read share queues, the fewest queues read outside
// their broker's zone (brokerZones) and the fewest moves from current (pod to queues) that keep that few.
// It tries every way for each current member to keep some of its queues; the queues left go to the free
// places, into their broker's zone wherever one is free.
func fewestMoves(current map[string][]allocate.Queue, zoneOf, brokerZones map[string]string, share int) (moves, cross int) {
	pods := slices.Sorted(maps.Keys(current))
	total := 0
	for _, qs := range current {
		total += len(qs)
	}
	// crossOf is how many queues end outside their zone when kept holds the queues kept in place.
	crossOf := func(kept map[string][]allocate.Queue) int {
		free := map[string]int{}
		for pod, zone := range zoneOf {
			free[zone] += share - len(kept[pod])
		}
		left := map[string]int{}
		n := 0
		for _, pod := range pods {
			for _, q := range current[pod] {
				switch {
				case !slices.Contains(kept[pod], q):
					left[brokerZones[q.Broker]]++
				case zoneOf[pod] != brokerZones[q.Broker]:
					n++
				}
			}
		}
		for zone, l := range left {
			n += l - min(l, free[zone])
		}
		return n
	}
	best := map[int]int{} // cross-zone count to the most queues kept with it
	var try func(i int, kept map[string][]allocate.Queue, n int)
	try = func(i int, kept map[string][]allocate.Queue, n int) {
		if i == len(pods) {
			c := crossOf(kept)
			best[c] = max(best[c], n)
			return
		}
		pod, qs := pods[i], current[pods[i]]
		if _, member := zoneOf[pod]; !member {
			try(i+1, kept, n) // a pod the plan leaves out keeps nothing
			return
		}
		for mask := 0; mask < 1<<len(qs); mask++ {
			var keep []allocate.Queue
			for j, q := range qs {
				if mask&(1<<j) != 0 {
					keep = append(keep, q)
				}
			}
			if len(keep) <= share {
				kept[pod] = keep
				try(i+1, kept, n+len(keep))
			}
		}
		delete(kept, pod)
	}
	try(0, map[string][]allocate.Queue{}, 0)
	cross = slices.Min(slices.Collect(maps.Keys(best)))
	return total - best[cross], cross
}

// TestFewestMoves checks the oracle TestDemo holds the plan to on two placements of the demo's pods.
func TestFewestMoves(t *testing.T) {
	q := func(broker string, ids ...int32) []allocate.Queue {
		var qs []allocate.Queue
		for _, id := range ids {
			qs = append(qs, allocate.Queue{Topic: "orders", Broker: broker, ID: id})
		}
		return qs
	}
	brokerZones := map[string]string{"broker-a": "zone-a", "broker-b": "zone-b"}
	for _, c := range []struct {
		name              string
		current           map[string][]allocate.Queue
		zoneOf            map[string]string
		wantMoves, wantCZ int
	}{{
		// Every pod in a broker's zone keeps its queues there: the members of 3 give one each to the new pod.
		name:    "pods in both brokers' zones",
		current: map[string][]allocate.Queue{"a1": q("broker-a", 0, 1, 2), "a2": q("broker-a", 3, 4, 5), "b1": q("broker-b", 0, 1), "b2": q("broker-b", 2, 3), "b3": q("broker-b", 4, 5)},
		zoneOf:  map[string]string{"a1": "zone-a", "a2": "zone-a", "b1": "zone-b", "b2": "zone-b", "b3": "zone-b", "new": "zone-c"},
		// The new pod in zone-c takes two broker-a queues: both end outside their zone.
		wantMoves: 2, wantCZ: 2,
	}, {
		// No pod in zone-a; a zone-b pod reads a broker-a queue, which must make room for broker-b's sixth.
		name: "no pod in zone-a",
		current: map[string][]allocate.Queue{"c1": q("broker-a", 3, 4, 5), "b1": q("broker-b", 2, 3, 4),
			"b2": append(q("broker-a", 2), q("broker-b", 5)...), "c2": q("broker-a", 0, 1), "b3": q("broker-b", 0, 1)},
		zoneOf:    map[string]string{"c1": "zone-c", "b1": "zone-b", "b2": "zone-b", "c2": "zone-c", "b3": "zone-b", "new": "zone-c"},
		wantMoves: 3, wantCZ: 6,
	}} {
		if moves, cross := fewestMoves(c.current, c.zoneOf, brokerZones, 2); moves != c.wantMoves || cross != c.wantCZ {
			t.Errorf("%s: fewestMoves = %d moves, %d outside their zone; want %d, %d", c.name, moves, cross, c.wantMoves, c.wantCZ)
		}
	}
}

// crossZoneAtMinimum asks kubectl cg describe how many of the group's queues are read outside their
// broker's zone, and says whether that is the fewest a balanced plan of the current members allows.
func crossZoneAtMinimum(kubeconfig, assets, plugin string) error {
	cmd := exec.Command(filepath.Join(assets, "kubectl"), "cg", "describe", "orders", "-o", "json")
	cmd.Env = append(os.Environ(), "KUBECONFIG="+kubeconfig, "PATH="+filepath.Dir(plugin)+string(os.PathListSeparator)+os.Getenv("PATH"))
	out, err := cmd.Output()
	if err != nil {
		return fmt.Errorf("kubectl cg describe orders -o json: %w", err)
	}
	var d struct {
		CrossZone    *int `json:"crossZone"`
		MinCrossZone *int `json:"minCrossZone"`
	}
	if err := json.Unmarshal(out, &d); err != nil {
		return fmt.Errorf("kubectl cg describe orders -o json: %w", err)
	}
	switch {
	case d.CrossZone == nil || d.MinCrossZone == nil:
		return fmt.Errorf("kubectl cg describe counts no cross-zone reads, although the sample's brokers have zones:\n%s", out)
	case *d.CrossZone != *d.MinCrossZone:
		return fmt.Errorf("%d queues are read outside their broker's zone; balance allows %d", *d.CrossZone, *d.MinCrossZone)
	}
	return nil
}

// expectMembers waits until exactly n order-consumer pods run, none of them on avoid (a drained node), the
// ConfigMap has an entry for each of them and gives each of the group's queues (as many as queues) to
// exactly one, and the group reports them all Ready members.
func expectMembers(t *testing.T, done <-chan error, c client.Client, n int, avoid string, queues int) {
	t.Helper()
	waitFor(t, done, fmt.Sprintf("%d members holding the %d queues", n, queues), func() error {
		var pods corev1.PodList
		if err := c.List(context.Background(), &pods, client.InNamespace("demo"), client.MatchingLabels{"app": "order-consumer"}); err != nil {
			return err
		}
		var want []string
		for _, p := range pods.Items {
			if p.DeletionTimestamp != nil {
				return fmt.Errorf("pod %s is terminating", p.Name)
			}
			if p.Spec.NodeName == avoid {
				return fmt.Errorf("pod %s runs on the drained node %s", p.Name, avoid)
			}
			want = append(want, p.Name)
		}
		slices.Sort(want)
		if len(want) != n {
			return fmt.Errorf("pods %v, want %d", want, n)
		}

		var cm corev1.ConfigMap
		if err := c.Get(context.Background(), client.ObjectKey{Namespace: "demo", Name: "orders-assignment"}, &cm); err != nil {
			return err
		}
		var keys []string
		owner := map[allocate.Queue]string{}
		for pod, value := range cm.Data {
			keys = append(keys, pod)
			_, queues, err := protocol.DecodeEntry([]byte(value))
			if err != nil {
				return fmt.Errorf("entry of %s: %w", pod, err)
			}
			for _, q := range queues {
				if other, taken := owner[q]; taken {
					return fmt.Errorf("%s is given to both %s and %s", q, other, pod)
				}
				owner[q] = pod
			}
		}
		slices.Sort(keys)
		if !slices.Equal(keys, want) {
			return fmt.Errorf("ConfigMap keys %v", keys)
		}
		if len(owner) != queues {
			return fmt.Errorf("%d queues have an owner, want %d", len(owner), queues)
		}

		var group v1alpha1.ConsumerGroup
		if err := c.Get(context.Background(), client.ObjectKey{Namespace: "demo", Name: "orders"}, &group); err != nil {
			return err
		}
		if !meta.IsStatusConditionTrue(group.Status.Conditions, "Ready") || group.Status.MemberCount != int32(n) {
			return fmt.Errorf("group status: %d members, conditions %v", group.Status.MemberCount, group.Status.Conditions)
		}
		return nil
	})
}

// waitFor retries check until it succeeds, for up to two minutes (the control plane shares two cores with
// the rest of the test run); it fails at once if the demo stopped.
func waitFor(t *testing.T, done <-chan error, what string, check func() error) {
	t.Helper()
	deadline := time.Now().Add(2 * time.Minute)
	for {
		err := check()
		if err == nil {
			return
		}
		select {
		case runErr := <-done:
			t.Fatalf("the demo stopped (%v) while waiting for %s; last check: %v", runErr, what, err)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("waiting for %s: %v", what, err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}
