package policy

// leafHeap is a binary min-heap of node ids with index tracking (as
// container/heap with Fix/Remove, but typed and without interface calls,
// since it sits on the per-page hot path). Its order is the eviction order
// of SGLang's simulator: oldest lastAccess first, then the shallower node
// (see doc.go, "Eviction order and tie-breaking"). Each entry carries a
// copy of its node's key so that comparisons stay inside the heap's own
// array; a caller that changes a member's last access must call fix.
//
// nodeInfo.pos is a member's index in entries: in the cold record beside
// the last access and depth that a push reads anyway, rather than in the
// hot node, because the sift loops write it on every swap. A node that
// leaves the heap keeps its stale index (contains checks the entry), so
// that a removal does not touch the leaving node's record, which is
// usually out of cache.
type leafHeap struct {
	info    *[]nodeInfo // the simulator's cold arena (a pointer: it grows)
	entries []heapEntry
}

type heapEntry struct {
	lastAccess int64
	depth      int32
	id         nodeID
}

func (h *leafHeap) len() int { return len(h.entries) }

// index returns member id's index in entries. The first entry, the usual
// one (an L2 victim), is checked first, without a read of the node's
// record.
func (h *leafHeap) index(id nodeID) int {
	if h.entries[0].id == id {
		return 0
	}
	return int((*h.info)[id].pos)
}

// contains reports whether id is a member: its recorded index holds it.
func (h *leafHeap) contains(id nodeID) bool {
	i := (*h.info)[id].pos
	return i >= 0 && int(i) < len(h.entries) && h.entries[i].id == id
}

func (h *leafHeap) less(i, j int) bool {
	a, b := &h.entries[i], &h.entries[j]
	if a.lastAccess != b.lastAccess {
		return a.lastAccess < b.lastAccess
	}
	return a.depth < b.depth
}

func (h *leafHeap) swap(i, j int) {
	e := h.entries
	e[i], e[j] = e[j], e[i]
	(*h.info)[e[i].id].pos = int32(i)
	(*h.info)[e[j].id].pos = int32(j)
}

func (h *leafHeap) push(id nodeID) {
	(*h.info)[id].pos = int32(len(h.entries))
	h.entries = append(h.entries, heapEntry{lastAccess: (*h.info)[id].at, depth: (*h.info)[id].depth, id: id})
	h.up(len(h.entries) - 1)
}

// remove takes id out of the heap; id must be a member.
func (h *leafHeap) remove(id nodeID) { h.removeAt(h.index(id)) }

// removeAt takes entry i out of the heap.
func (h *leafHeap) removeAt(i int) {
	n := len(h.entries) - 1
	if i != n {
		h.entries[i] = h.entries[n]
		(*h.info)[h.entries[i].id].pos = int32(i)
	}
	h.entries = h.entries[:n]
	if i != n {
		if !h.down(i) {
			h.up(i)
		}
	}
}

// replace puts id, which must not be a member, in the place of old, a
// member, and restores the order: remove(old) and push(id) in one sift.
func (h *leafHeap) replace(old, id nodeID) { h.replaceAt(h.index(old), id) }

// replaceAt puts id, which must not be a member, in the place of entry i,
// and restores the order.
func (h *leafHeap) replaceAt(i int, id nodeID) {
	h.entries[i] = heapEntry{lastAccess: (*h.info)[id].at, depth: (*h.info)[id].depth, id: id}
	(*h.info)[id].pos = int32(i)
	if !h.down(i) {
		h.up(i)
	}
}

// fix refreshes id's key from its node and restores the order; id must be
// a member.
func (h *leafHeap) fix(id nodeID) {
	at, depth := (*h.info)[id].at, (*h.info)[id].depth
	i := int((*h.info)[id].pos)
	e := &h.entries[i]
	if e.lastAccess == at && e.depth == depth {
		return
	}
	e.lastAccess, e.depth = at, depth
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
	i, n := i0, len(h.entries)
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
