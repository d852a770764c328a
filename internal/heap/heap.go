package heap

// Indexed is a binary min-heap of elements that carry their own index. The
// zero value is not usable: build one with [New].
type Indexed[T any] struct {
	items []T
	less  func(a, b T) bool
	slot  func(x T) *int
}

// New returns an empty heap ordered by less, a strict total order, that
// keeps each element's index in *slot(x) (-1 when x is not in the heap).
// The caller sets the slot of a new element to -1 before its first
// [Indexed.Push] or [Indexed.Set].
func New[T any](less func(a, b T) bool, slot func(x T) *int) Indexed[T] {
	return Indexed[T]{less: less, slot: slot}
}

// Len returns the number of elements in the heap.
func (h *Indexed[T]) Len() int { return len(h.items) }

// Contains reports whether x is in the heap.
func (h *Indexed[T]) Contains(x T) bool { return *h.slot(x) >= 0 }

// Min returns the least element; the heap must not be empty.
func (h *Indexed[T]) Min() T { return h.items[0] }

// Push adds x, which must not be in the heap.
func (h *Indexed[T]) Push(x T) {
	*h.slot(x) = len(h.items)
	h.items = append(h.items, x)
	h.up(len(h.items) - 1)
}

// Remove takes x, which must be in the heap, out of it.
func (h *Indexed[T]) Remove(x T) {
	i := *h.slot(x)
	last := len(h.items) - 1
	if i != last {
		h.swap(i, last)
	}
	var zero T
	h.items[last] = zero
	h.items = h.items[:last]
	*h.slot(x) = -1
	if i != last {
		if !h.down(i) {
			h.up(i)
		}
	}
}

// Fix restores the order after the key of x, which must be in the heap,
// changed.
func (h *Indexed[T]) Fix(x T) {
	i := *h.slot(x)
	if !h.down(i) {
		h.up(i)
	}
}

// Set puts x in the heap if in is true (fixing its position if it is
// already there), and takes it out otherwise.
func (h *Indexed[T]) Set(x T, in bool) {
	switch {
	case in && h.Contains(x):
		h.Fix(x)
	case in:
		h.Push(x)
	case h.Contains(x):
		h.Remove(x)
	}
}

// Valid reports whether the heap order and the index slots hold: an O(n)
// self-check for tests and invariant checks.
func (h *Indexed[T]) Valid() bool {
	for i, x := range h.items {
		if *h.slot(x) != i {
			return false
		}
		if i > 0 && h.less(x, h.items[(i-1)/2]) {
			return false
		}
	}
	return true
}

func (h *Indexed[T]) swap(i, j int) {
	h.items[i], h.items[j] = h.items[j], h.items[i]
	*h.slot(h.items[i]) = i
	*h.slot(h.items[j]) = j
}

func (h *Indexed[T]) up(j int) {
	for j > 0 {
		i := (j - 1) / 2
		if !h.less(h.items[j], h.items[i]) {
			break
		}
		h.swap(i, j)
		j = i
	}
}

// down sifts element i0 down and reports whether it moved.
func (h *Indexed[T]) down(i0 int) bool {
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
