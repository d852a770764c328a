package tree

import (
	"encoding/binary"
	"fmt"
	"slices"
)

// Token is a token id.
type Token int32

// Pager turns prompts into page keys with exact identities: two pages get
// the same PageID if and only if their contents are equal. Token pages are
// interned by their full contents (no hashing, so no silent collisions);
// pages of block-hash traces are identified by the blocks that cover them.
//
// A Pager is not safe for concurrent use. Use one Pager per tree: PageIDs
// from different Pagers are unrelated.
type Pager struct {
	pageSize int
	ids      map[string]PageID
	blocks   map[uint64]PageID // block hash -> first PageID of its pages (page size divides block size)
	// dense holds the blocks whose hash is below its length, indexed by
	// hash (0: not seen), instead of blocks: traces that number their
	// blocks 0, 1, 2, ... (Mooncake's hash_ids) take 8 bytes a block and
	// no hashing. It grows only while the hashes seen stay dense (see
	// firstPage); a block is in exactly one of dense and blocks.
	dense   []PageID
	nBlocks int // blocks seen
	next    PageID
	buf     []byte
}

// NewPager returns a Pager for pageSize-token pages.
func NewPager(pageSize int) *Pager {
	if pageSize < 1 {
		panic("tree: NewPager: page size < 1")
	}
	return &Pager{pageSize: pageSize, ids: map[string]PageID{}, blocks: map[uint64]PageID{}, next: 1}
}

// PageSize returns the tokens per page.
func (p *Pager) PageSize() int { return p.pageSize }

// Unique returns the number of distinct pages seen so far.
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
	for j := 0; j*per < n; j++ {
		base := p.firstPage(blocks[j], per)
		k := int64(min(per, n-j*per))
		if m := len(dst); m > 0 && dst[m-1].First+PageID(dst[m-1].N) == base {
			dst[m-1].N += k
			continue
		}
		dst = append(dst, PageRun{First: base, N: k})
	}
	return dst, true, nil
}

// firstPage returns the first PageID of block h's run of per pages,
// allocating the run the first time h is seen.
func (p *Pager) firstPage(h uint64, per int) PageID {
	if h < uint64(len(p.dense)) {
		if base := p.dense[h]; base != 0 {
			return base
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
	if h >= uint64(len(p.dense)) && h < uint64(4*p.nBlocks+denseMin) {
		grown := make([]PageID, max(2*len(p.dense), int(h)+1, denseMin))
		copy(grown, p.dense)
		p.dense = grown
	}
	if h < uint64(len(p.dense)) {
		p.dense[h] = base
	} else {
		p.blocks[h] = base
	}
	return base
}

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
