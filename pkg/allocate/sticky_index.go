package allocate

import (
	"cmp"
	"fmt"
	"slices"
	"strings"
)

// This file is Sticky's indexing: members in id order with their zones interned, queues in canonical
// order (topic, broker, id) with duplicates dropped, and the previous plan read onto both, so that the
// balancing steps work on dense integers (a member is its position in id order, a queue its canonical
// position) and never compare strings.

// stickyGroupKey identifies the queues of one broker of one topic.
type stickyGroupKey struct{ topic, broker string }

// stickyGroup records where the queues of one (topic, broker) pair sit in the canonical order.
type stickyGroup struct {
	key        stickyGroupKey
	lo, hi     int64 // smallest and largest queue id seen
	n          int32 // queues seen, duplicates included
	dense      bool  // ids are looked up through table rather than by binary search
	tableOff   int32 // dense: table[tableOff+id-lo] is the canonical position, or -1
	base       int32 // first canonical position of the group
	unique     int32 // distinct ids in the group
	sortedOff  int32 // sparse: sortedIDs[sortedOff:sortedOff+unique] are the group's ids, ascending
	zone       int32 // zone id of the broker, -1 when unknown
	byGroupOff int32 // start of the group's input indices in byGroup
}

// indexMembers sorts the members by id and interns their zones.
func (st *stickyState) indexMembers() error {
	st.members = slices.Clone(st.in.Members)
	slices.SortFunc(st.members, func(a, b Member) int { return strings.Compare(a.ID, b.ID) })
	st.zoneIDs = make(map[string]int32)
	st.mzone = make([]int32, len(st.members))
	st.weight = make([]int64, len(st.members))
	for i, m := range st.members {
		if i > 0 && st.members[i-1].ID == m.ID {
			return fmt.Errorf("member id %q appears twice", m.ID)
		}
		st.mzone[i] = st.zoneID(m.Zone)
		st.weight[i] = max(int64(m.Weight), 1)
	}
	return nil
}

func (st *stickyState) zoneID(z string) int32 {
	if z == "" {
		return -1
	}
	id, ok := st.zoneIDs[z]
	if !ok {
		id = int32(len(st.zoneIDs))
		st.zoneIDs[z] = id
	}
	return id
}

// smallGroupScan is the most (topic, broker) pairs findGroup compares one by one before it hashes.
const smallGroupScan = 8

// findGroup returns the index of q's (topic, broker) pair, or -1 for one indexing has not seen.
func (st *stickyState) findGroup(q Queue) int32 {
	k := stickyGroupKey{q.Topic, q.Broker}
	if len(st.groups) > 0 && k == st.lastKey {
		return st.lastG
	}
	g := st.lookupGroup(k)
	if g >= 0 {
		st.lastKey, st.lastG = k, g
	}
	return g
}

// lookupGroup returns the index of pair k, or -1. A group has few (topic, broker) pairs, and comparing
// their strings, which usually share memory with the queue's, costs less than hashing them.
func (st *stickyState) lookupGroup(k stickyGroupKey) int32 {
	if len(st.groups) <= smallGroupScan {
		for g := range st.groups {
			if st.groups[g].key == k {
				return int32(g)
			}
		}
		return -1
	}
	if g, ok := st.groupIdx[k]; ok {
		return g
	}
	return -1
}

// addGroup returns the index of q's (topic, broker) pair, adding the pair when it is new.
func (st *stickyState) addGroup(q Queue) int32 {
	if g := st.findGroup(q); g >= 0 {
		return g
	}
	k := stickyGroupKey{q.Topic, q.Broker}
	g := int32(len(st.groups))
	st.groups = append(st.groups, stickyGroup{key: k, lo: int64(q.ID), hi: int64(q.ID)})
	st.groupIdx[k] = g
	st.lastKey, st.lastG = k, g
	return g
}

// indexQueues puts the distinct queues in canonical order (topic, broker, id) without comparing
// strings per queue: queues are bucketed by (topic, broker), the buckets sorted, and ids ordered
// inside each bucket. Cost: O(Q + G log G), plus a comparison sort of the ids of sparse groups.
//
// Two scratch arrays serve twice: the queues' groups are written into the memory that becomes the
// canonical order, and the buckets into the memory readPrevious makes prev, which saves two Q-sized
// allocations per call on the hot path.
func (st *stickyState) indexQueues() {
	qs := st.in.Queues
	qg := reuse(&st.scratch.order, len(qs))
	st.countGroups(qg)
	byGroup := reuse(&st.scratch.prev, len(qs))
	tableLen := st.layOutGroups()
	st.bucketByGroup(qg, byGroup)
	st.table = reuse(&st.scratch.table, int(tableLen))
	for i := range st.table {
		st.table[i] = -1
	}
	gorder := make([]int32, len(st.groups)) // made here, not in sortGroups, so that a few stay on the stack
	st.sortGroups(gorder)
	// qg is not read again: its memory becomes the canonical order.
	st.order = qg[:0]
	st.spare = byGroup
	for _, g := range gorder {
		gr := &st.groups[g]
		gr.base = int32(len(st.order))
		members := byGroup[gr.byGroupOff : gr.byGroupOff+gr.n]
		if gr.dense {
			st.orderDense(gr, members)
		} else {
			st.orderSparse(gr, members)
		}
		gr.unique = int32(len(st.order)) - gr.base
	}
	st.zoneQueues(gorder)
}

// countGroups records each input queue's (topic, broker) group in qg, and each group's id range and
// queue count.
func (st *stickyState) countGroups(qg []int32) {
	st.groupIdx = make(map[stickyGroupKey]int32)
	for k, q := range st.in.Queues {
		g := st.addGroup(q)
		qg[k] = g
		gr := &st.groups[g]
		gr.lo, gr.hi = min(gr.lo, int64(q.ID)), max(gr.hi, int64(q.ID))
		gr.n++
	}
}

// layOutGroups gives each group its place in the buckets, its zone and, when its ids are dense, its
// place in the lookup table; it returns the table's length.
func (st *stickyState) layOutGroups() (tableLen int32) {
	var off int32
	for g := range st.groups {
		gr := &st.groups[g]
		gr.byGroupOff = off
		off += gr.n
		// Dense ids get a direct table; the slack bounds the table to about twice the queue count.
		if gr.hi-gr.lo+1 <= 2*int64(gr.n)+64 {
			gr.dense = true
			gr.tableOff = tableLen
			tableLen += int32(gr.hi - gr.lo + 1)
		}
		gr.zone = st.zoneID(st.in.BrokerZones[gr.key.broker])
	}
	return tableLen
}

// bucketByGroup writes the input indices into byGroup, group by group, in input order within each.
func (st *stickyState) bucketByGroup(qg, byGroup []int32) {
	fill := make([]int32, len(st.groups))
	for k, g := range qg {
		byGroup[st.groups[g].byGroupOff+fill[g]] = int32(k)
		fill[g]++
	}
}

// sortGroups fills gorder, of one entry per group, with the group indices ordered by (topic, broker).
func (st *stickyState) sortGroups(gorder []int32) {
	for g := range gorder {
		gorder[g] = int32(g)
	}
	slices.SortFunc(gorder, func(a, b int32) int {
		ka, kb := st.groups[a].key, st.groups[b].key
		if c := strings.Compare(ka.topic, kb.topic); c != 0 {
			return c
		}
		return strings.Compare(ka.broker, kb.broker)
	})
}

// orderDense appends a dense group's distinct queues to the canonical order by id, through its slice of
// the lookup table, which it leaves mapping each id to its canonical position (-1 for an absent id).
func (st *stickyState) orderDense(gr *stickyGroup, members []int32) {
	qs := st.in.Queues
	t := st.table[gr.tableOff : gr.tableOff+int32(gr.hi-gr.lo+1)]
	for _, k := range members {
		if slot := int64(qs[k].ID) - gr.lo; t[slot] < 0 {
			t[slot] = k // duplicates of a queue keep one entry
		}
	}
	for i, k := range t {
		if k >= 0 {
			t[i] = int32(len(st.order))
			st.order = append(st.order, k)
		}
	}
}

// orderSparse appends a sparse group's distinct queues to the canonical order by id, and their ids to
// sortedIDs for position's binary search.
func (st *stickyState) orderSparse(gr *stickyGroup, members []int32) {
	qs := st.in.Queues
	slices.SortFunc(members, func(a, b int32) int { return cmp.Compare(qs[a].ID, qs[b].ID) })
	gr.sortedOff = int32(len(st.sortedIDs))
	for i, k := range members {
		if i > 0 && qs[members[i-1]].ID == qs[k].ID {
			continue
		}
		st.sortedIDs = append(st.sortedIDs, qs[k].ID)
		st.order = append(st.order, k)
	}
}

// zoneQueues records each canonical position's broker zone.
func (st *stickyState) zoneQueues(gorder []int32) {
	st.qzone = reuse(&st.scratch.qzone, len(st.order))
	for _, g := range gorder {
		gr := &st.groups[g]
		for p := gr.base; p < gr.base+gr.unique; p++ {
			st.qzone[p] = gr.zone
		}
	}
}

// position returns q's canonical position, or -1 when q is not among the queues.
func (st *stickyState) position(q Queue) int32 {
	g := st.findGroup(q)
	if g < 0 {
		return -1
	}
	gr := &st.groups[g]
	id := int64(q.ID)
	if id < gr.lo || id > gr.hi {
		return -1
	}
	if gr.dense {
		return st.table[gr.tableOff+int32(id-gr.lo)]
	}
	ids := st.sortedIDs[gr.sortedOff : gr.sortedOff+gr.unique]
	if j, ok := slices.BinarySearch(ids, q.ID); ok {
		return gr.base + int32(j)
	}
	return -1
}

// readPrevious records, for every current queue, which current member held it. A queue listed under two
// members goes to the one with the smaller id, so the outcome does not depend on map iteration order.
func (st *stickyState) readPrevious() {
	st.prev = st.spare[:len(st.order)]
	for p := range st.prev {
		st.prev[p] = -1
	}
	if len(st.in.Previous) == 0 {
		return
	}
	memberIdx := make(map[string]int32, len(st.members))
	for i, m := range st.members {
		memberIdx[m.ID] = int32(i)
	}
	for id, queues := range st.in.Previous {
		mi, ok := memberIdx[id]
		if !ok {
			continue
		}
		for _, qu := range queues {
			if p := st.position(qu); p >= 0 && (st.prev[p] < 0 || mi < st.prev[p]) {
				st.prev[p] = mi
			}
		}
	}
}
