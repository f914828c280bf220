package allocate

import (
	"crypto/md5"
	"encoding/binary"
	"math/bits"
	"slices"
	"strconv"
	"sync"
)

// DefaultVirtualNodes is ConsistentHash's number of ring points per member when Params.VirtualNodes is nil,
// as in RocketMQ.
const DefaultVirtualNodes = 10

// consistentHash is RocketMQ's AllocateMessageQueueConsistentHash, computed once for the whole group.
//
// Every member (in sorted order) puts v points on a 32-bit ring, at the hashes of "<id>-0" ... "<id>-(v-1)";
// when two points share a hash the one inserted later (the later member) owns it. A queue goes to the owner
// of the first point at or after the hash of its RocketMQ string form, wrapping to the smallest point.
// RocketMQ rebuilds the ring in every client at O(n²·v); one ring gives the same answer in
// O((n·v + m)·MD5 + n·v·log(n·v)).
//
// It remembers the ring positions of the queues and members of its last plan, so that re-planning after a
// member joins or leaves hashes only the newcomers: MD5 is most of its cost. Its plans are the same as a
// freshly built one's for the same input. It is safe for concurrent use; calls are serialised. Memory is
// about 4 bytes per queue and 8·v bytes per member of the last input, plus the sorted queue list.
type consistentHash struct {
	virtualNodes int
	hash         HashFunc

	mu   sync.Mutex
	memo hashMemo
}

func newConsistentHash(p Params) (Strategy, error) {
	v, err := virtualNodes(p)
	if err != nil {
		return nil, err
	}
	return &consistentHash{virtualNodes: v, hash: p.Hash}, nil
}

func virtualNodes(p Params) (int, error) {
	if p.VirtualNodes == nil {
		return DefaultVirtualNodes, nil
	}
	if v := *p.VirtualNodes; v < 0 {
		return 0, paramErrorf("virtualNodes", "must be >= 0, got %d", v)
	}
	return int(*p.VirtualNodes), nil
}

// RocketMQHash is ConsistentHash's default hash: the first 4 bytes of the MD5 digest of the key's UTF-8
// bytes, big-endian, as RocketMQ's ConsistentHashRouter.MD5Hash computes it.
func RocketMQHash(key string) uint32 {
	d := md5.Sum([]byte(key))
	return binary.BigEndian.Uint32(d[:4])
}

// parallelQueueHashing is the queue count from which the queues' hashes are computed on two goroutines:
// below it the goroutine costs more than it saves.
const parallelQueueHashing = 4096

// Allocate returns the plan for in, reusing the hashes of the queues and members of the previous call.
func (s *consistentHash) Allocate(in Input) (Plan, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return allocateConsistentHash(in, s.virtualNodes, s.hash, &s.memo), nil
}

// hashMemo holds what one ConsistentHash computation found, for the next one to reuse.
type hashMemo struct {
	queues      []Queue  // sorted, as the last computation saw them; owned by the memo
	queueHashes []uint32 // queueHashes[i] is the hash of queues[i]
	members     []Member // sorted, as the last computation saw them
	ring        []uint64 // the sorted ring, member indices into members
}

// allocateConsistentHash computes the plan, hashing only what memo (empty for a cold computation) does not
// already hold, and leaves in memo what this computation saw.
func allocateConsistentHash(in Input, v int, hash HashFunc, memo *hashMemo) Plan {
	queues, members := sortedQueues(in.Queues), sortedMembers(in.Members)
	if len(queues) == 0 || len(members) == 0 || v == 0 {
		return emptyPlan(members)
	}

	// Phase 1: take over what memo knows, and list the queues and members that still need hashing.
	queueHashes := make([]uint32, len(queues))
	var missingQueues []int32
	var ring []uint64 // sorted points of members already known
	var newMembers []int32
	if memo.ring != nil {
		missingQueues = reuseQueueHashes(queueHashes, queues, memo.queues, memo.queueHashes)
		ring, newMembers = carryRing(members, memo.members, memo.ring, v)
	} else {
		missingQueues = allIndices(len(queues))
		newMembers = allIndices(len(members))
	}

	// Phase 2: hash, and order the ring. MD5 dominates, so with the default hash a second goroutine takes a
	// share of the queues, sized so both do about the same number of MD5 blocks (a queue key is two blocks
	// long, a ring key one) while this one also hashes the new ring points.
	fresh := make([]uint64, 0, len(newMembers)*v)
	var wg sync.WaitGroup
	split := 0
	if hash == nil && len(missingQueues) >= parallelQueueHashing {
		split = min(len(missingQueues), (2*len(missingQueues)+cap(fresh))/4)
		wg.Go(func() { hashQueues(queueHashes, queues, missingQueues[:split], nil) })
	}
	var buf []byte
	for _, i := range newMembers {
		fresh, buf = appendRingPoints(fresh, buf, members[i].ID, i, v, hash)
	}
	// Ordering the ring does not need the queues' hashes, so it overlaps with the other goroutine's MD5.
	slices.Sort(fresh)
	ring = mergeSorted(ring, fresh)
	hashQueues(queueHashes, queues, missingQueues[split:], hash)
	wg.Wait()

	// Phase 3: route every queue.
	// Both lists are sorted without duplicates, so with nothing missing they differ exactly when queues is
	// shorter (a subset): the memo's list must then shrink with its hashes.
	if len(missingQueues) > 0 || len(queues) != len(memo.queues) {
		// queues may be the caller's slice; the memo must not change if the caller reuses it.
		memo.queues = slices.Clone(queues)
	}
	memo.queueHashes, memo.members, memo.ring = queueHashes, members, ring
	return routeQueues(queues, queueHashes, members, ring)
}

func allIndices(n int) []int32 {
	idx := make([]int32, n)
	for i := range idx {
		idx[i] = int32(i)
	}
	return idx
}

// carryRing keeps the points of prevRing whose member is still in members, renumbered to the member's new
// index, and returns the indices of the members that have no points yet. Both member lists are sorted, so
// renumbering keeps the ring sorted: order among equal hashes is by member, and the new numbering keeps
// the members' order.
func carryRing(members, prev []Member, prevRing []uint64, v int) ([]uint64, []int32) {
	newIndex := make([]int32, len(prev))
	known := make([]bool, len(members))
	j := 0
	for i, pm := range prev {
		for j < len(members) && CompareUTF16(members[j].ID, pm.ID) < 0 {
			j++
		}
		newIndex[i] = -1
		if j < len(members) && members[j].ID == pm.ID {
			newIndex[i] = int32(j)
			known[j] = true
		}
	}
	ring := make([]uint64, 0, len(members)*v)
	for _, p := range prevRing {
		if ni := newIndex[uint32(p)]; ni >= 0 {
			ring = append(ring, p>>32<<32|uint64(ni))
		}
	}
	var newMembers []int32
	for i, ok := range known {
		if !ok {
			newMembers = append(newMembers, int32(i))
		}
	}
	return ring, newMembers
}

// mergeSorted merges two sorted slices into a new sorted one (or returns one of them if the other is empty).
func mergeSorted(a, b []uint64) []uint64 {
	if len(b) == 0 {
		return a
	}
	if len(a) == 0 {
		return b
	}
	out := make([]uint64, 0, len(a)+len(b))
	i, j := 0, 0
	for i < len(a) && j < len(b) {
		if a[i] <= b[j] {
			out = append(out, a[i])
			i++
		} else {
			out = append(out, b[j])
			j++
		}
	}
	out = append(out, a[i:]...)
	return append(out, b[j:]...)
}

// reuseQueueHashes copies into dst the hashes of the queues that were also in the previous (sorted) list
// and returns the indices of the queues that still need hashing. Both lists are sorted, so one merge pass
// finds the common queues.
func reuseQueueHashes(dst []uint32, queues, prev []Queue, prevHashes []uint32) []int32 {
	if slices.Equal(queues, prev) {
		copy(dst, prevHashes)
		return nil
	}
	var missing []int32
	j := 0
	for i, q := range queues {
		for j < len(prev) && CompareRocketMQ(prev[j], q) < 0 {
			j++
		}
		if j < len(prev) && prev[j] == q {
			dst[i] = prevHashes[j]
			continue
		}
		missing = append(missing, int32(i))
	}
	return missing
}

// hashQueues writes the ring position of queues[i] into dst[i] for every i in which. With the default hash
// the key is built in one reused buffer whose "MessageQueue [topic=T, brokerName=B, queueId=" prefix is
// rebuilt only when the topic or broker changes, so hashing allocates nothing.
func hashQueues(dst []uint32, queues []Queue, which []int32, hash HashFunc) {
	buf := make([]byte, 0, 128)
	prefix := 0
	var topic, broker string
	for n, i := range which {
		q := queues[i]
		if n == 0 || q.Topic != topic || q.Broker != broker {
			topic, broker = q.Topic, q.Broker
			buf = append(buf[:0], "MessageQueue [topic="...)
			buf = append(buf, topic...)
			buf = append(buf, ", brokerName="...)
			buf = append(buf, broker...)
			buf = append(buf, ", queueId="...)
			prefix = len(buf)
		}
		buf = strconv.AppendInt(buf[:prefix], int64(q.ID), 10)
		buf = append(buf, ']')
		dst[i] = hashBytes(buf, hash)
	}
}

// appendRingPoints appends member's points, "<id>-0" ... "<id>-(v-1)", to ring and returns it with the
// (reused) key buffer. A point is packed as hash<<32 | member index, so sorting the ring as plain integers
// orders it by hash and, among equal hashes, by insertion order of members: the last of a run of equal hashes
// is the point RocketMQ keeps.
func appendRingPoints(ring []uint64, buf []byte, id string, member int32, v int, hash HashFunc) ([]uint64, []byte) {
	buf = append(append(buf[:0], id...), '-')
	prefix := len(buf)
	for k := range v {
		buf = strconv.AppendInt(buf[:prefix], int64(k), 10)
		ring = append(ring, uint64(hashBytes(buf, hash))<<32|uint64(uint32(member)))
	}
	return ring, buf
}

func hashBytes(key []byte, hash HashFunc) uint32 {
	if hash != nil {
		return hash(string(key))
	}
	d := md5.Sum(key)
	return binary.BigEndian.Uint32(d[:4])
}

// routeQueues gives each queue to the owner of the first ring point at or after its hash (wrapping), and
// builds the plan. ring must be sorted and non-empty.
//
// Large groups are routed and laid out in two halves on two goroutines: each half counts its own queues
// per member, so the halves write disjoint parts of the plan and queue order within a member is kept.
func routeQueues(queues []Queue, queueHashes []uint32, members []Member, ring []uint64) Plan {
	idx := newRingIndex(ring)
	owners := make([]int32, len(queues))
	halves := 1
	if len(queues) >= parallelQueueHashing {
		halves = 2
	}
	bounds := []int{0, len(queues) / halves * (halves - 1), len(queues)}[2-halves:]
	counts := make([][]int32, halves)
	for h := range counts {
		counts[h] = make([]int32, len(members))
	}
	inParallel(halves, func(h int) {
		lo, hi := bounds[h], bounds[h+1]
		idx.route(queueHashes[lo:hi], owners[lo:hi], counts[h])
	})
	return layOutByOwner(queues, owners, members, bounds, counts)
}

// ringIndex finds a hash's point on a sorted ring. A lookup table indexed by the top bits of a hash points
// at the first ring point of that bucket; with about one bucket per point, a lookup scans one or two points
// instead of a binary search's cache misses.
type ringIndex struct {
	ring          []uint64
	shift         int
	firstInBucket []int32
}

func newRingIndex(ring []uint64) *ringIndex {
	bucketBits := min(max(bits.Len(uint(len(ring))), 1), 24)
	r := &ringIndex{ring: ring, shift: 32 - bucketBits, firstInBucket: make([]int32, 1<<bucketBits+1)}
	p := 0
	for b := range r.firstInBucket {
		for p < len(ring) && int(ring[p]>>(32+r.shift)) < b {
			p++
		}
		r.firstInBucket[b] = int32(p)
	}
	return r
}

// route writes in owners[i] the member whose point follows hashes[i] on the ring, and counts per member the
// queues it routed.
func (r *ringIndex) route(hashes []uint32, owners, counts []int32) {
	ring := r.ring
	for i, h := range hashes {
		b := h >> r.shift
		j, end := int(r.firstInBucket[b]), int(r.firstInBucket[b+1])
		for j < end && uint32(ring[j]>>32) < h {
			j++
		}
		if j == len(ring) {
			j = 0
		}
		// Of several points with this hash, RocketMQ's TreeMap kept the one put last.
		for j+1 < len(ring) && ring[j+1]>>32 == ring[j]>>32 {
			j++
		}
		owners[i] = int32(uint32(ring[j]))
		counts[owners[i]]++
	}
}

// layOutByOwner lays the queues out member by member in queue order, in one backing array: member m's
// queues from the first half (queues[bounds[0]:bounds[1]]) start at its offset, those of the second half
// right after them. counts[h][m] is how many of half h's queues member m owns.
func layOutByOwner(queues []Queue, owners []int32, members []Member, bounds []int, counts [][]int32) Plan {
	halves := len(counts)
	offsets := make([]int32, len(members))
	starts := make([][]int32, halves)
	total := int32(0)
	for m := range members {
		offsets[m] = total
		for h := range halves {
			total += counts[h][m]
		}
	}
	for h := range halves {
		starts[h] = slices.Clone(offsets)
		if h > 0 {
			for m := range members {
				starts[h][m] += counts[h-1][m]
			}
		}
	}
	backing := make([]Queue, total)
	inParallel(halves, func(h int) {
		next := starts[h]
		for i := bounds[h]; i < bounds[h+1]; i++ {
			o := owners[i]
			backing[next[o]] = queues[i]
			next[o]++
		}
	})
	plan := make(Plan, len(members))
	for m, member := range members {
		lo, hi := offsets[m], total
		if m+1 < len(members) {
			hi = offsets[m+1]
		}
		plan[member.ID] = backing[lo:hi:hi]
	}
	return plan
}

// inParallel runs f(0) … f(n-1), f(n-1) on this goroutine and the others on goroutines of their own.
func inParallel(n int, f func(int)) {
	var wg sync.WaitGroup
	for h := range n - 1 {
		wg.Go(func() { f(h) })
	}
	f(n - 1)
	wg.Wait()
}
