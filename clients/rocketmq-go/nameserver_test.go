package cgrocketmq

import (
	"bytes"
	"context"
	"encoding/binary"
	"io"
	"net"
	"testing"
	"time"

	"github.com/apache/rocketmq-client-go/v2/admin"
	"github.com/apache/rocketmq-client-go/v2/primitive"

	"github.com/consumergroup-operator/consumergroup-operator/internal/rocketmqstandin"
	"github.com/consumergroup-operator/consumergroup-operator/pkg/nameserver"
)

// rawNameServer answers route requests with pkg/nameserver's frames and keeps the raw bytes of each
// request frame it reads.
type rawNameServer struct {
	addr   string
	frames chan []byte
}

func startRawNameServer(t *testing.T, brokers []rocketmqstandin.Broker) *rawNameServer {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ln.Close() })
	s := &rawNameServer{addr: ln.Addr().String(), frames: make(chan []byte, 16)}
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer func() { _ = c.Close() }()
				for {
					var prefix [4]byte
					if _, err := io.ReadFull(c, prefix[:]); err != nil {
						return
					}
					frame := make([]byte, binary.BigEndian.Uint32(prefix[:]))
					if _, err := io.ReadFull(c, frame); err != nil {
						return
					}
					s.frames <- append(prefix[:], frame...)
					req, _, err := nameserver.DecodeFrame(frame)
					if err != nil {
						return
					}
					body := rocketmqstandin.RouteBody(brokers, s.addr)
					_ = nameserver.WriteFrame(c, nameserver.NewResponse(req, nameserver.CodeSuccess, ""), body)
				}
			}()
		}
	}()
	return s
}

// TestRouteFramesMatchTheLibrary checks pkg/nameserver frame for frame against rocketmq-client-go: the
// route request the library's name-server client sends is byte for byte the one pkg/nameserver builds
// (but for the opaque, which numbers requests), the library reads pkg/nameserver's answer (with the
// bare numeric keys of a Java name server), and a request signed by the library's ACL hook carries the
// signature pkg/nameserver computes.
func TestRouteFramesMatchTheLibrary(t *testing.T) {
	brokers := []rocketmqstandin.Broker{{Name: "broker-a", Queues: 8}, {Name: "broker-b", Queues: 4, Perm: nameserver.PermWrite}}
	for _, creds := range []*primitive.Credentials{nil, {AccessKey: "ak", SecretKey: "sk"}} {
		ns := startRawNameServer(t, brokers)
		opts := []admin.AdminOption{admin.WithResolver(primitive.NewPassthroughResolver([]string{ns.addr}))}
		if creds != nil {
			opts = append(opts, admin.WithCredentials(*creds))
		}
		a, err := admin.NewAdmin(opts...)
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		mqs, err := a.FetchPublishMessageQueues(ctx, "orders")
		cancel()
		_ = a.Close()
		if err != nil {
			t.Fatalf("credentials %v: the library could not read pkg/nameserver's answer: %v", creds, err)
		}
		// What the library makes of the route: broker-a's 8 write queues and broker-b's 4 (write-only).
		if len(mqs) != 12 {
			t.Fatalf("credentials %v: the library reads %d publish queues from the route, want 12", creds, len(mqs))
		}
		var raw []byte
		select {
		case raw = <-ns.frames:
		default:
			t.Fatal("no request frame")
		}
		got, body, err := nameserver.DecodeFrame(raw[4:])
		if err != nil {
			t.Fatalf("pkg/nameserver cannot read the library's request %q: %v", raw, err)
		}
		want := nameserver.RouteRequest("orders", got.Opaque)
		if creds == nil {
			frame, err := nameserver.AppendFrame(nil, want, nil)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(raw, frame) {
				t.Fatalf("the library sends\n%q\npkg/nameserver builds\n%q", raw, frame)
			}
			continue
		}
		(&nameserver.Credentials{AccessKey: creds.AccessKey, SecretKey: creds.SecretKey}).Sign(&want, body)
		if got.Code != want.Code || got.Language != want.Language || got.Version != want.Version || got.Flag != want.Flag ||
			len(got.ExtFields) != len(want.ExtFields) {
			t.Fatalf("the library's signed request %+v, pkg/nameserver's %+v", got, want)
		}
		for k, v := range want.ExtFields {
			if got.ExtFields[k] != v {
				t.Errorf("header field %s: the library sends %q, pkg/nameserver %q", k, got.ExtFields[k], v)
			}
		}
	}
}
