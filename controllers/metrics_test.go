//go:build envtest

package controllers

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"sigs.k8s.io/controller-runtime/pkg/metrics"

	"github.com/consumergroup-operator/consumergroup-operator/api/v1alpha1"
	"github.com/consumergroup-operator/consumergroup-operator/internal/testenv"
)

// TestMetrics scrapes the metrics endpoint's handler (promhttp over controller-runtime's registry, as the
// manager's metrics server serves it) while a Cooperative group goes through a
// join, a revocation its member does not acknowledge, the fence that follows, and the group's deletion,
// and checks the values.
func TestMetrics(t *testing.T) {
	const queues = 12
	ns, own, ms := settledGroup(t, "mx", queues, 2, 2, memberOptions)
	g := getGroup(t, ns, "mx")
	labels := map[string]string{"namespace": ns, "group": "mx"}
	expectMetric(t, "consumergroup_members", labels, 2)
	expectMetric(t, "consumergroup_queues", labels, queues)
	expectMetric(t, "consumergroup_unowned_queues", labels, 0)
	expectMetric(t, "consumergroup_imbalance_ratio", labels, 1)
	expectMetric(t, "consumergroup_assignment_generation", labels, float64(g.Status.AssignmentGeneration))
	expectMetric(t, "consumergroup_status_condition", with(labels, "type", "Ready", "status", "True"), 1)
	expectMetric(t, "consumergroup_status_condition", with(labels, "type", "Ready", "status", "False"), 0)
	if v := metricValue(t, "consumergroup_assignment_bytes", labels); v <= 0 {
		t.Errorf("consumergroup_assignment_bytes = %v", v)
	}

	// A join: the two members each give up two queues, which go to the newcomer once acknowledged.
	moved := metricValue(t, "consumergroup_queues_moved_total", labels)
	beyond := metricValue(t, "consumergroup_queues_moved_beyond_bound_total", labels)
	handoffs := histogramCount(t, "consumergroup_handoff_duration_seconds", labels)
	startSimMember(t, "mx", testenv.Pod(ns, "mx-2", "mx").Create(t, k8s), own)
	waitForSettled(t, ns, "mx", own, queues, 3)
	expectMetric(t, "consumergroup_members", labels, 3)
	expectMetric(t, "consumergroup_unowned_queues", labels, 0)
	if got := metricValue(t, "consumergroup_queues_moved_total", labels) - moved; got != 4 {
		t.Errorf("a join into 12 queues over 2 members moved %v queues, want 4", got)
	}
	// Sticky with no zones moves exactly the fewest balance needs.
	if got := metricValue(t, "consumergroup_queues_moved_beyond_bound_total", labels) - beyond; got != 0 {
		t.Errorf("a Sticky join with no zones moved %v queues beyond the bound, want 0", got)
	}
	if n := histogramCount(t, "consumergroup_handoff_duration_seconds", labels) - handoffs; n != 4 {
		t.Errorf("%d handoffs observed, want 4", n)
	}
	if v := metricValue(t, "consumergroup_rebalances_total", with(labels, "reason", "membership")); v < 1 {
		t.Errorf("no rebalance counted for the join (%v)", v)
	}

	// A revocation the member does not acknowledge: its queues are unowned until the fence, 2 s later.
	ms[0].Acking.Store(false)
	startSimMember(t, "mx", testenv.Pod(ns, "mx-3", "mx").Create(t, k8s), own)
	eventually(t, 10*time.Second, func() error {
		if v := metricValue(t, "consumergroup_unowned_queues", labels); v == 0 {
			return fmt.Errorf("no unowned queue while a revocation waits")
		}
		return nil
	})
	eventually(t, 30*time.Second, func() error {
		if v := metricValue(t, "consumergroup_members_fenced_total", labels); v != 1 {
			return fmt.Errorf("consumergroup_members_fenced_total = %v, want 1", v)
		}
		if v := metricValue(t, "consumergroup_unowned_queues", labels); v != 0 {
			return fmt.Errorf("%v queues still unowned after the fence", v)
		}
		return nil
	})
	expectMetric(t, "consumergroup_status_condition", with(labels, "type", "Fenced", "status", "True"), 1)

	// Deletion: the group's series go.
	must(t, k8s.Delete(context.Background(), g))
	eventually(t, 30*time.Second, func() error {
		if n := seriesOf(t, labels); n > 0 {
			return fmt.Errorf("%d series of the deleted group left", n)
		}
		return nil
	})
}

// TestMovesBeyondBoundCounted: RocketMQ's Averagely gives each member a contiguous run of the sorted
// queues, so a join into 12 queues over 2 members moves 6 (2 from the first member, 4 from the second) where
// balance needs 4: the metrics count 6 moved, 2 of them beyond the bound.
func TestMovesBeyondBoundCounted(t *testing.T) {
	const queues = 12
	ns := newNamespace(t)
	startManager(t, ns)
	own := testenv.NewOwnership()
	testenv.Group(ns, "av").Topic("t", testenv.Broker("b", queues, "")).
		Strategy(v1alpha1.Strategy{Type: v1alpha1.Averagely}).
		Handoff(v1alpha1.Handoff{Mode: v1alpha1.Cooperative}).Create(t, k8s)
	for i := range 2 {
		testenv.StartMember(t, restConfig, "av", testenv.Pod(ns, fmt.Sprintf("av-%d", i), "av").Create(t, k8s), own, memberOptions)
	}
	waitForSettled(t, ns, "av", own, queues, 2)
	labels := map[string]string{"namespace": ns, "group": "av"}
	moved := metricValue(t, "consumergroup_queues_moved_total", labels)
	beyond := metricValue(t, "consumergroup_queues_moved_beyond_bound_total", labels)
	testenv.StartMember(t, restConfig, "av", testenv.Pod(ns, "av-2", "av").Create(t, k8s), own, memberOptions)
	waitForSettled(t, ns, "av", own, queues, 3)
	if got := metricValue(t, "consumergroup_queues_moved_total", labels) - moved; got != 6 {
		t.Errorf("an Averagely join into 12 queues over 2 members moved %v queues, want 6", got)
	}
	if got := metricValue(t, "consumergroup_queues_moved_beyond_bound_total", labels) - beyond; got != 2 {
		t.Errorf("an Averagely join moved %v queues beyond the bound, want 2 (6 moved where balance needs 4)", got)
	}
}

func with(labels map[string]string, kv ...string) map[string]string {
	out := map[string]string{}
	for k, v := range labels {
		out[k] = v
	}
	for i := 0; i+1 < len(kv); i += 2 {
		out[kv[i]] = kv[i+1]
	}
	return out
}

// endpoint serves the metrics as the manager's metrics server does, started by the first scrape and
// kept for the tests that follow.
var (
	endpoint     *httptest.Server
	endpointOnce sync.Once
)

// scrape reads the metrics endpoint and parses its text exposition.
func scrape(t *testing.T) map[string]*dto.MetricFamily {
	t.Helper()
	endpointOnce.Do(func() {
		endpoint = httptest.NewServer(promhttp.HandlerFor(metrics.Registry, promhttp.HandlerOpts{}))
	})
	resp, err := http.Get(endpoint.URL + "/metrics")
	must(t, err)
	defer func() { _ = resp.Body.Close() }()
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(resp.Body)
	must(t, err)
	return families
}

// find returns the series of family name whose labels are exactly labels.
func find(t *testing.T, name string, labels map[string]string) *dto.Metric {
	t.Helper()
	for _, f := range scrape(t) {
		if f.GetName() != name {
			continue
		}
	series:
		for _, m := range f.GetMetric() {
			if len(m.GetLabel()) != len(labels) {
				continue
			}
			for _, l := range m.GetLabel() {
				if labels[l.GetName()] != l.GetValue() {
					continue series
				}
			}
			return m
		}
	}
	return nil
}

func metricValue(t *testing.T, name string, labels map[string]string) float64 {
	t.Helper()
	m := find(t, name, labels)
	switch {
	case m == nil:
		return -1
	case m.Gauge != nil:
		return m.GetGauge().GetValue()
	case m.Counter != nil:
		return m.GetCounter().GetValue()
	}
	t.Fatalf("%s is neither a gauge nor a counter", name)
	return 0
}

func histogramCount(t *testing.T, name string, labels map[string]string) uint64 {
	t.Helper()
	m := find(t, name, labels)
	if m == nil || m.Histogram == nil {
		return 0
	}
	return m.GetHistogram().GetSampleCount()
}

// expectMetric waits until the series has the value want.
func expectMetric(t *testing.T, name string, labels map[string]string, want float64) {
	t.Helper()
	eventually(t, 10*time.Second, func() error {
		if got := metricValue(t, name, labels); got != want {
			return fmt.Errorf("%s%v = %v, want %v", name, labels, got, want)
		}
		return nil
	})
}

// seriesOf counts the series, of any family, labelled with the namespace and group of labels.
func seriesOf(t *testing.T, labels map[string]string) int {
	t.Helper()
	n := 0
	for _, f := range scrape(t) {
		for _, m := range f.GetMetric() {
			match := 0
			for _, l := range m.GetLabel() {
				if (l.GetName() == "namespace" || l.GetName() == "group") && labels[l.GetName()] == l.GetValue() {
					match++
				}
			}
			if match == 2 {
				n++
			}
		}
	}
	return n
}
