package planner

import "cmp"

// Priority is a node's SLRU eviction key, as in SGLang's `slru` strategy
// (evict_policy.py): Segment is 0 for the probationary segment (fewer than
// two hits) and 1 for the protected one, and LastAccess is the time of the
// node's last access in the caller's clock (kvsim uses engine.Time, int64 ns).
// Smaller keys are evicted first: every probationary node before any
// protected one, least recently used first inside a segment. The planner only
// compares keys, so any integers work; SGLang uses segments 0 and 1.
type Priority struct {
	Segment    int
	LastAccess int64
}

// Compare returns -1, 0 or +1 as p orders before, equal to, or after q:
// segment first, then last access.
func (p Priority) Compare(q Priority) int {
	if c := cmp.Compare(p.Segment, q.Segment); c != 0 {
		return c
	}
	return cmp.Compare(p.LastAccess, q.LastAccess)
}
