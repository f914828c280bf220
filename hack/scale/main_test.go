package main

import (
	"flag"
	"io"
	"math"
	"os"
	"reflect"
	"runtime/debug"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
)

func TestParseOptionsNamesEachBadFlag(t *testing.T) {
	for _, tc := range []struct {
		name string
		args []string
		want []string // substrings of the error; none: no error
	}{
		{name: "defaults", args: nil},
		{name: "20,000 pods as json", args: []string{"-pods", "20000", "-format", "json"}},
		{name: "not a multiple of the group", args: []string{"-pods", "105"}, want: []string{"-pods 105 is not a multiple of -pods-per-group 10"}},
		{name: "odd queues and no nodes", args: []string{"-queues-per-group", "15", "-pods-per-node", "0"},
			want: []string{"-queues-per-group is 15: want an even number", "-pods-per-node is 0: want 1 or more"}},
		{name: "format", args: []string{"-format", "yaml"}, want: []string{`-format "yaml": want text or json`}},
		{name: "window", args: []string{"-window", "10ms"}, want: []string{"-window 10ms: want 1s or more"}},
		{name: "gogc", args: []string{"-gogc", "50"}},
		{name: "gogc off", args: []string{"-gogc", "off"}},
		{name: "start rate", args: []string{"-start-rate", "-1"}, want: []string{"-start-rate -1: want 0 (all at once) or more"}},
		{name: "gogc zero", args: []string{"-gogc", "0"}, want: []string{`-gogc "0": want a whole number of 1 or more, or off`}},
		{name: "control plane gogc", args: []string{"-control-plane-gogc", "300"}},
		{name: "control plane gogc not a number", args: []string{"-control-plane-gogc", "lots"},
			want: []string{`-control-plane-gogc "lots": want a whole number of 1 or more, or off`}},
		{name: "control plane memory limit", args: []string{"-control-plane-memory-limit", "6GiB"}},
		{name: "control plane memory limit in bytes", args: []string{"-control-plane-memory-limit", "6442450944"}},
		{name: "control plane memory limit in gigabytes", args: []string{"-control-plane-memory-limit", "6GB"},
			want: []string{`-control-plane-memory-limit "6GB": want bytes, with B, KiB, MiB, GiB or TiB or none, as GOMEMLIMIT (6GiB)`}},
		{name: "program gogc", args: []string{"-program-gogc", "800"}},
		{name: "program gogc negative", args: []string{"-program-gogc", "-5"},
			want: []string{`-program-gogc "-5": want a whole number of 1 or more, or off`}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fs := flag.NewFlagSet("scale", flag.ContinueOnError)
			fs.SetOutput(io.Discard)
			_, err := parseOptions(fs, tc.args)
			if len(tc.want) == 0 {
				if err != nil {
					t.Fatalf("error %v, want none", err)
				}
				return
			}
			if err == nil {
				t.Fatalf("no error, want %q", tc.want)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not say %q", err, w)
				}
			}
		})
	}
}

func TestLayoutSpreadsEachGroupOverNodes(t *testing.T) {
	o := options{pods: 120, podsPerGroup: 10, podsPerNode: 30, queuesPerGroup: 16, groupsPerNamespace: 5}
	w := layout(o)
	if len(w.groups) != 12 || len(w.pods) != 120 || len(w.nodes) != 4 || len(w.namespaces) != 3 {
		t.Fatalf("%d groups, %d pods, %d nodes, %d namespaces; want 12, 120, 4, 3", len(w.groups), len(w.pods), len(w.nodes), len(w.namespaces))
	}
	perNode := map[string]int{}
	topics := map[string]bool{}
	for i, p := range w.pods {
		perNode[p.Spec.NodeName]++
		g := w.groups[i/o.podsPerGroup]
		if p.Namespace != g.Namespace || p.Labels["app"] != g.Name {
			t.Errorf("pod %s/%s (app=%s) is not selected by group %s/%s", p.Namespace, p.Name, p.Labels["app"], g.Namespace, g.Name)
		}
	}
	for node, n := range perNode {
		if n != o.podsPerNode {
			t.Errorf("node %s runs %d pods, want %d", node, n, o.podsPerNode)
		}
	}
	for _, g := range w.groups {
		topics[g.Spec.Topics[0].Name] = true
		queues := int32(0)
		for _, b := range g.Spec.Topics[0].Brokers {
			queues += b.Queues
		}
		if queues != 16 {
			t.Errorf("group %s has %d queues, want 16", g.Name, queues)
		}
	}
	if len(topics) != len(w.groups) {
		t.Errorf("%d topics for %d groups: a queue must be one group's alone", len(topics), len(w.groups))
	}
	// A node lost must leave each of its groups a member elsewhere.
	nodesOfGroup := map[string]map[string]bool{}
	for i, p := range w.pods {
		g := w.groups[i/o.podsPerGroup].Name
		if nodesOfGroup[g] == nil {
			nodesOfGroup[g] = map[string]bool{}
		}
		nodesOfGroup[g][p.Spec.NodeName] = true
	}
	for g, nodes := range nodesOfGroup {
		if len(nodes) < 2 {
			t.Errorf("group %s runs on %d node(s)", g, len(nodes))
		}
	}
}

const requestTotals = `# HELP apiserver_request_total [STABLE] Counter of apiserver requests
# TYPE apiserver_request_total counter
apiserver_request_total{code="200",component="apiserver",dry_run="",group="",resource="configmaps",scope="resource",subresource="",verb="GET",version="v1"} 100
apiserver_request_total{code="404",component="apiserver",dry_run="",group="",resource="configmaps",scope="resource",subresource="",verb="GET",version="v1"} 5
apiserver_request_total{code="200",component="apiserver",dry_run="",group="coordination.k8s.io",resource="leases",scope="resource",subresource="",verb="PUT",version="v1"} 40
apiserver_request_total{code="200",component="apiserver",dry_run="",group="",resource="pods",scope="resource",subresource="status",verb="PUT",version="v1"} 7
apiserver_request_total{code="200",component="apiserver",dry_run="",group="",resource="",scope="",subresource="/metrics",verb="GET",version=""} 3
`

func TestParseRequestTotalsSumsByVerbAndResource(t *testing.T) {
	got, err := parseRequestTotals([]byte(requestTotals))
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]float64{"GET configmaps": 105, "PUT leases": 40, "PUT pods/status": 7}
	if len(got) != len(want) {
		t.Errorf("got %v, want %v", got, want)
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s: %v, want %v", k, got[k], v)
		}
	}
	if _, err := parseRequestTotals([]byte("# nothing\n")); err == nil {
		t.Error("metrics without apiserver_request_total read without an error")
	}
}

func TestRequestRatesLeaveOutThisProgramsRequests(t *testing.T) {
	before := map[string]float64{"GET configmaps": 100, "PUT leases": 40}
	after := map[string]float64{"GET configmaps": 1100, "PUT leases": 90, "GET pods": 10}
	// 1,060 requests over 10 s, 60 of them this program's, from 100 members: 1 per member per second.
	rates, perMember := requestRates(before, after, 60, 10, 100)
	if math.Abs(perMember-1) > 1e-9 {
		t.Errorf("%v requests per member per second, want 1", perMember)
	}
	if rates["GET configmaps"] != 100 || rates["PUT leases"] != 5 || rates["GET pods"] != 1 {
		t.Errorf("rates %v", rates)
	}
}

func TestMemStatsOfReadsTheMemStats(t *testing.T) {
	profile := "heap profile: 1: 2 [3: 4] @ heap/1048576\n# runtime.MemStats\n# Alloc = 1000\n# HeapIdle = 5000\n# HeapInuse = 23453696\n" +
		"# HeapReleased = 3000\n# Stack = 1 / 2\n# NextGC = 40000000\n"
	want := memStats{HeapInuse: 23453696, HeapIdleUnreleased: 2000, StackInuse: 1, NextGC: 40000000}
	if got, err := memStatsOf(profile); err != nil || got != want {
		t.Errorf("memStatsOf = %+v, %v; want %+v", got, err, want)
	}
	if _, err := memStatsOf("heap profile: 1: 2 [3: 4] @ heap/1048576\n# HeapInuse = 1\n"); err == nil {
		t.Errorf("memStatsOf a profile without all the memory statistics: no error")
	}
}

func TestProcFieldsReadsKilobytes(t *testing.T) {
	status := []byte("Name:\tmanager\nVmHWM:\t  120000 kB\nVmRSS:\t  100000 kB\nThreads:\t12\n")
	got := procFields(status, "VmRSS:", "VmHWM:")
	if got["VmRSS:"] != 100000 || got["VmHWM:"] != 120000 || len(got) != 2 {
		t.Errorf("got %v", got)
	}
}

// TestMembersActAsTheirServiceAccounts: a member's requests carry the identity the API server gives a
// token of its pod's service account, which API Priority and Fairness classifies as a workload's.
func TestMembersActAsTheirServiceAccounts(t *testing.T) {
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "scale-003", Name: "group-00001-4"}, Spec: corev1.PodSpec{ServiceAccountName: "scale-member"}}
	cfg := asServiceAccount(&rest.Config{Host: "https://127.0.0.1:6443"}, pod)
	want := rest.ImpersonationConfig{UserName: "system:serviceaccount:scale-003:scale-member",
		Groups: []string{"system:serviceaccounts", "system:serviceaccounts:scale-003", "system:authenticated"}}
	if !reflect.DeepEqual(cfg.Impersonate, want) {
		t.Errorf("impersonates %+v, want %+v", cfg.Impersonate, want)
	}
}

func TestSetEnvRestoresWhatWasThere(t *testing.T) {
	const key = "CONSUMERGROUP_SCALE_TEST_VAR"
	restore := setEnv(key, "300")
	if got := os.Getenv(key); got != "300" {
		t.Fatalf("%s = %q while set, want 300", key, got)
	}
	restore()
	if _, ok := os.LookupEnv(key); ok {
		t.Fatalf("%s still set after restore, want it unset as before", key)
	}
	t.Setenv(key, "before")
	setEnv(key, "300")()
	if got := os.Getenv(key); got != "before" {
		t.Fatalf("%s = %q after restore, want the earlier value", key, got)
	}
	setEnv(key, "")()
	if got := os.Getenv(key); got != "before" {
		t.Fatalf("%s = %q after an empty value, want it untouched", key, got)
	}
}

func TestStatCPUSecondsAddsUserAndSystemTicks(t *testing.T) {
	// A command name with spaces and parentheses, as a process may give itself; utime 1234, stime 66.
	stat := []byte("4242 (a (b) c) S 1 4242 4242 0 -1 4194560 2310 0 0 0 1234 66 0 0 20 0 9 0 1000 123456 789 18446744073709551615\n")
	got, err := statCPUSeconds(stat)
	if err != nil || got != 13 {
		t.Errorf("statCPUSeconds = %v, %v; want 13 s", got, err)
	}
	for _, bad := range []string{"4242 no name", "4242 (x) S 1 2", "4242 (x) S 1 2 3 4 5 6 7 8 9 10 many 66"} {
		if _, err := statCPUSeconds([]byte(bad)); err == nil {
			t.Errorf("statCPUSeconds(%q) has no error", bad)
		}
	}
}

func TestStatNameAndParentReadsThroughParentheses(t *testing.T) {
	statNameAndParent := func(stat []byte) (string, int, bool) {
		name, f, err := statFields(stat)
		ppid, ok := fieldsParent(f)
		return name, ppid, err == nil && ok
	}
	name, ppid, ok := statNameAndParent([]byte("4242 (kube (api) server) S 77 4242 4242 0 -1 4194560\n"))
	if !ok || name != "kube (api) server" || ppid != 77 {
		t.Errorf("statNameAndParent = %q, %d, %t; want \"kube (api) server\", 77, true", name, ppid, ok)
	}
	for _, bad := range []string{"4242 no name S 1", "4242 (x) S", "4242 (x) S parent"} {
		if _, _, ok := statNameAndParent([]byte(bad)); ok {
			t.Errorf("statNameAndParent(%q) is ok", bad)
		}
	}
}

// TestReadCPUSharesReadsThisProgram: this test's own process has used CPU, and it starts no control
// plane, so the children's shares are 0.
func TestReadCPUSharesReadsThisProgram(t *testing.T) {
	for start := time.Now(); time.Since(start) < 20*time.Millisecond; {
	}
	c, err := readCPUShares()
	if err != nil {
		t.Fatal(err)
	}
	if c.Program <= 0 || c.APIServer != 0 || c.Etcd != 0 {
		t.Errorf("readCPUShares = %+v, want this program's time alone", c)
	}
}

func TestOperatorEnvSetsGOGCOnlyWhenAsked(t *testing.T) {
	inherited := []string{"PATH=/bin", "GOGC=400", "HOME=/root"}
	for _, tc := range []struct {
		name, gogc string
		want       []string
	}{
		{name: "the operator's own default", gogc: "", want: []string{"PATH=/bin", "HOME=/root"}},
		{name: "asked for", gogc: "50", want: []string{"PATH=/bin", "HOME=/root", "GOGC=50"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := operatorEnv(inherited, tc.gogc); !slices.Equal(got, tc.want) {
				t.Errorf("operatorEnv(%q) = %q, want %q", tc.gogc, got, tc.want)
			}
			if inherited[1] != "GOGC=400" {
				t.Errorf("operatorEnv changed the environment it was given: %q", inherited)
			}
		})
	}
}

func TestGroupQueueOfReadsTheGroupControllerAlone(t *testing.T) {
	text := []byte(`# TYPE controller_runtime_reconcile_total counter
controller_runtime_reconcile_total{controller="consumergroup",result="success"} 120
controller_runtime_reconcile_total{controller="consumergroup",result="requeue_after"} 30
controller_runtime_reconcile_total{controller="consumergroup",result="error"} 2
controller_runtime_reconcile_total{controller="routes",result="success"} 999
# TYPE workqueue_depth gauge
workqueue_depth{controller="consumergroup",name="consumergroup",priority="0"} 7
workqueue_depth{controller="consumergroup",name="consumergroup",priority="-100"} 3
workqueue_depth{controller="routes",name="routes",priority="0"} 50
workqueue_depth{name="nodeviews"} 40
# TYPE workqueue_queue_duration_seconds histogram
workqueue_queue_duration_seconds_bucket{controller="consumergroup",name="consumergroup",le="+Inf"} 150
workqueue_queue_duration_seconds_sum{controller="consumergroup",name="consumergroup"} 45
workqueue_queue_duration_seconds_count{controller="consumergroup",name="consumergroup"} 150
workqueue_queue_duration_seconds_bucket{controller="routes",name="routes",le="+Inf"} 10
workqueue_queue_duration_seconds_sum{controller="routes",name="routes"} 1000
workqueue_queue_duration_seconds_count{controller="routes",name="routes"} 10
`)
	got, err := groupQueueOf(text)
	if err != nil {
		t.Fatal(err)
	}
	if want := (groupQueue{Passes: 152, Depth: 10, WaitSeconds: 45, Waits: 150}); got != want {
		t.Errorf("groupQueueOf = %+v, want %+v", got, want)
	}
	if _, err := groupQueueOf([]byte("# TYPE workqueue_depth gauge\nworkqueue_depth{name=\"routes\"} 1\n")); err == nil ||
		!strings.Contains(err.Error(), "no controller_runtime_reconcile_total of consumergroup") {
		t.Errorf("metrics without the group controller: error %v, want one naming what is missing", err)
	}
}

func TestSetProgramGCLimitsMemoryAboveGosDefault(t *testing.T) {
	defer debug.SetGCPercent(debug.SetGCPercent(100))
	defer debug.SetMemoryLimit(debug.SetMemoryLimit(-1))
	const gib = 1 << 30
	for _, tc := range []struct {
		name, gogc string
		wantGOGC   int
		wantLimit  int64
	}{
		{name: "above the default", gogc: "400", wantGOGC: 400, wantLimit: 4 * gib},
		{name: "off", gogc: "off", wantGOGC: -1, wantLimit: 4 * gib},
		{name: "below the default", gogc: "50", wantGOGC: 50, wantLimit: math.MaxInt64},
		{name: "empty: Go's default", gogc: "", wantGOGC: 100, wantLimit: math.MaxInt64},
	} {
		t.Run(tc.name, func(t *testing.T) {
			debug.SetGCPercent(100)
			debug.SetMemoryLimit(math.MaxInt64)
			setProgramGC(tc.gogc, 10*gib, 2*gib)
			if got := debug.SetGCPercent(100); got != tc.wantGOGC {
				t.Errorf("GOGC %d, want %d", got, tc.wantGOGC)
			}
			if got := debug.SetMemoryLimit(-1); got != tc.wantLimit {
				t.Errorf("memory limit %d, want %d", got, tc.wantLimit)
			}
		})
	}
}

func TestBusiestNodeIsTheOneWhoseMembersReadMost(t *testing.T) {
	nodes := []string{"node-0", "node-1", "node-2"}
	for _, tc := range []struct {
		name    string
		reading map[string]int
		want    int
	}{
		{name: "the first node's members fenced", reading: map[string]int{"node-0": 0, "node-1": 16, "node-2": 15}, want: 1},
		{name: "a tie goes to the first", reading: map[string]int{"node-0": 16, "node-1": 16, "node-2": 16}, want: 0},
		{name: "nobody reads", reading: map[string]int{}, want: 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := busiestNode(nodes, func(n string) int { return tc.reading[n] }); got != tc.want {
				t.Errorf("busiestNode = %d, want %d", got, tc.want)
			}
		})
	}
}
