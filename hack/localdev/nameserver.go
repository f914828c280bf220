package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/consumergroup-operator/consumergroup-operator/api/v1alpha1"
	"github.com/consumergroup-operator/consumergroup-operator/internal/rocketmqstandin"
)

const (
	// demoClusterNameServer is the ClusterNameServer the demo's group names (config/samples/demo/orders.yaml).
	demoClusterNameServer = "demo"
	// demoRefreshSeconds is how often the operator reads the demo's routes: the shortest interval a
	// ClusterNameServer allows, so that a grown topic shows soon.
	demoRefreshSeconds = 10
	// maxDemoQueues bounds what the control endpoint sets a broker's queues to: RocketMQ's own limit on a
	// topic's queues per broker is far above it, but the demo's terminal is not.
	maxDemoQueues = 64
	// controlURLFile, in the demo's directory, holds the control endpoint's URL while the demo runs.
	controlURLFile = "nameserver-control"
)

// demoBrokers are the brokers of the demo's topic orders, one in each of two of the cluster's three zones,
// so that Sticky has a zone to keep each queue in and a zone (zone-c) without a broker.
var demoBrokers = []struct{ name, zone string }{{"broker-a", "zone-a"}, {"broker-b", "zone-b"}}

// startNameServer starts the name-server stand-in, serving the topic orders with 6 queues on each demo
// broker; creates the ClusterNameServer demo that lets every namespace read routes from it (its loopback
// address and port only) with the brokers' zones; and serves the control endpoint. It returns the stand-in
// and the control endpoint's URL, which it also writes to dir/nameserver-control until ctx ends.
func startNameServer(ctx context.Context, c client.Client, dir string) (*rocketmqstandin.NameServer, string, error) {
	nsrv, err := rocketmqstandin.Listen("127.0.0.1:0", nil)
	if err != nil {
		return nil, "", fmt.Errorf("starting the name-server stand-in: %w", err)
	}
	setQueues(nsrv, "orders", 6)
	_, portText, _ := net.SplitHostPort(nsrv.Addr)
	port, _ := strconv.ParseInt(portText, 10, 32)
	cns := &v1alpha1.ClusterNameServer{
		ObjectMeta: metav1.ObjectMeta{Name: demoClusterNameServer},
		Spec: v1alpha1.ClusterNameServerSpec{
			Addresses:              []string{nsrv.Addr},
			AllowedDestinations:    v1alpha1.AllowedDestinations{CIDRs: []string{"127.0.0.1/32"}, Ports: []int32{int32(port)}},
			NamespaceSelector:      metav1.LabelSelector{},
			RefreshIntervalSeconds: ptr.To[int32](demoRefreshSeconds),
		},
	}
	for _, b := range demoBrokers {
		cns.Spec.BrokerZones = append(cns.Spec.BrokerZones, v1alpha1.BrokerZone{Broker: b.name, Zone: b.zone})
	}
	if err := c.Create(ctx, cns); err != nil {
		nsrv.Close()
		return nil, "", fmt.Errorf("creating the ClusterNameServer %s: %w", demoClusterNameServer, err)
	}
	fmt.Printf("Name-server stand-in at %s serves the topic orders (2 brokers, 6 queues each); ClusterNameServer %s names it\n",
		nsrv.Addr, demoClusterNameServer)

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		nsrv.Close()
		return nil, "", err
	}
	controlURL := "http://" + ln.Addr().String()
	srv := &http.Server{Handler: nameServerControl(nsrv), ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	urlPath := filepath.Join(dir, controlURLFile)
	if err := os.WriteFile(urlPath, []byte(controlURL+"\n"), 0o644); err != nil {
		nsrv.Close()
		_ = srv.Close()
		return nil, "", err
	}
	go func() {
		<-ctx.Done()
		_ = srv.Close()
		_ = os.Remove(urlPath)
	}()
	return nsrv, controlURL, nil
}

// setQueues makes topic's route on nsrv the demo brokers with n readable and writable queues each.
func setQueues(nsrv *rocketmqstandin.NameServer, topic string, n int32) {
	var brokers []rocketmqstandin.Broker
	for _, b := range demoBrokers {
		brokers = append(brokers, rocketmqstandin.Broker{Name: b.name, Queues: n})
	}
	nsrv.SetTopic(topic, brokers...)
}

// routeView is a topic's route as the control endpoint shows it.
type routeView struct {
	Topic   string       `json:"topic"`
	Brokers []brokerView `json:"brokers"`
}

type brokerView struct {
	Name   string `json:"name"`
	Queues int32  `json:"queues"`
}

// nameServerControl is the demo's stand-in for `mqadmin updateTopic`: PUT /topics/<topic>?queues=N gives
// each demo broker N queues of topic (1 to maxDemoQueues), and GET /topics/<topic> shows the route the
// stand-in serves. Both answer with the route as JSON. It listens on the loopback interface only.
func nameServerControl(nsrv *rocketmqstandin.NameServer) http.Handler {
	mux := http.NewServeMux()
	show := func(w http.ResponseWriter, topic string) {
		brokers, known := nsrv.Topic(topic)
		if !known {
			http.Error(w, fmt.Sprintf("the name server does not know the topic %q\n", topic), http.StatusNotFound)
			return
		}
		view := routeView{Topic: topic}
		for _, b := range brokers {
			view.Brokers = append(view.Brokers, brokerView{Name: b.Name, Queues: b.Queues})
		}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(view)
	}
	mux.HandleFunc("GET /topics/{topic}", func(w http.ResponseWriter, r *http.Request) { show(w, r.PathValue("topic")) })
	mux.HandleFunc("PUT /topics/{topic}", func(w http.ResponseWriter, r *http.Request) {
		n, err := parseQueues(r.URL.Query().Get("queues"))
		if err != nil {
			http.Error(w, err.Error()+"\n", http.StatusBadRequest)
			return
		}
		setQueues(nsrv, r.PathValue("topic"), n)
		show(w, r.PathValue("topic"))
	})
	return mux
}

// parseQueues reads the queues parameter of the control endpoint.
func parseQueues(s string) (int32, error) {
	if s == "" {
		return 0, errors.New("say how many queues each broker should have: ?queues=N")
	}
	n, err := strconv.ParseInt(s, 10, 32)
	if err != nil || n < 1 || n > maxDemoQueues {
		return 0, fmt.Errorf("queues=%s: want a whole number from 1 to %d", s, maxDemoQueues)
	}
	return int32(n), nil
}
