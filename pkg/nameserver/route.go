package nameserver

import (
	"bytes"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"unicode/utf8"
)

// Bounds on a route, beyond which it is refused as garbled.
const (
	// MaxBrokers is the most brokers a topic's route may list.
	MaxBrokers = 256
	// MaxQueues is the most read queues a broker may report for a topic.
	MaxQueues = 65536
	// MaxNameLength is the longest broker name, in bytes.
	MaxNameLength = 255
)

// Permission bits of a topic on a broker (RocketMQ's PermName).
const (
	PermInherit = 1
	PermWrite   = 2
	PermRead    = 4
)

// QueueData is one broker's share of a topic, as the name server reports it.
type QueueData struct {
	BrokerName     string `json:"brokerName"`
	ReadQueueNums  int32  `json:"readQueueNums"`
	WriteQueueNums int32  `json:"writeQueueNums"`
	Perm           int32  `json:"perm"`
	TopicSysFlag   int32  `json:"topicSysFlag"`
}

// Readable reports whether consumers read the topic on this broker (PermName.isReadable).
func (q QueueData) Readable() bool { return q.Perm&PermRead != 0 }

// BrokerData is one broker's addresses, by broker id (0 is the master).
type BrokerData struct {
	Cluster     string            `json:"cluster"`
	BrokerName  string            `json:"brokerName"`
	BrokerAddrs map[string]string `json:"brokerAddrs"`
}

// Route is a topic's route data (TopicRouteData), the body of a GET_ROUTEINFO_BY_TOPIC answer.
type Route struct {
	QueueDatas  []QueueData  `json:"queueDatas"`
	BrokerDatas []BrokerData `json:"brokerDatas"`
}

// BrokerQueueCounts is how many queues of a topic one broker holds, and how many of them consumers read.
type BrokerQueueCounts struct {
	Broker string
	// Readable is ReadQueues when the broker lets the topic be read, 0 otherwise: the queues a RocketMQ
	// consumer subscribes to are ids 0 .. Readable-1.
	Readable   int32
	ReadQueues int32
	Perm       int32
}

// Queues lists, per broker sorted by name, the queues consumers read: as RocketMQ clients'
// topicRouteData2TopicSubscribeInfo, ids below readQueueNums of the brokers whose perm is readable.
func (r *Route) Queues() []BrokerQueueCounts {
	out := make([]BrokerQueueCounts, 0, len(r.QueueDatas))
	for _, q := range r.QueueDatas {
		b := BrokerQueueCounts{Broker: q.BrokerName, ReadQueues: q.ReadQueueNums, Perm: q.Perm}
		if q.Readable() {
			b.Readable = q.ReadQueueNums
		}
		out = append(out, b)
	}
	slices.SortFunc(out, func(a, b BrokerQueueCounts) int { return strings.Compare(a.Broker, b.Broker) })
	return out
}

// DecodeRoute decodes route data and checks it against the bounds above. Java name servers write the
// broker address maps with bare numeric keys ({0:"10.0.0.1:10911"}), which are accepted.
func DecodeRoute(body []byte) (*Route, error) {
	if len(body) > MaxFrame {
		return nil, fmt.Errorf("%w: route of %d bytes", ErrGarbled, len(body))
	}
	if err := checkNumbers(body); err != nil {
		return nil, fmt.Errorf("%w: route: %v", ErrGarbled, err)
	}
	var r Route
	dec := json.NewDecoder(bytes.NewReader(quoteBareKeys(body)))
	if err := dec.Decode(&r); err != nil {
		return nil, fmt.Errorf("%w: route: %s", ErrGarbled, truncate(err.Error(), maxDetail))
	}
	if err := r.check(); err != nil {
		return nil, fmt.Errorf("%w: route: %s", ErrGarbled, truncate(err.Error(), maxDetail))
	}
	return &r, nil
}

func (r *Route) check() error {
	if len(r.QueueDatas) > MaxBrokers {
		return fmt.Errorf("%d queue data, at most %d", len(r.QueueDatas), MaxBrokers)
	}
	seen := make(map[string]bool, len(r.QueueDatas))
	for _, q := range r.QueueDatas {
		if err := checkName(q.BrokerName); err != nil {
			return err
		}
		if seen[q.BrokerName] {
			return fmt.Errorf("broker %q listed twice", q.BrokerName)
		}
		seen[q.BrokerName] = true
		if q.ReadQueueNums < 0 || q.ReadQueueNums > MaxQueues {
			return fmt.Errorf("broker %q: readQueueNums %d, want 0 to %d", q.BrokerName, q.ReadQueueNums, MaxQueues)
		}
		if q.Perm < 0 || q.Perm > 7 {
			return fmt.Errorf("broker %q: perm %d, want 0 to 7", q.BrokerName, q.Perm)
		}
	}
	return nil
}

func checkName(name string) error {
	if name == "" || len(name) > MaxNameLength || !utf8.ValidString(name) {
		return fmt.Errorf("broker name %q: want 1 to %d bytes of UTF-8", truncate(name, 32), MaxNameLength)
	}
	for _, c := range name {
		if c < 0x20 || c == 0x7f {
			return fmt.Errorf("broker name %q has a control character", name)
		}
	}
	return nil
}

// quoteBareKeys quotes object keys written as bare integers ({0:"a"} becomes {"0":"a"}), as fastjson
// writes maps with integer keys. Everything else, strings included, is copied as it is. It is one pass,
// and its output is at most twice as long as its input.
func quoteBareKeys(in []byte) []byte {
	out := make([]byte, 0, len(in)+16)
	var strs jsonStrings
	afterOpen := false // after '{' or ',' outside strings, where a key may start
	for i := 0; i < len(in); i++ {
		c := in[i]
		if strs.within(c) {
			out = append(out, c)
			continue
		}
		if afterOpen && (c == '-' || c >= '0' && c <= '9') {
			j := i + 1
			for j < len(in) && in[j] >= '0' && in[j] <= '9' {
				j++
			}
			k := j
			for k < len(in) && (in[k] == ' ' || in[k] == '\t' || in[k] == '\n' || in[k] == '\r') {
				k++
			}
			if k < len(in) && in[k] == ':' {
				out = append(append(append(out, '"'), in[i:j]...), '"')
				i = j - 1
				afterOpen = false
				continue
			}
		}
		switch c {
		case '{', ',':
			afterOpen = true
		case ' ', '\t', '\n', '\r':
		default:
			afterOpen = false
		}
		out = append(out, c)
	}
	return out
}
