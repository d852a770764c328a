package engine

import (
	"cmp"
	"encoding/binary"
	"math"
	"math/bits"
	"slices"

	"github.com/kvsim/kvsim/internal/offheap"
)

// bag is a multiset of uint64 keys, each with a count, kept compactly for
// [Stats]: keys are added to a buffer of up to bagBuf entries (16 bytes
// each); a full buffer is sorted, its equal keys combined, and encoded as a
// block of varints, or of Rice codes in a rice bag (the gap to the
// previous key, then the count: see bagBlock), and blocks are merged pairwise as a binary counter merges its digits, so
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
	// rice encodes the blocks with Rice codes (see bagBlock), for keys
	// whose gaps are near-geometric (TTFT, E2E, TPOT); else uvarints.
	rice bool
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
//
// A block of a rice bag codes an entry in bits instead (from each byte's
// lowest bit up): the gap d as a Rice code of parameter kg (riceCode), then
// a bit 0 for a count of 1, or a bit 1 and n-2 as a Rice code of parameter
// riceCountK. kg is the block's, from its mean gap (riceParam): a Rice
// code takes about log2(mean gap) + 2 bits a near-geometric gap, where a
// uvarint takes whole bytes of 7 bits: TTFT and E2E gaps of 2^20 to 2^24
// ns take 3 bytes, not 4.
type bagBlock struct {
	data    []byte
	entries int
	own     *offheap.Bytes // data's memory when it is outside the heap: keep it reachable while data is read
	rice    bool
	kg      uint8  // the gaps' Rice parameter
	lo, hi  uint64 // the first and last keys
}

// cursor returns a cursor at the block's first entry.
func (b bagBlock) cursor() bagCursor {
	c := bagCursor{own: b.own, data: b.data, entries: b.entries, rice: b.rice, kg: uint(b.kg)}
	c.rewind()
	return c
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
	w := blockWriter{data: make([]byte, 0, 4*len(b.buf)), rice: b.rice}
	if b.rice {
		w.kg = riceParam(b.buf[0].k, b.buf[len(b.buf)-1].k, len(b.buf))
	}
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
	w := blockWriter{rice: a.rice}
	n := len(a.data) + len(b.data)
	if a.rice {
		// A smaller parameter than a part's may lengthen some codes.
		w.kg = riceParam(min(a.lo, b.lo), max(a.hi, b.hi), a.entries+b.entries)
		n += n/8 + 16
	}
	if n >= offheap.MinSize {
		own = offheap.New(n)
		w.data = own.B[:0]
	} else {
		w.data = make([]byte, 0, n)
	}
	ca, cb := a.cursor(), b.cursor()
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
	first   uint64 // the first key written
	k       uint64 // the pending entry, if n > 0
	n       int64
	rice    bool // write Rice codes of parameter kg
	kg      uint
	acc     uint64 // bits not yet in data (rice), nb of them (< 8 between codes)
	nb      uint
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
	if w.entries == 0 {
		w.first = w.k
	}
	if w.rice {
		w.riceCode(w.k-w.prev, w.kg)
		if w.n == 1 {
			w.bits(0, 1)
		} else {
			w.bits(1, 1)
			w.riceCode(uint64(w.n-2), riceCountK)
		}
		w.prev = w.k
		w.entries++
		w.n = 0
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
	if w.nb > 0 {
		w.data = append(w.data, byte(w.acc))
		w.acc, w.nb = 0, 0
	}
	return bagBlock{data: w.data, entries: w.entries, rice: w.rice, kg: uint8(w.kg), lo: w.first, hi: w.prev}
}

// bits writes the n (<= 32) low bits of v.
func (w *blockWriter) bits(v uint64, n uint) {
	w.acc |= (v & (1<<n - 1)) << w.nb
	w.nb += n
	for w.nb >= 8 {
		w.data = append(w.data, byte(w.acc))
		w.acc >>= 8
		w.nb -= 8
	}
}

// riceCode writes v as q = v>>k zero bits, a one bit and v's k low bits;
// or, when q is riceEscape or more, riceEscape zero bits, a one bit and
// all 64 bits of v.
func (w *blockWriter) riceCode(v uint64, k uint) {
	q := v >> k
	if q >= riceEscape {
		q, k = riceEscape, 64
	}
	for ; q > 32; q -= 32 {
		w.bits(0, 32)
	}
	w.bits(1<<q, uint(q)+1)
	for ; k > 32; k -= 32 {
		w.bits(v, 32)
		v >>= 32
	}
	w.bits(v, k)
}

// riceEscape is the longest run of zero bits a Rice code starts with: the
// value follows whole.
const riceEscape = 40

// riceCountK is the Rice parameter of the counts over 1 (n-2): small.
const riceCountK = 1

// riceParam is the Rice parameter for entries keys from lo to hi: about
// log2 of the mean gap times ln 2, the best for geometric gaps.
func riceParam(lo, hi uint64, entries int) uint {
	m := (hi - lo) / uint64(max(entries-1, 1))
	m -= m/4 + m/16 // 0.6875 m
	if m == 0 {
		return 0
	}
	return uint(min(bits.Len64(m)-1, 62))
}

// bagCursor reads a block's entries in order: k and n are the current one.
type bagCursor struct {
	own     *offheap.Bytes // keeps data mapped
	data    []byte
	off     int
	k       uint64
	n       int64
	entries int // the block's
	left    int // entries not yet read
	rice    bool
	kg      uint
	acc     uint64 // bits read from data and not yet used (rice), nb of them
	nb      uint
}

// rewind moves the cursor back before the block's first entry.
func (c *bagCursor) rewind() {
	c.off, c.k, c.left, c.acc, c.nb = 0, 0, c.entries, 0, 0
}

// next moves to the next entry and reports whether there was one.
func (c *bagCursor) next() bool {
	if c.left == 0 {
		return false
	}
	c.left--
	if c.rice {
		c.k += c.riceCode(c.kg)
		c.n = 1
		if c.bits(1) == 1 {
			c.n = int64(c.riceCode(riceCountK)) + 2
		}
		return true
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

// bits reads n (<= 32) bits.
func (c *bagCursor) bits(n uint) uint64 {
	for c.nb < n {
		if c.off >= len(c.data) {
			panic("engine: corrupt bag block")
		}
		c.acc |= uint64(c.data[c.off]) << c.nb
		c.off++
		c.nb += 8
	}
	v := c.acc & (1<<n - 1)
	c.acc >>= n
	c.nb -= n
	return v
}

// riceCode reads a value written by blockWriter.riceCode with parameter k.
func (c *bagCursor) riceCode(k uint) uint64 {
	var q uint64
	for {
		if c.nb == 0 {
			if c.off >= len(c.data) {
				panic("engine: corrupt bag block")
			}
			c.acc, c.nb = uint64(c.data[c.off]), 8
			c.off++
		}
		z := uint(bits.TrailingZeros64(c.acc))
		if z < c.nb {
			q += uint64(z)
			c.acc >>= z + 1
			c.nb -= z + 1
			break
		}
		q += uint64(c.nb)
		c.acc, c.nb = 0, 0
	}
	if q >= riceEscape {
		if q > riceEscape {
			panic("engine: corrupt bag block")
		}
		return c.bits(32) | c.bits(32)<<32
	}
	v := q << k
	if k > 32 {
		return v | c.bits(32) | c.bits(k-32)<<32
	}
	return v | c.bits(k)
}

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
			s.cur = append(s.cur, streamCursor{c: blk.cursor(), value: p.value})
		}
	}
	s.reset()
	return s
}

// reset moves the stream back to its first value.
func (s *valueStream) reset() {
	for i := range s.cur {
		c := &s.cur[i]
		c.c.rewind()
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
