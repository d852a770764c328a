package sim

import (
	"fmt"
	"math"
	"slices"
	"sort"

	"github.com/kvsim/kvsim/internal/heap"
	"github.com/kvsim/kvsim/internal/invariants"
	"github.com/kvsim/kvsim/sim/engine"
	"github.com/kvsim/kvsim/tree"
)

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
	stamp   int64       // LRU stamp of pages[0] when present
	heapIdx int         // position in the LRU heap, -1 if absent
	dead    bool        // merged into its parent or deleted
	writer  int32       // the replica whose write stored the pages (a shared store's; 0 otherwise)
	lease   engine.Time // Mooncake mode: the pages may not be evicted before this time
}

func (n *l3Node) numKids() int {
	if n.index != nil {
		return len(n.index)
	}
	return len(n.kids)
}

// follow returns n's child on key's path at position d and how many of
// its pages the key matches, looking no further than position end; nil
// and 0 where the path leaves the trie.
func (n *l3Node) follow(key pathKey, d, end int) (*l3Node, int) {
	c := n.child(key.at(d))
	if c == nil {
		return nil, 0
	}
	return c, key.match(c.pages, d, end)
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
// In Mooncake mode (setMooncake) a write evicts in rounds instead
// (storeMooncake, evictRound), and a node also keeps the end of the
// lease a lookup granted its pages (lease), which a round skips; nodes
// merge only with equal leases.
//
// Costs, for a path of L pages over k trie nodes, with n stored nodes: a
// lookup is k child lookups plus the vectorised comparison of the L pages;
// a write or read adds O(log n) heap work for each node it stamps or
// splits; evicting e pages costs O(log n) for each run they span, not for
// each page. Memory is O(nodes), plus the tree keys the nodes keep alive.
type l3Store struct {
	root      *l3Node
	lru       heap.Indexed[*l3Node] // stored nodes by stamp (stamps are unique, so the order is total)
	seq       int64                 // next LRU stamp
	nodes     int                   // trie nodes, root excluded
	pages     int64                 // pages stored
	limited   bool
	capPages  int64
	evicted   int64     // pages dropped for capacity
	dirty     []*l3Node // nodes changed by the operation in progress, tidied at its end
	unchecked int       // operations since the last full check (-tags invariants)
	// A shared store's replicas: writer is the one whose write is in
	// progress, reader the one whose read is; crossRead counts the pages
	// read that another replica wrote.
	writer, reader int32
	crossRead      int64
	// Mooncake mode (setMooncake; off: exact LRU at capacity).
	mooncake bool
	hwPages  int64       // a round of evictions runs when a write brings the pages stored to this
	ratio    float64     // share of the pages stored one round evicts
	ttl      engine.Time // lease granted by a lookup
	at       engine.Time // the time of the write in progress
	rounds   int64       // eviction rounds that dropped pages
	refused  int64       // pages a write could not store
	aside    []*l3Node   // scratch: leased nodes a round skipped
	// onDrop, when set (tests), is told of every eviction: the path up to
	// the end of the dropped pages and the position of the first.
	onDrop func(path []tree.PageID, from int)
}

func newL3Store(capTokens int64, pageSize int) *l3Store {
	s := &l3Store{root: &l3Node{heapIdx: -1}}
	s.lru = heap.New(func(a, b *l3Node) bool { return a.stamp < b.stamp }, func(n *l3Node) *int { return &n.heapIdx })
	if capTokens > 0 {
		s.limited = true
		s.capPages = capTokens / int64(pageSize)
	}
	return s
}

// newL3StoreFor returns an empty store with st's capacity and eviction
// (st with defaults).
func newL3StoreFor(st StorageConfig, pageSize int) *l3Store {
	s := newL3Store(st.CapacityTokens, pageSize)
	if st.Eviction == StorageMooncake {
		s.setMooncake(st.HighWatermark, st.EvictionRatio, engine.Time(st.LeaseTTL))
	}
	return s
}

// setMooncake switches the store to Mooncake's eviction (a limited store
// only): a round of evictions drops ceil(ratio x pages stored) of the least
// recently used pages not under lease when a write finds the store full or
// brings it to watermark x capacity; a lookup leases the pages it finds for
// ttl.
func (s *l3Store) setMooncake(watermark, ratio float64, ttl engine.Time) {
	if !s.limited {
		return
	}
	s.mooncake, s.ratio, s.ttl = true, ratio, ttl
	s.hwPages = max(int64(math.Ceil(watermark*float64(s.capPages))), 1)
}

// ---- Node changes ----

// split cuts c after its first m pages (0 < m < len(c.pages)) and returns
// the new upper node, which takes c's place; c keeps the rest, so a pointer
// to c still names the node ending where it did.
func (s *l3Store) split(c *l3Node, m int) *l3Node {
	up := &l3Node{parent: c.parent, pages: c.pages[:m], present: c.present, stamp: c.stamp, heapIdx: -1, writer: c.writer, lease: c.lease}
	c.parent.replaceChild(c, up)
	c.pages = c.pages[m:]
	c.stamp += int64(m)
	c.parent = up
	up.kids = []*l3Node{c}
	s.nodes++
	if c.present {
		s.lru.Push(up)
		s.lru.Fix(c)
	}
	return up
}

// refresh marks stored c as just used.
func (s *l3Store) refresh(c *l3Node) {
	c.stamp = s.seq
	s.seq += int64(len(c.pages))
	s.lru.Fix(c)
	s.dirty = append(s.dirty, c)
}

// store makes absent c stored and just used.
func (s *l3Store) store(c *l3Node) {
	c.present = true
	c.writer = s.writer
	c.lease = 0
	c.stamp = s.seq
	s.seq += int64(len(c.pages))
	s.pages += int64(len(c.pages))
	s.lru.Push(c)
	s.dirty = append(s.dirty, c)
}

// evictOver drops the least recently used pages beyond the capacity.
func (s *l3Store) evictOver() {
	for s.limited && s.pages > s.capPages {
		x := s.lru.Min()
		if over := s.pages - s.capPages; int64(len(x.pages)) > over {
			x = s.split(x, int(over))
		}
		s.drop(x)
	}
}

// drop evicts stored x, which the LRU heap holds.
func (s *l3Store) drop(x *l3Node) {
	if s.onDrop != nil {
		var runs [][]tree.PageID
		for a := x; a.parent != nil; a = a.parent {
			runs = append(runs, a.pages)
		}
		slices.Reverse(runs)
		path := slices.Concat(runs...)
		s.onDrop(path, len(path)-len(x.pages))
	}
	s.lru.Remove(x)
	x.present, x.lease = false, 0
	s.pages -= int64(len(x.pages))
	s.evicted += int64(len(x.pages))
	s.dirty = append(s.dirty, x)
}

// evictRound is one Mooncake eviction round at s.at: it drops the least
// recently used pages whose lease has ended, need of them or
// ceil(ratio x pages stored) if more, or as many as there are. It reports
// whether it dropped any.
func (s *l3Store) evictRound(need int64) bool {
	k := max(need, int64(math.Ceil(s.ratio*float64(s.pages))), 1)
	before := s.evicted
	for k > 0 && s.lru.Len() > 0 {
		x := s.lru.Min()
		if x.lease > s.at {
			s.lru.Remove(x)
			s.aside = append(s.aside, x)
			continue
		}
		if int64(len(x.pages)) > k {
			x = s.split(x, int(k))
		}
		k -= int64(len(x.pages))
		s.drop(x)
	}
	for _, x := range s.aside {
		s.lru.Push(x)
	}
	clear(s.aside)
	s.aside = s.aside[:0]
	if s.evicted == before {
		return false
	}
	s.rounds++
	return true
}

// storeMooncake stores absent c as Mooncake would page by page: a page
// that finds the store full runs a round first and is refused if the store
// is still full (then so are the rest: no round can free more); a page
// that brings the store to the watermark runs a round after it. c keeps
// its end, whatever it stores.
func (s *l3Store) storeMooncake(c *l3Node) {
	for {
		if s.pages >= s.capPages {
			s.evictRound(s.pages + 1 - s.capPages)
			if s.pages >= s.capPages {
				s.refused += int64(len(c.pages))
				return
			}
		}
		n := min(int64(len(c.pages)), s.capPages-s.pages, max(s.hwPages-s.pages, 1))
		x := c
		if n < int64(len(c.pages)) {
			x = s.split(c, int(n))
		}
		s.store(x)
		if s.pages >= s.hwPages {
			s.evictRound(0)
		}
		if x == c {
			return
		}
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
// without copying: same presence, consecutive stamps (and writer and
// lease), and c's pages right
// after p's in the same array (as the two halves of a split are).
func mergeable(p, c *l3Node) bool {
	return p.parent != nil && p.numKids() == 1 && p.present == c.present &&
		(!p.present || p.stamp+int64(len(p.pages)) == c.stamp && p.writer == c.writer && p.lease == c.lease) && adjacent(p.pages, c.pages)
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
		s.lru.Remove(c)
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
		c, m := n.follow(key, d, key.len())
		if c == nil {
			break
		}
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
		c, m := n.follow(key, d, hi)
		if c == nil {
			break
		}
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

// write stores the spans of key (sorted, disjoint) at time at, page by
// page in path order: a stored page becomes the most recently used, an
// absent one is added and the least recently used page dropped if storage
// is over capacity (in Mooncake mode, storeMooncake's rounds instead). The path up to the last span is created as needed, from key's
// own arrays, which must never change. Pages are handled a run at a time;
// the result is the page-by-page one because a run of added pages only
// appends to the LRU order, and every run's presence is read after the
// evictions of the runs before it.
func (s *l3Store) write(key pathKey, spans []span, at engine.Time) {
	s.at = at
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
			switch {
			case c.present:
				s.refresh(c)
			case s.mooncake:
				s.storeMooncake(c)
			default:
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
	s.eachStored(key, lo, hi, func(c *l3Node) {
		if c.writer != s.reader {
			s.crossRead += int64(len(c.pages))
		}
		s.refresh(c)
	})
}

// lease grants the stored pages among [lo, hi) of key a lease until at +
// ttl (a Mooncake existence query that found them at time at); no-op
// outside Mooncake mode.
func (s *l3Store) lease(key pathKey, lo, hi int, at engine.Time) {
	if !s.mooncake || lo >= hi {
		return
	}
	s.eachStored(key, lo, hi, func(c *l3Node) {
		c.lease = max(c.lease, at+s.ttl)
		s.dirty = append(s.dirty, c)
	})
}

// eachStored calls f, in path order, on nodes holding exactly the stored
// pages among [lo, hi) of key (splitting nodes at lo and hi), then tidies.
// Absent pages are skipped; the walk stops where the path leaves the trie.
func (s *l3Store) eachStored(key pathKey, lo, hi int, f func(c *l3Node)) {
	n, d := s.root, 0
	for d < hi {
		c, m := n.follow(key, d, hi)
		if c == nil {
			break
		}
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
			f(c)
		}
		if !full {
			break
		}
		n, d = c, d+len(c.pages)
	}
	s.tidy()
}

// check panics if the store breaks an invariant (with -tags invariants).
// The full check costs O(n log n), so it runs once per operation while the
// store is small and once every nodes/64 operations beyond that: amortised
// O(log n) an operation, so that a fleet of replicas sharing a store of
// millions of pages still runs under the invariants build (checked at
// every operation, a 2 M-token shared store took over ten minutes for
// 300 requests).
func (s *l3Store) check() {
	if !invariants.Enabled {
		return
	}
	if s.unchecked++; s.unchecked*64 < s.nodes {
		return
	}
	s.unchecked = 0
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
		if !n.present && n.lease != 0 {
			return fmt.Errorf("storage: absent node with a lease")
		}
		if n.present != (n.heapIdx >= 0) || n.heapIdx >= s.lru.Len() {
			return fmt.Errorf("storage: heap index %d of a node stored=%v", n.heapIdx, n.present)
		}
		if n.present {
			pages += int64(len(n.pages))
			runs = append(runs, run{n.stamp, n.stamp + int64(len(n.pages))})
		}
	}
	if nodes != s.nodes || pages != s.pages || len(runs) != s.lru.Len() {
		return fmt.Errorf("storage: counted %d nodes, %d pages, %d stored nodes; the store says %d, %d, %d", nodes, pages, len(runs), s.nodes, s.pages, s.lru.Len())
	}
	if !s.lru.Valid() {
		return fmt.Errorf("storage: LRU heap order or index slots broken")
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
