package heap

import (
	"slices"
	"testing"

	"pgregory.net/rapid"
)

// item is a heap element: a key that may change, a unique id that breaks
// ties, and the index slot.
type item struct {
	key, id int
	idx     int
}

func itemLess(a, b *item) bool {
	if a.key != b.key {
		return a.key < b.key
	}
	return a.id < b.id
}

func itemSlot(x *item) *int { return &x.idx }

// TestPropIndexedMatchesModel drives a heap with random pushes, removes,
// re-keys (Fix and Set) and pops against a model that sorts all members:
// Min must be the model's first member, Len and Contains must agree, and
// the order and slots must stay valid.
func TestPropIndexedMatchesModel(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		items := make([]*item, rapid.IntRange(1, 40).Draw(rt, "n"))
		for i := range items {
			items[i] = &item{id: i, idx: -1}
		}
		h := New(itemLess, itemSlot)
		in := map[int]bool{}
		steps := rapid.IntRange(0, 200).Draw(rt, "steps")
		for range steps {
			x := items[rapid.IntRange(0, len(items)-1).Draw(rt, "x")]
			switch rapid.IntRange(0, 4).Draw(rt, "op") {
			case 0: // push or re-key through Set
				x.key = rapid.IntRange(-5, 5).Draw(rt, "key")
				h.Set(x, true)
				in[x.id] = true
			case 1: // take out through Set
				h.Set(x, false)
				delete(in, x.id)
			case 2: // re-key a member through Fix
				if in[x.id] {
					x.key = rapid.IntRange(-5, 5).Draw(rt, "key")
					h.Fix(x)
				}
			case 3: // Push and Remove directly
				if in[x.id] {
					h.Remove(x)
					delete(in, x.id)
				} else {
					h.Push(x)
					in[x.id] = true
				}
			case 4: // pop the minimum
				if h.Len() > 0 {
					m := h.Min()
					h.Remove(m)
					delete(in, m.id)
				}
			}
			var model []*item
			for _, y := range items {
				if in[y.id] {
					model = append(model, y)
				}
				if h.Contains(y) != in[y.id] {
					rt.Fatalf("Contains(%d) = %v, want %v", y.id, h.Contains(y), in[y.id])
				}
			}
			slices.SortFunc(model, func(a, b *item) int {
				if itemLess(a, b) {
					return -1
				}
				return 1
			})
			if h.Len() != len(model) {
				rt.Fatalf("Len() = %d, want %d", h.Len(), len(model))
			}
			if len(model) > 0 && h.Min() != model[0] {
				rt.Fatalf("Min() = item %d, want item %d", h.Min().id, model[0].id)
			}
			if !h.Valid() {
				rt.Fatalf("heap order or slots broken")
			}
		}
	})
}

// TestValidCatchesBrokenSlot checks that the self-check can fail: a slot
// that does not name the element's index, and a key changed without Fix.
func TestValidCatchesBrokenSlot(t *testing.T) {
	a, b := &item{key: 1, id: 0, idx: -1}, &item{key: 2, id: 1, idx: -1}
	h := New(itemLess, itemSlot)
	h.Push(a)
	h.Push(b)
	if !h.Valid() {
		t.Fatalf("Valid() = false on a well-formed heap")
	}
	b.key = 0 // re-keyed without Fix
	if h.Valid() {
		t.Fatalf("Valid() = true with a child less than its parent")
	}
	h.Fix(b)
	a.idx = 7
	if h.Valid() {
		t.Fatalf("Valid() = true with a wrong slot")
	}
}

// BenchmarkIndexed re-keys random members of a heap of 4096 elements with
// Fix, as the tree does when a node is touched, and pops and pushes the
// minimum, as eviction does.
func BenchmarkIndexed(b *testing.B) {
	const n = 4096
	items := make([]*item, n)
	h := New(itemLess, itemSlot)
	for i := range items {
		items[i] = &item{key: (i * 7919) % n, id: i, idx: -1}
		h.Push(items[i])
	}
	x := uint64(1)
	k := n
	for b.Loop() {
		x = x*6364136223846793005 + 1442695040888963407
		it := items[x>>52%n]
		k++
		it.key = k
		h.Fix(it)
		m := h.Min()
		h.Remove(m)
		k++
		m.key = k
		h.Push(m)
	}
}
