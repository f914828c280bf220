// Package rocketmqstandin is a RocketMQ name server stand-in for tests: it speaks the remoting protocol
// (pkg/nameserver's frames), in clear or over TLS, and answers GET_ROUTEINFO_BY_TOPIC from routes a test
// sets and changes, and can be made to fail: closing every connection, answering junk, never answering,
// or answering in ways that cost a careless reader time or memory (slowly, endlessly, with a huge length,
// or cut short). Requests it does not know go to a handler of the test's, so that one listener can also
// play a broker.
package rocketmqstandin

import (
	"bufio"
	"crypto/tls"
	"encoding/binary"
	"encoding/json"
	"net"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/consumergroup-operator/consumergroup-operator/pkg/nameserver"
)

// Mode is how the stand-in answers route requests.
type Mode int

const (
	// Serve answers with the routes set.
	Serve Mode = iota
	// Down closes every connection as soon as it is opened.
	Down
	// Junk answers every request with bytes that are no frame.
	Junk
	// Garbled answers with a well-formed frame whose route cannot be read.
	Garbled
	// Hang reads requests and never answers.
	Hang
	// Drip sends the answer Serve would, one byte at a time, a delay (SetDelay) apart.
	Drip
	// Endless announces a frame of nameserver.MaxFrame bytes and sends a zero byte every delay
	// (SetDelay), for as long as the connection lasts.
	Endless
	// HugeLength announces a frame of 2 GiB and sends a few bytes of it.
	HugeLength
	// CloseMidFrame sends the first half of the answer Serve would, then closes the connection.
	CloseMidFrame
)

// DefaultDelay is the delay between the bytes of Drip and Endless until SetDelay sets another.
const DefaultDelay = 10 * time.Millisecond

// Broker is one broker's part of a topic's route.
type Broker struct {
	Name   string
	Queues int32
	// Perm is the topic's permission on the broker; 6 (read and write) when 0.
	Perm int32
	// Addr is the broker's address, in brokerDatas; the stand-in's own when empty.
	Addr string
}

// Handler answers a request that is not a route request; ok false answers success with no body.
type Handler func(req nameserver.Command, body []byte) (res nameserver.Command, resBody []byte, ok bool)

// NameServer is a running stand-in.
type NameServer struct {
	Addr string
	ln   net.Listener

	mu       sync.Mutex
	routes   map[string][]Broker
	mode     Mode
	handler  Handler
	requests map[string]int
	last     nameserver.Command
	conns    map[net.Conn]bool
	accepted int
	delay    time.Duration
	latency  time.Duration
}

// LastRequest is the last route request the stand-in received.
func (n *NameServer) LastRequest() nameserver.Command {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.last
}

// Start runs a stand-in on a loopback port until the test ends.
func Start(t testing.TB) *NameServer {
	t.Helper()
	return start(t, nil)
}

// StartTLS runs a stand-in that speaks TLS with config (see Certificates) on a loopback port until the
// test ends.
func StartTLS(t testing.TB, config *tls.Config) *NameServer {
	t.Helper()
	return start(t, config)
}

func start(t testing.TB, config *tls.Config) *NameServer {
	t.Helper()
	n, err := Listen("127.0.0.1:0", config)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(n.Close)
	return n
}

// Listen runs a stand-in on addr, speaking TLS with config when it is not nil, until Close. The tests use
// Start; the local demo (hack/localdev) runs one for its group to discover its topic from.
func Listen(addr string, config *tls.Config) (*NameServer, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, err
	}
	if config != nil {
		ln = tls.NewListener(ln, config)
	}
	n := &NameServer{Addr: ln.Addr().String(), ln: ln, routes: map[string][]Broker{}, requests: map[string]int{}, conns: map[net.Conn]bool{},
		delay: DefaultDelay}
	go n.accept(ln)
	return n, nil
}

// Close stops accepting connections and closes the open ones.
func (n *NameServer) Close() {
	_ = n.ln.Close()
	n.mu.Lock()
	defer n.mu.Unlock()
	for c := range n.conns {
		_ = c.Close()
	}
}

// Topic is topic's route as the stand-in serves it, and whether it knows the topic.
func (n *NameServer) Topic(topic string) ([]Broker, bool) {
	n.mu.Lock()
	defer n.mu.Unlock()
	brokers, ok := n.routes[topic]
	return append([]Broker(nil), brokers...), ok
}

// SetTopic sets topic's route to brokers.
func (n *NameServer) SetTopic(topic string, brokers ...Broker) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.routes[topic] = append([]Broker(nil), brokers...)
}

// RemoveTopic makes topic unknown: route requests for it are answered TOPIC_NOT_EXIST.
func (n *NameServer) RemoveTopic(topic string) {
	n.mu.Lock()
	defer n.mu.Unlock()
	delete(n.routes, topic)
}

// SetMode sets how route requests are answered from now on; Down and Hang also cut the connections open.
func (n *NameServer) SetMode(m Mode) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.mode = m
	if m == Down || m == Hang {
		for c := range n.conns {
			_ = c.Close()
		}
	}
}

// SetDelay sets the delay between the bytes of Drip and Endless.
func (n *NameServer) SetDelay(d time.Duration) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.delay = d
}

// SetLatency makes every route request wait d before it is answered, as a busy name server's would.
func (n *NameServer) SetLatency(d time.Duration) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.latency = d
}

// Accepted is how many connections the stand-in accepted, TLS handshake or not.
func (n *NameServer) Accepted() int {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.accepted
}

// SetHandler sets the handler of the requests that are not route requests.
func (n *NameServer) SetHandler(h Handler) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.handler = h
}

// Requests is how many route requests for topic the stand-in received.
func (n *NameServer) Requests(topic string) int {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.requests[topic]
}

func (n *NameServer) accept(ln net.Listener) {
	for {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		n.mu.Lock()
		n.accepted++
		down := n.mode == Down
		if !down {
			n.conns[c] = true
		}
		n.mu.Unlock()
		if down {
			_ = c.Close()
			continue
		}
		go n.serve(c)
	}
}

func (n *NameServer) serve(c net.Conn) {
	defer func() {
		n.mu.Lock()
		delete(n.conns, c)
		n.mu.Unlock()
		_ = c.Close()
	}()
	var writeMu sync.Mutex
	r := bufio.NewReader(c)
	for {
		req, body, err := nameserver.ReadFrame(r, 0)
		if err != nil || req.IsResponse() {
			return
		}
		go func() {
			out, mode, ok := n.answer(req, body)
			if !ok {
				return
			}
			writeMu.Lock()
			defer writeMu.Unlock()
			n.send(c, out, mode)
		}()
	}
}

// send writes out to c as mode says.
func (n *NameServer) send(c net.Conn, out []byte, mode Mode) {
	n.mu.Lock()
	delay := n.delay
	n.mu.Unlock()
	switch mode {
	case Drip:
		for i := range out {
			if _, err := c.Write(out[i : i+1]); err != nil {
				return
			}
			time.Sleep(delay)
		}
	case Endless:
		if _, err := c.Write(binary.BigEndian.AppendUint32(nil, nameserver.MaxFrame)); err != nil {
			return
		}
		for {
			if _, err := c.Write([]byte{0}); err != nil {
				return
			}
			time.Sleep(delay)
		}
	case HugeLength:
		_, _ = c.Write(append(binary.BigEndian.AppendUint32(nil, 0x80000000), "0123456789"...))
	case CloseMidFrame:
		_, _ = c.Write(out[:len(out)/2])
		_ = c.Close()
	default:
		_, _ = c.Write(out)
	}
}

// answer is the bytes that answer req, and the mode to send them in; ok false sends nothing.
func (n *NameServer) answer(req nameserver.Command, body []byte) (out []byte, mode Mode, ok bool) {
	n.mu.Lock()
	mode, handler, latency := n.mode, n.handler, n.latency
	var brokers []Broker
	known := false
	if req.Code == nameserver.CodeGetRouteByTopic {
		n.requests[req.ExtFields["topic"]]++
		n.last = req
		brokers, known = n.routes[req.ExtFields["topic"]]
	}
	n.mu.Unlock()
	if req.Code == nameserver.CodeGetRouteByTopic {
		time.Sleep(latency)
	}
	if req.Code != nameserver.CodeGetRouteByTopic {
		res, resBody := nameserver.NewResponse(req, nameserver.CodeSuccess, ""), []byte(nil)
		if handler != nil {
			if hres, hbody, handled := handler(req, body); handled {
				res, resBody = hres, hbody
				res.Opaque, res.Flag = req.Opaque, 1
			}
		}
		out, err := nameserver.AppendFrame(nil, res, resBody)
		return out, Serve, err == nil
	}
	switch mode {
	case Hang, Down:
		return nil, mode, false
	case Junk:
		return []byte("\x00\x00\x00\x10this is no frame"), mode, true
	case Garbled:
		out, err := nameserver.AppendFrame(nil, nameserver.NewResponse(req, nameserver.CodeSuccess, ""), []byte(`{"queueDatas":[{"brokerName":""`))
		return out, mode, err == nil
	}
	if !known {
		out, err := nameserver.AppendFrame(nil, nameserver.NewResponse(req, nameserver.CodeTopicNotExist, "No topic route info in name server for the topic: "+req.ExtFields["topic"]), nil)
		return out, mode, err == nil
	}
	out, err := nameserver.AppendFrame(nil, nameserver.NewResponse(req, nameserver.CodeSuccess, ""), RouteBody(brokers, n.Addr))
	return out, mode, err == nil
}

// RouteBody is the route data of brokers as a Java name server writes it: broker address maps with bare
// numeric keys. Brokers without an address get addr.
func RouteBody(brokers []Broker, addr string) []byte {
	sorted := append([]Broker(nil), brokers...)
	sort.Slice(sorted, func(i, j int) bool { return sorted[i].Name < sorted[j].Name })
	var qd, bd []byte
	for i, b := range sorted {
		perm := b.Perm
		if perm == 0 {
			perm = nameserver.PermRead | nameserver.PermWrite
		}
		q, _ := json.Marshal(nameserver.QueueData{BrokerName: b.Name, ReadQueueNums: b.Queues, WriteQueueNums: b.Queues, Perm: perm})
		a := b.Addr
		if a == "" {
			a = addr
		}
		name, _ := json.Marshal(b.Name)
		address, _ := json.Marshal(a)
		if i > 0 {
			qd, bd = append(qd, ','), append(bd, ',')
		}
		qd = append(qd, q...)
		bd = append(bd, `{"brokerAddrs":{0:`+string(address)+`},"brokerName":`+string(name)+`,"cluster":"DefaultCluster"}`...)
	}
	return []byte(`{"brokerDatas":[` + string(bd) + `],"filterServerTable":{},"queueDatas":[` + string(qd) + `]}`)
}
