package traces

// blockLRU is a block-level LRU cache of a fixed number of entries: a hash
// map to slots of an intrusive doubly linked list kept in a slice, so every
// access is O(1) and evicted slots are reused. ComputeStats uses stack
// distances instead; blockLRU is their brute-force twin in tests.
type blockLRU struct {
	cap   int
	index map[uint64]int32
	slots []lruSlot
	head  int32 // most recently used, -1 when empty
	tail  int32 // least recently used
}

type lruSlot struct {
	key        uint64
	prev, next int32
}

func newBlockLRU(capacity int) *blockLRU {
	return &blockLRU{cap: capacity, index: make(map[uint64]int32, min(capacity, 1<<20)), head: -1, tail: -1}
}

// contains reports whether key is cached, without touching it.
func (c *blockLRU) contains(key uint64) bool {
	_, ok := c.index[key]
	return ok
}

// touch makes key the most recently used entry, inserting it (and evicting
// the least recently used entry when over capacity) if absent.
func (c *blockLRU) touch(key uint64) {
	if i, ok := c.index[key]; ok {
		c.unlink(i)
		c.pushFront(i)
		return
	}
	var i int32
	if len(c.slots) < c.cap {
		i = int32(len(c.slots))
		c.slots = append(c.slots, lruSlot{})
	} else {
		i = c.tail
		c.unlink(i)
		delete(c.index, c.slots[i].key)
	}
	c.slots[i].key = key
	c.index[key] = i
	c.pushFront(i)
}

func (c *blockLRU) unlink(i int32) {
	s := &c.slots[i]
	if s.prev >= 0 {
		c.slots[s.prev].next = s.next
	} else {
		c.head = s.next
	}
	if s.next >= 0 {
		c.slots[s.next].prev = s.prev
	} else {
		c.tail = s.prev
	}
}

func (c *blockLRU) pushFront(i int32) {
	s := &c.slots[i]
	s.prev, s.next = -1, c.head
	if c.head >= 0 {
		c.slots[c.head].prev = i
	}
	c.head = i
	if c.tail < 0 {
		c.tail = i
	}
}
