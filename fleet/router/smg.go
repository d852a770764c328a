package router

import (
	"math"
	"time"

	"github.com/emirpasic/gods/maps/treemap"
)

// prefixHash is SMG's prefix_hash (model_gateway policies/prefix_hash.rs):
// the hash of the prompt's first router.prefix_token_count tokens picks a
// point on a ring of router.virtual_nodes points per replica, as
// consistent_hash's ring; the replica there keeps the request if its load
// is at most prefix_hash_load_factor times the mean load with this request
// counted ((total + 1) / available replicas), else the least loaded
// replica that passes that test (the first in index order among equals),
// else the ring's replica. The load is the router's in-flight count.
func (r *Router) prefixHash(req *Request) Decision {
	h, ok := prefixKey(req, r.cfg.PrefixHash.TokenCount)
	if !ok { // nothing to hash: SMG fails such a request; kvsim sends it to the least loaded
		return Decision{Replica: r.leastInFlight(func(int) bool { return true }), Reason: NoKey}
	}
	total := 0
	for _, i := range r.cand {
		total += r.inflight[i]
	}
	limit := float64(total+1) / float64(len(r.cand)) * r.cfg.PrefixHash.LoadFactor
	fits := func(i int) bool { return total == 0 || float64(r.inflight[i]) <= limit }
	w := r.ring.lookupHash(h, r.available)
	if fits(w) {
		return Decision{Replica: w, Reason: PrefixRing}
	}
	if b := r.leastInFlight(fits); b >= 0 {
		return Decision{Replica: b, Reason: PrefixBalanced}
	}
	return Decision{Replica: w, Reason: PrefixBalanced}
}

// leastInFlight returns the candidate with the fewest requests in flight
// among those ok accepts, the first in index order among equals; -1 if ok
// accepts none.
func (r *Router) leastInFlight(ok func(int) bool) int {
	best := -1
	for _, i := range r.cand {
		if ok(i) && (best < 0 || r.inflight[i] < r.inflight[best]) {
			best = i
		}
	}
	return best
}

// prefixKey hashes the first n tokens of req's prompt: its token ids, else
// the blocks that hold them (ceil(n / BlockSize) block hashes), else the
// first n characters of its routing text, a value at a time. False when the
// request has none of these.
func prefixKey(req *Request, n int) (uint64, bool) {
	x := uint64(fnvOffset)
	mix := func(v uint64) { x = (x ^ v) * fnvPrime } // FNV-1a on whole values; splitmix spreads them

	switch {
	case len(req.Tokens) > 0:
		for _, t := range req.Tokens[:min(n, len(req.Tokens))] {
			mix(uint64(uint32(t)))
		}
	case len(req.Blocks) > 0:
		b := n
		if req.BlockSize > 0 {
			b = (n + req.BlockSize - 1) / req.BlockSize
		}
		for _, v := range req.Blocks[:min(b, len(req.Blocks))] {
			mix(v)
		}
	case req.Text != "":
		k := 0
		for _, c := range req.Text {
			if k == n {
				break
			}
			mix(uint64(c))
			k++
		}
	default:
		return 0, false
	}
	return splitmix(x), true
}

// sticky is SMG's manual policy's routing map (policies/manual.rs): each
// routing key (the request's session) remembers up to two replicas, the
// newest last; a request goes to the first of them that is available, and
// a key seen for the first time, or whose replicas are all unavailable,
// gets a new one by router.assignment_mode. Keys not used for
// router.max_idle are dropped at the router's eviction ticks. The keys'
// last uses are kept in time order in a gods red-black tree, so an
// eviction pops the idle ones oldest first without scanning the map.
type sticky struct {
	keys  map[string]*stickyKey
	order *treemap.Map // stickyStamp -> routing key, oldest use first
	seq   uint64
}

type stickyKey struct {
	cand  [2]int
	n     int
	stamp stickyStamp
}

// stickyStamp orders uses by virtual time, then by a counter.
type stickyStamp struct {
	at  time.Duration
	seq uint64
}

func compareStamps(a, b any) int {
	x, y := a.(stickyStamp), b.(stickyStamp)
	switch {
	case x.at != y.at:
		return cmpOrder(x.at < y.at)
	case x.seq != y.seq:
		return cmpOrder(x.seq < y.seq)
	}
	return 0
}

func cmpOrder(less bool) int {
	if less {
		return -1
	}
	return 1
}

func newSticky() *sticky {
	return &sticky{keys: map[string]*stickyKey{}, order: treemap.NewWith(compareStamps)}
}

// touch returns key's entry (a new, empty one the first time) stamped as
// used at now.
func (s *sticky) touch(key string, now time.Duration) *stickyKey {
	e := s.keys[key]
	if e == nil {
		e = &stickyKey{}
		s.keys[key] = e
	} else {
		s.order.Remove(e.stamp)
	}
	s.seq++
	e.stamp = stickyStamp{at: now, seq: s.seq}
	s.order.Put(e.stamp, key)
	return e
}

// push makes replica i the key's newest replica, dropping the oldest of
// two.
func (e *stickyKey) push(i int) {
	if e.n == len(e.cand) {
		e.cand[0] = e.cand[1]
		e.n--
	}
	e.cand[e.n] = i
	e.n++
}

// evict drops the keys last used more than maxIdle before now.
func (s *sticky) evict(now, maxIdle time.Duration) {
	for s.order.Size() > 0 {
		k, v := s.order.Min()
		if now-k.(stickyStamp).at <= maxIdle {
			return
		}
		s.order.Remove(k)
		delete(s.keys, v.(string))
	}
}

// Keys returns the routing keys the manual policy remembers (0 under the
// other policies).
func (r *Router) Keys() int {
	if r.sticky == nil {
		return 0
	}
	return len(r.sticky.keys)
}

// manual routes a request with a session key by the sticky routing map
// (see sticky), and one without a key by the assignment mode, remembering
// nothing, as SMG's select_new_worker.
func (r *Router) manual(req *Request) Decision {
	if req.Session == "" {
		return Decision{Replica: r.assign(), Reason: NoKey}
	}
	e := r.sticky.touch(req.Session, r.now)
	for _, i := range e.cand[:e.n] {
		if r.available[i] {
			return Decision{Replica: i, Reason: StickyHit}
		}
	}
	why := StickyMoved
	if e.n == 0 {
		why = StickyNew
	}
	i := r.assign()
	e.push(i)
	return Decision{Replica: i, Reason: why}
}

// assign picks a replica for a new routing key: a uniform draw (random), or
// a uniform draw among the fewest in flight (min_load), as SMG's
// select_min_by.
func (r *Router) assign() int {
	if !r.cfg.Manual.MinLoad {
		return r.cand[r.rng.IntN(len(r.cand))]
	}
	least := math.MaxInt
	r.ties = r.ties[:0]
	for _, i := range r.cand {
		switch l := r.inflight[i]; {
		case l < least:
			least = l
			r.ties = append(r.ties[:0], i)
		case l == least:
			r.ties = append(r.ties, i)
		}
	}
	if len(r.ties) == 1 {
		return r.ties[0]
	}
	return r.ties[r.rng.IntN(len(r.ties))]
}
