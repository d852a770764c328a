package policy

import (
	"cmp"
	"errors"
	"fmt"
	"math"
	"slices"

	"github.com/kvsim/kvsim/internal/invariants"
)

// Request is one request of a block-hash trace: one page per block.
type Request struct {
	// Timestamp orders the requests (any unit; the CLI uses nanoseconds
	// since the trace start). [Run] replays requests in Timestamp order,
	// ties in input order.
	Timestamp int64
	// Pages are the request's page keys from the first page on. Page i's
	// identity is the whole sequence Pages[0..i], as in SGLang's
	// simulator, which builds a trie keyed by the hash-id sequence.
	// The slice is only read.
	Pages []uint64
}

// Result holds the counters of one simulation, as SGLang's simulator
// defines them (see doc.go, "Counters"). The JSON names are SGLang's; the
// last four fields are SGLang's extra counters, printed in the terminal
// table but not in the JSON object.
type Result struct {
	// Policy is the policy that produced the result.
	Policy Policy `json:"-"`

	Requests           int     `json:"requests"`
	TotalInputPages    int     `json:"total_input_pages"`
	L1HitPages         int     `json:"l1_hit_pages"`
	L2HitPages         int     `json:"l2_hit_pages"`
	MissPages          int     `json:"miss_pages"`
	L1HitRate          float64 `json:"l1_hit_rate"`
	L1L2HitRate        float64 `json:"l1_l2_hit_rate"`
	L1Evictions        int     `json:"l1_evictions"`
	L2Evictions        int     `json:"l2_evictions"`
	DToHDemotions      int     `json:"d_to_h_demotions"`
	FailedHAllocations int     `json:"failed_h_allocations"`
	DPages             int     `json:"d_pages"`
	HPages             int     `json:"h_pages"`
	DuplicateRatio     float64 `json:"duplicate_ratio"`

	// DedupL2Evictions is SGLang's dh_to_d_l2_dedup_evictions: host
	// copies of device-resident pages dropped by L2 eviction.
	DedupL2Evictions int `json:"-"`
	// DeletedL2Evictions is SGLang's h_to_deleted_evictions: host copies
	// whose page left the cache entirely.
	DeletedL2Evictions int `json:"-"`
	// DHPages is SGLang's dh_pages: pages resident on both tiers at the end.
	DHPages int `json:"-"`
	// UniqueCachedPages is SGLang's unique_cached_pages:
	// DPages + HPages - DHPages.
	UniqueCachedPages int `json:"-"`
}

// ErrAborted is matched (errors.Is) by every [*AbortError].
var ErrAborted = errors.New("SGLang's policy simulator aborts on this input")

// AbortError reports a request at which SGLang's simulator raises an
// AssertionError and stops without results. It happens under
// BoundaryL1L2 when a demotion's L2 eviction strips the host copy of the
// victim's parent, leaving a host-only page below a device-only one, and a
// later L1 eviction must delete that device-only page (see doc.go,
// "Aborts"). After an AbortError the Simulator refuses further requests.
type AbortError struct {
	// Request is the 1-based position of the request in replay order.
	Request int
	// Index is the request's index in the slice given to [Run], or -1 when
	// the error comes from [Simulator.Process].
	Index int
	// Reason is the AssertionError message of SGLang's simulator.
	Reason string
}

// Error describes the abort.
func (e *AbortError) Error() string {
	where := fmt.Sprintf("request %d replayed", e.Request)
	if e.Index >= 0 {
		where = fmt.Sprintf("input request %d (%s)", e.Index, where)
	}
	return fmt.Sprintf("%s: %v (AssertionError: %s)", where, ErrAborted, e.Reason)
}

// Unwrap returns ErrAborted.
func (e *AbortError) Unwrap() error { return ErrAborted }

// abort is panicked inside a request and recovered by Process.
type abort string

// nodeID is a page's dense id: the index of its trie node in the arena.
// The root is node 0; noNode marks "none" in links.
type nodeID int32

const (
	rootID nodeID = 0
	noNode nodeID = -1
)

// checkBudget bounds the average cost of the -tags invariants self-check
// per request, in trie nodes visited.
const checkBudget = 256

// node is one page of the trie: the page key sequence from the root to it.
// Ids are dense slots of an arena that holds the live pages only: a page
// that leaves the cache entirely is detached (removed from the child
// index, hit count forgotten) and its slot goes to a free list, from which
// the next new page takes it. The arena therefore grows with the most
// pages ever live at once (about L1Pages + L2Pages), not with the distinct
// pages of the trace; a page that comes back is a new page, to the model
// and to the arena.
//
// node holds what every request reads and writes, in 32 bytes, so that
// two nodes share a cache line; what only BoundaryL1L2's eviction order and
// the checks read is in Simulator.info, slot for slot, and the hit count
// of a write-through threshold above 1 in Simulator.hits. A free slot has
// parent noNode and is linked through next.
type node struct {
	parent nodeID
	// prev and next link the node into the recency list of its residency
	// class: the device list when hasD, the host-only list when hasH and
	// not hasD, none otherwise (see lru.go).
	prev, next nodeID
	dChildren  int32 // live children with hasD
	hChildren  int32 // live children with hasH
	nChildren  int32 // live children
	// key is the page key, or noKey32 for a key that does not fit (the
	// full key is then in Simulator.keys; see childIndex).
	key        uint32
	hasD, hasH bool // resident on device (L1) / host (L2)
	inMap      bool // indexed in childIndex.other, key in Simulator.keys
}

// noKey32 is node.key for a page key of 2^32-1 or more.
const noKey32 = math.MaxUint32

// key32 returns node.key for page key p.
func key32(p uint64) uint32 { return uint32(min(p, noKey32)) }

// pageKey returns v's page key.
func (s *Simulator) pageKey(v nodeID) uint64 {
	if n := &s.nodes[v]; !n.inMap {
		return uint64(n.key)
	}
	return s.keys[v]
}

// live reports whether the node holds a copy or has live children.
// Between requests every node in the trie holds a copy (see detach).
// Within a request, a node created by the walk is in the trie before it
// gets its copy, but the walk never asks.
func (n *node) live() bool { return n.hasD || n.hasH || n.nChildren > 0 }

// nodeInfo is the cold part of a node, 16 bytes: what only BoundaryL1L2's
// eviction order and the checks read, so only they keep it
// (Simulator.stamp). A page's fields share a cache line, since a victim
// search or a heap update that reads one reads the others.
type nodeInfo struct {
	at    int64 // last access: the request clock of the page's last touch
	depth int32 // pages from the root; the root is 0
	pos   int32 // index in the duplicate heap, -1 when absent (heap.go)
}

// guard names the pages that a host reservation protects from the L2
// evictions it triggers (BoundaryL1L2; see reserveHost). Only duplicate
// leaves can be protected and be candidates at once: a reservation
// protects device pages, and host-only pages are never on the device.
type guard struct {
	// path protects the current request's pages: exactly the pages whose
	// last access is the clock, since the walk has stamped each of them
	// and no other page.
	path bool
	// a and b are protected pages, noNode for none.
	a, b nodeID
}

// guards reports whether g protects page v, whose last access is at.
func (s *Simulator) guards(g guard, v nodeID, at int64) bool {
	return g.path && at == s.clock || v == g.a || v == g.b
}

type edge struct {
	parent nodeID
	page   uint64
}

// Simulator replays requests through the page-level L1/L2 model. It is not
// safe for concurrent use.
type Simulator struct {
	cfg   Config
	nodes []node
	// keys holds, slot for slot with nodes, the page key of the nodes
	// indexed in the child index's map (node.inMap); other slots are stale.
	// It stays empty until the map gets its first node.
	keys []uint64
	free nodeID // the first free slot, noNode when none (see node)
	// hits is MainWriteThrough's per-page hit count, slot for slot with
	// nodes when WriteThroughThreshold is above 1, else empty (at 1 a
	// touched page always qualifies). It saturates at math.MaxInt32,
	// which takes as many requests to the page.
	hits []int32
	// info is slot for slot with nodes when stamp is set, else empty.
	info  []nodeInfo
	index childIndex
	live  int // live nodes, the root excluded
	clock int64
	err   error // the abort that stopped the simulator, or nil

	dPages, hPages, dhPages int
	res                     Result

	// SGLang's three candidate sets (see doc.go, "Eviction order and
	// tie-breaking"). The L1 and host-only candidates are read off two
	// recency lists that are kept sorted by construction (lru.go); the
	// duplicate leaves of BoundaryL1L2 sit in an index-tracked heap
	// (heap.go), kept exact: a node is a member exactly when it is a
	// valid candidate. Under MainWriteThrough the heap stays empty.
	device, hostOnly recencyList
	dup              leafHeap

	guard guard // what the reservation under way protects (reserveHost)
	// stamp is whether Process keeps info: BoundaryL1L2's victim
	// searches read it, MainWriteThrough's only in the checks.
	stamp   bool
	path    []nodeID
	missing []nodeID
	one     [2]nodeID
}

// ErrNeedsTrace is matched (errors.Is) by the error of [New] for
// [Belady], which must see the whole trace in advance: use [Run].
var ErrNeedsTrace = errors.New("belady needs the whole trace in advance; replay it with Run")

// New returns an empty simulator, or the configuration's errors. Belady
// has no online simulator: New returns [ErrNeedsTrace] for it.
func New(cfg Config) (*Simulator, error) {
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("policy config: %w", err)
	}
	if cfg.Policy == Belady {
		return nil, ErrNeedsTrace
	}
	return newSimulator(cfg, 0), nil
}

// arenaSlack is how many slots past L1Pages + L2Pages [Run] allocates up
// front: the device holds a request's new pages before L1 eviction.
const arenaSlack = 1024

// newSimulator returns an empty simulator for a valid online cfg, with
// room for about hint live pages before the arena grows.
func newSimulator(cfg Config, hint int) *Simulator {
	hint = max(hint, 1024)
	s := &Simulator{cfg: cfg, nodes: make([]node, 0, hint), free: noNode}
	s.nodes = append(s.nodes, node{parent: noNode, prev: noNode, next: noNode})
	if cfg.Policy == MainWriteThrough && cfg.WriteThroughThreshold > 1 {
		s.hits = make([]int32, 1, hint)
	}
	s.device = recencyList{head: noNode, tail: noNode}
	s.hostOnly = recencyList{head: noNode, tail: noNode}
	s.dup = leafHeap{info: &s.info}
	s.res.Policy = cfg.Policy
	s.stamp = cfg.Policy == BoundaryL1L2 || invariants.Enabled
	if s.stamp {
		s.info = make([]nodeInfo, 1, hint)
		s.info[rootID].pos = -1
	}
	return s
}

// Run replays reqs in Timestamp order (a stable sort, as SGLang's
// simulator does) through a new simulator and returns its result. reqs is
// not modified. If SGLang's simulator would abort, the error is an
// [*AbortError] whose Index is the request's index in reqs. Under
// [Belady] the whole ordered trace is the oracle's future.
func Run(cfg Config, reqs []Request) (Result, error) {
	if err := cfg.Validate(); err != nil {
		return Result{}, fmt.Errorf("policy config: %w", err)
	}
	order := replayOrder(reqs)
	if cfg.Policy == Belady {
		return runBelady(cfg.L1Pages, reqs, order, nil)
	}
	pages, maxKey := 0, uint64(0)
	for _, r := range reqs {
		pages += len(r.Pages)
		for _, p := range r.Pages {
			maxKey = max(maxKey, p)
		}
	}
	s := newSimulator(cfg, min(pages, cfg.L1Pages+cfg.L2Pages)+arenaSlack)
	s.index.reserve(maxKey, pages)
	for _, i := range order {
		if _, _, err := s.Process(reqs[i].Pages); err != nil {
			ae := *err.(*AbortError) // Process returns no other error
			ae.Index = i
			return Result{}, &ae
		}
	}
	return s.Result(), nil
}

// replayOrder returns the indexes of reqs in replay order: by Timestamp,
// ties in input order.
func replayOrder(reqs []Request) []int {
	order := make([]int, len(reqs))
	for i := range order {
		order[i] = i
	}
	if slices.IsSortedFunc(reqs, func(a, b Request) int { return cmp.Compare(a.Timestamp, b.Timestamp) }) {
		return order // most traces are in time order already
	}
	slices.SortStableFunc(order, func(a, b int) int { return cmp.Compare(reqs[a].Timestamp, reqs[b].Timestamp) })
	return order
}

// Process replays one request (the caller orders requests) and returns its
// L1 and L2 hit pages. pages is only read. The error is an [*AbortError]
// when SGLang's simulator would abort at this request; the simulator is
// then stopped and returns that error for every later request.
func (s *Simulator) Process(pages []uint64) (l1Hits, l2Hits int, err error) {
	if s.err != nil {
		return 0, 0, s.err
	}
	defer func() {
		if r := recover(); r != nil {
			reason, ok := r.(abort)
			if !ok {
				panic(r)
			}
			s.err = &AbortError{Request: s.res.Requests, Index: -1, Reason: string(reason)}
			l1Hits, l2Hits, err = 0, 0, s.err
		}
	}()
	s.clock++

	// Walk the trie along the request. Hits are the leading pages found on
	// device, then those found on host only; the first page found nowhere
	// ends the hits. Missing trie nodes are created on the way; every node
	// found is live (the walk never comes back to one it created). Each
	// page, once counted, becomes device-resident and is stamped with the
	// request clock (a host copy is kept); the pages go to the young end of
	// the device list deepest first, each just before its parent, which
	// keeps the list in (last access, deeper first) order (lru.go).
	//
	// Under MainWriteThrough the host-write step runs along the walk, page
	// by page, in the order of the step after the walk, and it chooses the
	// same victims: a page written has no host copy, so (host residency
	// being closed under ancestors) the pages below it on the path have
	// none either, are on the device or new, and no host-only page or host
	// child count depends on them.
	boundary := s.cfg.Policy == BoundaryL1L2
	path := s.path[:0]
	counting, created := true, false
	cur := rootID
	for _, p := range pages {
		c := noNode
		if !created {
			// A node created by this walk has no children yet.
			c = s.index.lookup(s.nodes, cur, p)
		}
		switch {
		case c == noNode:
			c = s.newChild(cur, p)
			counting, created = false, true
		case counting:
			switch n := &s.nodes[c]; {
			case n.hasD:
				l1Hits++
			case n.hasH:
				l2Hits++
			default:
				counting = false
			}
		}
		s.touch(c, cur)
		path = append(path, c)
		if !boundary {
			s.writeThrough(c)
		}
		cur = c
	}
	s.path = path
	s.res.Requests++
	s.res.TotalInputPages += len(pages)
	s.res.L1HitPages += l1Hits
	s.res.L2HitPages += l2Hits
	s.res.MissPages += len(pages) - l1Hits - l2Hits

	if boundary {
		s.reserveHost(path, guard{path: true, a: noNode, b: noNode})
	}

	for s.dPages > s.cfg.L1Pages {
		v := s.device.head
		if v == noNode || s.nodes[v].dChildren != 0 {
			panic("policy: L1 over capacity but the oldest device page is not a device leaf")
		}
		if boundary {
			s.boundaryEvictL1(v)
		} else {
			s.writeThroughEvictL1(v)
		}
		s.res.L1Evictions++
	}
	if invariants.Enabled {
		// O(nodes) per check: every request on small tries, and on large
		// ones every (nodes/checkBudget)-th, so that a check costs about
		// checkBudget node visits per request on average.
		if n := len(s.nodes); n <= checkBudget || s.clock%int64(n/checkBudget+1) == 0 {
			s.checkInvariants()
		}
	}
	return l1Hits, l2Hits, nil
}

// Result returns the counters so far, with the residency counters and the
// duplicate ratio taken from the current state.
func (s *Simulator) Result() Result {
	r := s.res
	if r.TotalInputPages > 0 {
		r.L1HitRate = float64(r.L1HitPages) / float64(r.TotalInputPages)
		r.L1L2HitRate = float64(r.L1HitPages+r.L2HitPages) / float64(r.TotalInputPages)
	}
	r.DPages, r.HPages, r.DHPages = s.dPages, s.hPages, s.dhPages
	r.UniqueCachedPages = s.dPages + s.hPages - s.dhPages
	if s.hPages > 0 {
		r.DuplicateRatio = float64(s.dhPages) / float64(s.hPages)
	}
	return r
}

// writeThrough is MainWriteThrough's host-write step for page id of the
// request, its pages taken parent first: the page counts one hit; if it is
// not on host, its count reached the threshold, and its parent is the root
// or on host, it gets a host copy if one can be allocated (so a whole new
// prefix can be written in one request). It is reserveHost for one page,
// cut down: no protection, since the page is on the device and L2 eviction
// under MainWriteThrough only takes host-only pages, and at most one
// eviction, since the host is never over capacity.
func (s *Simulator) writeThrough(id nodeID) {
	if s.hits != nil && s.hits[id] < math.MaxInt32 {
		s.hits[id]++
	}
	n := &s.nodes[id]
	if n.hasH || s.hits != nil && int(s.hits[id]) < s.cfg.WriteThroughThreshold {
		return
	}
	if n.parent != rootID && !s.nodes[n.parent].hasH {
		return
	}
	if s.hPages >= s.cfg.L2Pages {
		v := s.minHostOnly()
		if v == noNode {
			s.res.FailedHAllocations++
			return
		}
		s.deleteHostOnlyLeaf(v)
	}
	s.addHostCopy(id)
}

// reserveHost gives every node of nodes, device pages, a host copy, or
// none of them (BoundaryL1L2). The pages that g names are protected from
// the L2 evictions this triggers: the nodes, and the L1 victim whose
// parent they are. A failure (more pages than L2 holds, or nothing left to
// evict) counts one failed host allocation; pages evicted before a failure
// stay evicted.
func (s *Simulator) reserveHost(nodes []nodeID, g guard) bool {
	s.guard = g
	missing := s.missing[:0]
	for _, id := range nodes {
		if !s.nodes[id].hasH {
			missing = append(missing, id)
		}
	}
	if cap(missing) != cap(s.missing) {
		s.missing = missing // grown; otherwise the same array
	}
	if len(missing) == 0 {
		return true
	}
	if len(missing) > s.cfg.L2Pages {
		s.res.FailedHAllocations++
		return false
	}
	for s.hPages+len(missing) > s.cfg.L2Pages {
		if !s.evictL2One() {
			s.res.FailedHAllocations++
			return false
		}
	}
	// Deepest first (nodes run from the root down): a page whose child
	// has just got its host copy is no duplicate leaf, so under
	// BoundaryL1L2 only the deepest enters the duplicate heap, instead of
	// each page entering it and leaving when its child follows. The end
	// state, and so every later choice, is the same in any order.
	for i := len(missing) - 1; i >= 0; i-- {
		s.addHostCopy(missing[i])
	}
	return true
}

// reserveParent is reserveHost for the one page p, the device-only parent
// of L1 victim v, which has a host copy, protecting p and v: nine in ten
// of BoundaryL1L2's reservations on the Mooncake traces. The host is never
// over capacity, so it takes at most one eviction.
func (s *Simulator) reserveParent(p, v nodeID) bool {
	s.guard = guard{a: p, b: v}
	if s.hPages >= s.cfg.L2Pages && !s.evictL2One() {
		// With L2Pages 0 there is no host page, so nothing to evict.
		s.res.FailedHAllocations++
		return false
	}
	s.addHostCopy(p)
	return true
}

// evictL2One frees one host page: under BoundaryL1L2 the oldest duplicate
// host copy of a device page (the page stays on device), else the oldest
// host-only leaf (the page leaves the cache). Protected nodes are passed
// over. It reports whether a page was freed.
func (s *Simulator) evictL2One() bool {
	if s.cfg.Policy == BoundaryL1L2 {
		if i := s.minDupIndex(); i >= 0 {
			s.dropDupCopy(i)
			s.res.L2Evictions++
			s.res.DedupL2Evictions++
			return true
		}
	}
	if v := s.minHostOnly(); v != noNode {
		s.deleteHostOnlyLeaf(v)
		return true
	}
	return false
}

// minHostOnly returns the first host-only leaf in eviction order, or
// noNode. The host-only list is in (last access, deeper first) order
// (lru.go), and its first leaf is the answer, SGLang's tie-break
// (shallower first) included: two host-only leaves never share a last
// access. Pages with one last access lie on one request's path; below the
// shallower leaf on that path would be a page that is not on host (the
// leaf has no child on host) nor on the device (the leaf is not), a page
// without a copy, and there is none (see detach). checkInvariants checks
// that no host-only leaf shares its predecessor's last access.
// Reservations protect only device pages (see reserveHost), so no
// host-only page is protected; the head is a leaf in practice: a
// host-only page's host children are older, so they come first.
func (s *Simulator) minHostOnly() nodeID {
	for v := s.hostOnly.head; v != noNode; v = s.nodes[v].next {
		if s.nodes[v].hChildren == 0 {
			return v
		}
	}
	return noNode
}

// minDupIndex returns the index in the duplicate heap of the first member
// in eviction order that the current reservation does not protect, or -1:
// the top entry, usually, else minUnguarded's search.
func (s *Simulator) minDupIndex() int {
	if e := s.dup.entries; len(e) > 0 && !s.guards(s.guard, e[0].id, e[0].lastAccess) {
		return 0
	}
	return s.minUnguarded(0)
}

// minUnguarded returns the index in the duplicate heap of the first member
// in eviction order, among entry i and those below it, that the current
// reservation does not protect, or -1. It looks below protected entries
// only: at most two pages apart from the request's path, and when the
// path is protected, an entry stamped with the clock has nothing but path
// pages below it (no member has a later access).
func (s *Simulator) minUnguarded(i int) int {
	h := &s.dup
	if i >= len(h.entries) {
		return -1
	}
	e := &h.entries[i]
	if !s.guards(s.guard, e.id, e.lastAccess) {
		return i
	}
	if s.guard.path && e.lastAccess == s.clock {
		return -1
	}
	l, r := s.minUnguarded(2*i+1), s.minUnguarded(2*i+2)
	if l < 0 || r >= 0 && h.less(r, l) {
		return r
	}
	return l
}

func (s *Simulator) writeThroughEvictL1(v nodeID) {
	if s.nodes[v].hasH {
		s.dropD(v)
	} else {
		s.deleteDeviceOnlyLeaf(v)
	}
}

// boundaryEvictL1 evicts device leaf v under BoundaryL1L2. A page with a
// host copy becomes host-only once its device-only parent has a host copy
// too (so no host-only page hangs below a device-only one); if the parent
// cannot get one, v loses both copies. A device-only page is demoted: it
// and, if needed, its parent get host copies together, or v is deleted.
func (s *Simulator) boundaryEvictL1(v nodeID) {
	p := s.nodes[v].parent
	parentNeedsHost := p != rootID && s.nodes[p].hasD && !s.nodes[p].hasH
	if s.nodes[v].hasH {
		parentOK := true
		if parentNeedsHost {
			parentOK = s.reserveParent(p, v)
		}
		switch {
		case parentOK:
			s.dropD(v)
		case !s.hasHostDescendant(v):
			s.dropDupCopy(s.dup.index(v)) // a duplicate leaf: no children
			s.res.L2Evictions++
			s.res.DeletedL2Evictions++
			s.deleteDeviceOnlyLeaf(v)
		default:
			panic(abort("Cannot evict D+H node without breaking boundary"))
		}
		return
	}
	req, g := s.one[:0], guard{a: v, b: noNode}
	if parentNeedsHost {
		req, g.b = append(req, p), p
	}
	req = append(req, v)
	if s.reserveHost(req, g) {
		s.dropD(v)
		s.res.DToHDemotions++
	} else {
		s.deleteDeviceOnlyLeaf(v)
	}
}

func (s *Simulator) deleteDeviceOnlyLeaf(v nodeID) {
	n := &s.nodes[v]
	if n.hasH || n.dChildren > 0 || s.hasHostDescendant(v) {
		panic(abort("Refusing to delete a non-D-only leaf"))
	}
	s.dropD(v)
	s.detach(v)
}

func (s *Simulator) deleteHostOnlyLeaf(v nodeID) {
	n := &s.nodes[v]
	if n.hasD || !n.hasH || n.hChildren > 0 {
		panic("policy: refusing to delete a page that is not a host-only leaf")
	}
	// v leaves the host-only list, and its parent may become a leaf on
	// host: a duplicate leaf, or a host-only one (which needs no update).
	n.hasH = false
	s.hPages--
	pn := &s.nodes[n.parent]
	pn.hChildren--
	s.hostOnly.remove(s.nodes, v)
	if s.cfg.Policy == BoundaryL1L2 && pn.hasD && pn.hasH && pn.hChildren == 0 {
		// v was the parent's last host child: a duplicate leaf now.
		s.dup.push(n.parent)
	}
	s.res.L2Evictions++
	s.res.DeletedL2Evictions++
	s.detach(v)
}

// hasHostDescendant reports whether any node below v has a host copy; v
// must have no child on the device (SGLang walks the subtree). Then no
// node below v is on the device (device residency is closed under
// ancestors), and every live child's subtree holds a copy (no empty node
// is kept), so it holds a host copy: the answer is whether v has live
// children.
func (s *Simulator) hasHostDescendant(v nodeID) bool {
	n := &s.nodes[v]
	if n.dChildren != 0 {
		panic("policy: host-descendant search below a page with device children")
	}
	return n.nChildren > 0
}

// touch stamps page v of the current request, whose parent on the
// request's path is parent, and puts it on the device: in the device list
// just before parent, which the walk touched just before v, or at the young
// end when parent is the root (see Process). It keeps the counters, the
// recency lists and the duplicate heap exact.
func (s *Simulator) touch(v, parent nodeID) {
	if s.stamp {
		s.info[v].at = s.clock
	}
	at := parent
	if parent == rootID {
		at = noNode
	}
	n := &s.nodes[v]
	wasD := n.hasD
	if wasD {
		s.device.moveBefore(s.nodes, at, v)
	} else {
		n.hasD = true
		s.count(true, n.hasH, &s.dPages, &s.nodes[n.parent].dChildren)
		if n.hasH {
			s.hostOnly.remove(s.nodes, v)
		}
		s.device.insertBefore(s.nodes, at, v)
	}
	if s.cfg.Policy == BoundaryL1L2 && n.hasH && n.hChildren == 0 {
		// A duplicate leaf now; it was one before, at an older last
		// access, exactly when it was on the device.
		if wasD {
			s.dup.fix(v)
		} else {
			s.dup.push(v)
		}
	}
}

// dropD takes v off the device and keeps the counters, the recency lists
// and the duplicate heap exact; v becomes host-only if it has a host copy.
func (s *Simulator) dropD(v nodeID) {
	n := &s.nodes[v]
	if !n.hasD {
		return
	}
	n.hasD = false
	s.count(false, n.hasH, &s.dPages, &s.nodes[n.parent].dChildren)
	s.device.remove(s.nodes, v)
	if n.hasH {
		s.hostOnly.pushBack(s.nodes, v)
		if s.cfg.Policy == BoundaryL1L2 && n.hChildren == 0 {
			s.dup.remove(v) // a duplicate leaf until now
		}
	}
}

// addHostCopy gives device page v, which has none, a host copy: host
// copies are only ever made of device pages (lru.go), so v joins no list.
// Under BoundaryL1L2 v becomes a duplicate leaf when it has no host child,
// and its parent, on the device too (device residency is closed under
// ancestors; the root has no copy), stops being one when v is its first
// host child. The heap holds exactly the duplicate
// leaves, so that follows from the flags and counters, without a look at
// the heap.
func (s *Simulator) addHostCopy(v nodeID) {
	n := &s.nodes[v]
	if !n.hasD || n.hasH {
		panic("policy: host copy made of a page that is not device-only")
	}
	n.hasH = true
	s.hPages++
	s.dhPages++
	pn := &s.nodes[n.parent]
	pn.hChildren++
	if s.cfg.Policy == BoundaryL1L2 {
		if n.hChildren == 0 {
			s.dup.push(v)
		}
		if pn.hasH && pn.hChildren == 1 {
			s.dup.remove(n.parent)
		}
	}
}

// dropDupCopy takes the host copy of the duplicate leaf at entry i of the
// duplicate heap (BoundaryL1L2); the page stays on the device, and the
// caller counts the L2 eviction. The page joins no list, and its parent,
// on the device too, is a duplicate leaf now exactly when the page was its
// last host child.
func (s *Simulator) dropDupCopy(i int) {
	v := s.dup.entries[i].id
	n := &s.nodes[v]
	pn := &s.nodes[n.parent]
	n.hasH = false
	s.hPages--
	s.dhPages--
	pn.hChildren--
	if pn.hasH && pn.hChildren == 0 {
		// The parent, usually the next victim, takes v's place: one
		// sift instead of a removal and a push.
		s.dup.replaceAt(i, n.parent)
	} else {
		s.dup.removeAt(i)
	}
}

// count keeps the counters of a page that came onto a tier (on) or left
// it: the tier's pages, the pages on both tiers when the page has a copy on
// the other (both), and its parent's children on the tier.
func (s *Simulator) count(on, both bool, pages *int, parentChildren *int32) {
	d := 1
	if !on {
		d = -1
	}
	*pages += d
	if both {
		s.dhPages += d
	}
	*parentChildren += int32(d)
}

// newChild creates the trie node for page p below parent, in the first
// free slot or at the end of the arena.
func (s *Simulator) newChild(parent nodeID, p uint64) nodeID {
	id := s.free
	if id != noNode {
		s.free = s.nodes[id].next
		s.nodes[id] = node{parent: parent, prev: noNode, next: noNode, key: key32(p)}
		if s.stamp {
			s.info[id] = nodeInfo{depth: s.info[parent].depth + 1, pos: -1}
		}
		if s.hits != nil {
			s.hits[id] = 0
		}
		// A free slot left the duplicate heap before it was freed.
	} else {
		id = s.appendNode(parent, p)
	}
	s.nodes[parent].nChildren++
	s.live++
	if s.index.insert(s.nodes, parent, p, id) {
		s.nodes[id].inMap = true
		if s.keys == nil {
			s.keys = make([]uint64, len(s.nodes), cap(s.nodes))
		}
		s.keys[id] = p
	}
	return id
}

// appendNode adds a slot for page p below parent at the end of the arena.
func (s *Simulator) appendNode(parent nodeID, p uint64) nodeID {
	id := nodeID(len(s.nodes))
	if id < 0 {
		panic("policy: more than 2^31-1 live pages")
	}
	if len(s.nodes) == cap(s.nodes) {
		// Double the arena: append grows large slices by about 1.25x,
		// which copies the whole arena several times over.
		s.nodes = slices.Grow(s.nodes, len(s.nodes))
		if s.keys != nil {
			s.keys = slices.Grow(s.keys, len(s.keys))
		}
		if s.hits != nil {
			s.hits = slices.Grow(s.hits, len(s.hits))
		}
		if s.stamp {
			s.info = slices.Grow(s.info, len(s.info))
		}
	}
	s.nodes = append(s.nodes, node{parent: parent, prev: noNode, next: noNode, key: key32(p)})
	if s.keys != nil {
		s.keys = append(s.keys, 0)
	}
	if s.hits != nil {
		s.hits = append(s.hits, 0)
	}
	if s.stamp {
		s.info = append(s.info, nodeInfo{depth: s.info[parent].depth + 1, pos: -1})
	}
	return id
}

// detach removes v, which holds no copy and has no children: it leaves
// the child index (an entry in the key array goes stale; see childIndex)
// and its slot goes to the free list. A removed page forgets its hit
// count.
//
// SGLang's simulator then removes each ancestor in turn left without a
// copy or children; here there is never one, since every page in the trie
// holds a copy, on the device or on host, whenever no operation is under
// way (checkInvariants checks it after every request). Proof: the walk
// puts each page it creates on the device at once, and a page loses its
// last copy only in deleteDeviceOnlyLeaf or deleteHostOnlyLeaf, which
// detach it; no other page loses a copy there. The page has no children:
// deleteDeviceOnlyLeaf refuses a page with any (hasHostDescendant), and a
// host-only leaf has no child on host and, being off the device, none on
// the device, so none that holds a copy, that is none. Its parent, unless
// it is the root, keeps its copy and stays. (A device page's parent is on
// the device, and a host-only page's parent has a copy by the same
// invariant.) So the walk up is left out, and -tags invariants checks
// the parent.
func (s *Simulator) detach(v nodeID) {
	n := &s.nodes[v]
	if invariants.Enabled && (n.live() || s.cfg.Policy == BoundaryL1L2 && s.dup.contains(v)) {
		panic("policy: detaching a live node or an eviction candidate")
	}
	parent := n.parent
	if n.inMap {
		s.index.remove(parent, s.keys[v])
	}
	pn := &s.nodes[parent]
	pn.nChildren--
	s.live--
	n.parent, n.next = noNode, s.free
	s.free = v
	if invariants.Enabled && parent != rootID && !pn.hasD && !pn.hasH {
		panic("policy: detach left a page without a copy in the trie")
	}
}
