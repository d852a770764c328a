package sim

import (
	"errors"
	"fmt"
	"io"
	"math"

	"github.com/kvsim/kvsim/sim/engine"
	"github.com/kvsim/kvsim/traces"
	"github.com/kvsim/kvsim/tree"
)

// ErrOracleOnline is returned by [NewOnline] for cache.eviction = "belady":
// the oracle needs every request in advance, and an online simulation
// receives them as they come.
var ErrOracleOnline = errors.New(`cache.eviction: "belady" is an offline oracle that needs the whole trace in advance; an online simulation (kvsim serve, replay against the simulator) receives requests as they come: use kvsim sim or a study, or another eviction`)

// oracle is the full simulator's [tree.Oracle] for cache.eviction =
// "belady": the trie of every prompt of the trace, paged with the
// simulator's own pager (so its page ids are the tree's), and for each
// trie node the requests that use it, in arrival order. A prefix's next
// use is the first of those requests that has not been admitted yet (its
// first admission, when it locks its prefix, or its end consumes it); the
// trace position is the request's arrival index.
//
// This is Belady's rule under the simulator's timing: the request order is
// the arrival order, a request waiting in the queue still counts as a use
// to come, and the tree re-reads a node's next use whenever it touches the
// node (see [tree.Oracle]), so a key can lag until then.
//
// The trie has one of two granularities. Block-hash traces whose block
// size is a multiple of the page size (every Mooncake trace) get a trie of
// blocks: the pager gives each block a run of per consecutive page ids, a
// prefix id is node*per + (page within the block), and memory grows with
// the trace's blocks, not its pages (a 512-token block is 512 pages at
// page size 1). A request whose prompt ends inside a block counts as a
// user of the whole block. Other traces (token ids) get a trie of pages.
type oracle struct {
	per      int32 // pages per block; 0: a trie of pages
	child    map[oracleEdge]int32
	uses     [][]int32     // per trie node (0: the root): request indexes, ascending
	next     []int32       // per trie node: index into uses of the first one not consumed
	consumed []bool        // per request index
	nodeBase []tree.PageID // block mode: per trie node, its block's first page id
}

// oracleEdge is a trie edge: from node parent by a page (page mode) or by
// a block's first page id (block mode).
type oracleEdge struct {
	parent int32
	page   tree.PageID
}

var _ tree.Oracle = (*oracle)(nil)

// Root implements [tree.Oracle]: node 0, at its last page in block mode.
func (o *oracle) Root() int32 {
	if o.per > 0 {
		return o.per - 1
	}
	return 0
}

// Child implements [tree.Oracle].
func (o *oracle) Child(prefix int32, p tree.PageID) int32 {
	if o.per == 0 {
		if id, ok := o.child[oracleEdge{prefix, p}]; ok {
			return id
		}
		return -1
	}
	node, k := prefix/o.per, prefix%o.per
	if k+1 < o.per {
		if p == o.nodeBase[node]+tree.PageID(k+1) {
			return prefix + 1
		}
		return -1
	}
	if c, ok := o.child[oracleEdge{node, p}]; ok { // p must start a block
		return c * o.per
	}
	return -1
}

// NextUse implements [tree.Oracle].
func (o *oracle) NextUse(prefix int32) int64 {
	node := prefix
	if o.per > 0 {
		node = prefix / o.per
	}
	u := o.uses[node]
	i := o.next[node]
	for int(i) < len(u) && o.consumed[u[i]] {
		i++
	}
	o.next[node] = i
	if int(i) == len(u) {
		return math.MaxInt64
	}
	return int64(u[i])
}

// consume marks request idx as no longer to come.
func (o *oracle) consume(idx int) {
	if o != nil && idx < len(o.consumed) {
		o.consumed[idx] = true
	}
}

// add walks (and extends) the trie along keys for request idx: pages in
// page mode, block first pages in block mode.
func (o *oracle) add(idx int, keys []tree.PageID) error {
	cur := int32(0)
	for _, p := range keys {
		e := oracleEdge{cur, p}
		id, ok := o.child[e]
		if !ok {
			limit := math.MaxInt32
			if o.per > 0 {
				limit = math.MaxInt32 / int(o.per)
			}
			if len(o.uses) >= limit-1 {
				return fmt.Errorf("belady oracle: more than %d distinct prefixes", limit-1)
			}
			id = int32(len(o.uses))
			o.child[e] = id
			o.uses = append(o.uses, nil)
			if o.per > 0 {
				o.nodeBase = append(o.nodeBase, p)
			}
		}
		o.uses[id] = append(o.uses[id], int32(idx))
		cur = id
	}
	return nil
}

// readAhead reads the whole source for cache.eviction = "belady", builds
// the oracle from the prompts and gives it to the tree, and returns a
// source that replays the records read. Records that fail on arrival
// (admissionError) never use the cache and are left out of the oracle.
func (s *Sim) readAhead(src engine.Source) (engine.Source, error) {
	var recs []traces.Record
	blockSize, tokens := 0, false
	for {
		rec, err := src.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			return nil, err
		}
		switch {
		case rec.Tokens != nil:
			tokens = true
		case rec.Blocks != nil && (blockSize == 0 || blockSize == rec.BlockSize):
			blockSize = rec.BlockSize
		case rec.Blocks != nil:
			tokens = true // mixed block sizes: pages it is
		}
		recs = append(recs, rec)
	}
	ps := s.cfg.Cache.PageSize
	o := &oracle{child: map[oracleEdge]int32{}, uses: [][]int32{nil}, consumed: make([]bool, len(recs))}
	if !tokens && blockSize > 0 && blockSize%ps == 0 {
		o.per = int32(blockSize / ps)
		o.nodeBase = []tree.PageID{0}
	}
	var pages, keys []tree.PageID
	for i := range recs {
		rec := &recs[i]
		input, maxNew := int64(rec.InputLen), int64(max(rec.OutputLen, 1))
		if admissionError(&s.cfg, s.lanes, input, maxNew) != "" {
			continue
		}
		pages = pages[:0]
		switch {
		case rec.Tokens != nil:
			toks := make([]tree.Token, len(rec.Tokens))
			for j, t := range rec.Tokens {
				toks[j] = tree.Token(t)
			}
			pages = s.pager.TokenPages(toks, pages)
		case rec.Blocks != nil:
			var err error
			if pages, err = s.pager.BlockPages(rec.Blocks, rec.BlockSize, rec.InputLen, pages); err != nil {
				return nil, fmt.Errorf("request %q: %w", rec.ID, err)
			}
		}
		keys = pages
		if o.per > 0 {
			keys = keys[:0:0]
			for j := 0; j < len(pages); j += int(o.per) {
				keys = append(keys, pages[j])
			}
		}
		if err := o.add(i, keys); err != nil {
			return nil, err
		}
	}
	o.next = make([]int32, len(o.uses))
	if err := s.tree.SetOracle(o); err != nil {
		return nil, err
	}
	s.oracle = o
	return engine.NewSliceSource(recs), nil
}
