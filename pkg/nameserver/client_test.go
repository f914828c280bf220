package nameserver_test

import (
	"context"
	"net"
	"testing"
	"time"

	"github.com/consumergroup-operator/consumergroup-operator/internal/rocketmqstandin"
	"github.com/consumergroup-operator/consumergroup-operator/pkg/nameserver"
)

// closedAddr is an address where nothing listens.
func closedAddr(t *testing.T) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	_ = ln.Close()
	return addr
}

func TestRoutesTriesNameServersInTurn(t *testing.T) {
	good := rocketmqstandin.Start(t)
	good.SetTopic("orders", rocketmqstandin.Broker{Name: "broker-a", Queues: 8}, rocketmqstandin.Broker{Name: "broker-b", Queues: 4, Perm: nameserver.PermWrite})
	hung, junk, garbled := rocketmqstandin.Start(t), rocketmqstandin.Start(t), rocketmqstandin.Start(t)
	hung.SetMode(rocketmqstandin.Hang)
	junk.SetMode(rocketmqstandin.Junk)
	garbled.SetMode(rocketmqstandin.Garbled)
	refused := closedAddr(t)

	c := &nameserver.Client{Timeout: 300 * time.Millisecond}
	start := time.Now()
	answers, by, errs := c.Routes(context.Background(), []string{refused, hung.Addr, junk.Addr, garbled.Addr, good.Addr}, []string{"orders", "gone"})
	if took := time.Since(start); took > 2*time.Second {
		t.Errorf("took %v: one timeout of 300ms and quick failures expected", took)
	}
	if by != good.Addr {
		t.Errorf("answered by %s, want %s", by, good.Addr)
	}
	wantReasons := []string{nameserver.ReasonRefused, nameserver.ReasonTimeout, nameserver.ReasonGarbled, nameserver.ReasonGarbled}
	if len(errs) != len(wantReasons) {
		t.Fatalf("errors %v, want reasons %v", errs, wantReasons)
	}
	for i, e := range errs {
		if e.Reason != wantReasons[i] {
			t.Errorf("error %d: %v is %s, want %s", i, e, e.Reason, wantReasons[i])
		}
	}
	if a := answers["gone"]; !a.Absent {
		t.Errorf("gone: %+v, want absent", a)
	}
	q := answers["orders"].Route.Queues()
	if len(q) != 2 || q[0].Readable != 8 || q[1].Readable != 0 {
		t.Errorf("orders: %+v", q)
	}
}

func TestRoutesLeavesTopicsNobodyAnswered(t *testing.T) {
	hung := rocketmqstandin.Start(t)
	hung.SetMode(rocketmqstandin.Hang)
	c := &nameserver.Client{Timeout: 5 * time.Second}
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	start := time.Now()
	answers, by, errs := c.Routes(ctx, []string{hung.Addr, hung.Addr}, []string{"orders"})
	if time.Since(start) > time.Second || len(answers) != 0 || by != "" || len(errs) == 0 {
		t.Fatalf("after %v: answers %v by %q errors %v; want the context's deadline to end it", time.Since(start), answers, by, errs)
	}
	for _, e := range errs {
		if e.Reason != nameserver.ReasonTimeout {
			t.Errorf("%v is %s, want %s", e, e.Reason, nameserver.ReasonTimeout)
		}
	}
}

// rejectingNameServer is a name server that answers one request with error code 17010 (an ACL check
// failed) and remark; it returns the answers Routes gets from it.
func rejectingNameServer(t *testing.T, remark string) []*nameserver.Error {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = ln.Close() }()
	go func() {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		defer func() { _ = c.Close() }()
		req, _, err := nameserver.ReadFrame(c, 0)
		if err != nil {
			return
		}
		_ = nameserver.WriteFrame(c, nameserver.NewResponse(req, 17010, remark), nil)
	}()
	_, _, errs := (&nameserver.Client{}).Routes(context.Background(), []string{ln.Addr().String()}, []string{"orders"})
	if len(errs) != 1 || errs[0].Reason != nameserver.ReasonRejected {
		t.Fatalf("errors %v, want one rejection", errs)
	}
	return errs
}

func TestRejectedRequest(t *testing.T) {
	// A name server refusing the request (an ACL check, say) answers with an error code.
	rejectingNameServer(t, "No accessKey is configured")
}

func TestSignature(t *testing.T) {
	cmd := nameserver.RouteRequest("orders", 1)
	(&nameserver.Credentials{AccessKey: "ak", SecretKey: "sk"}).Sign(&cmd, nil)
	// HMAC-SHA1 with key "sk" of "ak"+"orders" (the values of AccessKey and topic, by name), in base64:
	// printf akorders | openssl dgst -sha1 -hmac sk -binary | base64
	if cmd.ExtFields["AccessKey"] != "ak" || cmd.ExtFields["Signature"] != "J9xnbXxLxrmSgExgkW9Y4cIyUEw=" {
		t.Fatalf("signed %v", cmd.ExtFields)
	}
}
