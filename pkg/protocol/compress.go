package protocol

import (
	"bytes"
	"compress/flate"
	"encoding/base64"
	"fmt"
	"io"
	"strings"
)

// An annotation value longer than compressAbove bytes is written compressed: "z:" followed by the base64
// of its DEFLATE-compressed JSON. Ranges keep most claims and load reports far smaller; a member holding
// tens of thousands of scattered queues stays well inside the API server's 256 KiB bound on a Lease's
// annotations.
const (
	compressAbove  = 16 << 10
	compressedMark = "z:"
	// maxInflatedLen bounds what a reader inflates, so that an edited annotation cannot exhaust memory.
	maxInflatedLen = 8 << 20
)

// compressLong returns data as an annotation value: as it is, or compressed when long.
func compressLong(data []byte) string {
	if len(data) <= compressAbove {
		return string(data)
	}
	var buf bytes.Buffer
	w, _ := flate.NewWriter(&buf, flate.BestCompression)
	_, _ = w.Write(data)
	_ = w.Close()
	return compressedMark + base64.StdEncoding.EncodeToString(buf.Bytes())
}

// inflate reverses compressLong; what names the value in errors. It refuses a value that is, or inflates
// to, more than limit bytes: reading stops there, so a small compressed value cannot make the reader
// allocate more.
func inflate(s, what string, limit int) ([]byte, error) {
	rest, ok := strings.CutPrefix(s, compressedMark)
	if !ok {
		if len(s) > limit {
			return nil, fmt.Errorf("%s is %d bytes, more than its group's queues take (%d)", what, len(s), limit)
		}
		return []byte(s), nil
	}
	compressed, err := base64.StdEncoding.DecodeString(rest)
	if err != nil {
		return nil, fmt.Errorf("decoding %s: %w", what, err)
	}
	data, err := io.ReadAll(io.LimitReader(flate.NewReader(bytes.NewReader(compressed)), int64(limit)+1))
	if err != nil {
		return nil, fmt.Errorf("decompressing %s: %w", what, err)
	}
	if len(data) > limit {
		return nil, fmt.Errorf("decompressing %s: longer than %d bytes, more than its group's queues take", what, limit)
	}
	return data, nil
}
