package fleet

import (
	"slices"

	"github.com/kvsim/kvsim/internal/heap"
	"github.com/kvsim/kvsim/sim/engine"
)

// dueTimes is each replica's next event time (engine.Never when it has
// none), with a heap of the replicas that have one, so that the fleet's
// next instant and the replicas due at an instant are found in time
// logarithmic in the fleet's size, not by reading every replica at every
// step (a request on a fleet of thousands of replicas behind kvsim serve
// paid for every replica at each of its steps).
type dueTimes struct {
	at   []engine.Time
	slot []int // each replica's index in h, -1 when it has no event
	h    heap.Indexed[int]
}

// newDueTimes returns the due times of n replicas, every one due at 0 (a
// fleet's replicas are asked for their next event at its first instant).
func newDueTimes(n int) *dueTimes {
	d := &dueTimes{at: make([]engine.Time, n), slot: make([]int, n)}
	d.h = heap.New(func(a, b int) bool {
		return d.at[a] < d.at[b] || (d.at[a] == d.at[b] && a < b)
	}, func(i int) *int { return &d.slot[i] })
	for i := range n {
		d.slot[i] = -1
		d.h.Push(i)
	}
	return d
}

// set records replica i's next event time.
func (d *dueTimes) set(i int, at engine.Time) {
	d.at[i] = at
	d.h.Set(i, at != engine.Never)
}

// next returns the earliest due time; false when no replica has an event.
func (d *dueTimes) next() (engine.Time, bool) {
	if d.h.Len() == 0 {
		return engine.Never, false
	}
	return d.at[d.h.Min()], true
}

// takeDue appends to dst the replicas due at or before now, in index
// order, and takes them out of the heap: the caller runs each and sets
// its next time.
func (d *dueTimes) takeDue(now engine.Time, dst []int) []int {
	start := len(dst)
	for d.h.Len() > 0 && d.at[d.h.Min()] <= now {
		i := d.h.Min()
		d.h.Remove(i)
		dst = append(dst, i)
	}
	slices.Sort(dst[start:])
	return dst
}
