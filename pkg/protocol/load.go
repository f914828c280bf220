package protocol

import (
	"encoding/json"
	"fmt"
	"maps"
	"math"
	"slices"
	"strconv"
	"strings"
)

// LoadVersion is the format version of a LoadReport.
const LoadVersion = 1

// loadDigits is how many significant digits a reported load keeps: a load is a measurement (an average
// of messages per second, say), and rounding it keeps the report, and the Lease, small.
const loadDigits = 4

// LoadReport is what a member states in its Lease about the load of the queues it reads: a non-negative
// number per queue in the group's unit, such as an average of messages per second. The member writes it
// with its Lease renewals; the operator reads it to balance by load and to recommend a member count.
type LoadReport struct {
	// Version is the format version; readers refuse versions they do not know.
	Version int `json:"version"`
	// Queues are the reported queues, grouped per topic and broker.
	Queues []BrokerLoads `json:"queues"`
}

// BrokerLoads is the load of a set of queues on one broker of one topic.
type BrokerLoads struct {
	Topic  string `json:"topic"`
	Broker string `json:"broker"`
	// IDs are the queue ids as ascending ranges, as in an Entry.
	IDs string `json:"ids"`
	// Loads are the queues' loads, one per id, in the order of IDs.
	Loads []float64 `json:"loads"`
}

// CheckLoad returns an error naming the first queue whose load is not a finite number of 0 or more.
func CheckLoad(loads map[Queue]float64) error {
	for _, q := range slices.SortedFunc(maps.Keys(loads), CompareCanonical) {
		if v := loads[q]; math.IsNaN(v) || math.IsInf(v, 0) || v < 0 {
			return fmt.Errorf("the load of %s is %v: want a finite number of 0 or more", q, v)
		}
	}
	return nil
}

// NewLoadReport builds the report of loads, each rounded to a few significant digits. loads must pass
// CheckLoad.
func NewLoadReport(loads map[Queue]float64) LoadReport {
	sorted := slices.SortedFunc(maps.Keys(loads), CompareCanonical)
	r := LoadReport{Version: LoadVersion, Queues: []BrokerLoads{}}
	next := 0
	for _, bq := range Compact(sorted) { // the groups' ids, in order, are sorted's next ones
		bl := BrokerLoads{Topic: bq.Topic, Broker: bq.Broker, IDs: bq.IDs, Loads: []float64{}}
		for next < len(sorted) && sorted[next].Topic == bq.Topic && sorted[next].Broker == bq.Broker {
			bl.Loads = append(bl.Loads, roundLoad(loads[sorted[next]]))
			next++
		}
		r.Queues = append(r.Queues, bl)
	}
	return r
}

func roundLoad(v float64) float64 {
	r, _ := strconv.ParseFloat(strconv.FormatFloat(v, 'g', loadDigits, 64), 64)
	return r
}

// Encode returns the report as LoadAnnotation holds it: its JSON, compressed when long, as a Claim.
func (r LoadReport) Encode() string {
	b, err := json.Marshal(r)
	if err != nil {
		panic(err) // finite numbers and strings only: cannot fail
	}
	return compressLong(b)
}

// DecodeLoad parses a report as Encode writes it into each queue's load. It refuses an unknown version,
// malformed ranges, a count of loads that does not match the ids, a load that is not a finite number of
// 0 or more, and input that inflates past a few MiB.
func DecodeLoad(s string) (map[Queue]float64, error) {
	loads, _, err := DecodeLoadIn(s, nil)
	return loads, err
}

// maxLoadLen is the most bytes one load takes in a report, as a JSON number and a comma.
const maxLoadLen = 24

// DecodeLoadIn is DecodeLoad for a reader that keeps only the loads of scope's queues (Scope.Expand) and
// counts the others: it also refuses a report that inflates past what a report of every queue of scope
// takes.
func DecodeLoadIn(s string, scope *Scope) (map[Queue]float64, int, error) {
	r, err := decodeLoadReport(s, scope)
	if err != nil {
		return nil, 0, err
	}
	loads := map[Queue]float64{}
	outside := 0
	for i, bl := range r.Queues {
		if i > 0 && !brokerBefore(r.Queues[i-1], bl) {
			return nil, 0, fmt.Errorf("load report: queues[%d] (%s/%s) is out of order or repeated", i, bl.Topic, bl.Broker)
		}
		n, err := readBrokerLoads(bl, scope.count(bl.Topic, bl.Broker), loads)
		if err != nil {
			return nil, 0, fmt.Errorf("load report: queues[%d] (%s/%s): %w", i, bl.Topic, bl.Broker, err)
		}
		outside += n
	}
	return loads, outside, nil
}

// decodeLoadReport inflates and parses a report, bounded by scope, and checks its version.
func decodeLoadReport(s string, scope *Scope) (LoadReport, error) {
	data, err := inflate(s, "load report", scope.maxEncodedLen(maxIDLen+maxLoadLen))
	if err != nil {
		return LoadReport{}, err
	}
	var r LoadReport
	if err := json.Unmarshal(data, &r); err != nil {
		return LoadReport{}, fmt.Errorf("decoding load report: %w", err)
	}
	if r.Version != LoadVersion {
		return LoadReport{}, fmt.Errorf("load report has format version %d; this reader knows version %d", r.Version, LoadVersion)
	}
	return r, nil
}

// brokerBefore reports whether a's topic and broker come strictly before b's (byte order).
func brokerBefore(a, b BrokerLoads) bool {
	c := strings.Compare(a.Topic, b.Topic)
	return c < 0 || c == 0 && strings.Compare(a.Broker, b.Broker) < 0
}

// readBrokerLoads adds to loads the load of each id of bl below n (the broker's queue count in the
// reader's scope) and returns how many ids it left out for being n or above. It refuses ids and loads that
// do not pair up, a load that is not a finite number of 0 or more, and more than MaxQueues loads in all.
func readBrokerLoads(bl BrokerLoads, n int32, loads map[Queue]float64) (outside int, err error) {
	next := 0
	err = eachRange(bl.IDs, func(first, last int32) error {
		count := int(last-first) + 1
		if next+count > len(bl.Loads) {
			return fmt.Errorf("more ids than loads (%d)", len(bl.Loads))
		}
		for id := first; id <= last; id, next = id+1, next+1 {
			v := bl.Loads[next]
			if math.IsNaN(v) || math.IsInf(v, 0) || v < 0 {
				return fmt.Errorf("the load of id %d is %v: want a finite number of 0 or more", id, v)
			}
			if id >= n {
				outside++
				continue
			}
			if len(loads) >= MaxQueues {
				return fmt.Errorf("more than %d queues", MaxQueues)
			}
			loads[Queue{Topic: bl.Topic, Broker: bl.Broker, ID: id}] = v
		}
		return nil
	})
	if err == nil && next != len(bl.Loads) {
		err = fmt.Errorf("%d loads for %d ids", len(bl.Loads), next)
	}
	return outside, err
}
