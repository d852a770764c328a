package tree

import (
	"encoding/binary"
	"fmt"
	"slices"

	"github.com/kvsim/kvsim/internal/offheap"
)

// Token is a token id.
type Token int32

// Pager turns prompts into page keys with exact identities: two pages get
// the same PageID if and only if their contents are equal. Token pages are
// interned by their full contents (no hashing, so no silent collisions);
// pages of block-hash traces are identified by the blocks that cover them.
//
// A Pager is not safe for concurrent use. Use one Pager per tree: PageIDs
// from different Pagers are unrelated. Several trees may share one Pager
// (then their ids are related) as long as none of them calls [Pager.Forget].
//
// By default a Pager remembers every block it has seen, 8 bytes a block,
// so that a block that comes back gets its ids again. [Pager.Forget] lets
// its one user bound that by what it still holds.
type Pager struct {
	pageSize int
	ids      map[string]PageID
	blocks   map[uint64]PageID // block hash -> first PageID of its pages (page size divides block size)
	// dense holds the blocks whose hash is below denseN, indexed by hash
	// (0: not seen) in chunks of denseChunk (nil: none seen, or all
	// forgotten), instead of blocks: traces that number their blocks 0,
	// 1, 2, ... (Mooncake's hash_ids) take 8 bytes a block and no hashing.
	// It grows only while the hashes seen stay dense (see firstPage); a
	// block is in exactly one of dense and blocks.
	dense   []*[denseChunk]PageID
	denseN  uint64
	nBlocks int // blocks seen
	next    PageID
	buf     []byte
	forget  *forgetting // nil: remember every block
}

// forgetting is the state of a Pager that forgets blocks nobody holds.
// Its list of the blocks remembered (16 bytes a block) grows with what the
// user holds, a long run's backlog of queued requests included, so it is
// kept outside the garbage-collected heap (internal/offheap): it costs its
// size in resident memory, not the up to four times that a slice grown by
// append costs under the collector's headroom.
type forgetting struct {
	held    func(Marks)             // reports every page id the user holds
	order   offheap.Array[blockRun] // the blocks remembered, by first id (ids are handed out in increasing order)
	inChunk []int32                 // per dense chunk: blocks remembered in it
	every   int                     // the fewest blocks remembered before a sweep
	work    int                     // ids and runs reported during the sweep in progress
	sweepAt int                     // sweep when order reaches this length
	dropped int64                   // blocks forgotten
}

// blockRun is one remembered block: its hash and the first of its ids,
// whose top bit (heldMark) says during a sweep that the block is held.
// Its ids run up to the next remembered block's first, as far as marking
// goes: that counts the fresh ids handed out in between as the block's,
// which may keep a block a sweep longer but never forgets a held one.
type blockRun struct {
	base PageID
	hash uint64
}

// heldMark is the bit of blockRun.base that marks a held block during a
// sweep (ids are handed out from 1 up: none reaches it).
const heldMark PageID = 1 << 63

// denseChunk is the number of hashes in one chunk of the dense table.
const denseChunk = 4096

// NewPager returns a Pager for pageSize-token pages.
func NewPager(pageSize int) *Pager {
	if pageSize < 1 {
		panic("tree: NewPager: page size < 1")
	}
	return &Pager{pageSize: pageSize, ids: map[string]PageID{}, blocks: map[uint64]PageID{}, next: 1}
}

// PageSize returns the tokens per page.
func (p *Pager) PageSize() int { return p.pageSize }

// Unique returns the number of page ids handed out so far: the distinct
// pages seen, unless the pager forgot blocks that came back (see Forget).
func (p *Pager) Unique() int { return int(p.next - 1) }

func (p *Pager) intern(key []byte) PageID {
	if id, ok := p.ids[string(key)]; ok {
		return id
	}
	id := p.next
	p.next++
	p.ids[string(key)] = id
	return id
}

// TokenPages appends to dst the pages of tokens, cut down to whole pages
// (the unaligned tail is not part of any key, as in SGLang), and returns it.
func (p *Pager) TokenPages(tokens []Token, dst []PageID) []PageID {
	n := len(tokens) / p.pageSize
	for i := 0; i < n; i++ {
		b := p.buf[:0]
		for _, tok := range tokens[i*p.pageSize : (i+1)*p.pageSize] {
			b = binary.LittleEndian.AppendUint32(b, uint32(tok))
		}
		p.buf = b
		dst = append(dst, p.intern(b))
	}
	return dst
}

// BlockPages appends to dst the whole pages of a prompt of inputLen tokens
// described by block hashes of blockSize tokens each (the last block may be
// partial), and returns it. Page i covers tokens [i*P, (i+1)*P); its
// identity is the sequence of (block hash, start, end) pieces that cover it.
// When the page size divides the block size each block gets a contiguous run
// of PageIDs, so memory grows with unique blocks, not pages. Pages beyond
// the blocks given are not produced.
func (p *Pager) BlockPages(blocks []uint64, blockSize, inputLen int, dst []PageID) ([]PageID, error) {
	if blockSize < 1 {
		return dst, fmt.Errorf("block size %d < 1", blockSize)
	}
	covered := min(inputLen, len(blocks)*blockSize)
	n := covered / p.pageSize
	if blockSize%p.pageSize == 0 {
		p.maybeSweep()
		per := blockSize / p.pageSize
		dst = slices.Grow(dst, n)
		out := dst[len(dst) : len(dst)+n]
		for j := 0; j*per < n; j++ {
			base := p.firstPage(blocks[j], per)
			run := out[j*per : min((j+1)*per, n)]
			for k := range run {
				run[k] = base + PageID(k)
			}
		}
		return dst[:len(dst)+n], nil
	}
	for i := 0; i < n; i++ {
		b := p.buf[:0]
		b = append(b, 0xB1) // namespace: never equal to a token page of the same length
		from, to := i*p.pageSize, (i+1)*p.pageSize
		for pos := from; pos < to; {
			j := pos / blockSize
			end := min(to, (j+1)*blockSize)
			b = binary.LittleEndian.AppendUint64(b, blocks[j])
			b = binary.LittleEndian.AppendUint32(b, uint32(pos-j*blockSize))
			b = binary.LittleEndian.AppendUint32(b, uint32(end-j*blockSize))
			pos = end
		}
		p.buf = b
		dst = append(dst, p.intern(b))
	}
	return dst, nil
}

// PageRun is N consecutive PageIDs from First: a compact form of a key
// whose pages come in runs, as block pages do.
type PageRun struct {
	First PageID
	N     int64
}

// BlockRuns is BlockPages for a page size that divides the block size,
// returning the pages as runs appended to dst (consecutive runs merged)
// instead of one id a page; it hands out the same ids in the same order.
// It returns false, and nothing, when the page size does not divide the
// block size: use BlockPages then.
func (p *Pager) BlockRuns(blocks []uint64, blockSize, inputLen int, dst []PageRun) ([]PageRun, bool, error) {
	if blockSize < 1 {
		return dst, false, fmt.Errorf("block size %d < 1", blockSize)
	}
	if blockSize%p.pageSize != 0 {
		return dst, false, nil
	}
	n := min(inputLen, len(blocks)*blockSize) / p.pageSize
	per := blockSize / p.pageSize
	p.maybeSweep()
	for j := 0; j*per < n; j++ {
		base := p.firstPage(blocks[j], per)
		dst = AppendRun(dst, base, int64(min(per, n-j*per)))
	}
	return dst, true, nil
}

// firstPage returns the first PageID of block h's run of per pages,
// allocating the run the first time h is seen (or the first time since it
// was forgotten).
func (p *Pager) firstPage(h uint64, per int) PageID {
	if h < p.denseN {
		if c := p.dense[h/denseChunk]; c != nil && c[h%denseChunk] != 0 {
			return c[h%denseChunk]
		}
	}
	if base, ok := p.blocks[h]; ok {
		return base
	}
	base := p.next
	p.next += PageID(per)
	p.nBlocks++
	// Grow dense to cover h if that keeps it at most four times the
	// blocks seen (plus a start of denseMin): with dense hashes it then
	// holds them all; with scattered ones (real hashes) it stays empty.
	if h >= p.denseN && h < uint64(4*p.nBlocks+denseMin) {
		p.denseN = max(2*p.denseN, h+1, denseMin)
		grown := make([]*[denseChunk]PageID, (p.denseN+denseChunk-1)/denseChunk)
		copy(grown, p.dense)
		p.dense = grown
	}
	if h < p.denseN {
		c := p.dense[h/denseChunk]
		if c == nil {
			c = new([denseChunk]PageID)
			p.dense[h/denseChunk] = c
		}
		c[h%denseChunk] = base
	} else {
		p.blocks[h] = base
	}
	if f := p.forget; f != nil {
		f.order.Append(blockRun{base: base, hash: h})
		if h < p.denseN {
			for len(f.inChunk) <= int(h/denseChunk) {
				f.inChunk = append(f.inChunk, 0)
			}
			f.inChunk[h/denseChunk]++
		}
	}
	return base
}

// Forget makes the pager forget, from time to time, the blocks none of
// whose ids its user still holds, so that its memory follows what the user
// holds, not every block ever seen. A forgotten block that comes back gets
// new ids, which nothing can tell from its old ones since nothing holds
// those. held must report, through the [Marks] it is given, every page id
// the user holds anywhere (its tree, its stores, its requests) that
// BlockRuns or BlockPages handed out; the pager calls it only at the start
// of those calls, so ids handed out earlier in the same call are safe.
// A sweep runs when the blocks remembered reach one and a half times those
// kept by the last sweep, or more (at least every (>= 1) more, and one more
// per 128 ids held reports), so its cost per new block is constant. The pager must be unused (call Forget before any other
// method), and no other user may share it. Pages interned by contents
// (TokenPages, and BlockPages when the page size does not divide the block
// size) are never forgotten.
func (p *Pager) Forget(held func(Marks), every int) {
	if p.next != 1 {
		panic("tree: Pager.Forget after the pager handed out ids")
	}
	if every < 1 {
		panic("tree: Pager.Forget: every < 1")
	}
	p.forget = &forgetting{held: held, every: every, sweepAt: every}
}

// Forgotten returns the number of blocks forgotten so far.
func (p *Pager) Forgotten() int64 {
	if p.forget == nil {
		return 0
	}
	return p.forget.dropped
}

// Marks is how a [Pager.Forget] user reports the page ids it holds.
type Marks struct{ f *forgetting }

// Run marks the ids first, first+1, ..., first+n-1 as held.
func (m Marks) Run(first PageID, n int64) {
	o := &m.f.order
	end := first + PageID(n)
	m.f.work++
	// The last block starting at or before first, or the first block.
	i, j := 0, o.Len() // o.At(i-1).base <= first < o.At(j).base, outside the range
	for i < j {
		h := int(uint(i+j) >> 1)
		if o.At(h).base&^heldMark <= first {
			i = h + 1
		} else {
			j = h
		}
	}
	i = max(i-1, 0)
	for ; i < o.Len() && o.At(i).base&^heldMark < end; i++ {
		o.At(i).base |= heldMark
	}
}

// Pages marks every id of ids as held.
func (m Marks) Pages(ids []PageID) {
	m.f.work += len(ids)
	for i := 0; i < len(ids); {
		j := i + 1
		for j < len(ids) && ids[j] == ids[j-1]+1 {
			j++
		}
		m.Run(ids[i], int64(j-i))
		i = j
	}
}

// maybeSweep forgets the blocks nobody holds, when it is time.
func (p *Pager) maybeSweep() {
	f := p.forget
	if f == nil || f.order.Len() < f.sweepAt {
		return
	}
	f.work = 0
	f.held(Marks{f})
	kept := 0
	for i := range f.order.Len() {
		b := *f.order.At(i)
		if b.base&heldMark != 0 {
			b.base &^= heldMark
			*f.order.At(kept) = b
			kept++
			continue
		}
		f.dropped++
		c := b.hash / denseChunk
		if b.hash >= p.denseN || p.dense[c] == nil || p.dense[c][b.hash%denseChunk] != b.base {
			delete(p.blocks, b.hash) // in blocks (dense may have grown over it since)
			continue
		}
		p.dense[c][b.hash%denseChunk] = 0
		if f.inChunk[c]--; f.inChunk[c] == 0 {
			p.dense[c] = nil
		}
	}
	f.order.Truncate(kept)
	// The next sweep comes after half as many new blocks as were kept
	// (so that the blocks remembered stay within 1.5 times those held:
	// order is most of the pager's memory when a backlog of queued
	// requests holds many blocks), and at least one new block per
	// sweepWork ids the user reported, so that sweeps cost a bounded
	// amount per new block even when the user holds many pages per block
	// (page size 1 against 512-token blocks).
	f.sweepAt = kept + max(kept/2, f.work/sweepWork, f.every)
}

// sweepWork is the most ids and runs a sweep reads, amortized, per block it
// lets the pager remember until the next sweep.
const sweepWork = 128

// denseMin is the smallest dense table (8 KiB).
const denseMin = 1024

// Fresh returns a PageID that no page has had before and none will have:
// for pages whose contents are unknown (generated tokens of a block-hash
// trace), which can therefore never be matched.
func (p *Pager) Fresh() PageID {
	id := p.next
	p.next++
	return id
}
