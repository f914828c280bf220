package nameserver_test

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"runtime"
	"testing"

	"github.com/consumergroup-operator/consumergroup-operator/pkg/nameserver"
)

func TestFrameRoundTrip(t *testing.T) {
	req := nameserver.RouteRequest("orders", 42)
	frame, err := nameserver.AppendFrame(nil, req, []byte("body"))
	if err != nil {
		t.Fatal(err)
	}
	want := `{"code":105,"language":"GO","version":317,"opaque":42,"flag":0,"remark":"","extFields":{"topic":"orders"}}`
	if got := string(frame[8 : 8+len(want)]); got != want {
		t.Fatalf("header %s, want %s", got, want)
	}
	if n := binary.BigEndian.Uint32(frame); int(n) != len(frame)-4 {
		t.Fatalf("length %d for a frame of %d bytes", n, len(frame))
	}
	cmd, body, err := nameserver.ReadFrame(bytes.NewReader(frame), 0)
	if err != nil || cmd.Code != 105 || cmd.Opaque != 42 || cmd.ExtFields["topic"] != "orders" || string(body) != "body" || cmd.IsResponse() {
		t.Fatalf("read back %+v %q %v", cmd, body, err)
	}
}

func TestReadFrameRefusesBadFrames(t *testing.T) {
	frame := func(parts ...[]byte) []byte { return bytes.Join(parts, nil) }
	u32 := func(v uint32) []byte { return binary.BigEndian.AppendUint32(nil, v) }
	for _, tc := range []struct {
		name string
		in   []byte
	}{
		{"too long", u32(nameserver.MaxFrame + 1)},
		{"too short", u32(2)},
		{"header past frame", frame(u32(8), u32(100), []byte("{}{}"))},
		{"binary header", frame(u32(6), u32(1<<24|2), []byte("{}"))},
		{"header not JSON", frame(u32(6), u32(2), []byte("{["))},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, _, err := nameserver.ReadFrame(bytes.NewReader(tc.in), 0); !errors.Is(err, nameserver.ErrGarbled) {
				t.Errorf("%v, want a garbled frame", err)
			}
		})
	}
	if _, _, err := nameserver.ReadFrame(bytes.NewReader(u32(100)), 0); !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Errorf("truncated: %v", err)
	}
}

// A frame's announced length is checked before anything is allocated for it.
func TestReadFrameAllocatesNoMoreThanItChecks(t *testing.T) {
	in := binary.BigEndian.AppendUint32(nil, 0xFFFFFFF0)
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	_, _, err := nameserver.ReadFrame(bytes.NewReader(in), 0)
	runtime.ReadMemStats(&after)
	if err == nil || after.TotalAlloc-before.TotalAlloc > 64<<10 {
		t.Fatalf("a 4 GiB length: %v after allocating %d bytes", err, after.TotalAlloc-before.TotalAlloc)
	}
}
