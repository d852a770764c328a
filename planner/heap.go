package planner

// entry is one node's slot in the planner's min-heap: the node's score as it
// was when the entry was last evaluated. contrib and unlock go stale as the
// deficits shrink; slru and id never change.
type entry struct {
	contrib int64 // contribution when last evaluated
	unlock  int64 // unlock when last evaluated
	slru    Priority
	id      int64
	node    int32 // internal index
}

// less is the score order (-contrib, -unlock, slru, id): a strict total order
// on entries of distinct nodes, because IDs are unique.
func less(a, b *entry) bool {
	if a.contrib != b.contrib {
		return a.contrib > b.contrib
	}
	if a.unlock != b.unlock {
		return a.unlock > b.unlock
	}
	if a.slru.Segment != b.slru.Segment {
		return a.slru.Segment < b.slru.Segment
	}
	if a.slru.LastAccess != b.slru.LastAccess {
		return a.slru.LastAccess < b.slru.LastAccess
	}
	return a.id < b.id
}

// scoreHeap is a binary min-heap of entries with at most one entry per node
// and an index (pos) from node to slot, so that an entry can be re-keyed in
// place. It is the typed equivalent of container/heap with index tracking
// and Fix, without the interface calls.
type scoreHeap struct {
	e   []entry
	pos []int32 // pos[node] is the node's slot in e, or -1
}

// reset empties the heap for a snapshot of n internal indices.
func (h *scoreHeap) reset(n int) {
	h.e = h.e[:0]
	h.pos = resize(h.pos, n)
	for i := range h.pos {
		h.pos[i] = -1
	}
}

// add appends an entry without restoring the heap order; call init after the
// last add.
func (h *scoreHeap) add(x entry) {
	h.pos[x.node] = int32(len(h.e))
	h.e = append(h.e, x)
}

// init establishes the heap order in O(len) time.
func (h *scoreHeap) init() {
	for i := len(h.e)/2 - 1; i >= 0; i-- {
		h.down(i)
	}
}

func (h *scoreHeap) push(x entry) {
	h.add(x)
	h.up(len(h.e) - 1)
}

// pop removes the minimum entry.
func (h *scoreHeap) pop() entry {
	top := h.e[0]
	last := len(h.e) - 1
	h.move(0, last)
	h.e = h.e[:last]
	h.pos[top.node] = -1
	if last > 0 {
		h.sink(0)
	}
	return top
}

// fix restores the order after the entry in slot i changed its key.
func (h *scoreHeap) fix(i int) {
	if !h.down(i) {
		h.up(i)
	}
}

// move copies slot from into slot to and updates pos.
func (h *scoreHeap) move(to, from int) {
	h.e[to] = h.e[from]
	h.pos[h.e[to].node] = int32(to)
}

func (h *scoreHeap) up(i int) {
	x := h.e[i]
	for i > 0 {
		p := (i - 1) / 2
		if !less(&x, &h.e[p]) {
			break
		}
		h.move(i, p)
		i = p
	}
	h.e[i] = x
	h.pos[x.node] = int32(i)
}

// sink restores the order after the entry in slot i got a larger key, the
// way Floyd's heapsort does: it walks the hole down along the smaller
// children to a leaf (one comparison per level) and then sifts the entry up
// from there. Entries that sink far, as re-keyed stale entries and the
// element moved up by pop usually do, need about half the comparisons of
// down.
func (h *scoreHeap) sink(i int) {
	x := h.e[i]
	n := len(h.e)
	for {
		c := 2*i + 1
		if c >= n {
			break
		}
		if r := c + 1; r < n && less(&h.e[r], &h.e[c]) {
			c = r
		}
		h.move(i, c)
		i = c
	}
	h.e[i] = x
	h.up(i)
}

// down sifts slot i down and reports whether it moved.
func (h *scoreHeap) down(i int) bool {
	x := h.e[i]
	n := len(h.e)
	start := i
	for {
		c := 2*i + 1
		if c >= n {
			break
		}
		if r := c + 1; r < n && less(&h.e[r], &h.e[c]) {
			c = r
		}
		if !less(&h.e[c], &x) {
			break
		}
		h.move(i, c)
		i = c
	}
	h.e[i] = x
	h.pos[x.node] = int32(i)
	return i > start
}
