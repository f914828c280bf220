package nameserver_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"io"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/consumergroup-operator/consumergroup-operator/internal/rocketmqstandin"
	"github.com/consumergroup-operator/consumergroup-operator/pkg/nameserver"
)

// allocated is how many bytes f allocates, counted by the runtime (every goroutine's, so what runs
// beside f counts too).
func allocated(f func()) uint64 {
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	f()
	runtime.ReadMemStats(&after)
	return after.TotalAlloc - before.TotalAlloc
}

func TestReadFrameRefusesAHugeLength(t *testing.T) {
	in := append(binary.BigEndian.AppendUint32(nil, 0x80000000), "0123456789"...)
	var err error
	alloc := allocated(func() { _, _, err = nameserver.ReadFrame(bytes.NewReader(in), 0) })
	if !errors.Is(err, nameserver.ErrGarbled) || alloc > 16<<10 {
		t.Fatalf("a 2 GiB length: %v after allocating %d bytes", err, alloc)
	}
}

// A peer announcing a frame costs what it sends, not what it announces.
func TestReadFrameAllocatesAsBytesArrive(t *testing.T) {
	in := append(binary.BigEndian.AppendUint32(nil, nameserver.MaxFrame), "0123456789"...)
	var err error
	alloc := allocated(func() { _, _, err = nameserver.ReadFrame(bytes.NewReader(in), 0) })
	if !errors.Is(err, io.ErrUnexpectedEOF) || alloc > 128<<10 {
		t.Fatalf("%d bytes of a frame announced as %d: %v after allocating %d bytes", 10, nameserver.MaxFrame, err, alloc)
	}
}

// endless announces a frame of MaxFrame bytes, then never stops sending zeros.
type endless struct{ prefixSent bool }

func (e *endless) Read(p []byte) (int, error) {
	if !e.prefixSent {
		e.prefixSent = true
		return copy(p, binary.BigEndian.AppendUint32(nil, nameserver.MaxFrame)), nil
	}
	clear(p)
	return len(p), nil
}

func TestReadFrameStopsAtTheAnnouncedLength(t *testing.T) {
	var err error
	alloc := allocated(func() { _, _, err = nameserver.ReadFrame(&endless{}, 0) })
	// Doubling from 64 KiB to 1 MiB allocates under 2 MiB in all.
	if !errors.Is(err, nameserver.ErrGarbled) || alloc > 2*nameserver.MaxFrame {
		t.Fatalf("an endless frame: %v after allocating %d bytes", err, alloc)
	}
}

// A number too long for any field is refused before it is decoded, which would copy it into its error.
func TestDecodeRouteRefusesAHugeNumber(t *testing.T) {
	body := []byte(`{"queueDatas":[{"brokerName":"b","perm":6,"readQueueNums":` + strings.Repeat("9", 900_000) + `}]}`)
	var err error
	alloc := allocated(func() { _, err = nameserver.DecodeRoute(body) })
	if !errors.Is(err, nameserver.ErrGarbled) || alloc > uint64(len(body))/4 {
		t.Fatalf("a 900,000-digit number: %v after allocating %d bytes", err, alloc)
	}
	if len(err.Error()) > 400 {
		t.Errorf("the error's text is %d bytes long", len(err.Error()))
	}
	// Long numbers inside strings are only strings.
	if _, err := nameserver.DecodeRoute([]byte(`{"queueDatas":[{"brokerName":"` + strings.Repeat("9", 200) + `","perm":6,"readQueueNums":1}]}`)); err != nil {
		t.Errorf("digits in a string: %v", err)
	}
}

// Each hostile way to answer ends within the request's deadline, in bounded memory.
func TestRoutesFromHostileNameServers(t *testing.T) {
	for _, tc := range []struct {
		name   string
		mode   rocketmqstandin.Mode
		delay  time.Duration
		reason string
	}{
		{"huge length", rocketmqstandin.HugeLength, 0, nameserver.ReasonGarbled},
		{"closed mid-frame", rocketmqstandin.CloseMidFrame, 0, nameserver.ReasonUnreachable},
		{"endless", rocketmqstandin.Endless, time.Millisecond, nameserver.ReasonTimeout},
		// The deadline holds the whole answer, not each byte: a name server that keeps sending slowly
		// is cut off all the same.
		{"drip", rocketmqstandin.Drip, 20 * time.Millisecond, nameserver.ReasonTimeout},
	} {
		t.Run(tc.name, func(t *testing.T) {
			nsrv := rocketmqstandin.Start(t)
			nsrv.SetTopic("orders", rocketmqstandin.Broker{Name: "broker-a", Queues: 8})
			nsrv.SetMode(tc.mode)
			nsrv.SetDelay(tc.delay)
			c := &nameserver.Client{Timeout: 300 * time.Millisecond}
			var (
				answers map[string]nameserver.Answer
				errs    []*nameserver.Error
			)
			start := time.Now()
			alloc := allocated(func() { answers, _, errs = c.Routes(context.Background(), []string{nsrv.Addr}, []string{"orders"}) })
			if took := time.Since(start); took > time.Second {
				t.Errorf("took %v, want at most the 300ms timeout", took)
			}
			if len(answers) != 0 || len(errs) != 1 || errs[0].Reason != tc.reason {
				t.Errorf("answers %v, errors %v; want %s", answers, errs, tc.reason)
			}
			if alloc > 256<<10 {
				t.Errorf("allocated %d bytes", alloc)
			}
		})
	}
}

// A name server slow by a byte at a time, but within the timeout, is read.
func TestRoutesFromASlowNameServer(t *testing.T) {
	nsrv := rocketmqstandin.Start(t)
	nsrv.SetTopic("orders", rocketmqstandin.Broker{Name: "broker-a", Queues: 8})
	nsrv.SetMode(rocketmqstandin.Drip)
	nsrv.SetDelay(100 * time.Microsecond)
	c := &nameserver.Client{Timeout: 10 * time.Second}
	answers, _, errs := c.Routes(context.Background(), []string{nsrv.Addr}, []string{"orders"})
	if len(errs) != 0 || answers["orders"].Route == nil {
		t.Fatalf("answers %v, errors %v", answers, errs)
	}
}
