package traces

import "slices"

// stackDist computes LRU stack distances (Mattson et al., "Evaluation
// techniques for storage hierarchies", 1970) in one pass: the distance of
// a block is the number of distinct other blocks used since its last use.
// An LRU cache of capacity c holds a block exactly when its distance is
// < c, so one pass answers every capacity at once, which is what lets
// ComputeStats read its input only once.
//
// A Fenwick tree over use times marks the time of each block's last use;
// the distance is the number of marks after it. Times are renumbered when
// the tree is full, so memory is O(distinct blocks).
type stackDist struct {
	last map[uint64]int32 // block -> time of its last use (1-based)
	tree []int32          // Fenwick tree over times 1..len(tree)-1
	now  int32            // time of the latest use
}

func newStackDist() *stackDist {
	return &stackDist{last: map[uint64]int32{}, tree: make([]int32, 1024)}
}

// dist returns the stack distance of b, or -1 if b was never used.
func (s *stackDist) dist(b uint64) int {
	t, ok := s.last[b]
	if !ok {
		return -1
	}
	return int(s.sum(s.now) - s.sum(t))
}

// use makes b the most recently used block.
func (s *stackDist) use(b uint64) {
	if int(s.now)+1 >= len(s.tree) {
		s.renumber() // before b's mark moves: renumber keeps one mark per block
	}
	if t, ok := s.last[b]; ok {
		s.add(t, -1)
	}
	s.now++
	s.add(s.now, 1)
	s.last[b] = s.now
}

// renumber gives the blocks the times 1..n in the order of their last use
// and sizes the tree to 2n (at least 1024), so that renumbering is
// amortised O(log n) per use.
func (s *stackDist) renumber() {
	type use struct {
		t int32
		b uint64
	}
	uses := make([]use, 0, len(s.last))
	for b, t := range s.last { // order does not matter: sorted by t below
		uses = append(uses, use{t, b})
	}
	slices.SortFunc(uses, func(x, y use) int { return int(x.t) - int(y.t) })
	s.tree = make([]int32, max(1024, 2*len(uses)+2))
	for i, u := range uses {
		s.last[u.b] = int32(i + 1)
		s.add(int32(i+1), 1)
	}
	s.now = int32(len(uses))
}

func (s *stackDist) add(i, v int32) {
	for ; int(i) < len(s.tree); i += i & -i {
		s.tree[i] += v
	}
}

func (s *stackDist) sum(i int32) int32 {
	var n int32
	for ; i > 0; i -= i & -i {
		n += s.tree[i]
	}
	return n
}

// unique returns the number of distinct blocks used.
func (s *stackDist) unique() int { return len(s.last) }
