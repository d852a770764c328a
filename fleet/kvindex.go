package fleet

import (
	"fmt"
	"slices"

	"github.com/kvsim/kvsim/fleet/router"
	"github.com/kvsim/kvsim/sim"
	"github.com/kvsim/kvsim/sim/engine"
	"github.com/kvsim/kvsim/tree"
)

// kvPublisher is a replica engine that publishes its KV events and can
// share a page-id space: the SGLang simulator's ([sim.Online]).
type kvPublisher interface {
	SharePager(p *tree.Pager) error
	SetKVEventSink(f func(sim.KVEvent))
	StorageHit(pages []tree.PageID, from int) int
}

var _ kvPublisher = (*sim.Online)(nil)

// Residency bits of a prefix in a replica's view.
const (
	kvOnDevice uint8 = 1 << iota
	kvOnHost
)

// kvIndex is kv_aware's and cache_aware_oracle's [router.CacheOracle]
// (the latter's with no delay): the router's view of what
// each replica holds, built from the replicas' KV events as Dynamo's KV
// indexer and llm-d's precise-prefix scorer build theirs (fleet-spec 4).
//
// Every replica pages prompts with the index's one pager, so a page id
// means the same tokens on every replica. The index interns page paths in
// one prefix trie (a node per page prefix, shared by the replicas; it only
// grows) and keeps, per replica and trie node, whether the replica holds
// that page on its device and on its host. An event is applied
// kv_signal_delay after it happened: at once when the delay is 0, else
// queued and applied before the first routing decision at or after its
// time plus the delay. Replicas report their events at the fleet's
// instants in index order, so the queue is in (time, replica, seq) order.
type kvIndex struct {
	pager   *tree.Pager
	ps      int
	delay   engine.Time
	kidPage []tree.PageID    // per trie node: the page to its first child
	kidID   []int32          // per trie node: its first child (0: none)
	child   map[kvEdge]int32 // (parent trie node, page) -> trie node, the other children
	nodes   int32            // trie nodes, the root (0) included
	held    [][]uint8        // per replica, per trie node: kvOnDevice | kvOnHost
	count   []int            // per replica: trie nodes (pages) held on device or host
	policy  router.Policy    // for errors
	queue   []kvUpdate       // events waiting for their delay, oldest first
	head    int              // queue[:head] applied
	engines []kvPublisher
	ends    []map[tree.NodeID]int32 // per replica: a live radix node's last page's trie node

	epoch   uint64 // advance calls: one per routing decision
	walked  uint64 // the epoch walk was computed at
	walkReq *router.Request
	walk    []int32       // the request's pages' trie nodes, up to the first unknown prefix
	toks    []tree.Token  // scratch: a request's tokens
	pages   []tree.PageID // scratch: a request's pages
	scratch []int32       // scratch: an event's trie nodes
}

// kvEdge is a trie edge: from node parent by page.
type kvEdge struct {
	parent int32
	page   tree.PageID
}

// kvUpdate is one event waiting to be applied: at at, replica's bit
// becomes on for the trie nodes.
type kvUpdate struct {
	at      engine.Time
	replica int
	bit     uint8
	on      bool
	nodes   []int32
}

var _ router.CacheOracle = (*kvIndex)(nil)

// newKVIndex returns an empty index for a router of cfg over the replicas
// at idx of replicas (nil: every one), whose servers must have one page
// size: kv_aware's view is kv_signal_delay old, cache_aware_oracle's the
// caches as they are. Errors name the router's policy key (key:
// "router.policy", "router.prefill.policy") and the replicas (what:
// "replica", "prefill replica"), by their index in replicas.
func newKVIndex(cfg router.Config, replicas []Replica, idx []int, key, what string) (*kvIndex, error) {
	if idx == nil {
		idx = make([]int, len(replicas))
		for i := range idx {
			idx[i] = i
		}
	}
	first := idx[0]
	ps := replicas[first].Factory.Info().PageSize
	for _, i := range idx {
		if p := replicas[i].Factory.Info().PageSize; p != ps {
			return nil, fmt.Errorf("fleet: %s %v needs one page size on every %s: replica %d has %d, replica %d (%s) %d",
				key, cfg.Policy, what, first, ps, i, replicas[i].Group, p)
		}
	}
	if ps < 1 {
		return nil, fmt.Errorf("fleet: %s %v needs the replicas' page size", key, cfg.Policy)
	}
	delay := engine.Time(cfg.KVAware.SignalDelay)
	if cfg.Policy == router.CacheAwareOracle {
		delay = 0 // the replicas' caches as they are
	}
	n := len(idx)
	return &kvIndex{
		pager: tree.NewPager(ps), ps: ps, delay: delay, child: map[kvEdge]int32{}, nodes: 1,
		kidPage: []tree.PageID{0}, kidID: []int32{0}, policy: cfg.Policy, count: make([]int, n),
		held: make([][]uint8, n), ends: make([]map[tree.NodeID]int32, n),
	}, nil
}

// attach makes replica i's engine e page with the index's pager and
// publish its events to the index. It must be called in replica order.
func (k *kvIndex) attach(i int, e engine.Engine) error {
	p, ok := e.(kvPublisher)
	if !ok {
		return fmt.Errorf("router.policy %v needs the sglang engine (its KV events)", k.policy)
	}
	if err := p.SharePager(k.pager); err != nil {
		return err
	}
	k.ends[i] = map[tree.NodeID]int32{}
	p.SetKVEventSink(func(ev sim.KVEvent) { k.event(i, ev) })
	k.engines = append(k.engines, p)
	return nil
}

// event takes one of replica i's events: applied at once with no delay,
// else queued.
func (k *kvIndex) event(i int, ev sim.KVEvent) {
	n := ev.Node
	cur := k.end(i, n.Parent())
	nodes := k.scratch[:0]
	for _, p := range n.Pages() {
		cur = k.step(cur, p)
		nodes = append(nodes, cur)
	}
	k.scratch = nodes
	if n.OnDevice() || n.OnHost() {
		k.ends[i][n.ID()] = cur
	} else {
		delete(k.ends[i], n.ID()) // the node left the tree
	}
	bit := kvOnDevice
	if ev.Tier == sim.KVHost {
		bit = kvOnHost
	}
	if k.delay == 0 {
		k.set(i, bit, ev.Stored, nodes)
		return
	}
	k.queue = append(k.queue, kvUpdate{at: ev.At + k.delay, replica: i, bit: bit, on: ev.Stored, nodes: slices.Clone(nodes)})
}

// end returns the trie node of the last page of replica i's radix node n
// (0 for the root), interning its path where it is not known.
func (k *kvIndex) end(i int, n *tree.Node) int32 {
	if n.IsRoot() {
		return 0
	}
	if id, ok := k.ends[i][n.ID()]; ok {
		return id
	}
	cur := k.end(i, n.Parent())
	for _, p := range n.Pages() {
		cur = k.step(cur, p)
	}
	k.ends[i][n.ID()] = cur
	return cur
}

// step returns the trie node below cur by page p, adding it if new.
func (k *kvIndex) step(cur int32, p tree.PageID) int32 {
	if id, ok := k.below(cur, p); ok {
		return id
	}
	id := k.nodes
	k.nodes++
	k.kidPage, k.kidID = append(k.kidPage, 0), append(k.kidID, 0)
	if k.kidID[cur] == 0 {
		k.kidPage[cur], k.kidID[cur] = p, id
	} else {
		k.child[kvEdge{cur, p}] = id
	}
	return id
}

// below returns the trie node below cur by page p, if there is one. Most
// trie nodes have one child, kept inline: a prompt's chain of pages is a
// run of consecutive nodes, and a walk touches the map only at branches.
func (k *kvIndex) below(cur int32, p tree.PageID) (int32, bool) {
	switch {
	case k.kidID[cur] == 0:
		return 0, false
	case k.kidPage[cur] == p:
		return k.kidID[cur], true
	}
	id, ok := k.child[kvEdge{cur, p}]
	return id, ok
}

// set sets (on) or clears replica i's bit on the trie nodes.
func (k *kvIndex) set(i int, bit uint8, on bool, nodes []int32) {
	h := k.held[i]
	for _, id := range nodes {
		if int(id) >= len(h) {
			if !on {
				continue
			}
			h = append(h, make([]uint8, int(k.nodes)-len(h))...)
		}
		was := h[id] != 0
		if on {
			h[id] |= bit
		} else {
			h[id] &^= bit
		}
		if is := h[id] != 0; is != was {
			if is {
				k.count[i]++
			} else {
				k.count[i]--
			}
		}
	}
	k.held[i] = h
}

// HeldTokens implements [router.CacheOracle]: the tokens of the pages
// replica i holds on its device or host, in the index's view.
func (k *kvIndex) HeldTokens(i int) int { return k.count[i] * k.ps }

// advance applies every queued event due at or before now.
func (k *kvIndex) advance(now engine.Time) {
	k.epoch++
	k.walkReq = nil // the router must not keep a request: neither does its oracle
	for k.head < len(k.queue) && k.queue[k.head].at <= now {
		u := &k.queue[k.head]
		k.set(u.replica, u.bit, u.on, u.nodes)
		*u = kvUpdate{}
		k.head++
	}
	if k.head == len(k.queue) {
		k.queue, k.head = k.queue[:0], 0
	} else if k.head >= 1024 && 2*k.head >= len(k.queue) {
		n := copy(k.queue, k.queue[k.head:])
		clear(k.queue[n:])
		k.queue, k.head = k.queue[:n], 0
	}
}

// bits returns replica i's residency bits of trie node id.
func (k *kvIndex) bits(i int, id int32) uint8 {
	if h := k.held[i]; int(id) < len(h) {
		return h[id]
	}
	return 0
}

// CachedPrefix implements [router.CacheOracle]: the leading pages of
// req's prompt that replica i holds on its device, then on its host, in
// the index's (delayed) view, then those its storage tier (L3) holds now,
// in tokens.
func (k *kvIndex) CachedPrefix(i int, req *router.Request) router.Cached {
	if k.walked != k.epoch || k.walkReq != req || k.epoch == 0 {
		k.walkRequest(req)
	}
	dev, host := 0, 0
	phase := kvOnDevice
	for _, id := range k.walk {
		b := k.bits(i, id)
		if phase == kvOnDevice && b&kvOnDevice == 0 {
			phase = kvOnHost
		}
		if b&phase == 0 {
			break
		}
		if phase == kvOnDevice {
			dev++
		} else {
			host++
		}
	}
	st := k.engines[i].StorageHit(k.pages, dev+host)
	return router.Cached{Device: dev * k.ps, Host: host * k.ps, Storage: st * k.ps}
}

// walkRequest pages req and walks its pages down the trie, for every
// replica's CachedPrefix of one routing decision (the router asks each
// candidate in turn).
func (k *kvIndex) walkRequest(req *router.Request) {
	k.walked, k.walkReq = k.epoch, req
	pages := k.requestPages(req)
	k.walk = k.walk[:0]
	cur := int32(0)
	for _, p := range pages {
		id, ok := k.below(cur, p)
		if !ok {
			break
		}
		k.walk = append(k.walk, id)
		cur = id
	}
}

// requestPages pages req's prompt with the index's pager, as the replicas
// page it: its tokens, else its blocks. The slice is reused by the next
// call.
func (k *kvIndex) requestPages(req *router.Request) []tree.PageID {
	k.pages = k.pages[:0]
	switch {
	case len(req.Tokens) > 0:
		k.toks = k.toks[:0]
		for _, t := range req.Tokens {
			k.toks = append(k.toks, tree.Token(t))
		}
		k.pages = k.pager.TokenPages(k.toks, k.pages)
	case len(req.Blocks) > 0 && req.BlockSize > 0:
		pages, err := k.pager.BlockPages(req.Blocks, req.BlockSize, req.Len, k.pages)
		if err == nil {
			k.pages = pages
		}
	}
	return k.pages
}
