package cgrocketmq

import (
	"bufio"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"sort"
	"strconv"
	"sync"
	"testing"
	"time"
)

// Request codes and response codes of RocketMQ's remoting protocol that fakeRocketMQ answers.
const (
	codeSuccess          = 0
	codePullMessage      = 11
	codeQueryOffset      = 14
	codeUpdateOffset     = 15
	codeTopicNotExist    = 17
	codePullNotFound     = 19
	codeGetMaxOffset     = 30
	codeHeartBeat        = 34
	codeGetConsumerList  = 38
	codeGetRouteByTopic  = 105
	responseFlag         = 1
	pullHold             = 50 * time.Millisecond
	brokerName           = "broker-a"
	remotingHeaderLength = 0xFFFFFF
)

// fakeRocketMQ is a name server and a broker in one, speaking RocketMQ's remoting protocol (JSON headers)
// well enough for a real push consumer to start, rebalance and pull. It holds no messages: every pull
// waits pullHold and finds nothing. It records when each queue was last pulled, which is how a test sees
// the queues the consumer has applied: a push consumer pulls every queue it holds, and stops pulling a
// queue once it drops it.
type fakeRocketMQ struct {
	addr   string
	queues map[string]int // topic -> queue count, all on brokerName

	mu       sync.Mutex
	clients  map[string]bool
	lastPull map[string]time.Time // "topic/broker/id" -> arrival of its last pull
	// offsetAt is when the consumer last wrote q's offset: it does so when it drops a queue, before the
	// rebalance round that dropped it ends.
	offsetAt map[string]time.Time
}

func startFakeRocketMQ(t *testing.T, queues map[string]int) *fakeRocketMQ {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	f := &fakeRocketMQ{addr: ln.Addr().String(), queues: queues, clients: map[string]bool{}, lastPull: map[string]time.Time{}, offsetAt: map[string]time.Time{}}
	done := make(chan struct{})
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go f.serve(c, done)
		}
	}()
	t.Cleanup(func() {
		close(done)
		_ = ln.Close()
	})
	return f
}

// command is a remoting frame's header.
type command struct {
	Code      int               `json:"code"`
	Language  string            `json:"language"`
	Version   int               `json:"version"`
	Opaque    int32             `json:"opaque"`
	Flag      int32             `json:"flag"`
	Remark    string            `json:"remark"`
	ExtFields map[string]string `json:"extFields"`
}

func (f *fakeRocketMQ) serve(c net.Conn, done <-chan struct{}) {
	defer func() { _ = c.Close() }()
	go func() { <-done; _ = c.Close() }()
	var writeMu sync.Mutex
	r := bufio.NewReader(c)
	for {
		req, body, err := readFrame(r)
		if err != nil {
			return
		}
		if req.Flag&responseFlag != 0 {
			continue // an answer to a request of ours; we send none
		}
		if req.Code == codeUpdateOffset { // noted here, in the order the connection carried it
			f.mu.Lock()
			f.offsetAt[queueOf(req)] = time.Now()
			f.mu.Unlock()
		}
		go func() {
			res, resBody := f.handle(req, body, done)
			res.Opaque, res.Flag, res.Language = req.Opaque, responseFlag, "JAVA"
			writeMu.Lock()
			defer writeMu.Unlock()
			_ = writeFrame(c, res, resBody)
		}()
	}
}

func readFrame(r io.Reader) (command, []byte, error) {
	var size, headerLen uint32
	if err := binary.Read(r, binary.BigEndian, &size); err != nil {
		return command{}, nil, err
	}
	frame := make([]byte, size)
	if _, err := io.ReadFull(r, frame); err != nil {
		return command{}, nil, err
	}
	if len(frame) < 4 {
		return command{}, nil, errors.New("short frame")
	}
	headerLen = binary.BigEndian.Uint32(frame[:4]) & remotingHeaderLength
	if int(headerLen) > len(frame)-4 {
		return command{}, nil, errors.New("header longer than frame")
	}
	var cmd command
	if err := json.Unmarshal(frame[4:4+headerLen], &cmd); err != nil {
		return command{}, nil, fmt.Errorf("header %q: %w", frame[4:4+headerLen], err)
	}
	return cmd, frame[4+headerLen:], nil
}

func writeFrame(w io.Writer, cmd command, body []byte) error {
	header, err := json.Marshal(cmd)
	if err != nil {
		return err
	}
	out := binary.BigEndian.AppendUint32(nil, uint32(4+len(header)+len(body)))
	out = binary.BigEndian.AppendUint32(out, uint32(len(header))) // codec 0: JSON
	out = append(append(out, header...), body...)
	_, err = w.Write(out)
	return err
}

func (f *fakeRocketMQ) handle(req command, body []byte, done <-chan struct{}) (command, []byte) {
	ok := command{Code: codeSuccess, ExtFields: map[string]string{}}
	switch req.Code {
	case codeGetRouteByTopic:
		n, known := f.queues[req.ExtFields["topic"]]
		if !known {
			return command{Code: codeTopicNotExist, Remark: "no such topic"}, nil
		}
		route, _ := json.Marshal(map[string]any{
			"queueDatas":  []map[string]any{{"brokerName": brokerName, "readQueueNums": n, "writeQueueNums": n, "perm": 6}},
			"brokerDatas": []map[string]any{{"cluster": "c", "brokerName": brokerName, "brokerAddrs": map[string]string{"0": f.addr}}},
		})
		return ok, route
	case codeHeartBeat:
		var hb struct {
			ClientID string `json:"clientID"`
		}
		_ = json.Unmarshal(body, &hb)
		f.mu.Lock()
		f.clients[hb.ClientID] = true
		f.mu.Unlock()
		return ok, nil
	case codeGetConsumerList:
		f.mu.Lock()
		ids := make([]string, 0, len(f.clients))
		for id := range f.clients {
			ids = append(ids, id)
		}
		f.mu.Unlock()
		sort.Strings(ids)
		list, _ := json.Marshal(map[string][]string{"consumerIdList": ids})
		return ok, list
	case codeQueryOffset, codeGetMaxOffset:
		ok.ExtFields["offset"] = "0"
		return ok, nil
	case codePullMessage:
		f.mu.Lock()
		f.lastPull[queueOf(req)] = time.Now()
		f.mu.Unlock()
		select { // as a broker holds a pull while it has no message, so that consumers do not spin
		case <-time.After(pullHold):
		case <-done:
		}
		offset := strconv.Itoa(0)
		return command{Code: codePullNotFound, ExtFields: map[string]string{"nextBeginOffset": offset, "minOffset": offset, "maxOffset": offset}}, nil
	default: // unregister, offset updates and the like: nothing to remember
		return ok, nil
	}
}

func queueOf(req command) string {
	return req.ExtFields["topic"] + "/" + brokerName + "/" + req.ExtFields["queueId"]
}

// pullWindow is how recent a pull must be for pulling to count its queue as read.
const pullWindow = 500 * time.Millisecond

// pulling returns the queues of topic pulled within the last pullWindow, sorted.
func (f *fakeRocketMQ) pulling(topic string) []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []string
	for id := range f.queues[topic] {
		q := fmt.Sprintf("%s/%s/%d", topic, brokerName, id)
		if at, ok := f.lastPull[q]; ok && time.Since(at) < pullWindow {
			out = append(out, q)
		}
	}
	sort.Strings(out)
	return out
}

// pulledAt is when q was last pulled; zero if never.
func (f *fakeRocketMQ) pulledAt(q string) time.Time {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.lastPull[q]
}

// offsetWrittenAt is when q's offset was last written; zero if never.
func (f *fakeRocketMQ) offsetWrittenAt(q string) time.Time {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.offsetAt[q]
}
