package protocol

import (
	"bytes"
	"compress/flate"
	"encoding/base64"
	"fmt"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// smallScope is a group of 8 queues: topic t, brokers b (ids 0-5) and c (ids 0-1).
func smallScope() *Scope {
	s := NewScope()
	s.Add("t", "b", 6)
	s.Add("t", "c", 2)
	return s
}

func TestScopeExpand(t *testing.T) {
	cases := []struct {
		name    string
		groups  []BrokerQueues
		want    []Queue
		outside int
		err     string
	}{
		{"inside", []BrokerQueues{{"t", "b", "0-2,5"}}, []Queue{q("t", "b", 0), q("t", "b", 1), q("t", "b", 2), q("t", "b", 5)}, 0, ""},
		{"a range across the end", []BrokerQueues{{"t", "b", "4-65535"}, {"t", "c", "1-3"}}, []Queue{q("t", "b", 4), q("t", "b", 5), q("t", "c", 1)}, 65530 + 2, ""},
		{"a broker the spec does not name", []BrokerQueues{{"t", "a", "0-65535"}, {"t", "b", "0"}}, []Queue{q("t", "b", 0)}, 65536, ""},
		{"a topic the spec does not name", []BrokerQueues{{"u", "b", "7,9-10"}}, nil, 3, ""},
		{"out of order", []BrokerQueues{{"t", "c", "0"}, {"t", "b", "0"}}, nil, 0, "out of order"},
		{"malformed ids", []BrokerQueues{{"t", "b", "3-1"}}, nil, 0, "invalid queue id range"},
		{"past the largest id", []BrokerQueues{{"t", "b", "65536"}}, nil, 0, "invalid or out-of-order"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, err := smallScope().Expand(c.groups)
			if c.err != "" {
				if err == nil || !strings.Contains(err.Error(), c.err) {
					t.Fatalf("error %v, want one saying %q", err, c.err)
				}
				return
			}
			if err != nil || !slices.Equal(got.Queues, c.want) || got.Outside != c.outside {
				t.Fatalf("got %v, %d outside, %v; want %v, %d outside", got.Queues, got.Outside, err, c.want, c.outside)
			}
		})
	}
}

func TestScopeOf(t *testing.T) {
	s := ScopeOf([]Queue{q("t", "b", 0), q("t", "b", 3), q("t", "c", 0)})
	if s.Len() != 5 || s.count("t", "b") != 4 || s.count("t", "c") != 1 || s.count("t", "x") != 0 {
		t.Fatalf("scope of 5 queues reads as %d queues, b %d, c %d", s.Len(), s.count("t", "b"), s.count("t", "c"))
	}
	if (*Scope)(nil).Len() != MaxQueues {
		t.Fatal("the nil scope is not unbounded")
	}
}

// hostileClaim is the 767-byte claim of the security report: 16 brokers, each with every id.
func hostileClaim() string {
	var groups []BrokerQueues
	for b := range 16 {
		groups = append(groups, BrokerQueues{Topic: "t", Broker: fmt.Sprintf("b%02d", b), IDs: "0-65535"})
	}
	return Claim{Version: ClaimVersion, PodUID: "u", Acked: 1, Queues: groups}.Encode()
}

// allocated is how many bytes f allocates.
func allocated(f func()) uint64 {
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	f()
	runtime.ReadMemStats(&after)
	return after.TotalAlloc - before.TotalAlloc
}

// The unbounded reader expands the hostile claim to 1,048,576 queues (tens of MiB); through the group's
// Scope it lists only the group's queues that it names, and counts the rest.
func TestReadLeaseInBoundsAHostileClaim(t *testing.T) {
	raw := hostileClaim()
	scope := NewScope()
	scope.Add("t", "b00", 8)
	lease := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: "g.p", Annotations: map[string]string{ClaimAnnotation: raw}}}
	var s LeaseState
	bytesIn := allocated(func() { s = ReadLeaseIn(lease, scope) })
	if s.ClaimErr != nil || len(s.Claim) != 8 || s.Outside != 16*65536-8 {
		t.Fatalf("read %d queues, %d outside, %v; want 8 and %d outside", len(s.Claim), s.Outside, s.ClaimErr, 16*65536-8)
	}
	bytesAll := allocated(func() { _ = ReadLease(lease) })
	t.Logf("a %d-byte claim: %d bytes allocated in scope, %d unbounded", len(raw), bytesIn, bytesAll)
	if bytesIn > 64<<10 {
		t.Fatalf("reading a %d-byte claim in a scope of 8 queues allocated %d bytes", len(raw), bytesIn)
	}
	if bytesAll < 16<<20 {
		t.Fatalf("the unbounded reader allocated only %d bytes: the test no longer shows what the scope bounds", bytesAll)
	}
}

// A compressed annotation that inflates far beyond what listing every queue of the scope takes is
// refused, and inflating it stops at that bound.
func TestReadLeaseInRefusesADeflateBomb(t *testing.T) {
	var buf bytes.Buffer
	w, _ := flate.NewWriter(&buf, flate.BestCompression)
	_, _ = w.Write([]byte(`{"version":1,"podUID":"u","acked":1,"queues":[],"x":"`))
	_, _ = w.Write(bytes.Repeat([]byte("a"), 8<<20))
	_ = w.Close()
	raw := compressedMark + base64.StdEncoding.EncodeToString(buf.Bytes())
	lease := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: "g.p", Annotations: map[string]string{ClaimAnnotation: raw, LoadAnnotation: raw}}}
	var s LeaseState
	n := allocated(func() { s = ReadLeaseIn(lease, smallScope()) })
	if s.ClaimErr == nil || s.LoadErr == nil {
		t.Fatalf("a %d-byte bomb reads as claim %v, load %v", len(raw), s.ClaimErr, s.LoadErr)
	}
	if n > 1<<20 {
		t.Fatalf("refusing a %d-byte bomb allocated %d bytes", len(raw), n)
	}
}

func TestDecodeLoadIn(t *testing.T) {
	report := LoadReport{Version: LoadVersion, Queues: []BrokerLoads{
		{Topic: "t", Broker: "a", IDs: "0-1", Loads: []float64{1, 2}},
		{Topic: "t", Broker: "b", IDs: "4-7", Loads: []float64{3, 4, 5, 6}},
	}}
	loads, outside, err := DecodeLoadIn(report.Encode(), smallScope())
	want := map[Queue]float64{q("t", "b", 4): 3, q("t", "b", 5): 4}
	if err != nil || outside != 4 || len(loads) != 2 || loads[q("t", "b", 4)] != 3 || loads[q("t", "b", 5)] != 4 {
		t.Fatalf("got %v, %d outside, %v; want %v, 4 outside", loads, outside, err, want)
	}
	report.Queues[1].Loads = report.Queues[1].Loads[:3]
	if _, _, err := DecodeLoadIn(report.Encode(), smallScope()); err == nil {
		t.Fatal("a report with fewer loads than ids was accepted")
	}
}

// Entries that give the group's queues out more than once were not written by an operator: past the
// budget they are not read.
func TestReadPublishedInBudget(t *testing.T) {
	all := []Queue{}
	for id := range int32(6) {
		all = append(all, q("t", "b", id))
	}
	data := map[string]string{}
	for i := range 40 {
		data[fmt.Sprintf("p%02d", i)] = string(NewEntry("m", "u", 1, all).Encode())
	}
	parts, err := Layout("g", 1, data, nil)
	if err != nil {
		t.Fatal(err)
	}
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: parts[0].Name, Annotations: parts[0].Annotations}, Data: parts[0].Data}
	p := ReadPublishedIn("g", cm, nil, smallScope(), smallScope().Len())
	listed := 0
	for _, e := range p.Entries {
		listed += len(e.Queues)
	}
	if listed > 2*smallScope().Len() || len(p.Tampered) == 0 || !strings.Contains(strings.Join(p.Tampered, ";"), "more than the group's 8 queues") {
		t.Fatalf("read %d queues from 40 entries of 6, findings %q", listed, p.Tampered)
	}
	if unbounded := ReadPublished("g", cm, nil); len(unbounded.Entries) != 40 || len(unbounded.Tampered) != 0 {
		t.Fatalf("the unbounded reader reads %d entries, findings %q", len(unbounded.Entries), unbounded.Tampered)
	}
}

// An assignment published under an earlier spec lists queues the spec no longer names: they are counted.
func TestReadPublishedInCountsQueuesOutsideTheScope(t *testing.T) {
	entries := map[string]string{
		"p0": string(NewEntry("m", "u0", 3, []Queue{q("t", "b", 0), q("t", "b", 9), q("t", "gone", 1)}).Encode()),
		"p1": string(NewEntry("m", "u1", 3, []Queue{q("t", "c", 1)}).Encode()),
	}
	parts, err := Layout("g", 3, entries, nil)
	if err != nil {
		t.Fatal(err)
	}
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: parts[0].Name, Annotations: parts[0].Annotations}, Data: parts[0].Data}
	p := ReadPublishedIn("g", cm, nil, smallScope(), smallScope().Len())
	if p.Outside != 2 || len(p.Entries["p0"].Queues) != 1 || len(p.Tampered) != 0 {
		t.Fatalf("outside = %d, p0 lists %v, findings %q; want 2 outside, p0 listing t/b/0 only", p.Outside, p.Entries["p0"].Queues, p.Tampered)
	}
}

func TestGenerationsAreBounded(t *testing.T) {
	if _, _, err := DecodeClaim(Claim{Version: ClaimVersion, PodUID: "u", Acked: MaxGeneration + 1, Queues: []BrokerQueues{}}.Encode()); err == nil {
		t.Error("a claim acknowledging a generation past MaxGeneration was accepted")
	}
	if _, _, err := DecodeEntry(NewEntry("m", "u", MaxGeneration+1, nil).Encode()); err == nil {
		t.Error("an entry of a generation past MaxGeneration was accepted")
	}
	lease := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{AckedGenerationAnnotation: "9223372036854775807"}}}
	if s := ReadLease(lease); s.AckedGeneration != 0 {
		t.Errorf("an acknowledgement of 2^63-1 reads as %d", s.AckedGeneration)
	}
}

// FuzzReadLeaseIn checks that what reading a Lease costs through a scope is bounded by the input and the
// scope, not by what the input says: at most perInputByte bytes allocated per byte of annotation, plus
// a constant and what listing the scope's queues takes.
func FuzzReadLeaseIn(f *testing.F) {
	f.Add(hostileClaim(), `{"version":1,"queues":[{"topic":"t","broker":"b","ids":"0-65535","loads":[1]}]}`)
	f.Add(NewClaim("u", 3, []Queue{q("t", "b", 1), q("t", "c", 0)}).Encode(), NewLoadReport(map[Queue]float64{q("t", "b", 1): 2}).Encode())
	f.Add("z:"+base64.StdEncoding.EncodeToString([]byte{0x4b, 0x4c, 0x04, 0x00}), "{")
	const perInputByte, constant = 64, 256 << 10
	f.Fuzz(func(t *testing.T, claim, load string) {
		lease := &coordinationv1.Lease{
			ObjectMeta: metav1.ObjectMeta{Name: "g.p", Annotations: map[string]string{ClaimAnnotation: claim, LoadAnnotation: load}},
			Spec:       coordinationv1.LeaseSpec{RenewTime: &metav1.MicroTime{Time: time.Unix(1e9, 0)}},
		}
		scope := smallScope()
		var s LeaseState
		n := allocated(func() { s = ReadLeaseIn(lease, scope) })
		if limit := uint64(perInputByte*(len(claim)+len(load)) + constant); n > limit {
			t.Fatalf("reading %d bytes of annotations allocated %d bytes, more than %d", len(claim)+len(load), n, limit)
		}
		if len(s.Claim) > scope.Len() || len(s.Load) > scope.Len() {
			t.Fatalf("read %d claimed queues and %d loads from a scope of %d", len(s.Claim), len(s.Load), scope.Len())
		}
	})
}

// FuzzDecodeEntryIn: what reading an entry costs through a scope is bounded by the entry's length and the
// scope, whatever ranges it lists.
func FuzzDecodeEntryIn(f *testing.F) {
	f.Add([]byte(NewEntry("m", "u", 3, []Queue{q("t", "b", 0), q("t", "c", 1)}).Encode()))
	f.Add([]byte(`{"version":1,"generation":1,"member":"m","queues":[{"topic":"t","broker":"b","ids":"0-65535"},{"topic":"t","broker":"c","ids":"0-65535"}]}`))
	const perInputByte, constant = 64, 256 << 10
	f.Fuzz(func(t *testing.T, data []byte) {
		scope := smallScope()
		var queues Expanded
		n := allocated(func() { _, queues, _ = DecodeEntryIn(data, scope) })
		if limit := uint64(perInputByte*len(data) + constant); n > limit {
			t.Fatalf("reading a %d-byte entry allocated %d bytes, more than %d", len(data), n, limit)
		}
		if len(queues.Queues) > scope.Len() {
			t.Fatalf("read %d queues from a scope of %d", len(queues.Queues), scope.Len())
		}
	})
}

func TestStopsWithinIsBounded(t *testing.T) {
	for _, tc := range []struct {
		name, raw string
		want      time.Duration
	}{
		{"seconds", "6", 6 * time.Second},
		{"the bound", "300", 300 * time.Second},
		{"past the bound", "301", 0},
		{"zero", "0", 0},
		{"negative", "-3", 0},
		{"empty", "", 0},
		{"with a unit", "6s", 0},
		{"in exponent notation", "1e9", 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			lease := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{StopsWithinAnnotation: tc.raw}}}
			if got := ReadLease(lease).StopsWithin; got != tc.want {
				t.Errorf("stops-within-seconds %q reads as %v, want %v", tc.raw, got, tc.want)
			}
		})
	}
	m := MemberLease{Group: "g", Pod: "p", PodUID: "u", Member: "p", Duration: time.Minute, StopsWithin: 5500 * time.Millisecond}
	if got := ReadLease(m.Apply(nil, "ns", nil, nil)).StopsWithin; got != 6*time.Second {
		t.Errorf("a promise of 5.5 s is written as %v, want it rounded up to 6s", got)
	}
	promised := m.Apply(nil, "ns", nil, nil)
	m.StopsWithin = 0
	if l := m.Apply(promised, "ns", nil, nil); l.Annotations[StopsWithinAnnotation] != "" {
		t.Errorf("a member without contact fencing leaves the promise %q in its Lease", l.Annotations[StopsWithinAnnotation])
	}
}
