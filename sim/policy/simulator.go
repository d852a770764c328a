package policy

import (
	"cmp"
	"errors"
	"fmt"
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

// nodeID indexes the node arena. The root is node 0; noNode marks "none"
// in the child and sibling links.
type nodeID int32

const (
	rootID nodeID = 0
	noNode nodeID = -1
)

// checkBudget bounds the average cost of the -tags invariants self-check
// per request, in trie nodes visited.
const checkBudget = 256

// Heap slots: indexes of Simulator.heaps.
const (
	slotL1   = iota // on device, no child on device
	slotHost        // on host only, no child on host
	slotDup         // on device and host, no child on host
	numSlots
)

// node is one page of the trie: the page key sequence from the root to it.
type node struct {
	page   uint64
	parent nodeID
	// firstChild/prevSib/nextSib form an intrusive list of children, used
	// to find host descendants and by the invariant checks.
	firstChild, prevSib, nextSib nodeID
	depth                        int32 // pages from the root; the root is 0
	lastAccess                   int64 // request clock of the last touch
	hitCount                     int   // MainWriteThrough's per-page count
	hasD, hasH                   bool  // resident on device (L1) / host (L2)
	nChildren                    int32
	dChildren                    int32  // children with hasD
	hChildren                    int32  // children with hasH
	protect                      uint64 // == Simulator.epoch: protected from L2 eviction
}

type edge struct {
	parent nodeID
	page   uint64
}

// Simulator replays requests through the page-level L1/L2 model. It is not
// safe for concurrent use.
type Simulator struct {
	cfg      Config
	nodes    []node
	free     []nodeID
	children map[edge]nodeID
	clock    int64
	err      error // the abort that stopped the simulator, or nil

	dPages, hPages, dhPages int
	res                     Result

	// The candidate sets of SGLang's three heaps, kept exact: a node is a
	// member exactly when it is a valid candidate.
	heaps [numSlots]leafHeap

	epoch   uint64 // bumped per host reservation; see node.protect
	path    []nodeID
	missing []nodeID
	stash   []nodeID
	stack   []nodeID
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
	s := &Simulator{cfg: cfg, children: make(map[edge]nodeID)}
	s.nodes = append(s.nodes, node{parent: noNode, firstChild: noNode, prevSib: noNode, nextSib: noNode})
	for i := range s.heaps {
		s.heaps[i] = leafHeap{nodes: &s.nodes, pos: []int32{-1}}
	}
	s.res.Policy = cfg.Policy
	return s, nil
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
	s, err := New(cfg)
	if err != nil {
		return Result{}, err
	}
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
	// ends the hits. Missing trie nodes are created on the way.
	path := s.path[:0]
	counting := true
	cur := rootID
	for _, p := range pages {
		c, ok := s.children[edge{cur, p}]
		if !ok {
			c = s.newChild(cur, p)
			counting = false
		} else if counting {
			switch n := &s.nodes[c]; {
			case n.hasD:
				l1Hits++
			case n.hasH:
				l2Hits++
			default:
				counting = false
			}
		}
		path = append(path, c)
		cur = c
	}
	s.path = path
	s.res.Requests++
	s.res.TotalInputPages += len(pages)
	s.res.L1HitPages += l1Hits
	s.res.L2HitPages += l2Hits
	s.res.MissPages += len(pages) - l1Hits - l2Hits

	// Every page of the request becomes device-resident and is stamped with
	// the request clock (a host copy is kept). Candidacy can only change for
	// the path's nodes (the root is never a candidate), so they are
	// re-queued once all flags are set, not after each one.
	for _, id := range path {
		s.nodes[id].lastAccess = s.clock
		s.flipD(id, true)
	}
	for _, id := range path {
		s.requeue(id)
	}

	switch s.cfg.Policy {
	case MainWriteThrough:
		s.writeThroughTouch(path)
	case BoundaryL1L2:
		s.reserveHost(path, noNode)
	}

	for s.dPages > s.cfg.L1Pages {
		if s.heaps[slotL1].len() == 0 {
			panic("policy: L1 over capacity but no device leaf to evict")
		}
		v := s.heaps[slotL1].min()
		if s.cfg.Policy == BoundaryL1L2 {
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
		if n := len(s.children); n <= checkBudget || s.clock%int64(n/checkBudget+1) == 0 {
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

// writeThroughTouch is MainWriteThrough's host-write step: every page of
// the request counts one hit; a page not on host whose count reached the
// threshold, and whose parent is the root or on host, gets a host copy if
// one can be allocated (parents first, so a whole new prefix can be
// written in one request).
func (s *Simulator) writeThroughTouch(path []nodeID) {
	for _, id := range path {
		n := &s.nodes[id]
		n.hitCount++
		if n.hasH || n.hitCount < s.cfg.WriteThroughThreshold {
			continue
		}
		if n.parent != rootID && !s.nodes[n.parent].hasH {
			continue
		}
		s.one[0] = id
		s.reserveHost(s.one[:1], noNode)
	}
}

// reserveHost gives every node of nodes a host copy, or none of them. The
// nodes, and also extra when it is not noNode, are protected from the L2
// evictions this triggers. A failure (more pages than L2 holds, or nothing
// left to evict) counts one failed host allocation; pages evicted before a
// failure stay evicted.
func (s *Simulator) reserveHost(nodes []nodeID, extra nodeID) bool {
	s.epoch++
	if extra != noNode {
		s.nodes[extra].protect = s.epoch
	}
	missing := s.missing[:0]
	for _, id := range nodes {
		s.nodes[id].protect = s.epoch
		if !s.nodes[id].hasH {
			missing = append(missing, id)
		}
	}
	s.missing = missing
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
	for _, id := range missing {
		s.flipH(id, true)
	}
	for _, id := range missing {
		s.requeue(id)
		s.requeue(s.nodes[id].parent)
	}
	return true
}

// evictL2One frees one host page: under BoundaryL1L2 the oldest duplicate
// host copy of a device page (the page stays on device), else the oldest
// host-only leaf (the page leaves the cache). Protected nodes are passed
// over. It reports whether a page was freed.
func (s *Simulator) evictL2One() bool {
	if s.cfg.Policy == BoundaryL1L2 {
		if v := s.minUnprotected(slotDup); v != noNode {
			s.setH(v, false)
			s.res.L2Evictions++
			s.res.DedupL2Evictions++
			return true
		}
	}
	if v := s.minUnprotected(slotHost); v != noNode {
		s.deleteHostOnlyLeaf(v)
		return true
	}
	return false
}

// minUnprotected returns the first member of heap slot in eviction order
// that is not protected by the current reservation, or noNode.
func (s *Simulator) minUnprotected(slot int) nodeID {
	h := &s.heaps[slot]
	found := noNode
	stash := s.stash[:0]
	for h.len() > 0 {
		id := h.min()
		if s.nodes[id].protect != s.epoch {
			found = id
			break
		}
		h.remove(id)
		stash = append(stash, id)
	}
	for _, id := range stash {
		h.push(id)
	}
	s.stash = stash
	return found
}

func (s *Simulator) writeThroughEvictL1(v nodeID) {
	if s.nodes[v].hasH {
		s.setD(v, false)
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
			s.one[0] = p
			parentOK = s.reserveHost(s.one[:1], v)
		}
		switch {
		case parentOK:
			s.setD(v, false)
		case !s.hasHostDescendant(v):
			s.setH(v, false)
			s.res.L2Evictions++
			s.res.DeletedL2Evictions++
			s.deleteDeviceOnlyLeaf(v)
		default:
			panic(abort("Cannot evict D+H node without breaking boundary"))
		}
		return
	}
	req := s.one[:0]
	if parentNeedsHost {
		req = append(req, p)
	}
	req = append(req, v)
	if s.reserveHost(req, noNode) {
		s.setD(v, false)
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
	s.setD(v, false)
	s.detachIfEmpty(v)
}

func (s *Simulator) deleteHostOnlyLeaf(v nodeID) {
	n := &s.nodes[v]
	if n.hasD || !n.hasH || n.hChildren > 0 {
		panic("policy: refusing to delete a page that is not a host-only leaf")
	}
	s.setH(v, false)
	s.res.L2Evictions++
	s.res.DeletedL2Evictions++
	s.detachIfEmpty(v)
}

// hasHostDescendant reports whether any node below v has a host copy.
func (s *Simulator) hasHostDescendant(v nodeID) bool {
	if s.nodes[v].hChildren > 0 {
		return true
	}
	stack := append(s.stack[:0], v)
	found := false
	for len(stack) > 0 && !found {
		id := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		for c := s.nodes[id].firstChild; c != noNode; c = s.nodes[c].nextSib {
			if s.nodes[c].hasH {
				found = true
				break
			}
			stack = append(stack, c)
		}
	}
	s.stack = stack[:0]
	return found
}

// setD sets v's device residency and keeps the counters and heaps exact.
func (s *Simulator) setD(v nodeID, on bool) {
	if s.flipD(v, on) {
		s.requeue(v)
		s.requeue(s.nodes[v].parent)
	}
}

// setH sets v's host residency and keeps the counters and heaps exact.
func (s *Simulator) setH(v nodeID, on bool) {
	if s.flipH(v, on) {
		s.requeue(v)
		s.requeue(s.nodes[v].parent)
	}
}

// flipD sets v's device residency and the counters, and reports whether it
// changed. The caller must requeue v and its parent before the next heap
// query.
func (s *Simulator) flipD(v nodeID, on bool) bool {
	n := &s.nodes[v]
	if n.hasD == on {
		return false
	}
	n.hasD = on
	d := 1
	if !on {
		d = -1
	}
	s.dPages += d
	if n.hasH {
		s.dhPages += d
	}
	s.nodes[n.parent].dChildren += int32(d)
	return true
}

// flipH is flipD for host residency.
func (s *Simulator) flipH(v nodeID, on bool) bool {
	n := &s.nodes[v]
	if n.hasH == on {
		return false
	}
	n.hasH = on
	d := 1
	if !on {
		d = -1
	}
	s.hPages += d
	if n.hasD {
		s.dhPages += d
	}
	s.nodes[n.parent].hChildren += int32(d)
	return true
}

// requeue puts v into exactly the heaps it is a candidate of, at its
// current key.
func (s *Simulator) requeue(v nodeID) {
	if v == rootID {
		return
	}
	n := &s.nodes[v]
	s.place(slotL1, v, n.hasD && n.dChildren == 0)
	s.place(slotHost, v, n.hasH && !n.hasD && n.hChildren == 0)
	s.place(slotDup, v, n.hasD && n.hasH && n.hChildren == 0)
}

func (s *Simulator) place(slot int, v nodeID, valid bool) {
	h := &s.heaps[slot]
	switch in := h.contains(v); {
	case valid && in:
		h.fix(v)
	case valid:
		h.push(v)
	case in:
		h.remove(v)
	}
}

// newChild creates the trie node for page p below parent.
func (s *Simulator) newChild(parent nodeID, p uint64) nodeID {
	var id nodeID
	if k := len(s.free); k > 0 {
		id = s.free[k-1]
		s.free = s.free[:k-1]
	} else {
		id = nodeID(len(s.nodes))
		s.nodes = append(s.nodes, node{})
		for i := range s.heaps {
			s.heaps[i].pos = append(s.heaps[i].pos, -1)
		}
	}
	par := &s.nodes[parent]
	s.nodes[id] = node{
		page:       p,
		parent:     parent,
		firstChild: noNode,
		prevSib:    noNode,
		nextSib:    par.firstChild,
		depth:      par.depth + 1,
	}
	if par.firstChild != noNode {
		s.nodes[par.firstChild].prevSib = id
	}
	par.firstChild = id
	par.nChildren++
	s.children[edge{parent, p}] = id
	return id
}

// detachIfEmpty removes v, and then each ancestor in turn, while it holds
// no copy and has no children.
func (s *Simulator) detachIfEmpty(v nodeID) {
	for v != rootID {
		n := &s.nodes[v]
		if n.hasD || n.hasH || n.nChildren > 0 {
			return
		}
		for i := range s.heaps {
			if s.heaps[i].contains(v) {
				panic("policy: detaching a node that is still an eviction candidate")
			}
		}
		p := n.parent
		par := &s.nodes[p]
		if n.prevSib != noNode {
			s.nodes[n.prevSib].nextSib = n.nextSib
		} else {
			par.firstChild = n.nextSib
		}
		if n.nextSib != noNode {
			s.nodes[n.nextSib].prevSib = n.prevSib
		}
		par.nChildren--
		delete(s.children, edge{p, n.page})
		*n = node{parent: noNode, firstChild: noNode, prevSib: noNode, nextSib: noNode}
		s.free = append(s.free, v)
		v = p
	}
}
