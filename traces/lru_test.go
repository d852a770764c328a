package traces

import (
	"slices"
	"testing"

	"pgregory.net/rapid"
)

// len is the number of blocks held.
func (c *blockLRU) len() int { return len(c.index) }

// naiveLRU is the model: a slice ordered from least to most recently used.
type naiveLRU struct {
	cap  int
	keys []uint64
}

func (n *naiveLRU) touch(k uint64) {
	if i := slices.Index(n.keys, k); i >= 0 {
		n.keys = slices.Delete(n.keys, i, i+1)
	}
	n.keys = append(n.keys, k)
	if len(n.keys) > n.cap {
		n.keys = n.keys[1:]
	}
}

func TestPropLRUMatchesModel(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		capacity := rapid.IntRange(1, 8).Draw(t, "cap")
		c := newBlockLRU(capacity)
		m := &naiveLRU{cap: capacity}
		keys := rapid.SliceOf(rapid.Uint64Range(0, 12)).Draw(t, "keys")
		for _, k := range keys {
			if got, want := c.contains(k), slices.Contains(m.keys, k); got != want {
				t.Fatalf("contains(%d) = %v, model says %v (model %v)", k, got, want, m.keys)
			}
			c.touch(k)
			m.touch(k)
			if c.len() != len(m.keys) {
				t.Fatalf("len = %d, model %d", c.len(), len(m.keys))
			}
		}
		// Walk the list from the LRU end: it must equal the model's order.
		var order []uint64
		for i := c.tail; i >= 0; i = c.slots[i].prev {
			order = append(order, c.slots[i].key)
		}
		if !slices.Equal(order, m.keys) {
			t.Fatalf("order %v, model %v", order, m.keys)
		}
	})
}
