package nameserver_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"runtime"
	"testing"

	"github.com/consumergroup-operator/consumergroup-operator/internal/rocketmqstandin"
	"github.com/consumergroup-operator/consumergroup-operator/pkg/nameserver"
)

// javaRoute is a route as a Java name server (RocketMQ 5) writes it: fastjson, broker ids as bare keys.
const javaRoute = `{"brokerDatas":[{"brokerAddrs":{0:"10.0.0.1:10911",1:"10.0.0.2:10911"},"brokerName":"broker-a","cluster":"DefaultCluster","enableActingMaster":false},` +
	`{"brokerAddrs":{0:"10.0.0.3:10911"},"brokerName":"broker-b","cluster":"DefaultCluster","enableActingMaster":false}],` +
	`"filterServerTable":{},"queueDatas":[{"brokerName":"broker-b","perm":2,"readQueueNums":8,"topicSysFlag":0,"writeQueueNums":8},` +
	`{"brokerName":"broker-a","perm":6,"readQueueNums":16,"topicSysFlag":0,"writeQueueNums":8}]}`

func TestDecodeJavaRoute(t *testing.T) {
	r, err := nameserver.DecodeRoute([]byte(javaRoute))
	if err != nil {
		t.Fatal(err)
	}
	got := r.Queues()
	want := []nameserver.BrokerQueueCounts{
		{Broker: "broker-a", Readable: 16, ReadQueues: 16, Perm: 6},
		{Broker: "broker-b", Readable: 0, ReadQueues: 8, Perm: 2}, // write-only: consumers read none of it
	}
	if len(got) != len(want) || got[0] != want[0] || got[1] != want[1] {
		t.Fatalf("queues %+v, want %+v", got, want)
	}
	if a := r.BrokerDatas[0].BrokerAddrs["1"]; a != "10.0.0.2:10911" {
		t.Fatalf("broker-a's slave address %q", a)
	}
}

func TestDecodeRouteRefusesWhatIsOutOfBounds(t *testing.T) {
	for _, tc := range []struct{ name, body string }{
		{"not JSON", `{"queueDatas":[`},
		{"negative queues", `{"queueDatas":[{"brokerName":"b","perm":6,"readQueueNums":-1}]}`},
		{"too many queues", `{"queueDatas":[{"brokerName":"b","perm":6,"readQueueNums":65537}]}`},
		{"empty broker", `{"queueDatas":[{"brokerName":"","perm":6,"readQueueNums":1}]}`},
		{"broker twice", `{"queueDatas":[{"brokerName":"b","perm":6,"readQueueNums":1},{"brokerName":"b","perm":6,"readQueueNums":2}]}`},
		{"bad perm", `{"queueDatas":[{"brokerName":"b","perm":64,"readQueueNums":1}]}`},
		{"control char", `{"queueDatas":[{"brokerName":"b\u0000","perm":6,"readQueueNums":1}]}`},
		{"wrong type", `{"queueDatas":[{"brokerName":7,"perm":6,"readQueueNums":1}]}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := nameserver.DecodeRoute([]byte(tc.body)); !errors.Is(err, nameserver.ErrGarbled) {
				t.Errorf("%v, want a garbled route", err)
			}
		})
	}
	var many bytes.Buffer
	many.WriteString(`{"queueDatas":[`)
	for i := range nameserver.MaxBrokers + 1 {
		if i > 0 {
			many.WriteByte(',')
		}
		b, _ := json.Marshal(nameserver.QueueData{BrokerName: string(rune('a'+i%26)) + string(rune('0'+i/26)), ReadQueueNums: 1, Perm: 6})
		many.Write(b)
	}
	many.WriteString(`]}`)
	if _, err := nameserver.DecodeRoute(many.Bytes()); !errors.Is(err, nameserver.ErrGarbled) {
		t.Errorf("%d brokers: %v, want a garbled route", nameserver.MaxBrokers+1, err)
	}
}

func TestBareKeysOnlyOutsideStrings(t *testing.T) {
	body := `{"queueDatas":[{"brokerName":"b{0:1,2:3}","perm":6,"readQueueNums":3}],"brokerDatas":[{"brokerName":"b{0:1,2:3}","brokerAddrs":{ 0 :"x:1", -1:"y:2"}}],"list":[1,2,{3:4}]}`
	r, err := nameserver.DecodeRoute([]byte(body))
	if err != nil {
		t.Fatal(err)
	}
	if r.QueueDatas[0].BrokerName != "b{0:1,2:3}" || r.BrokerDatas[0].BrokerAddrs["0"] != "x:1" || r.BrokerDatas[0].BrokerAddrs["-1"] != "y:2" {
		t.Fatalf("decoded %+v", r)
	}
}

// FuzzDecodeRoute checks that the decoder never panics, refuses what is out of bounds, and allocates at
// most a bounded multiple of its input: what a name server answers is untrusted.
func FuzzDecodeRoute(f *testing.F) {
	f.Add([]byte(javaRoute))
	f.Add(rocketmqstandin.RouteBody([]rocketmqstandin.Broker{{Name: "a", Queues: 8}, {Name: "b", Queues: 4, Perm: 2}}, "127.0.0.1:1"))
	f.Add([]byte(`{0:1,"queueDatas":[{"brokerName":"\"{1:2}","readQueueNums":65536,"perm":7}]}`))
	f.Add([]byte(`[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[`))
	f.Fuzz(func(t *testing.T, body []byte) {
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		r, err := nameserver.DecodeRoute(body)
		runtime.ReadMemStats(&after)
		// JSON decoding of n bytes costs a few times n; 64 KiB covers the fixed costs.
		if alloc := after.TotalAlloc - before.TotalAlloc; alloc > uint64(64*len(body))+64<<10 {
			t.Fatalf("decoding %d bytes allocated %d bytes", len(body), alloc)
		}
		if err != nil {
			return
		}
		if len(r.QueueDatas) > nameserver.MaxBrokers {
			t.Fatalf("accepted %d brokers", len(r.QueueDatas))
		}
		total := 0
		for _, q := range r.Queues() {
			if q.Readable < 0 || q.Readable > nameserver.MaxQueues || q.Readable > q.ReadQueues {
				t.Fatalf("accepted %+v", q)
			}
			total += int(q.Readable)
		}
		// What it accepts reads back the same once encoded again.
		again, _ := json.Marshal(r)
		back, err := nameserver.DecodeRoute(again)
		if err != nil || len(back.Queues()) != len(r.Queues()) {
			t.Fatalf("re-encoding %q: %v", again, err)
		}
	})
}
