package allocate

import "sync"

// ConsistentHashCache is ConsistentHash that remembers the ring positions of the queues and members of its
// last plan, so that re-planning after a member joins or leaves hashes only the newcomers: MD5 is most of
// ConsistentHash's cost. Its plans are identical to ConsistentHash's for the same input.
//
// Keep one per consumer group. It is safe for concurrent use; calls are serialised. Memory is about
// 4 bytes per queue and 4·v bytes per member of the last input, plus the sorted queue list.
type ConsistentHashCache struct {
	virtualNodes int
	hash         HashFunc

	mu   sync.Mutex
	memo hashMemo
}

// NewConsistentHashCache validates p as ConsistentHash does and returns an empty cache.
func NewConsistentHashCache(p Params) (*ConsistentHashCache, error) {
	v, err := virtualNodes(p)
	if err != nil {
		return nil, err
	}
	return &ConsistentHashCache{virtualNodes: v, hash: p.Hash}, nil
}

// Allocate returns ConsistentHash's plan for in, reusing the hashes of queues and members it has seen in
// the previous call.
func (c *ConsistentHashCache) Allocate(in Input) (Plan, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return allocateConsistentHash(in, c.virtualNodes, c.hash, &c.memo), nil
}
