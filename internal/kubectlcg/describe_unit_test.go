package kubectlcg

import (
	"bytes"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/consumergroup-operator/consumergroup-operator/api/v1alpha1"
	"github.com/consumergroup-operator/consumergroup-operator/internal/plan"
	"github.com/consumergroup-operator/consumergroup-operator/pkg/allocate"
)

// TestDescribeCrossZone: the demo of issue 25 after a rollout, 12 queues on broker-a (zone-a) and
// broker-b (zone-b) over pods in zones a, a, b, b, c; describe shows 6 read across zones where 2 is the
// fewest balance allows.
func TestDescribeCrossZone(t *testing.T) {
	q := func(b string, id int32) allocate.Queue { return allocate.Queue{Topic: "orders", Broker: b, ID: id} }
	var queues []allocate.Queue
	for id := range int32(6) {
		queues = append(queues, q("broker-a", id), q("broker-b", id))
	}
	pv := &plan.Preview{Queues: queues, BrokerZones: map[string]string{"broker-a": "zone-a", "broker-b": "zone-b"},
		Current: map[string][]allocate.Queue{
			"a1": {q("broker-a", 0), q("broker-b", 0), q("broker-b", 1)},
			"a2": {q("broker-a", 1), q("broker-b", 2), q("broker-b", 3)},
			"b1": {q("broker-b", 4), q("broker-a", 2)},
			"b2": {q("broker-b", 5), q("broker-a", 3)},
			"c1": {q("broker-a", 4), q("broker-a", 5)},
		}}
	for _, m := range []struct{ pod, zone string }{{"a1", "zone-a"}, {"a2", "zone-a"}, {"b1", "zone-b"}, {"b2", "zone-b"}, {"c1", "zone-c"}} {
		pv.Members = append(pv.Members, plan.PreviewMember{Member: allocate.Member{ID: m.pod, Zone: m.zone, Weight: 1}, Pod: m.pod})
	}
	g := &v1alpha1.ConsumerGroup{ObjectMeta: metav1.ObjectMeta{Namespace: "demo", Name: "orders"}}
	d := describe(g, pv, time.Now())
	if d.CrossZone == nil || d.MinCrossZone == nil || *d.CrossZone != 8 || *d.MinCrossZone != 2 {
		t.Fatalf("crossZone %v, minCrossZone %v; want 8 and 2", d.CrossZone, d.MinCrossZone)
	}
	var b bytes.Buffer
	if err := d.table(&b); err != nil {
		t.Fatal(err)
	}
	if want := "8 read outside their broker's zone (fewest balance allows: 2)"; !strings.Contains(b.String(), want) {
		t.Errorf("describe's table lacks %q:\n%s", want, b.String())
	}
	pv.BrokerZones = map[string]string{}
	if d := describe(g, pv, time.Now()); d.CrossZone != nil {
		t.Errorf("no broker has a zone, yet describe counts %d queues across zones", *d.CrossZone)
	}
}

func TestDescribeRoutes(t *testing.T) {
	now := time.Unix(1e9, 0)
	read := metav1.NewTime(now.Add(-12 * time.Second))
	g := &v1alpha1.ConsumerGroup{}
	g.Name, g.Namespace = "g", "ns"
	g.Spec.Topics = []v1alpha1.Topic{{Name: "orders"}, {Name: "gone"}}
	g.Spec.NameServer = &v1alpha1.NameServer{Addresses: []string{"10.0.0.1:9876"}, RetryTopic: v1alpha1.RetryTopicIgnore}
	g.Status.Routes = &v1alpha1.RoutesStatus{NameServer: "10.0.0.1:9876", ReadTime: &read, Topics: []v1alpha1.TopicRoute{
		{Name: "orders", ReadTime: &read, Brokers: []v1alpha1.BrokerRoute{{Name: "a", Queues: 16, ReadQueueNums: 16, Perm: 6}, {Name: "b", ReadQueueNums: 8, Perm: 2}}},
		{Name: "gone", ReadTime: &read, AbsentSince: &read},
	}}
	d := describe(g, &plan.Preview{}, now)
	var out bytes.Buffer
	if err := d.table(&out); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"ROUTES from name server 10.0.0.1:9876, as they stand since 12s ago", "orders  a       16      16           RW-   12s ago  -", "orders  b       0       8            -W-", "gone    -       0       0            -     12s ago  12s ago"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("describe lacks %q:\n%s", want, out.String())
		}
	}
	if !specQueue(g, allocate.Queue{Topic: "orders", Broker: "a", ID: 15}) || specQueue(g, allocate.Queue{Topic: "orders", Broker: "b", ID: 0}) {
		t.Error("who-has does not read the discovered queues")
	}
}

// TestPlanMoveCounts: a1 (zone-a) reads a0 and b0, b1 (zone-b) reads b1 and a1; a plan that swaps b0 and
// a1 home moves 2 queues where balance needs none, and says so.
func TestPlanMoveCounts(t *testing.T) {
	q := func(b string, id int32) allocate.Queue { return allocate.Queue{Topic: "orders", Broker: b, ID: id} }
	pv := &plan.Preview{
		Queues:      []allocate.Queue{q("broker-a", 0), q("broker-a", 1), q("broker-b", 0), q("broker-b", 1)},
		BrokerZones: map[string]string{"broker-a": "zone-a", "broker-b": "zone-b"},
		Members: []plan.PreviewMember{
			{Member: allocate.Member{ID: "10.0.0.1@a1", Zone: "zone-a", Weight: 1}, Pod: "a1"},
			{Member: allocate.Member{ID: "10.0.0.2@b1", Zone: "zone-b", Weight: 1}, Pod: "b1"},
		},
		Current: map[string][]allocate.Queue{"a1": {q("broker-a", 0), q("broker-b", 0)}, "b1": {q("broker-b", 1), q("broker-a", 1)}},
		Target:  map[string][]allocate.Queue{"a1": {q("broker-a", 0), q("broker-a", 1)}, "b1": {q("broker-b", 0), q("broker-b", 1)}},
	}
	g := &v1alpha1.ConsumerGroup{ObjectMeta: metav1.ObjectMeta{Namespace: "demo", Name: "orders"}}
	g.Spec.Strategy.Type = v1alpha1.Sticky
	p := planFor(g, pv, "as it is")
	if p.Moved != 2 || p.BalanceMoves == nil || *p.BalanceMoves != 0 || *p.LocalityMoves != 2 {
		t.Fatalf("%d moved, %v balance and %v locality moves; want 2, 0 and 2", p.Moved, p.BalanceMoves, p.LocalityMoves)
	}
	var b bytes.Buffer
	if err := p.table(&b); err != nil {
		t.Fatal(err)
	}
	if want := "2 of 4 queues move (2 beyond the 0 balance needs, for locality)"; !strings.Contains(b.String(), want) {
		t.Errorf("plan's table lacks %q:\n%s", want, b.String())
	}
	// Another strategy's moves beyond the bound are not locality moves: no split.
	g.Spec.Strategy.Type = v1alpha1.Averagely
	if p := planFor(g, pv, "as it is"); p.BalanceMoves != nil || p.LocalityMoves != nil {
		t.Errorf("Averagely: %v balance and %v locality moves, want neither", *p.BalanceMoves, *p.LocalityMoves)
	}
	g.Spec.Strategy = v1alpha1.Strategy{Type: v1alpha1.Sticky, Sticky: &v1alpha1.StickyParameters{BalanceBy: v1alpha1.BalanceByLoad}}
	if p := planFor(g, pv, "as it is"); p.BalanceMoves != nil {
		t.Errorf("Sticky by load: %v balance moves, want no split", *p.BalanceMoves)
	}
	g.Spec.Strategy = v1alpha1.Strategy{Type: v1alpha1.Sticky}
	pv.Target = pv.Current
	if p := planFor(g, pv, "as it is"); p.Moved != 0 || *p.BalanceMoves != 0 || *p.LocalityMoves != 0 {
		t.Errorf("nothing moves, yet %d moved, %d balance and %d locality moves", p.Moved, *p.BalanceMoves, *p.LocalityMoves)
	}
}
