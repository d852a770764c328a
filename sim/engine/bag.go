package engine

import (
	"cmp"
	"encoding/binary"
	"math"
	"slices"

	"github.com/kvsim/kvsim/internal/offheap"
)

// bag is a multiset of uint64 keys, each with a count, kept compactly for
// [Stats]: keys are added to a buffer of up to bagBuf entries (16 bytes
// each); a full buffer is sorted, its equal keys combined, and encoded as a
// block of varints (the gap to the previous key, then the count less one),
// and blocks are merged pairwise as a binary counter merges its digits, so
// that there are about log2(entries / bagBuf) of them, each larger than
// twice the next, up to bagMaxBlock bytes: past that, about one more block
// per bagMaxBlock/2 bytes held. A block of offheap.MinSize or more is
// outside the garbage-collected heap (internal/offheap), freed as soon as
// it is merged into another, so that a long run's bags cost what they hold
// in resident memory, not the twice that the collector's headroom makes of
// heap memory. A merged block's gaps are smaller than its parts', so the
// longer a run, the fewer bytes an entry: sorted, nanosecond latencies a
// few milliseconds apart take two to four bytes a key.
//
// The zero bag is empty and ready to use.
type bag struct {
	buf    []bagEntry
	blocks []bagBlock
	n      int64 // the sum of the counts
	// maxBlock is the largest block a merge makes, in bytes; 0 is
	// bagMaxBlock (tests set less).
	maxBlock int
}

// bagBuf is the most entries a bag buffers before encoding them (64 KiB).
const bagBuf = 4096

// bagMaxBlock is the largest block a merge makes (1 MiB): two blocks whose
// sizes add up to more stay apart, and the summary merges them as it reads
// them. A merge holds both parts and its output until it ends, so this
// caps that transient at twice bagMaxBlock, where merging without a cap
// would hold twice the largest bag (a day's inter-token latency runs take
// about 1.8 MB) at once; it costs a few blocks more per long bag, whose
// gaps are a little larger than one block's would be.
const bagMaxBlock = 1 << 20

type bagEntry struct {
	k uint64
	n int64
}

// bagBlock is entries in increasing key order. An entry's gap d is its key
// less the previous entry's (the first entry's: less 0). An entry of count
// n is the uvarint d<<1 when n is 1; d<<1 | 1 then the count when it is
// more, a byte n-2 for n up to 256, else the byte 255 and the uvarint
// n-257; or, when d is 0 or over 2^63 (where that would not fit), the
// uvarints 0, d and n-1. A value's count costs nothing when it is alone,
// and one byte up to 256: a run of inter-token latencies counts the
// requests of a decode step's batch, 129 to 256 for most of the
// conversation trace's (two bytes each as a uvarint).
type bagBlock struct {
	data    []byte
	entries int
	own     *offheap.Bytes // data's memory when it is outside the heap: keep it reachable while data is read
}

// add adds n (> 0) copies of the key k.
func (b *bag) add(k uint64, n int64) {
	if len(b.buf) == bagBuf {
		b.flush()
	}
	b.buf = append(b.buf, bagEntry{k, n})
	b.n += n
}

// flush encodes the buffered entries as a block and merges the blocks
// while the one before the last is at most twice the last.
func (b *bag) flush() {
	if len(b.buf) == 0 {
		return
	}
	slices.SortFunc(b.buf, func(x, y bagEntry) int { return cmp.Compare(x.k, y.k) })
	w := blockWriter{data: make([]byte, 0, 4*len(b.buf))}
	for _, e := range b.buf {
		w.put(e.k, e.n)
	}
	b.buf = b.buf[:0]
	b.blocks = append(b.blocks, w.block())
	for len(b.blocks) >= 2 {
		i := len(b.blocks) - 2
		if b.blocks[i].entries > 2*b.blocks[i+1].entries ||
			len(b.blocks[i].data)+len(b.blocks[i+1].data) > cmp.Or(b.maxBlock, bagMaxBlock) {
			break
		}
		b.blocks[i] = mergeBlocks(b.blocks[i], b.blocks[i+1])
		b.blocks[i+1] = bagBlock{}
		b.blocks = b.blocks[:i+1]
	}
}

// mergeBlocks returns one block holding the entries of a and b.
func mergeBlocks(a, b bagBlock) bagBlock {
	// The merged gaps are no larger than each part's own, and combined
	// entries are shorter than the two: the parts' length is enough.
	var own *offheap.Bytes
	w := blockWriter{}
	if n := len(a.data) + len(b.data); n >= offheap.MinSize {
		own = offheap.New(n)
		w.data = own.B[:0]
	} else {
		w.data = make([]byte, 0, n)
	}
	ca, cb := bagCursor{data: a.data}, bagCursor{data: b.data}
	okA, okB := ca.next(), cb.next()
	for okA || okB {
		if okA && (!okB || ca.k <= cb.k) {
			w.put(ca.k, ca.n)
			okA = ca.next()
		} else {
			w.put(cb.k, cb.n)
			okB = cb.next()
		}
	}
	// The parts are read no more (Stats is never copied: see its self).
	for _, o := range []*offheap.Bytes{a.own, b.own} {
		if o != nil {
			o.Free()
		}
	}
	blk := w.block()
	if own != nil {
		// The pages past its end were never written: not resident.
		blk.own = own
	} else if cap(blk.data)-len(blk.data) > len(blk.data)/8 {
		blk.data = slices.Clone(blk.data)
	}
	return blk
}

// blockWriter encodes entries given in increasing key order, combining
// equal keys.
type blockWriter struct {
	data    []byte
	entries int
	prev    uint64 // the last key written
	k       uint64 // the pending entry, if n > 0
	n       int64
}

func (w *blockWriter) put(k uint64, n int64) {
	if w.n > 0 && k == w.k {
		w.n += n
		return
	}
	w.emit()
	w.k, w.n = k, n
}

func (w *blockWriter) emit() {
	if w.n == 0 {
		return
	}
	switch d := w.k - w.prev; {
	case d == 0 || d >= 1<<63:
		w.data = binary.AppendUvarint(w.data, 0)
		w.data = binary.AppendUvarint(w.data, d)
		w.data = binary.AppendUvarint(w.data, uint64(w.n-1))
	case w.n == 1:
		w.data = binary.AppendUvarint(w.data, d<<1)
	default:
		w.data = binary.AppendUvarint(w.data, d<<1|1)
		if c := uint64(w.n - 2); c < countWide {
			w.data = append(w.data, byte(c))
		} else {
			w.data = append(w.data, countWide)
			w.data = binary.AppendUvarint(w.data, c-countWide)
		}
	}
	w.prev = w.k
	w.entries++
	w.n = 0
}

func (w *blockWriter) block() bagBlock {
	w.emit()
	return bagBlock{data: w.data, entries: w.entries}
}

// bagCursor reads a block's entries in order: k and n are the current one.
type bagCursor struct {
	own  *offheap.Bytes // keeps data mapped
	data []byte
	off  int
	k    uint64
	n    int64
}

// next moves to the next entry and reports whether there was one.
func (c *bagCursor) next() bool {
	if c.off >= len(c.data) {
		return false
	}
	t := c.uvarint()
	switch {
	case t == 0:
		c.k += c.uvarint()
		c.n = int64(c.uvarint()) + 1
	case t&1 == 0:
		c.k += t >> 1
		c.n = 1
	default:
		c.k += t >> 1
		if c.off >= len(c.data) {
			panic("engine: corrupt bag block")
		}
		b := c.data[c.off]
		c.off++
		if b < countWide {
			c.n = int64(b) + 2
		} else {
			c.n = int64(c.uvarint()) + countWide + 2
		}
	}
	return true
}

// countWide is the count byte (n-2) that says a uvarint of the rest
// follows: counts of 2 to 256 take the byte alone.
const countWide = 255

func (c *bagCursor) uvarint() uint64 {
	x, m := binary.Uvarint(c.data[c.off:])
	if m <= 0 {
		panic("engine: corrupt bag block")
	}
	c.off += m
	return x
}

// nsKey is the bag key of a time in ns, in the times' order.
func nsKey(t Time) uint64 { return uint64(t) ^ 1<<63 }

// nsMs is the value in ms of a key made by nsKey: Time.Milliseconds.
func nsMs(k uint64) float64 { return Time(k ^ 1<<63).Milliseconds() }

// floatKey is the bag key of x, in the order of sort.Float64s (NaN first,
// -0 before +0, which it does not distinguish); every NaN is key 0.
func floatKey(x float64) uint64 {
	if math.IsNaN(x) {
		return 0
	}
	b := math.Float64bits(x)
	if b>>63 != 0 {
		return ^b // never 0: that is a NaN's bits
	}
	return b | 1<<63
}

// keyFloat is the value of a key made by floatKey (a NaN is math.NaN()).
func keyFloat(k uint64) float64 {
	switch {
	case k == 0:
		return math.NaN()
	case k>>63 != 0:
		return math.Float64frombits(k &^ (1 << 63))
	default:
		return math.Float64frombits(^k)
	}
}

// msKey is the nsKey of the ns count whose Milliseconds is exactly ms (the
// same bits), if there is one: the latencies simulators and replays compute
// are such counts, and their sorted gaps are far smaller as integers.
func msKey(ms float64) (uint64, bool) {
	ns := math.Round(ms * 1e6)
	if !(math.Abs(ns) < 1<<62) {
		return 0, false
	}
	t := Time(ns)
	if math.Float64bits(t.Milliseconds()) != math.Float64bits(ms) {
		return 0, false
	}
	return nsKey(t), true
}

// bagPart is a bag and how its keys map to values, in the keys' order.
type bagPart struct {
	b     *bag
	value func(uint64) float64
}

// valueStream yields the values of several flushed bags in the order of
// sort.Float64s, as (value, count) entries, merging their blocks.
type valueStream struct {
	cur []streamCursor
}

type streamCursor struct {
	c     bagCursor
	value func(uint64) float64
	v     float64
	ok    bool
}

// newStream returns a stream over the parts' bags, which must have been
// flushed and must not change while it is used.
func newStream(parts ...bagPart) *valueStream {
	s := &valueStream{}
	for _, p := range parts {
		if len(p.b.buf) != 0 {
			panic("engine: stream over an unflushed bag")
		}
		for _, blk := range p.b.blocks {
			s.cur = append(s.cur, streamCursor{c: bagCursor{own: blk.own, data: blk.data}, value: p.value})
		}
	}
	s.reset()
	return s
}

// reset moves the stream back to its first value.
func (s *valueStream) reset() {
	for i := range s.cur {
		c := &s.cur[i]
		c.c.off, c.c.k = 0, 0
		c.advance()
	}
}

func (c *streamCursor) advance() {
	c.ok = c.c.next()
	if c.ok {
		c.v = c.value(c.c.k)
	}
}

// next returns the next value and its count, or ok false at the end.
func (s *valueStream) next() (v float64, n int64, ok bool) {
	best := -1
	for i := range s.cur {
		c := &s.cur[i]
		if c.ok && (best < 0 || floatLess(c.v, s.cur[best].v)) {
			best = i
		}
	}
	if best < 0 {
		return 0, 0, false
	}
	c := &s.cur[best]
	v, n = c.v, c.c.n
	c.advance()
	return v, n, true
}

// floatLess is sort.Float64s' order.
func floatLess(a, b float64) bool { return a < b || (math.IsNaN(a) && !math.IsNaN(b)) }
