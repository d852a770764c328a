package traces

import (
	"errors"
	"fmt"
	"math"
	"slices"
)

// OPT is Belady's offline optimal eviction ("MIN": L. A. Belady, "A study
// of replacement algorithms for a virtual-storage computer", IBM Systems
// Journal 5(2), 1966) for a prefix cache of pages, over a whole request
// sequence known in advance. Build one with an [OPTBuilder], then replay it
// at any capacity with [OPT.Run] or [OPT.NewRun]; an OPT is read-only once
// built, so runs at different capacities may proceed side by side.
//
// # The model
//
// Requests are taken one at a time in the order they were added. A page is
// a node of the trie of page-key sequences: page i of a request is the
// sequence of its keys 0..i (for chained block hashes, as in Mooncake
// traces, that is the same as the key itself). For each request:
//
//  1. Hits: the longest prefix of the request's pages that is cached,
//     counted before anything changes.
//  2. Every page of the request is cached; then, while more than C pages
//     are cached, the page whose next reference is furthest is evicted.
//     The next reference of a page is the position of its next occurrence
//     in the page sequence of the whole trace (every request's pages
//     concatenated in order) after the current request; a page never
//     referenced again is furthest, and among those the page created last
//     (the highest node id) goes first.
//
// # Why the cache stays prefix-closed
//
// Every occurrence of a page at depth d >= 1 is immediately preceded, in
// the same request, by an occurrence of its parent. So if a page is
// referenced again at position q, its parent is referenced at q-1, which is
// after the current request too: the parent's next reference is strictly
// nearer. If the page is never referenced again, either the parent is
// referenced again (and is nearer) or neither is, and then the parent,
// created before its child, has the lower node id and goes later. Either
// way the eviction order is a linear extension of the trie order: no page
// is evicted while a child of it is cached, a cached page's parent is
// always cached, and the longest cached prefix of a request is exactly the
// number of its pages that are cached.
//
// # Why it is optimal
//
// After request r the cache holds the C pages of (cache before r) ∪ (pages
// of r) whose next references are nearest. Belady's exchange argument goes
// through for this "set request" paging: a schedule that keeps a farther
// page x instead of a nearer page y can keep y instead until y's next
// reference, gain y's hit there and lose at most x's, which comes later.
// Since the cache is prefix-closed, hits = cached pages of the request, so
// no schedule, prefix-closed or not, hits more pages.
//
// # Inclusion (the stack property)
//
// With ties broken by a total order that does not depend on C (next
// reference, then node id), the cache at capacity C is a subset of the
// cache at C+1 after every request, and they differ by at most one page:
// if that holds before request r, the candidate sets U(C) ⊆ U(C+1) differ
// by at most that page, and adding one element to a totally ordered set
// moves each element's rank by at most one, so the C nearest of U(C) are
// among the C+1 nearest of U(C+1). Hence hits never decrease with C, and
// each page reference has a least capacity from which it hits (its OPT
// stack distance). Computing those distances in one pass needs Mattson's
// priority-stack update, which costs the referenced depth per page; a run
// per capacity costs O(pages · log C) and is what this type offers.
//
// # Cost
//
// Building costs one array read per page when the keys are small integers
// that always follow one parent (as block ids are; see [OPTBuilder]), a
// hash-map lookup otherwise, and memory of two int32 per page reference
// plus three per distinct page (and one per key value below the bound of
// the key table while building). A run costs O(pages · log C)
// time (one heap operation per page reference and per eviction) and one
// int32 per distinct page plus the heap.
type OPT struct {
	reqStart []int32 // request r's references are reqStart[r]..reqStart[r+1]
	node     []int32 // node of each reference
	next     []int32 // index of the next reference of the same node, or -1
	parent   []int32 // per node, -1 for depth-1 pages
}

// optInf flags a key of a page never referenced again; the low bits hold
// its node id.
const optInf = int64(1) << 62

// ErrOPTTooLarge is returned by [OPTBuilder.Add] when the trace has more
// page references than an OPT indexes (2^31 - 1).
var ErrOPTTooLarge = errors.New("too many page references for the offline optimum (max 2^31-1)")

// OPTBuilder collects the requests of an [OPT]. The zero value is not
// usable; call [NewOPTBuilder].
//
// Its trie index maps an edge (parent, key) to the child. Block-hash traces
// (Mooncake's among them) number their blocks densely from 0, and a key
// names one prefix, so it always hangs below the same parent: the index
// keeps, for every key below a bound, the first node created with that key
// in a flat array (byKey), and checks the parent on lookup; edges that do
// not fit (keys past the bound, or a key seen below a second parent) go to
// a map, which is then empty and skipped for such traces.
type OPTBuilder struct {
	o     *OPT
	byKey []int32 // byKey[k]: 1 + the first node with key k, 0 for none
	child map[optEdge]int32
}

// optKeySlack is how far past the number of nodes a key may lie and still
// get a slot in byKey (4 bytes a slot; the bound keeps byKey within a
// small multiple of the builder's other memory).
const optKeySlack = 1 << 16

type optEdge struct {
	parent int32
	key    uint64
}

// NewOPTBuilder returns an empty builder.
func NewOPTBuilder() *OPTBuilder {
	return &OPTBuilder{o: &OPT{reqStart: []int32{0}}, child: map[optEdge]int32{}}
}

// Add appends one request: its page keys from the first page on. pages is
// only read.
func (b *OPTBuilder) Add(pages []uint64) error {
	o := b.o
	if len(o.node)+len(pages) >= math.MaxInt32 {
		return fmt.Errorf("%w: %d", ErrOPTTooLarge, len(o.node)+len(pages))
	}
	cur := int32(-1)
	for _, p := range pages {
		id, ok := b.lookup(cur, p)
		if !ok {
			id = int32(len(o.parent))
			o.parent = append(o.parent, cur)
			b.insert(cur, p, id)
		}
		o.node = append(o.node, id)
		cur = id
	}
	o.reqStart = append(o.reqStart, int32(len(o.node)))
	return nil
}

// lookup returns the child of parent with key p.
func (b *OPTBuilder) lookup(parent int32, p uint64) (int32, bool) {
	if p < uint64(len(b.byKey)) {
		if id := b.byKey[p] - 1; id >= 0 && b.o.parent[id] == parent {
			return id, true
		}
	}
	if len(b.child) == 0 {
		return 0, false
	}
	id, ok := b.child[optEdge{parent, p}]
	return id, ok
}

// insert records the new edge (parent, p) -> id; the edge must be absent.
func (b *OPTBuilder) insert(parent int32, p uint64, id int32) {
	if p >= uint64(len(b.byKey)) && p < uint64(4*len(b.o.parent)+optKeySlack) {
		b.byKey = slices.Grow(b.byKey, max(int(p)+1, 2*len(b.byKey))-len(b.byKey))
		b.byKey = b.byKey[:cap(b.byKey)]
	}
	if p < uint64(len(b.byKey)) && b.byKey[p] == 0 {
		b.byKey[p] = id + 1
		return
	}
	b.child[optEdge{parent, p}] = id
}

// Build computes the next references and returns the OPT. The builder must
// not be used afterwards.
func (b *OPTBuilder) Build() *OPT {
	o := b.o
	b.o, b.byKey, b.child = nil, nil, nil
	o.next = make([]int32, len(o.node))
	last := make([]int32, len(o.parent))
	for i := range last {
		last[i] = -1
	}
	for i := len(o.node) - 1; i >= 0; i-- {
		n := o.node[i]
		o.next[i] = last[n]
		last[n] = int32(i)
	}
	return o
}

// Requests returns the number of requests.
func (o *OPT) Requests() int { return len(o.reqStart) - 1 }

// TotalPages returns the number of page references (pages over all
// requests).
func (o *OPT) TotalPages() int { return len(o.node) }

// UniquePages returns the number of distinct pages (trie nodes).
func (o *OPT) UniquePages() int { return len(o.parent) }

// RequestPages returns the number of pages of request r.
func (o *OPT) RequestPages(r int) int { return int(o.reqStart[r+1] - o.reqStart[r]) }

// OPTResult holds the counters of a whole run.
type OPTResult struct {
	// HitPages sums the hits of every request.
	HitPages int
	// Evictions counts pages evicted.
	Evictions int
	// Cached is the number of pages cached at the end.
	Cached int
}

// Run replays every request at capacity pages (>= 0; a negative capacity
// is taken as 0) and returns the counters.
func (o *OPT) Run(capacity int) OPTResult {
	r := o.NewRun(capacity)
	for !r.Done() {
		r.Step()
	}
	return r.Result()
}

// OPTRun is one replay of an [OPT] at one capacity, a request at a time.
// It is not safe for concurrent use; distinct runs of one OPT are
// independent.
type OPTRun struct {
	o        *OPT
	capacity int
	r        int     // next request
	pos      []int32 // per node: index in heap, -1 when not cached
	heap     []optEntry
	res      OPTResult
}

type optEntry struct {
	key  int64 // next reference, or optInf | node id
	node int32
}

// NewRun starts a replay at capacity pages (a negative capacity is taken as
// 0).
func (o *OPT) NewRun(capacity int) *OPTRun {
	pos := make([]int32, len(o.parent))
	for i := range pos {
		pos[i] = -1
	}
	return &OPTRun{o: o, capacity: max(0, capacity), pos: pos, heap: make([]optEntry, 0, min(max(0, capacity), len(o.parent))+64)}
}

// Done reports whether every request has been replayed.
func (r *OPTRun) Done() bool { return r.r >= r.o.Requests() }

// Step replays the next request and returns its hits: its first hits pages
// were cached. It must not be called once Done.
func (r *OPTRun) Step() (hits int) {
	o := r.o
	lo, hi := o.reqStart[r.r], o.reqStart[r.r+1]
	r.r++
	for i := lo; i < hi && r.pos[o.node[i]] >= 0; i++ {
		hits++
	}
	r.res.HitPages += hits
	for i := lo; i < hi; i++ {
		n := o.node[i]
		key := int64(o.next[i])
		if key < 0 {
			key = optInf | int64(n)
		}
		if p := r.pos[n]; p >= 0 {
			// The next reference only moves further: sift up.
			r.heap[p].key = key
			r.up(int(p))
		} else {
			r.pos[n] = int32(len(r.heap))
			r.heap = append(r.heap, optEntry{key: key, node: n})
			r.up(len(r.heap) - 1)
		}
	}
	for len(r.heap) > r.capacity {
		r.pop()
		r.res.Evictions++
	}
	return hits
}

// Result returns the counters so far.
func (r *OPTRun) Result() OPTResult {
	res := r.res
	res.Cached = len(r.heap)
	return res
}

// Cached reports whether page i of request req (0-based, in the order
// added) is cached now.
func (r *OPTRun) Cached(req, i int) bool {
	return r.pos[r.o.node[int(r.o.reqStart[req])+i]] >= 0
}

// Check verifies, in O(distinct pages), the run's invariants: at most
// capacity pages cached once a request is done, a cached page's parent
// cached (prefix closure), and the heap's order and index. It returns the
// first violation.
func (r *OPTRun) Check() error {
	if len(r.heap) > r.capacity {
		return fmt.Errorf("opt: %d pages cached, capacity %d", len(r.heap), r.capacity)
	}
	for i, e := range r.heap {
		if r.pos[e.node] != int32(i) {
			return fmt.Errorf("opt: node %d at heap index %d records %d", e.node, i, r.pos[e.node])
		}
		if i > 0 && r.heap[(i-1)/2].key < e.key {
			return fmt.Errorf("opt: heap order broken at %d", i)
		}
	}
	n := 0
	for id, p := range r.pos {
		if p < 0 {
			continue
		}
		n++
		if par := r.o.parent[id]; par >= 0 && r.pos[par] < 0 {
			return fmt.Errorf("opt: page %d cached, its parent %d is not", id, par)
		}
	}
	if n != len(r.heap) {
		return fmt.Errorf("opt: %d pages marked cached, heap holds %d", n, len(r.heap))
	}
	return nil
}

// up sifts heap[j] towards the root of the max-heap.
func (r *OPTRun) up(j int) {
	h := r.heap
	e := h[j]
	for j > 0 {
		i := (j - 1) / 2
		if h[i].key >= e.key {
			break
		}
		r.place(j, h[i])
		j = i
	}
	r.place(j, e)
}

// place puts e at heap index i and records it in pos.
func (r *OPTRun) place(i int, e optEntry) {
	r.heap[i] = e
	r.pos[e.node] = int32(i)
}

// pop evicts the page with the furthest next reference.
func (r *OPTRun) pop() {
	h := r.heap
	r.pos[h[0].node] = -1
	last := len(h) - 1
	e := h[last]
	h = h[:last]
	r.heap = h
	if last == 0 {
		return
	}
	i := 0
	for {
		l := 2*i + 1
		if l >= last {
			break
		}
		c := l
		if rr := l + 1; rr < last && h[rr].key > h[l].key {
			c = rr
		}
		if h[c].key <= e.key {
			break
		}
		r.place(i, h[c])
		i = c
	}
	r.place(i, e)
}
