package tree

// nodeHeap is a binary min-heap of nodes with index tracking (as
// container/heap with Fix), typed so that no interface conversions sit on the
// hot path. less must be a strict total order; slot returns the node's index
// field for this heap.
type nodeHeap struct {
	items []*Node
	less  func(a, b *Node) bool
	slot  func(n *Node) *int
}

func (h *nodeHeap) len() int { return len(h.items) }

func (h *nodeHeap) contains(n *Node) bool { return *h.slot(n) >= 0 }

func (h *nodeHeap) min() *Node { return h.items[0] }

func (h *nodeHeap) push(n *Node) {
	*h.slot(n) = len(h.items)
	h.items = append(h.items, n)
	h.up(len(h.items) - 1)
}

func (h *nodeHeap) remove(n *Node) {
	i := *h.slot(n)
	last := len(h.items) - 1
	if i != last {
		h.swap(i, last)
	}
	h.items[last] = nil
	h.items = h.items[:last]
	*h.slot(n) = -1
	if i != last {
		if !h.down(i) {
			h.up(i)
		}
	}
}

func (h *nodeHeap) fix(n *Node) {
	i := *h.slot(n)
	if !h.down(i) {
		h.up(i)
	}
}

// set puts n in the heap if in is true (fixing its position if it is
// already there), and takes it out otherwise.
func (h *nodeHeap) set(n *Node, in bool) {
	switch {
	case in && h.contains(n):
		h.fix(n)
	case in:
		h.push(n)
	case h.contains(n):
		h.remove(n)
	}
}

func (h *nodeHeap) swap(i, j int) {
	h.items[i], h.items[j] = h.items[j], h.items[i]
	*h.slot(h.items[i]) = i
	*h.slot(h.items[j]) = j
}

func (h *nodeHeap) up(j int) {
	for j > 0 {
		i := (j - 1) / 2
		if !h.less(h.items[j], h.items[i]) {
			break
		}
		h.swap(i, j)
		j = i
	}
}

func (h *nodeHeap) down(i0 int) bool {
	i, n := i0, len(h.items)
	for {
		j := 2*i + 1
		if j >= n {
			break
		}
		if r := j + 1; r < n && h.less(h.items[r], h.items[j]) {
			j = r
		}
		if !h.less(h.items[j], h.items[i]) {
			break
		}
		h.swap(i, j)
		i = j
	}
	return i > i0
}

// valid reports whether the heap property and the index fields hold.
func (h *nodeHeap) valid() bool {
	for i, n := range h.items {
		if *h.slot(n) != i {
			return false
		}
		if i > 0 && h.less(n, h.items[(i-1)/2]) {
			return false
		}
	}
	return true
}
