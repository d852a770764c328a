package sim

import (
	"fmt"
	"math"
	"slices"
	"sort"

	"github.com/kvsim/kvsim/internal/invariants"
	"github.com/kvsim/kvsim/sim/engine"
	"github.com/kvsim/kvsim/tree"
)

// storageBatchPages is the page count of one storage call (SGLang's
// batch_exists / batch_get / batch_set take 128 pages at a time).
const storageBatchPages = 128

// span is the page positions [lo, hi) of a path.
type span struct{ lo, hi int }

// pathKey is a path of pages given as consecutive runs (a tree node's key
// and its ancestors', root first), so that it need not be copied into one
// slice.
type pathKey struct {
	runs   [][]tree.PageID
	starts []int // starts[i] is the position of runs[i][0]; one more entry holds the length
}

func newPathKey(runs ...[]tree.PageID) pathKey {
	k := pathKey{runs: runs, starts: make([]int, len(runs)+1)}
	for i, r := range runs {
		k.starts[i+1] = k.starts[i] + len(r)
	}
	return k
}

func (k pathKey) len() int { return k.starts[len(k.runs)] }

// run returns the pages from position d up to the end of d's run or to
// position end, whichever comes first (d < end <= len).
func (k pathKey) run(d, end int) []tree.PageID {
	i := sort.SearchInts(k.starts, d+1) - 1 // the last run starting at or before d: not empty
	off := d - k.starts[i]
	return k.runs[i][off:min(len(k.runs[i]), off+end-d)]
}

func (k pathKey) at(d int) tree.PageID { return k.run(d, d+1)[0] }

// match returns how many leading pages of p equal the key's from position
// d on, looking no further than position end.
func (k pathKey) match(p []tree.PageID, d, end int) int {
	m := 0
	for m < len(p) && d+m < end {
		r := k.run(d+m, end)
		x := tree.CommonPrefix(p[m:], r)
		m += x
		if x < len(r) {
			break
		}
	}
	return m
}

// l3SmallFanout is the number of children a trie node keeps in a slice;
// beyond it they are indexed by first page.
const l3SmallFanout = 8

// l3Node is one run of pages in the storage tier's trie: pages that follow
// one another on every path through the node, all stored or all absent,
// and, when stored, used in path order: page i of the node has LRU stamp
// stamp+i.
type l3Node struct {
	parent  *l3Node
	kids    []*l3Node               // children while there are at most l3SmallFanout (nil once index is built)
	index   map[tree.PageID]*l3Node // first page -> child, once there were more
	pages   []tree.PageID           // never written: views of the tree's keys, resliced by splits and merges
	present bool
	stamp   int64 // LRU stamp of pages[0] when present
	heapIdx int   // position in the LRU heap, -1 if absent
	dead    bool  // merged into its parent or deleted
}

func (n *l3Node) numKids() int {
	if n.index != nil {
		return len(n.index)
	}
	return len(n.kids)
}

func (n *l3Node) child(p tree.PageID) *l3Node {
	if n.index != nil {
		return n.index[p]
	}
	for _, c := range n.kids {
		if c.pages[0] == p {
			return c
		}
	}
	return nil
}

// onlyChild returns the child of a node with exactly one.
func (n *l3Node) onlyChild() *l3Node {
	if n.index == nil {
		return n.kids[0]
	}
	for _, c := range n.index { // a single entry: the order cannot matter
		return c
	}
	panic("sim: onlyChild of a storage node without children")
}

func (n *l3Node) addChild(c *l3Node) {
	if n.index != nil {
		n.index[c.pages[0]] = c
		return
	}
	n.kids = append(n.kids, c)
	if len(n.kids) > l3SmallFanout {
		n.index = make(map[tree.PageID]*l3Node, 2*len(n.kids))
		for _, k := range n.kids {
			n.index[k.pages[0]] = k
		}
		n.kids = nil
	}
}

func (n *l3Node) removeChild(c *l3Node) {
	if n.index != nil {
		delete(n.index, c.pages[0])
		return
	}
	for i, k := range n.kids {
		if k == c {
			n.kids = append(n.kids[:i], n.kids[i+1:]...)
			return
		}
	}
	panic("sim: removeChild: not a child")
}

// replaceChild puts nw, which starts with the same page, where old was.
func (n *l3Node) replaceChild(old, nw *l3Node) {
	if n.index != nil {
		n.index[nw.pages[0]] = nw
		return
	}
	for i, k := range n.kids {
		if k == old {
			n.kids[i] = nw
			return
		}
	}
	panic("sim: replaceChild: not a child")
}

// l3Store is the storage tier's contents: the set of page paths storage
// holds, with an LRU order over pages and an optional capacity.
//
// A page is identified by its exact path, the prefix before it plus its own
// contents, so lookups have SGLang's chained-hash semantics without
// collisions. The paths form a compressed trie of runs of pages (like the
// radix tree's nodes), which is what keeps page size 1 affordable: every
// operation walks a path comparing runs with the runtime's vectorised memory
// comparison and touches nodes, never a map entry per page. Nodes do not
// copy pages: they view the tree's keys (immutable, see [tree.Node.Pages]),
// and splits and merges only reslice them.
//
// The LRU order is per page, as a hash-keyed store's would be. Each
// operation stamps the pages it writes or reads with consecutive numbers in
// path order, so a stored node's stamps are one interval, the intervals of
// different nodes are disjoint, and a min-heap of stored nodes by first
// stamp yields the least recently used page: its first. Capacity eviction
// drops pages from the front of that node, splitting it, and can therefore
// leave later pages of a path stored and unreachable (a lookup stops at the
// first absent page), as in a hash-keyed store. Absent nodes stay only as
// the path to stored ones. At the end of each operation absent leaves are
// deleted, and a changed node is merged with its parent or only child when
// they are one run (same presence, consecutive stamps) whose pages lie side
// by side in one array, as a split's halves do.
//
// Costs, for a path of L pages over k trie nodes, with n stored nodes: a
// lookup is k child lookups plus the vectorised comparison of the L pages;
// a write or read adds O(log n) heap work for each node it stamps or
// splits; evicting e pages costs O(log n) for each run they span, not for
// each page. Memory is O(nodes), plus the tree keys the nodes keep alive.
type l3Store struct {
	root     *l3Node
	lru      []*l3Node // stored nodes, a min-heap by stamp
	seq      int64     // next LRU stamp
	nodes    int       // trie nodes, root excluded
	pages    int64     // pages stored
	limited  bool
	capPages int64
	evicted  int64     // pages dropped for capacity
	dirty    []*l3Node // nodes changed by the operation in progress, tidied at its end
}

func newL3Store(capTokens int64, pageSize int) *l3Store {
	s := &l3Store{root: &l3Node{heapIdx: -1}}
	if capTokens > 0 {
		s.limited = true
		s.capPages = capTokens / int64(pageSize)
	}
	return s
}

// ---- LRU heap of stored nodes ----

func (s *l3Store) heapSwap(i, j int) {
	s.lru[i], s.lru[j] = s.lru[j], s.lru[i]
	s.lru[i].heapIdx = i
	s.lru[j].heapIdx = j
}

func (s *l3Store) heapUp(j int) {
	for j > 0 {
		i := (j - 1) / 2
		if s.lru[i].stamp <= s.lru[j].stamp {
			break
		}
		s.heapSwap(i, j)
		j = i
	}
}

func (s *l3Store) heapDown(i int) {
	for {
		j := 2*i + 1
		if j >= len(s.lru) {
			return
		}
		if r := j + 1; r < len(s.lru) && s.lru[r].stamp < s.lru[j].stamp {
			j = r
		}
		if s.lru[i].stamp <= s.lru[j].stamp {
			return
		}
		s.heapSwap(i, j)
		i = j
	}
}

func (s *l3Store) heapPush(n *l3Node) {
	n.heapIdx = len(s.lru)
	s.lru = append(s.lru, n)
	s.heapUp(n.heapIdx)
}

func (s *l3Store) heapRemove(n *l3Node) {
	i, last := n.heapIdx, len(s.lru)-1
	if i != last {
		s.heapSwap(i, last)
	}
	s.lru[last] = nil
	s.lru = s.lru[:last]
	n.heapIdx = -1
	if i != last {
		s.heapDown(i)
		s.heapUp(i)
	}
}

// ---- Node changes ----

// split cuts c after its first m pages (0 < m < len(c.pages)) and returns
// the new upper node, which takes c's place; c keeps the rest, so a pointer
// to c still names the node ending where it did.
func (s *l3Store) split(c *l3Node, m int) *l3Node {
	up := &l3Node{parent: c.parent, pages: c.pages[:m], present: c.present, stamp: c.stamp, heapIdx: -1}
	c.parent.replaceChild(c, up)
	c.pages = c.pages[m:]
	c.stamp += int64(m)
	c.parent = up
	up.kids = []*l3Node{c}
	s.nodes++
	if c.present {
		s.heapPush(up)
		s.heapDown(c.heapIdx)
	}
	return up
}

// refresh marks stored c as just used.
func (s *l3Store) refresh(c *l3Node) {
	c.stamp = s.seq
	s.seq += int64(len(c.pages))
	s.heapDown(c.heapIdx)
	s.dirty = append(s.dirty, c)
}

// store makes absent c stored and just used.
func (s *l3Store) store(c *l3Node) {
	c.present = true
	c.stamp = s.seq
	s.seq += int64(len(c.pages))
	s.pages += int64(len(c.pages))
	s.heapPush(c)
	s.dirty = append(s.dirty, c)
}

// evictOver drops the least recently used pages beyond the capacity.
func (s *l3Store) evictOver() {
	for s.limited && s.pages > s.capPages {
		x := s.lru[0]
		if over := s.pages - s.capPages; int64(len(x.pages)) > over {
			x = s.split(x, int(over))
		}
		s.heapRemove(x)
		x.present = false
		s.pages -= int64(len(x.pages))
		s.evicted += int64(len(x.pages))
		s.dirty = append(s.dirty, x)
	}
}

// step returns the node starting at position d of key, after n, cut so
// that it holds only pages of key[d:end]: an existing child, split where
// the key ends or differs inside it, or a new absent leaf holding the rest
// of key's run at d (the key's own pages, not a copy).
func (s *l3Store) step(n *l3Node, key pathKey, d, end int) *l3Node {
	run := key.run(d, end)
	c := n.child(run[0])
	if c == nil {
		c = &l3Node{parent: n, pages: run, heapIdx: -1}
		n.addChild(c)
		s.nodes++
		s.dirty = append(s.dirty, c)
		return c
	}
	if m := key.match(c.pages, d, end); m < len(c.pages) {
		c = s.split(c, m)
	}
	return c
}

// mergeable says whether child c, p's only child, can join p in one run
// without copying: same presence, consecutive stamps, and c's pages right
// after p's in the same array (as the two halves of a split are).
func mergeable(p, c *l3Node) bool {
	return p.parent != nil && p.numKids() == 1 && p.present == c.present &&
		(!p.present || p.stamp+int64(len(p.pages)) == c.stamp) && adjacent(p.pages, c.pages)
}

// adjacent reports whether b starts in a's array right where a ends.
func adjacent(a, b []tree.PageID) bool {
	return cap(a)-len(a) >= len(b) && &a[:len(a)+1][len(a)] == &b[0]
}

// absorb merges p's only child c into p.
func (s *l3Store) absorb(p, c *l3Node) {
	p.pages = p.pages[:len(p.pages)+len(c.pages)]
	p.kids, p.index = c.kids, c.index
	for _, k := range c.kids {
		k.parent = p
	}
	for _, k := range c.index { // sets each child's parent: the order cannot matter
		k.parent = p
	}
	if c.present {
		s.heapRemove(c)
	}
	c.dead, c.parent, c.kids, c.index = true, nil, nil, nil
	s.nodes--
}

// tidy ends an operation: absent leaves are deleted, upwards, and the
// changed nodes are merged with a parent or only child they continue.
func (s *l3Store) tidy() {
	for _, x := range s.dirty {
		for !x.dead && x.parent != nil {
			if p := x.parent; !x.present && x.numKids() == 0 {
				p.removeChild(x)
				x.dead, x.parent = true, nil
				s.nodes--
				x = p
			} else if mergeable(p, x) {
				s.absorb(p, x)
				x = p
			} else if x.numKids() == 1 && mergeable(x, x.onlyChild()) {
				s.absorb(x, x.onlyChild())
			} else {
				break
			}
		}
	}
	clear(s.dirty)
	s.dirty = s.dirty[:0]
	s.check()
}

// ---- Operations ----

// hit returns the number of stored pages of key from page from on, up to
// the first absent one (SGLang's batch_exists until the first miss).
func (s *l3Store) hit(key pathKey, from int) int {
	n, d := s.root, 0
	for d < key.len() {
		c := n.child(key.at(d))
		if c == nil {
			break
		}
		m := key.match(c.pages, d, key.len())
		if !c.present && d+m > from {
			return max(d, from) - from
		}
		d += m
		if m < len(c.pages) {
			break
		}
		n = c
	}
	return max(d, from) - from
}

// absent appends to dst the spans of pages [lo, hi) of key that storage
// does not hold, in order, and returns it.
func (s *l3Store) absent(key pathKey, lo, hi int, dst []span) []span {
	add := func(a, b int) {
		a, b = max(a, lo), min(b, hi)
		switch {
		case a >= b:
		case len(dst) > 0 && dst[len(dst)-1].hi == a:
			dst[len(dst)-1].hi = b
		default:
			dst = append(dst, span{a, b})
		}
	}
	n, d := s.root, 0
	for d < hi {
		c := n.child(key.at(d))
		if c == nil {
			break
		}
		m := key.match(c.pages, d, hi)
		if !c.present {
			add(d, d+m)
		}
		d += m
		if m < len(c.pages) {
			break
		}
		n = c
	}
	add(d, hi)
	return dst
}

// write stores the spans of key (sorted, disjoint), page by page in path
// order: a stored page becomes the most recently used, an absent one is
// added and the least recently used page dropped if storage is over
// capacity. The path up to the last span is created as needed, from key's
// own arrays, which must never change. Pages are handled a run at a time;
// the result is the page-by-page one because a run of added pages only
// appends to the LRU order, and every run's presence is read after the
// evictions of the runs before it.
func (s *l3Store) write(key pathKey, spans []span) {
	n, d := s.root, 0
	for _, sp := range spans {
		for d < sp.hi {
			end := sp.hi
			if d < sp.lo {
				end = sp.lo
			}
			c := s.step(n, key, d, end)
			n, d = c, d+len(c.pages)
			if d <= sp.lo {
				continue
			}
			if c.present {
				s.refresh(c)
			} else {
				s.store(c)
				// Eviction splits nodes by cutting their front off, so c
				// still ends at d; deletions wait for tidy.
				s.evictOver()
			}
		}
	}
	s.tidy()
}

// touch marks the stored pages among [lo, hi) of key as just used, in path
// order (a read). Absent pages are skipped; the walk stops where the path
// leaves the trie.
func (s *l3Store) touch(key pathKey, lo, hi int) {
	n, d := s.root, 0
	for d < hi {
		c := n.child(key.at(d))
		if c == nil {
			break
		}
		m := key.match(c.pages, d, hi)
		full := m == len(c.pages)
		if c.present && d+m > lo {
			if d < lo {
				s.split(c, lo-d) // c keeps the part from lo
				m -= lo - d
				d = lo
			}
			if m < len(c.pages) {
				c = s.split(c, m)
			}
			s.refresh(c)
		}
		if !full {
			break
		}
		n, d = c, d+len(c.pages)
	}
	s.tidy()
}

// check panics if the store breaks an invariant (with -tags invariants).
func (s *l3Store) check() {
	if !invariants.Enabled {
		return
	}
	if err := s.verify(); err != nil {
		panic("sim: " + err.Error())
	}
}

// verify checks the store's invariants in O(n log n): the trie's links and
// indexes, no absent leaves, the page and node counts, the heap, disjoint
// stamp intervals below seq, and the capacity.
func (s *l3Store) verify() error {
	var pages int64
	nodes := 0
	type run struct{ lo, hi int64 }
	var runs []run
	stack := []*l3Node{s.root}
	for len(stack) > 0 {
		n := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		if n.dead {
			return fmt.Errorf("storage: dead node in the trie")
		}
		var kids []*l3Node
		if n.index != nil {
			if n.kids != nil {
				return fmt.Errorf("storage: node with both a child slice and an index")
			}
			for p, c := range n.index { // collected only to be checked
				if c.pages[0] != p {
					return fmt.Errorf("storage: child indexed by page %d starts with %d", p, c.pages[0])
				}
				kids = append(kids, c)
			}
		} else {
			kids = n.kids
		}
		for _, c := range kids {
			if c.parent != n {
				return fmt.Errorf("storage: child's parent link is wrong")
			}
			if len(c.pages) == 0 {
				return fmt.Errorf("storage: node without pages")
			}
			stack = append(stack, c)
		}
		if n == s.root {
			if n.present || len(n.pages) != 0 {
				return fmt.Errorf("storage: root holds pages")
			}
			continue
		}
		nodes++
		if !n.present && len(kids) == 0 {
			return fmt.Errorf("storage: absent leaf")
		}
		if n.present != (n.heapIdx >= 0) || n.heapIdx >= len(s.lru) || (n.present && s.lru[n.heapIdx] != n) {
			return fmt.Errorf("storage: heap index %d of a node stored=%v", n.heapIdx, n.present)
		}
		if n.present {
			pages += int64(len(n.pages))
			runs = append(runs, run{n.stamp, n.stamp + int64(len(n.pages))})
		}
	}
	if nodes != s.nodes || pages != s.pages || len(runs) != len(s.lru) {
		return fmt.Errorf("storage: counted %d nodes, %d pages, %d stored nodes; the store says %d, %d, %d", nodes, pages, len(runs), s.nodes, s.pages, len(s.lru))
	}
	for i := 1; i < len(s.lru); i++ {
		if s.lru[(i-1)/2].stamp > s.lru[i].stamp {
			return fmt.Errorf("storage: heap order broken at %d", i)
		}
	}
	sort.Slice(runs, func(i, j int) bool { return runs[i].lo < runs[j].lo })
	for i, r := range runs {
		if r.hi > s.seq || (i > 0 && runs[i-1].hi > r.lo) {
			return fmt.Errorf("storage: stamp intervals overlap or run ahead of the clock")
		}
	}
	if s.limited && s.pages > s.capPages {
		return fmt.Errorf("storage: %d pages stored over a capacity of %d", s.pages, s.capPages)
	}
	return nil
}

// prefetchOp is one storage prefetch in flight (SGLang's PrefetchOperation):
// the request's storage hit, read batch by batch over the storage read link
// into host tokens reserved for it.
type prefetchOp struct {
	r        *request
	key      pathKey     // the sequence's pages up to the end of the hit
	from     int         // position in key of the first fetched page
	hitPages int         // hit pages: key positions [from, from+hitPages)
	hit      int64       // hit tokens
	lanes    []int64     // reserved host tokens per lane
	pinned   *tree.Node  // the node whose host copy is protected (nil: root)
	issued   engine.Time // operation start (the timeout counts from here)
	ready    engine.Time // reads may start: after the hit query
	batches  int
	done     int // batches read
	queued   bool
}

// backupOp is one L2 -> L3 backup (SGLang's write_backup_storage): the
// pages of one node that storage lacked when it was queued, written batch by
// batch; the node's host copy is protected until the ack.
type backupOp struct {
	node  *tree.Node
	path  pathKey // the pages of the node and its ancestors, root first, as queued
	spans []span  // the positions on the path to write
	done  engine.Time
}

// storageState is the simulator's storage tier: contents, links, and the
// operations in flight.
type storageState struct {
	l3        *l3Store
	threshold int64         // tokens
	limit     int64         // prefetch capacity limit, tokens
	occupied  int64         // tokens reserved by prefetches in flight
	reads     []*prefetchOp // FIFO on the read link
	readFree  engine.Time   // the read link is idle from here until the head's next batch
	writeFree engine.Time
	backups   []*backupOp // FIFO; done times never decrease
	landed    int         // backups[:landed] are written to storage

	// Batches read one after another by the same prefetch are stamped in
	// storage's LRU order as one read: the same order, one walk.
	touchOp          *prefetchOp
	touchLo, touchHi int // pages [touchLo, touchHi) of touchOp.key
}

func newStorageState(cfg Config) *storageState {
	st := cfg.Storage
	return &storageState{
		l3:        newL3Store(st.CapacityTokens, cfg.Cache.PageSize),
		threshold: max(st.PrefetchThreshold, int64(cfg.Cache.PageSize)),
		limit:     int64(st.PrefetchCapacityRatio * float64(cfg.Cache.HostTokens*int64(cfg.Cache.CP))),
	}
}

// pathOf returns the path from the root to the end of n. Its runs are the
// tree's own keys, whose contents never change (see [tree.Node.Pages]), so
// the storage trie may keep them.
func pathOf(n *tree.Node) pathKey {
	var runs [][]tree.PageID
	for a := n; !a.IsRoot(); a = a.Parent() {
		runs = append(runs, a.Pages())
	}
	slices.Reverse(runs)
	return newPathKey(runs...)
}

// readPages records that pages [lo, hi) of op's sequence were just read;
// storage sees it at the next flushReads.
func (st *storageState) readPages(op *prefetchOp, lo, hi int) {
	if st.touchOp == op && st.touchHi == lo {
		st.touchHi = hi
		return
	}
	st.flushReads()
	st.touchOp, st.touchLo, st.touchHi = op, lo, hi
}

// flushReads stamps the pending read in storage's LRU order.
func (st *storageState) flushReads() {
	if st.touchOp != nil {
		st.l3.touch(st.touchOp.key, st.touchLo, st.touchHi)
		st.touchOp = nil
	}
}

// storageTime is the time to move tokens over a storage link at bw bytes/s:
// the CP ranks each move their share in parallel.
func (s *Sim) storageTime(tokens int64, bw float64) engine.Time {
	per := (tokens + int64(s.lanes) - 1) / int64(s.lanes)
	return engine.Time(math.Ceil(float64(per) * s.cfg.Links.KVBytesPerToken / bw * 1e9))
}

// ---- Backup (L2 -> L3) ----

// backup queues n's pages that storage lacks on the storage write link and
// protects n's host copy until the write is acknowledged. protected says n
// already holds a protection for this backup (a held write-back).
func (s *Sim) backup(n *tree.Node, protected bool) {
	st := s.st
	if !protected {
		s.tree.ProtectHost(n)
	}
	ps := int64(s.cfg.Cache.PageSize)
	path := pathOf(n)
	lo := int(n.Depth(int(ps)) / ps)
	// The backend skips the pages it has.
	spans := st.l3.absent(path, lo, lo+len(n.Pages()), nil)
	pages := 0
	for _, sp := range spans {
		pages += sp.hi - sp.lo
	}
	op := &backupOp{node: n, done: max(s.now, st.writeFree)}
	if pages > 0 {
		op.path, op.spans = path, spans
	}
	for k := 0; k < pages; k += storageBatchPages {
		tok := int64(min(storageBatchPages, pages-k)) * ps
		op.done = max(s.now, st.writeFree) + engine.Time(s.cfg.Storage.WriteLatency) + s.storageTime(tok, s.cfg.Storage.WriteBandwidth)
		st.writeFree = op.done
		s.counters.StorageWriteTokens += tok
		s.counters.StorageWriteBytes += s.bytes(tok)
	}
	st.backups = append(st.backups, op)
}

// landBackups writes to storage every backup whose last batch has landed by
// now. Storage sees the pages from that moment; the scheduler learns of it
// at its next iteration (ackBackups).
func (s *Sim) landBackups(now engine.Time) {
	st := s.st
	for st.landed < len(st.backups) && st.backups[st.landed].done <= now {
		if op := st.backups[st.landed]; len(op.spans) > 0 {
			st.l3.write(op.path, op.spans)
		}
		st.landed++
	}
	s.counters.StorageEvictedTokens = st.l3.evicted * int64(s.cfg.Cache.PageSize)
}

// ackBackups releases the host copies of landed backups, in FIFO order (the
// backup acks drained at the start of an iteration).
func (s *Sim) ackBackups() {
	st := s.st
	s.landBackups(s.now)
	for _, op := range st.backups[:st.landed] {
		s.tree.ReleaseHost(op.node)
	}
	clear(st.backups[:st.landed])
	st.backups = st.backups[st.landed:]
	st.landed = 0
}

// drainWriteBacks queues a backup for every write-back copy the tree made
// since the last call. Each already holds its host protection.
func (s *Sim) drainWriteBacks() {
	for _, n := range s.tree.TakeWriteBacks() {
		if n.Parent() == nil {
			// Dropped with a parent whose own write-back found no room:
			// nothing left to back up.
			s.tree.ReleaseHost(n)
			continue
		}
		s.backup(n, true)
	}
}

// storageIdleWake says when an idle scheduler with a storage tier must run
// again: SGLang's scheduler keeps polling while idle, so a write-through
// that lands is acknowledged (and backed up to storage) at once, and a
// landed backup releases its host copy. Without storage an idle server
// acknowledges at its next event, which changes nothing it decides.
func (s *Sim) storageIdleWake() (engine.Time, bool) {
	if s.st == nil {
		return 0, false
	}
	best, ok := engine.Time(0), false
	if len(s.writeDone) > 0 {
		best, ok = s.writeDone[0], true
	}
	if len(s.st.backups) > 0 && (!ok || s.st.backups[0].done < best) {
		best, ok = s.st.backups[0].done, true
	}
	return max(best, s.now), ok
}

// ---- Prefetch (L3 -> L2) ----

// prefetch is SGLang's _prefetch_kvcache for a request entering the queue:
// match it; if the deepest matched node is backed up (or is the root), look
// up storage for the pages after the device + host hit, and if the hit is
// at least the threshold and prefetches are not rate limited, reserve host
// tokens for it (all or nothing) and start reading it batch by batch.
func (s *Sim) prefetch(r *request) {
	st := s.st
	m := s.match(r)
	if !m.Last.IsRoot() && !m.Last.OnHost() {
		return
	}
	ps := int64(s.cfg.Cache.PageSize)
	from := int((m.DeviceTokens + m.HostTokens) / ps)
	pages := s.pagesFor(r, r.input)
	cand := len(pages) - from
	if int64(cand)*ps < st.threshold {
		return
	}
	if st.occupied >= st.limit {
		s.counters.PrefetchesRateLimited++
		return
	}
	s.advanceReads(s.now)
	hitPages := st.l3.hit(newPathKey(pages), from)
	// The hit query asks storage batch by batch until the first miss.
	calls := hitPages/storageBatchPages + 1
	if hitPages == cand {
		calls = (cand + storageBatchPages - 1) / storageBatchPages
	}
	hit := int64(hitPages) * ps
	if hit < st.threshold {
		s.counters.PrefetchesRevoked++
		return
	}
	op := &prefetchOp{
		r: r, key: newPathKey(pages[:from+hitPages]), from: from, hitPages: hitPages, hit: hit, issued: s.now,
		ready:   s.now + engine.Time(int64(calls)*s.cfg.Storage.ReadLatency),
		batches: (hitPages + storageBatchPages - 1) / storageBatchPages,
		lanes:   s.tree.LaneTokens(int64(from)*ps, int64(from)*ps+hit, make([]int64, s.lanes)),
	}
	// Protect the prefix's host copy first, so that the reservation's host
	// eviction cannot take it.
	if !m.Last.IsRoot() {
		s.tree.ProtectHost(m.Last)
		op.pinned = m.Last
	}
	if !s.tree.ReserveHost(op.lanes) {
		if op.pinned != nil {
			s.tree.ReleaseHost(op.pinned)
		}
		s.counters.PrefetchesNoHost++
		return
	}
	st.occupied += hit
	op.queued = true
	st.reads = append(st.reads, op)
	r.prefetch = op
	s.counters.PrefetchesIssued++
}

func (s *Sim) batchTokens(op *prefetchOp, k int) int64 {
	return int64(min(storageBatchPages, op.hitPages-k*storageBatchPages)) * int64(s.cfg.Cache.PageSize)
}

func (s *Sim) readBatchTime(op *prefetchOp, k int) engine.Time {
	return engine.Time(s.cfg.Storage.ReadLatency) + s.storageTime(s.batchTokens(op, k), s.cfg.Storage.ReadBandwidth)
}

// readBatch accounts for batch k of op having been read.
func (s *Sim) readBatch(op *prefetchOp, k int) {
	tok := s.batchTokens(op, k)
	s.counters.StorageReadTokens += tok
	s.counters.StorageReadBytes += s.bytes(tok)
	lo := op.from + k*storageBatchPages
	s.st.readPages(op, lo, lo+int(tok/int64(s.cfg.Cache.PageSize)))
}

// advanceReads plays the read link forward to now: batches are read one
// after another, in FIFO order of their operations, none before its
// operation's hit query is done.
//
// Backups that landed by now are written to storage first. Both are played
// lazily, at the same decision points whatever else happens (timeline
// samples change nothing), so runs stay deterministic.
func (s *Sim) advanceReads(now engine.Time) {
	s.landBackups(now)
	s.playReads(now)
	s.st.flushReads()
}

func (s *Sim) playReads(now engine.Time) {
	st := s.st
	for len(st.reads) > 0 {
		op := st.reads[0]
		for op.done < op.batches {
			end := max(st.readFree, op.ready) + s.readBatchTime(op, op.done)
			if end > now {
				return
			}
			s.readBatch(op, op.done)
			op.done++
			st.readFree = end
		}
		op.queued = false
		st.reads[0] = nil
		st.reads = st.reads[1:]
	}
}

// projectedDone is when op's last batch will be read if nothing is
// cancelled before it.
func (s *Sim) projectedDone(op *prefetchOp) engine.Time {
	t := s.st.readFree
	for _, o := range s.st.reads {
		for k := o.done; k < o.batches; k++ {
			t = max(t, o.ready) + s.readBatchTime(o, k)
		}
		if o == op {
			return t
		}
	}
	return s.now
}

func (s *Sim) prefetchTimeout(hit int64) engine.Time {
	st := s.cfg.Storage
	return engine.Time(min(st.PrefetchTimeoutMax, st.PrefetchTimeoutBase+st.PrefetchTimeoutPerKiToken*hit/1024))
}

// prefetchTerminable is SGLang's check_prefetch_progress for a request the
// admission loop is about to consider: under the policy, either terminate
// its prefetch now (returning true; the completed part is in the tree as
// host-only nodes) or keep it running and skip the request (false).
func (s *Sim) prefetchTerminable(r *request) bool {
	op := r.prefetch
	s.advanceReads(s.now)
	complete := op.done == op.batches
	switch s.cfg.Storage.PrefetchPolicy {
	case WaitComplete:
		if !complete {
			return false
		}
	case PrefetchTimeout:
		if !complete && s.now-op.issued <= s.prefetchTimeout(op.hit) {
			return false
		}
	}
	if !complete {
		s.counters.PrefetchesTerminatedEarly++
	}
	s.endPrefetch(op, true)
	return true
}

// prefetchWake is the earliest time after now at which a request held back
// by its prefetch becomes admissible (its fetch completes or its timeout
// passes). Requests admissible already are not waiting for a wake.
func (s *Sim) prefetchWake() (engine.Time, bool) {
	if s.st == nil || s.cfg.Storage.PrefetchPolicy == BestEffort {
		return 0, false
	}
	s.advanceReads(s.now)
	best, ok := engine.Time(0), false
	for _, r := range s.waiting {
		op := r.prefetch
		if op == nil {
			continue
		}
		t := s.projectedDone(op)
		if s.cfg.Storage.PrefetchPolicy == PrefetchTimeout {
			t = min(t, op.issued+s.prefetchTimeout(op.hit)+1)
		}
		if t > s.now && (!ok || t < best) {
			best, ok = t, true
		}
	}
	return best, ok
}

// endPrefetch terminates op at s.now. A batch being read finishes (the link
// stays busy) but is not used. With insert, the completed pages go into the
// tree as host-only KV (InsertHost); the rest of the reservation is
// released, and so are the host protection and the rate-limit share.
func (s *Sim) endPrefetch(op *prefetchOp, insert bool) {
	st := s.st
	s.advanceReads(s.now)
	if op.queued {
		if st.reads[0] == op && op.done < op.batches {
			if start := max(st.readFree, op.ready); start < s.now {
				st.readFree = start + s.readBatchTime(op, op.done)
				tok := s.batchTokens(op, op.done)
				s.counters.StorageReadTokens += tok
				s.counters.StorageReadBytes += s.bytes(tok)
			}
		}
		for i, o := range st.reads {
			if o == op {
				copy(st.reads[i:], st.reads[i+1:])
				st.reads[len(st.reads)-1] = nil
				st.reads = st.reads[:len(st.reads)-1]
				break
			}
		}
		op.queued = false
	}
	r := op.r
	release := op.lanes
	completed := min(op.done*storageBatchPages, op.hitPages)
	if insert && completed > 0 {
		ps := int64(s.cfg.Cache.PageSize)
		res := s.tree.InsertHost(r.pages[:op.from+completed], op.from, int64(s.now))
		for o := range release {
			release[o] -= res.Lanes[o]
		}
		r.l3From, r.l3To = res.Matched, res.Matched+res.Inserted
		r.res.StorageTokens = res.Inserted
		s.counters.StoragePrefetchedTokens += res.Inserted
		if res.Missing || res.Blocked {
			s.counters.StorageInsertDroppedTokens += int64(completed) * ps
		}
	}
	s.tree.ReleaseHostReservation(release)
	if op.pinned != nil {
		s.tree.ReleaseHost(op.pinned)
	}
	st.occupied -= op.hit
	r.prefetch = nil
}

// finishStorage ends a run: backups still in flight land (they complete
// after the last request), and every host protection is released.
func (s *Sim) finishStorage() {
	st := s.st
	if len(st.reads) > 0 || st.occupied != 0 {
		panic(fmt.Sprintf("sim: run ended with %d prefetches reading, %d tokens reserved", len(st.reads), st.occupied))
	}
	s.drainWriteBacks()
	s.landBackups(engine.Never)
	for _, op := range st.backups {
		s.tree.ReleaseHost(op.node)
	}
	st.backups, st.landed = nil, 0
}
