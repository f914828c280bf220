package nameserver

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
)

// Request and response codes of RocketMQ's remoting protocol used here (RequestCode and ResponseCode in
// RocketMQ's remoting module).
const (
	CodeSuccess         = 0
	CodeSystemError     = 1
	CodeTopicNotExist   = 17
	CodeGetRouteByTopic = 105
)

// MaxFrame is the largest frame this package reads, in bytes. A route of MaxBrokers brokers, each with a
// few addresses, takes well under it.
const MaxFrame = 1 << 20

// responseFlag marks a frame as a response (RemotingCommand.flag bit 0).
const responseFlag = 1

// serializeJSON is the serialisation type of a JSON header, in the high byte of the header length.
const serializeJSON = 0

// version is the protocol version this package announces, as rocketmq-client-go does.
const version = 317

// Command is a remoting frame's header, serialised as JSON.
type Command struct {
	Code      int               `json:"code"`
	Language  string            `json:"language"`
	Version   int               `json:"version"`
	Opaque    int32             `json:"opaque"`
	Flag      int32             `json:"flag"`
	Remark    string            `json:"remark"`
	ExtFields map[string]string `json:"extFields"`
}

// IsResponse reports whether the frame answers a request.
func (c *Command) IsResponse() bool { return c.Flag&responseFlag != 0 }

// NewRequest is a request with code, opaque and the header fields ext, as rocketmq-client-go builds it.
func NewRequest(code int, opaque int32, ext map[string]string) Command {
	if ext == nil {
		ext = map[string]string{}
	}
	return Command{Code: code, Language: "GO", Version: version, Opaque: opaque, ExtFields: ext}
}

// NewResponse is the response to req with code, as a Java name server writes it.
func NewResponse(req Command, code int, remark string) Command {
	return Command{Code: code, Language: "JAVA", Version: req.Version, Opaque: req.Opaque, Flag: responseFlag, Remark: remark,
		ExtFields: map[string]string{}}
}

// AppendFrame appends the frame of cmd and body to dst: its length, its header's length (with the JSON
// serialisation type, 0, in the high byte), the header and the body.
func AppendFrame(dst []byte, cmd Command, body []byte) ([]byte, error) {
	header, err := json.Marshal(cmd)
	if err != nil {
		return nil, err
	}
	if len(header) > 0xFFFFFF || 4+len(header)+len(body) > MaxFrame {
		return nil, fmt.Errorf("frame of %d bytes is too large", 4+len(header)+len(body))
	}
	dst = binary.BigEndian.AppendUint32(dst, uint32(4+len(header)+len(body)))
	dst = binary.BigEndian.AppendUint32(dst, uint32(len(header))|serializeJSON<<24)
	return append(append(dst, header...), body...), nil
}

// WriteFrame writes the frame of cmd and body to w in one write.
func WriteFrame(w io.Writer, cmd Command, body []byte) error {
	frame, err := AppendFrame(nil, cmd, body)
	if err != nil {
		return err
	}
	_, err = w.Write(frame)
	return err
}

// ErrGarbled wraps every error about what was read, as opposed to how (a timeout, a closed connection).
var ErrGarbled = errors.New("garbled frame")

// readChunk is how much ReadFrame allocates before a frame's bytes arrive: a peer announcing a frame of
// MaxFrame bytes and sending few costs this much, not MaxFrame.
const readChunk = 64 << 10

// ReadFrame reads one frame of at most maxFrame bytes (MaxFrame when 0) from r. It checks the frame's
// announced length before allocating anything, then allocates as the bytes arrive: at most readChunk
// bytes, or twice what has arrived, and never more than the announced length.
func ReadFrame(r io.Reader, maxFrame int) (Command, []byte, error) {
	if maxFrame <= 0 {
		maxFrame = MaxFrame
	}
	var prefix [4]byte
	if _, err := io.ReadFull(r, prefix[:]); err != nil {
		return Command{}, nil, err
	}
	size := binary.BigEndian.Uint32(prefix[:])
	if size < 4 || size > uint32(maxFrame) {
		return Command{}, nil, fmt.Errorf("%w: length %d, want 4 to %d", ErrGarbled, size, maxFrame)
	}
	frame := make([]byte, min(int(size), readChunk))
	read := 0
	for {
		n, err := io.ReadFull(r, frame[read:])
		read += n
		if err != nil {
			if errors.Is(err, io.EOF) {
				err = io.ErrUnexpectedEOF
			}
			return Command{}, nil, err
		}
		if read == int(size) {
			break
		}
		grown := make([]byte, min(2*len(frame), int(size)))
		copy(grown, frame[:read])
		frame = grown
	}
	return DecodeFrame(frame)
}

// DecodeFrame decodes a frame without its length prefix: header length, header, body.
func DecodeFrame(frame []byte) (Command, []byte, error) {
	if len(frame) < 4 {
		return Command{}, nil, fmt.Errorf("%w: %d bytes, shorter than a header length", ErrGarbled, len(frame))
	}
	word := binary.BigEndian.Uint32(frame[:4])
	if kind := word >> 24; kind != serializeJSON {
		return Command{}, nil, fmt.Errorf("%w: header serialisation type %d, want 0 (JSON)", ErrGarbled, kind)
	}
	headerLen := int(word & 0xFFFFFF)
	if headerLen > len(frame)-4 {
		return Command{}, nil, fmt.Errorf("%w: header of %d bytes in a frame of %d", ErrGarbled, headerLen, len(frame))
	}
	header := frame[4 : 4+headerLen]
	if err := checkNumbers(header); err != nil {
		return Command{}, nil, fmt.Errorf("%w: header: %v", ErrGarbled, err)
	}
	var cmd Command
	if err := json.Unmarshal(header, &cmd); err != nil {
		return Command{}, nil, fmt.Errorf("%w: header: %s", ErrGarbled, truncate(err.Error(), maxDetail))
	}
	return cmd, frame[4+headerLen:], nil
}

// maxDetail is the most bytes of a decoding error's text kept in the error: the text may quote what the
// remote sent.
const maxDetail = 200

// maxNumber is the longest number JSON from a name server may hold, in bytes; the longest int64 takes
// 20. Longer ones are refused before decoding, which would copy them into its errors.
const maxNumber = 64

// checkNumbers refuses JSON with a number longer than maxNumber bytes. It looks at runs of the bytes a
// number is made of outside strings, without parsing: what it lets through is for the decoder to judge.
func checkNumbers(in []byte) error {
	var strs jsonStrings
	run := 0
	for i, c := range in {
		switch {
		case strs.within(c):
		case c >= '0' && c <= '9', c == '-', c == '+', c == '.', c == 'e', c == 'E':
			run++
			if run > maxNumber {
				return fmt.Errorf("a number of more than %d bytes at offset %d", maxNumber, i+1-run)
			}
			continue
		}
		run = 0
	}
	return nil
}

// jsonStrings follows JSON text a byte at a time to tell its strings from the rest, without parsing it.
type jsonStrings struct{ inString, escaped bool }

// within reports whether c, the next byte of the text, belongs to a string, its quotes included.
func (s *jsonStrings) within(c byte) bool {
	switch {
	case !s.inString:
		s.inString = c == '"'
		return s.inString
	case s.escaped:
		s.escaped = false
	case c == '\\':
		s.escaped = true
	case c == '"':
		s.inString = false
	}
	return true
}
