package kubectlcg

import (
	"bytes"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/consumergroup-operator/consumergroup-operator/api/v1alpha1"
	"github.com/consumergroup-operator/consumergroup-operator/controllers"
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
	pv := &controllers.Preview{Queues: queues, BrokerZones: map[string]string{"broker-a": "zone-a", "broker-b": "zone-b"},
		Current: map[string][]allocate.Queue{
			"a1": {q("broker-a", 0), q("broker-b", 0), q("broker-b", 1)},
			"a2": {q("broker-a", 1), q("broker-b", 2), q("broker-b", 3)},
			"b1": {q("broker-b", 4), q("broker-a", 2)},
			"b2": {q("broker-b", 5), q("broker-a", 3)},
			"c1": {q("broker-a", 4), q("broker-a", 5)},
		}}
	for _, m := range []struct{ pod, zone string }{{"a1", "zone-a"}, {"a2", "zone-a"}, {"b1", "zone-b"}, {"b2", "zone-b"}, {"c1", "zone-c"}} {
		pv.Members = append(pv.Members, controllers.PreviewMember{Member: allocate.Member{ID: m.pod, Zone: m.zone, Weight: 1}, Pod: m.pod})
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
