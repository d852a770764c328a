// Package offheap allocates long-lived, pointer-free byte slices outside
// the garbage-collected heap, so that the collector neither scans them nor
// counts them in its heap goal: a slice of n bytes costs n bytes of
// resident memory (only the pages written), where on the heap it costs up
// to twice that under the default GOGC, since the collector lets the heap
// grow to twice what it found live. kvsim's run summaries (engine.Stats)
// and closed-loop dependency tracker (sim.DepTracker) keep their
// per-request numbers here, and the forgetting pager (tree.Pager.Forget)
// its list of remembered blocks, in an [Array], so that a day-long
// trace's peak resident memory grows by what they hold, not twice it.
//
// A [Bytes] owns its memory: it is returned to the system by
// [Bytes.Free], or by a cleanup (runtime.AddCleanup) once the Bytes is
// unreachable. Whoever reads or
// writes [Bytes.B] must keep the *Bytes itself reachable meanwhile (hold
// it, or runtime.KeepAlive it after the last use): a slice of the memory
// alone does not keep it mapped. Where the system has no anonymous
// mappings, or the mapping fails, the memory is an ordinary heap slice.
package offheap

// Bytes is n bytes of zeroed memory, B, outside the heap where possible.
type Bytes struct {
	// B is the memory: len(B) is the size asked for. Appending past
	// cap(B) moves the slice to the heap, which stays correct.
	B []byte

	unmap func() // set when B is mapped: unmaps it and stops the cleanup
}

// Free returns the memory now (if it was mapped) and sets B to nil: no
// slice of it may be used afterwards. Free of a freed Bytes does nothing.
func (o *Bytes) Free() {
	if o.unmap != nil {
		o.unmap()
		o.unmap = nil
	}
	o.B = nil
}

// New returns n (>= 0) zeroed bytes, mapped outside the heap when n is at
// least MinSize and the system allows, else on the heap.
func New(n int) *Bytes {
	if n >= MinSize {
		if b, ok := mapBytes(n); ok {
			o := &Bytes{B: b}
			o.unmap = unmapWhenUnreachable(o, b)
			return o
		}
	}
	return &Bytes{B: make([]byte, n)}
}

// MinSize is the smallest allocation New maps outside the heap (64 KiB):
// smaller ones are not worth a system call and a page's rounding.
const MinSize = 64 << 10
