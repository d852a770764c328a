package planner

import "math/bits"

// entry is one node's slot in the planner's priority queue: the node's score
// as it was when the entry was last evaluated. contrib and unlock go stale as
// the deficits shrink; slru and id never change.
type entry struct {
	contrib int64 // contribution when last evaluated
	unlock  int64 // unlock when last evaluated
	slru    Priority
	id      int64
	node    int32  // internal index
	ver     uint32 // the entry is live iff ver equals its node's current version
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

// maxBuckets bounds the number of buckets of a scoreQueue. A variable so
// that tests can shrink it to exercise coarse and clamped buckets.
var maxBuckets = 1 << 14

// scoreQueue is the planner's priority queue (see the package
// documentation): a bucket queue on the stored (contribution, unlock) pair.
// Every bucket is a slice of entries; once a bucket has been the highest
// non-empty one it is a binary min-heap by the full score order (ordered),
// before that its entries are in arrival order. The minimum of the queue is
// the root of the highest non-empty bucket, possibly a dead entry.
//
// An entry is re-keyed by adding a new one: the stale minimum is popped
// first, and a sibling refresh (the only re-key of an entry that is not the
// minimum) bumps its node's version, which makes the old entry dead; dead
// entries are dropped when they reach the root of their bucket.
//
// Why this shape: a stale entry's contribution or unlock has dropped, so
// re-keying it moves it to a lower bucket, usually one that is not ordered
// yet, where it is appended in O(1); with one heap over all entries every
// re-key sifted through its full depth.
type scoreQueue struct {
	b       [][]entry // b[k] is bucket k's entries
	ordered []bool    // ordered[k]: b[k] is a heap
	touched []int32   // buckets that may be non-empty since the last reset
	bits    []uint64  // bit k is set iff bucket k is non-empty
	summary []uint64  // bit w is set iff bits[w] != 0
	ver     []uint32  // ver[node] is the version of the node's live entry
	shiftC  uint      // contribution row: c >> shiftC
	shiftU  uint      // unlock column: u >> shiftU
	rows    int64     // number of contribution rows
	cols    int64     // number of unlock columns per row
	last    int       // index of the last bucket
}

// reset empties the queue for a snapshot of n internal indices whose
// contributions (and so unlocks) are at most bound.
func (h *scoreQueue) reset(n int, bound int64) {
	h.ver = resize(h.ver, n)
	clear(h.ver)
	h.shiftC, h.shiftU = 0, 0
	if bound < int64(maxBuckets/2) {
		// Exact contributions, and as fine unlocks as fit.
		h.rows = bound + 1
		for bound>>h.shiftU >= int64(maxBuckets)/h.rows {
			h.shiftU++
		}
		h.cols = bound>>h.shiftU + 1
	} else {
		// Ranges of contributions only: a row may hold several
		// contributions, so the unlock must not split it.
		for bound>>h.shiftC >= int64(maxBuckets) {
			h.shiftC++
		}
		h.rows, h.cols = bound>>h.shiftC+1, 1
	}
	nb := int(h.rows * h.cols)
	for _, k := range h.touched {
		h.b[k] = h.b[k][:0]
		h.ordered[k] = false
	}
	h.touched = h.touched[:0]
	if len(h.b) < nb {
		h.b = append(h.b, make([][]entry, nb-len(h.b))...)
		h.ordered = append(h.ordered, make([]bool, nb-len(h.ordered))...)
	}
	h.last = nb - 1
	h.bits = resize(h.bits, (nb+63)/64)
	clear(h.bits)
	h.summary = resize(h.summary, (len(h.bits)+63)/64)
	clear(h.summary)
}

// index returns the bucket of an entry with contribution c and unlock u,
// both >= 0. It is non-decreasing in (c, u) ordered lexicographically: rows
// are non-decreasing in c; columns split a row only when the row holds one
// contribution (shiftC == 0) and are non-decreasing in u; and every pair
// beyond the last row goes to the last bucket.
func (h *scoreQueue) index(c, u int64) int {
	r := c >> h.shiftC
	if r >= h.rows {
		return h.last
	}
	return int(r*h.cols + min(u>>h.shiftU, h.cols-1))
}

// top returns the highest non-empty bucket, or -1 if the queue is empty.
// If that bucket is ordered, its root is the minimum, possibly dead.
func (h *scoreQueue) top() int {
	for v := len(h.summary) - 1; v >= 0; v-- {
		if y := h.summary[v]; y != 0 {
			w := v*64 + 63 - bits.LeadingZeros64(y)
			return w*64 + 63 - bits.LeadingZeros64(h.bits[w])
		}
	}
	return -1
}

// order keeps the first n entries of bucket k and makes it a heap.
func (h *scoreQueue) order(k, n int) {
	e := h.b[k][:n]
	h.b[k] = e
	if n == 0 {
		h.clearBit(k)
		return
	}
	for i := n/2 - 1; i >= 0; i-- {
		down(e, i)
	}
	h.ordered[k] = true
}

// clearBit marks bucket k empty.
func (h *scoreQueue) clearBit(k int) {
	h.bits[k/64] &^= 1 << (k % 64)
	if h.bits[k/64] == 0 {
		h.summary[k/4096] &^= 1 << (k / 64 % 64)
	}
}

// live reports whether x is its node's current entry.
func (h *scoreQueue) live(x *entry) bool { return x.ver == h.ver[x.node] }

// push adds x as its node's live entry, with x.ver set by the caller.
func (h *scoreQueue) push(x entry) {
	k := h.index(x.contrib, x.unlock)
	e := h.b[k]
	if len(e) == 0 {
		h.touched = append(h.touched, int32(k))
		h.bits[k/64] |= 1 << (k % 64)
		h.summary[k/4096] |= 1 << (k / 64 % 64)
	}
	e = append(e, x)
	h.b[k] = e
	if h.ordered[k] {
		up(e, len(e)-1)
	}
}

// pop removes the minimum of the ordered bucket k and returns it.
func (h *scoreQueue) pop(k int) entry {
	e := h.b[k]
	x := e[0]
	last := len(e) - 1
	e[0] = e[last]
	e = e[:last]
	h.b[k] = e
	if last == 0 {
		h.clearBit(k)
	} else {
		sink(e)
	}
	return x
}

// kill makes node i's live entry dead; the caller then pushes a new one.
func (h *scoreQueue) kill(i int32) { h.ver[i]++ }

// up sifts slot i of the heap e up.
func up(e []entry, i int) {
	x := e[i]
	for i > 0 {
		p := (i - 1) / 2
		if !less(&x, &e[p]) {
			break
		}
		e[i] = e[p]
		i = p
	}
	e[i] = x
}

// sink restores the order of the heap e after its root got a larger key, the
// way Floyd's heapsort does: it walks the hole down along the smaller
// children to a leaf (one comparison per level) and then sifts the entry up
// from there. The entry moved to the root by a pop usually belongs near the
// bottom, so this needs about half the comparisons of down.
func sink(e []entry) {
	x := e[0]
	i := 0
	for c := minChild(e, i); c >= 0; c = minChild(e, i) {
		e[i] = e[c]
		i = c
	}
	e[i] = x
	up(e, i)
}

// down sifts slot i of the heap e down.
func down(e []entry, i int) {
	x := e[i]
	for c := minChild(e, i); c >= 0 && less(&e[c], &x); c = minChild(e, i) {
		e[i] = e[c]
		i = c
	}
	e[i] = x
}

// minChild returns the slot of the smaller child of slot i of the heap e,
// or -1 when i is a leaf.
func minChild(e []entry, i int) int {
	c := 2*i + 1
	if c >= len(e) {
		return -1
	}
	if r := c + 1; r < len(e) && less(&e[r], &e[c]) {
		c = r
	}
	return c
}
