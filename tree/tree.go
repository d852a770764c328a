package tree

import (
	"bytes"
	"fmt"
	"unsafe"

	"github.com/kvsim/kvsim/internal/heap"
)

// Tree is a paged radix tree of prompt prefixes with SGLang HiCache's device
// and host tiers, per-lane capacities, locks and eviction orders. It keeps
// token counts, not KV data: it says what is cached where, and the simulator
// decides when transfers happen.
//
// A Tree is not safe for concurrent use.
type Tree struct {
	cfg  Config
	root *Node

	nextID NodeID
	seq    int64 // access/creation stamp counter
	now    int64 // latest simulated time seen

	cp       int
	treeDev  []int64 // device tokens held by tree nodes, per lane
	held     []int64 // device tokens held by requests outside the tree, per lane
	hostUsed []int64 // host tokens held by tree nodes, per lane
	hostRes  []int64 // host tokens reserved for in-flight storage prefetches, per lane
	evict    []int64 // device tokens in unlocked nodes (SGLang evictable_size_), per lane
	prot     []int64 // device tokens in locked nodes (SGLang protected_size_), per lane

	devHeap  nodeHeap // evictable device leaves
	hostHeap nodeHeap // evictable host-only leaves
	protHeap nodeHeap // SegmentedLRU protected segment, LRU first
	protTok  int64    // tokens in the protected segment
	protCap  int64    // capacity of the protected segment

	writes []Transfer // in-flight write-through copies, oldest first
	heldWB []*Node    // write-back copies holding a host protection (Config.HoldWriteBacks)
	loads  []Transfer // in-flight load-backs, oldest first

	nodes int // nodes in the tree, root excluded
	stats Stats

	oracle Oracle // Belady only

	residency ResidencyFunc // ObserveResidency's observer; nil: none

	scratch []int64
	pathBuf []*Node   // walkFrom's path, reused
	keyBuf  []PageRun // pageKey's runs, reused
	leafBuf []PageRun // a new leaf's runs, reused
	hitBuf  []*Node   // Insert's nodes to count hits on, reused
}

// Transfer is one queued copy between tiers: the node it concerns and its
// size. For a load-back, Node is the deepest loaded node (the one locked
// until the load is acknowledged) and Tokens covers the whole loaded chain.
type Transfer struct {
	Node   *Node
	Tokens int64
	Lanes  []int64 // tokens per lane
}

// Stats are cumulative token counters.
type Stats struct {
	DeviceEvicted   int64 // tokens removed from the device by eviction
	Demoted         int64 // of which kept as host-only copies
	Deleted         int64 // of which dropped with no copy left
	HostEvicted     int64 // host-only tokens dropped by host eviction
	WrittenThrough  int64 // tokens queued device->host by write-through
	WrittenBack     int64 // tokens written device->host synchronously by write-back eviction
	WriteFailures   int64 // write-backups that found no host space
	LoadedBack      int64 // tokens queued host->device
	LoadSkipped     int64 // host hits below the load-back threshold (recomputed)
	LoadFailed      int64 // host hits that found no device space (recomputed)
	Splits          int64 // node splits
	AdoptedFromHost int64 // host-only tokens re-inserted by a request that recomputed them
	// InsertedFromStorage counts host-only tokens added by InsertHost.
	InsertedFromStorage int64
}

// New returns an empty tree.
func New(cfg Config) (*Tree, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	t := &Tree{cfg: cfg, cp: cfg.CP}
	t.treeDev = make([]int64, t.cp)
	t.held = make([]int64, t.cp)
	t.hostUsed = make([]int64, t.cp)
	t.hostRes = make([]int64, t.cp)
	t.evict = make([]int64, t.cp)
	t.prot = make([]int64, t.cp)
	t.scratch = make([]int64, t.cp)
	t.devHeap = heap.New(t.evictsBefore, func(n *Node) *int { return &n.devIdx })
	t.hostHeap = heap.New(t.evictsBefore, func(n *Node) *int { return &n.hostIdx })
	t.protHeap = heap.New(func(a, b *Node) bool { return a.accessSeq < b.accessSeq }, func(n *Node) *int { return &n.protIdx })
	t.protCap = int64(cfg.ProtectedShare * float64(cfg.DeviceTokens*int64(cfg.CP)))
	t.root = &Node{id: 0, lanes: make([]int64, t.cp), device: true, host: true, lockRef: 1, devIdx: -1, hostIdx: -1, protIdx: -1}
	t.nextID = 1
	return t, nil
}

// Config returns the tree's configuration with defaults filled in.
func (t *Tree) Config() Config { return t.cfg }

// Root returns the root node. It holds no pages and is never evicted.
func (t *Tree) Root() *Node { return t.root }

// Stats returns the cumulative counters.
func (t *Tree) Stats() Stats { return t.stats }

// Nodes returns the number of nodes, root excluded.
func (t *Tree) Nodes() int { return t.nodes }

// DeviceCapacity returns each lane's device capacity in tokens.
func (t *Tree) DeviceCapacity() int64 { return t.cfg.DeviceTokens }

// HostCapacity returns each lane's host capacity in tokens (0: no host tier).
func (t *Tree) HostCapacity() int64 { return t.cfg.HostTokens }

// HasHost reports whether the tree has a host tier.
func (t *Tree) HasHost() bool { return t.cfg.HostTokens > 0 }

// DeviceFree returns the free device tokens of lane o (capacity minus tree
// and request holdings).
func (t *Tree) DeviceFree(o int) int64 { return t.cfg.DeviceTokens - t.treeDev[o] - t.held[o] }

// DeviceUsed returns the device tokens of lane o held by the tree.
func (t *Tree) DeviceUsed(o int) int64 { return t.treeDev[o] }

// Held returns the device tokens of lane o held by requests outside the
// tree.
func (t *Tree) Held(o int) int64 { return t.held[o] }

// HostUsed returns the host tokens of lane o held by the tree.
func (t *Tree) HostUsed(o int) int64 { return t.hostUsed[o] }

// HostFree returns the free host tokens of lane o: capacity minus the tree's
// host copies and the reservations of in-flight prefetches.
func (t *Tree) HostFree(o int) int64 { return t.cfg.HostTokens - t.hostUsed[o] - t.hostRes[o] }

// HostReserved returns the host tokens of lane o reserved by
// [Tree.ReserveHost] and not yet inserted or released.
func (t *Tree) HostReserved(o int) int64 { return t.hostRes[o] }

// HostReservedTotal returns the reserved host tokens over all lanes.
func (t *Tree) HostReservedTotal() int64 { return sum(t.hostRes) }

// Evictable returns lane o's device tokens in unlocked nodes (SGLang's
// evictable_size()).
func (t *Tree) Evictable(o int) int64 { return t.evict[o] }

// Protected returns lane o's device tokens in locked nodes (SGLang's
// protected_size()).
func (t *Tree) Protected(o int) int64 { return t.prot[o] }

// EvictableTotal returns the evictable device tokens over all lanes.
func (t *Tree) EvictableTotal() int64 { return sum(t.evict) }

// DeviceTotal returns the device tokens in the tree over all lanes.
func (t *Tree) DeviceTotal() int64 { return sum(t.treeDev) }

// HostTotal returns the host tokens in the tree over all lanes.
func (t *Tree) HostTotal() int64 { return sum(t.hostUsed) }

func sum(xs []int64) int64 {
	var s int64
	for _, x := range xs {
		s += x
	}
	return s
}

// advance records the simulated time of an operation. Time never goes back.
func (t *Tree) advance(now int64) {
	if now < t.now {
		panic(fmt.Sprintf("tree: time went back from %d to %d", t.now, now))
	}
	t.now = now
}

// stamp marks n as accessed now.
func (t *Tree) stamp(n *Node) {
	t.seq++
	n.accessSeq = t.seq
	n.lastAccess = t.now
	t.refresh(n)
	if n.protIdx >= 0 {
		t.protHeap.Fix(n)
	}
}

// key returns n's eviction key under the configured strategy: smaller is
// evicted first. Accesses and creations are ordered by tree-wide stamps, so
// keys are distinct; the node id breaks any remaining tie.
func (t *Tree) key(n *Node) (int64, int64) {
	switch t.cfg.Eviction {
	case LFU:
		return n.hitCount, n.accessSeq
	case FIFO:
		return n.createdSeq, 0
	case MRU:
		return -n.accessSeq, 0
	case FILO:
		return -n.createdSeq, 0
	case Priority:
		return n.priority, n.accessSeq
	case SLRU, SegmentedLRU:
		return t.segment(n), n.accessSeq
	case Belady:
		// Furthest next use first: the key is its negation, and
		// never-needed nodes (MaxInt64) come first, by node id.
		return -n.nextUse, 0
	default:
		return n.accessSeq, 0
	}
}

// segment is n's SLRU segment: 0 probation, 1 protected.
func (t *Tree) segment(n *Node) int64 {
	switch t.cfg.Eviction {
	case SegmentedLRU:
		if n.protected {
			return 1
		}
	default:
		if n.hitCount >= t.cfg.ProtectedHits {
			return 1
		}
	}
	return 0
}

// SLRUKey returns n's segmented-LRU eviction key, (segment, last access
// stamp): probation (0) before protected (1), least recently used first.
// Under SegmentedLRU the segment is the node's membership; under every other
// strategy it is SGLang's rule (hit count >= ProtectedHits). The eviction
// planner orders its candidates by this key.
func (t *Tree) SLRUKey(n *Node) (segment int, lastAccess int64) {
	return int(t.segment(n)), n.accessSeq
}

func (t *Tree) evictsBefore(a, b *Node) bool {
	a1, a2 := t.key(a)
	b1, b2 := t.key(b)
	if a1 != b1 {
		return a1 < b1
	}
	if a2 != b2 {
		return a2 < b2
	}
	return a.id < b.id
}

// refresh puts n into or out of the eviction heaps after any change to its
// residency, locks, children or key.
func (t *Tree) refresh(n *Node) {
	if n.parent == nil {
		return
	}
	if t.cfg.Eviction == Belady {
		n.nextUse = t.nextUse(n)
	}
	t.devHeap.Set(n, n.device && n.lockRef == 0 && n.devKids == 0)
	t.hostHeap.Set(n, !n.device && n.host && n.lockRef == 0 && n.hostRef == 0 && len(n.kids) == 0)
}

func (t *Tree) newNode(parent *Node, key []PageRun, pages []PageID, depth int64) *Node {
	np := int64(len(pages))
	if key != nil {
		np = runsLen(key)
	}
	n := &Node{
		id: t.nextID, parent: parent, key: key, pages: pages, npages: np, depth: depth,
		tokens: np * int64(t.cfg.PageSize),
		lanes:  make([]int64, t.cp),
		devIdx: -1, hostIdx: -1, protIdx: -1,
	}
	t.nextID++
	t.oracleIDs(n)
	ps := int64(t.cfg.PageSize)
	addLaneTokens(t.cfg.Lanes, ps, int64(t.cp), depth*ps, (depth+np)*ps, n.lanes)
	t.seq++
	n.createdSeq = t.seq
	n.accessSeq = t.seq
	n.created = t.now
	n.lastAccess = t.now
	t.nodes++
	return n
}

// addLanes adds sign * lanes to dst.
func addLanes(dst, lanes []int64, sign int64) {
	for o, v := range lanes {
		dst[o] += sign * v
	}
}

// setDevice changes n's device residency, keeping every per-lane account and
// the parent's device-child count right.
func (t *Tree) setDevice(n *Node, on bool) {
	if n.device == on {
		return
	}
	n.device = on
	sign := int64(1)
	if !on {
		sign = -1
	}
	addLanes(t.treeDev, n.lanes, sign)
	if n.lockRef > 0 {
		addLanes(t.prot, n.lanes, sign)
	} else {
		addLanes(t.evict, n.lanes, sign)
	}
	if on {
		n.parent.devKids++
	} else {
		n.parent.devKids--
		if n.protected {
			t.unprotect(n)
		}
	}
	t.refresh(n)
	t.refresh(n.parent)
	t.observe(n, true, on)
}

func (t *Tree) setHost(n *Node, on bool) {
	if n.host == on {
		return
	}
	n.host = on
	if on {
		addLanes(t.hostUsed, n.lanes, 1)
	} else {
		addLanes(t.hostUsed, n.lanes, -1)
	}
	t.refresh(n)
	t.observe(n, false, on)
}

// ---- Matching ----

// MatchResult is what a prefix match found. Token counts are whole pages.
type MatchResult struct {
	// DeviceTokens is the matched prefix on the device (SGLang's
	// len(device_indices)).
	DeviceTokens int64
	// HostTokens is the matched prefix, after the device part, that is only
	// on the host (SGLang's host_hit_length).
	HostTokens int64
	// Last is the deepest matched node (the root if nothing matched).
	Last *Node
	// LastDevice is the deepest device-resident matched node (SGLang's
	// last_device_node): the node a request locks.
	LastDevice *Node
	// LastHost is the deepest matched node with a host copy, the root
	// counting as one (SGLang's last_host_node).
	LastHost *Node
}

// Match finds the longest page-aligned prefix of key in the tree at
// simulated time now, splitting a node that matches only in part and
// refreshing the access time of every node on the path (SGLang's
// match_prefix). It does not lock anything or count hits.
func (t *Tree) Match(key []PageID, now int64) MatchResult {
	return t.MatchRuns(t.pageKey(key), now)
}

// MatchRuns is Match for a key given as runs of consecutive page ids (each
// run at least one page; any cut of the pages into runs matches alike).
func (t *Tree) MatchRuns(key []PageRun, now int64) MatchResult {
	checkRuns(key)
	t.advance(now)
	last := t.walk(key, func(*Node) {})
	r := MatchResult{Last: last}
	n := last
	for !n.device {
		r.HostTokens += n.tokens
		n = n.parent
	}
	r.LastDevice = n
	for ; n.parent != nil; n = n.parent {
		r.DeviceTokens += n.tokens
	}
	n = last
	for n.parent != nil && !n.host {
		n = n.parent
	}
	r.LastHost = n
	t.check()
	return r
}

// walk descends along key from the root, stamping each node it passes and
// splitting the last one if it matches only in part; visit is called on
// each matched node, top-down. It returns the deepest matched node.
func (t *Tree) walk(key []PageRun, visit func(*Node)) *Node {
	return t.walkFrom(t.root, key, visit)
}

// walkFrom is walk for a key whose first pages are the path from the root
// through from (see [Tree.InsertFrom]): the nodes of that path are stamped
// and visited top-down, exactly as walk would after matching them in full,
// without comparing their pages; the descent then goes on below from.
func (t *Tree) walkFrom(from *Node, key []PageRun, visit func(*Node)) *Node {
	t.stamp(t.root)
	n := from
	k := keyCursor{runs: key}
	if from != t.root {
		path := t.pathBuf[:0]
		for x := from; x.parent != nil; x = x.parent {
			path = append(path, x)
		}
		for i := len(path) - 1; i >= 0; i-- {
			t.stamp(path[i])
			visit(path[i])
		}
		clear(path)
		t.pathBuf = path[:0]
		k.skip(from.depth + from.npages)
	}
	for !k.done() {
		c := n.child(k.first())
		if c == nil {
			break
		}
		t.stamp(c)
		m := k.matchNode(c)
		if m < c.npages {
			c = t.split(c, m)
			visit(c)
			n = c
			break
		}
		visit(c)
		n = c
		k.skip(m)
	}
	return n
}

// pageKey returns key as runs, in a buffer reused by the next call.
func (t *Tree) pageKey(key []PageID) []PageRun {
	t.keyBuf = AppendRuns(t.keyBuf[:0], key)
	return t.keyBuf
}

// leafKey returns pages [lo, hi) of key for a new node, in the form that
// costs less memory (see compactKey).
func (t *Tree) leafKey(key []PageRun, lo, hi int64) ([]PageRun, []PageID) {
	t.leafBuf = AppendRunRange(t.leafBuf[:0], key, lo, hi)
	return compactKey(t.leafBuf)
}

// checkRuns panics on a run of fewer than one page: a caller bug.
func checkRuns(key []PageRun) {
	for _, x := range key {
		if x.N < 1 {
			panic(fmt.Sprintf("tree: a key's run of %d pages from %d", x.N, x.First))
		}
	}
}

// CommonPrefix returns the number of leading pages a and b share, comparing
// long keys with the runtime's vectorised memory comparison (as the tree's
// own matching does). Package sim indexes its storage tier with it.
func CommonPrefix(a, b []PageID) int { return matchLen(a, b) }

// matchLen returns the length of the common prefix of a and b. Long keys
// (page size 1 and long prompts) are compared in chunks with the runtime's
// vectorised memory comparison before the first difference is located.
func matchLen(a, b []PageID) int {
	n := min(len(a), len(b))
	i := 0
	const chunk = 32
	for ; i+chunk <= n; i += chunk {
		if !bytes.Equal(pageBytes(a[i:i+chunk]), pageBytes(b[i:i+chunk])) {
			break
		}
	}
	for ; i < n; i++ {
		if a[i] != b[i] {
			return i
		}
	}
	return n
}

// pageBytes views pages as bytes, for comparison only.
func pageBytes(p []PageID) []byte {
	if len(p) == 0 {
		return nil
	}
	return unsafe.Slice((*byte)(unsafe.Pointer(&p[0])), len(p)*int(unsafe.Sizeof(p[0])))
}

// split cuts c after its first m pages (0 < m < c.npages) and returns the
// new upper node, which takes c's place under c's parent. As in SGLang's
// _split_node, the upper node copies the lock count, hit count, priority and
// residency (so every holder of c also holds the prefix), and it is a fresh
// node: new id, created and accessed now. The host protection count
// (ProtectHost) stays with c alone: c keeps the upper node from being a
// leaf, so the upper node's host copy is safe from host eviction while c is
// protected, and ReleaseHost(c) then leaves no stray count behind.
func (t *Tree) split(c *Node, m int64) *Node {
	t.stats.Splits++
	parent := c.parent
	var upKey []PageRun
	var upPages []PageID
	if c.key != nil {
		upKey = AppendRunRange(nil, c.key, 0, m)
	}
	if c.pages != nil {
		upPages = c.pages[:m:m]
	}
	up := t.newNode(parent, upKey, upPages, c.depth)
	up.device, up.host = c.device, c.host
	up.lockRef = c.lockRef
	up.hitCount, up.priority = c.hitCount, c.priority
	parent.replaceChild(c, up)

	// c keeps the rest. Per-lane counts move from c to up; tier totals do not
	// change, because split only repartitions tokens.
	if c.key != nil {
		c.key = AppendRunRange(nil, c.key, m, c.npages)
	}
	if c.pages != nil {
		c.pages = c.pages[m:]
	}
	c.npages -= m
	c.depth += m
	c.tokens -= up.tokens
	for o := range c.lanes {
		c.lanes[o] -= up.lanes[o]
	}
	c.parent = up
	if t.oracle != nil {
		c.oFirst = -1
		if up.oLast >= 0 {
			c.oFirst = t.oracle.Child(up.oLast, c.first())
		}
	}
	up.addChild(c)
	if c.protected {
		// Both halves stay in the protected segment.
		up.protected = true
		t.protHeap.Push(up)
	}
	t.refresh(up)
	t.refresh(c)
	if c.protIdx >= 0 {
		t.protHeap.Fix(c)
	}
	return up
}
