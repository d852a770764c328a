package policy

// leafHeap is a binary min-heap of node ids with index tracking (as
// container/heap with Fix/Remove, but typed and without interface calls, since
// it sits on the per-page hot path). Its order is the eviction order of
// SGLang's simulator: oldest lastAccess first, then the shallower node (see
// doc.go, "Tie-breaking"). The key is read from the node arena, so a caller
// that changes a member's lastAccess must call fix.
//
// Each node records its position in each of the three heaps in
// node.heapIdx[h.slot] (-1 when absent).
type leafHeap struct {
	slot  int     // which heapIdx entry of a node belongs to this heap
	nodes *[]node // the simulator's arena (a pointer: the arena grows)
	ids   []nodeID
}

func (h *leafHeap) len() int { return len(h.ids) }

func (h *leafHeap) contains(id nodeID) bool { return (*h.nodes)[id].heapIdx[h.slot] >= 0 }

// min returns the first node in eviction order; the heap must not be empty.
func (h *leafHeap) min() nodeID { return h.ids[0] }

func (h *leafHeap) less(i, j int) bool {
	a, b := &(*h.nodes)[h.ids[i]], &(*h.nodes)[h.ids[j]]
	if a.lastAccess != b.lastAccess {
		return a.lastAccess < b.lastAccess
	}
	return a.depth < b.depth
}

func (h *leafHeap) swap(i, j int) {
	h.ids[i], h.ids[j] = h.ids[j], h.ids[i]
	(*h.nodes)[h.ids[i]].heapIdx[h.slot] = int32(i)
	(*h.nodes)[h.ids[j]].heapIdx[h.slot] = int32(j)
}

func (h *leafHeap) push(id nodeID) {
	(*h.nodes)[id].heapIdx[h.slot] = int32(len(h.ids))
	h.ids = append(h.ids, id)
	h.up(len(h.ids) - 1)
}

// remove takes id out of the heap; id must be a member.
func (h *leafHeap) remove(id nodeID) {
	i := int((*h.nodes)[id].heapIdx[h.slot])
	n := len(h.ids) - 1
	if i != n {
		h.swap(i, n)
	}
	h.ids = h.ids[:n]
	(*h.nodes)[id].heapIdx[h.slot] = -1
	if i != n {
		if !h.down(i) {
			h.up(i)
		}
	}
}

// fix restores the order after id's key changed; id must be a member.
func (h *leafHeap) fix(id nodeID) {
	i := int((*h.nodes)[id].heapIdx[h.slot])
	if !h.down(i) {
		h.up(i)
	}
}

func (h *leafHeap) up(j int) {
	for j > 0 {
		i := (j - 1) / 2
		if !h.less(j, i) {
			break
		}
		h.swap(i, j)
		j = i
	}
}

// down sifts element i0 down and reports whether it moved.
func (h *leafHeap) down(i0 int) bool {
	i, n := i0, len(h.ids)
	for {
		l := 2*i + 1
		if l >= n {
			break
		}
		j := l
		if r := l + 1; r < n && h.less(r, l) {
			j = r
		}
		if !h.less(j, i) {
			break
		}
		h.swap(i, j)
		i = j
	}
	return i > i0
}
