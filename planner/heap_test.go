package planner

import (
	"math/rand/v2"
	"strconv"
	"testing"

	"github.com/kvsim/kvsim/internal/heap"
)

// queueOps is a stream of the planner's queue operations: n entries with
// scores in [0, bound], popped in score order, each popped entry re-keyed
// to a lower contribution and pushed again with probability one half (as a
// stale entry is) until its contribution reaches 0.
type queueOps struct {
	entries []entry
	bound   int64
	seed    uint64
}

func newQueueOps(n int, bound int64) queueOps {
	r := rand.New(rand.NewPCG(1, 2))
	q := queueOps{entries: make([]entry, n), bound: bound, seed: 3}
	for i := range q.entries {
		q.entries[i] = entry{contrib: r.Int64N(bound + 1), unlock: r.Int64N(bound + 1), id: int64(i + 1), node: int32(i)}
	}
	return q
}

// rekey returns x with a lower contribution, or false to drop it.
func rekey(r *rand.Rand, x entry) (entry, bool) {
	if x.contrib == 0 || r.IntN(2) == 0 {
		return x, false
	}
	x.contrib = r.Int64N(x.contrib)
	x.unlock = min(x.unlock, x.contrib)
	return x, true
}

// drainBuckets runs the stream through the planner's scoreQueue and
// returns the number of pops.
func (q queueOps) drainBuckets(h *scoreQueue) int {
	r := rand.New(rand.NewPCG(q.seed, 0))
	h.reset(len(q.entries), q.bound)
	for _, x := range q.entries {
		h.push(x)
	}
	pops := 0
	for k := h.top(); k >= 0; k = h.top() {
		if !h.ordered[k] {
			h.order(k, len(h.b[k]))
			continue
		}
		x := h.pop(k)
		pops++
		if y, ok := rekey(r, x); ok {
			h.push(y)
		}
	}
	return pops
}

// indexedEntry is an entry in an internal/heap.Indexed heap.
type indexedEntry struct {
	entry
	idx int
}

// drainIndexed runs the stream through one internal/heap.Indexed heap over
// all entries, the shape the bucket queue replaced, and returns the number
// of pops.
func (q queueOps) drainIndexed(items []indexedEntry) int {
	r := rand.New(rand.NewPCG(q.seed, 0))
	h := heap.New(func(a, b *indexedEntry) bool { return less(&a.entry, &b.entry) }, func(x *indexedEntry) *int { return &x.idx })
	for i := range items {
		items[i] = indexedEntry{entry: q.entries[i], idx: -1}
		h.Push(&items[i])
	}
	pops := 0
	for h.Len() > 0 {
		x := h.Min()
		pops++
		if y, ok := rekey(r, x.entry); ok {
			x.entry = y
			h.Fix(x)
		} else {
			h.Remove(x)
		}
	}
	return pops
}

// TestQueueShapesAgree checks that the two drains of BenchmarkQueue do the
// same work: the same pops in the same order of scores.
func TestQueueShapesAgree(t *testing.T) {
	q := newQueueOps(2000, 7877)
	var h scoreQueue
	if a, b := q.drainBuckets(&h), q.drainIndexed(make([]indexedEntry, 2000)); a != b {
		t.Fatalf("bucket queue popped %d entries, indexed heap %d", a, b)
	}
}

// BenchmarkQueue justifies the planner's specialised queue: it drains the
// same stream of pushes, pops and stale re-keys through the bucket queue
// of value entries (scoreQueue) and through one generic index-tracked heap
// (internal/heap.Indexed) over all entries, at the seed case's scale and
// larger.
func BenchmarkQueue(b *testing.B) {
	for _, n := range []int{2000, 200000} {
		q := newQueueOps(n, int64(n)*7877/2000)
		b.Run("buckets/n="+strconv.Itoa(n), func(b *testing.B) {
			var h scoreQueue
			pops := 0
			for b.Loop() {
				pops = q.drainBuckets(&h)
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(pops), "ns/pop")
		})
		b.Run("indexed/n="+strconv.Itoa(n), func(b *testing.B) {
			items := make([]indexedEntry, n)
			pops := 0
			for b.Loop() {
				pops = q.drainIndexed(items)
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(pops), "ns/pop")
		})
	}
}
