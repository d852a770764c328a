package router

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/kvsim/kvsim/internal/enum"
)

// Request is what the router sees of a request.
type Request struct {
	// Text is the routing text (an HTTP request's prompt, or its chat
	// messages' text joined by single spaces). When it is not empty the
	// approximate tree keys on its Unicode characters, as SGLang's HTTP
	// router does.
	Text string
	// Tokens are the prompt's token ids, used by the approximate tree (one
	// symbol per token) when Text is empty. The router does not keep the
	// slice.
	Tokens []int32
	// Blocks are the prompt's block hashes (a block-hash trace's hash_ids,
	// e.g. Mooncake's 512-token blocks), used by the approximate tree when
	// Text and Tokens are empty: one symbol per block, so match rates and
	// router.max_tree_size count blocks. The router does not keep the
	// slice.
	Blocks []uint64
	// BlockSize is the tokens per block of Blocks, for the caller's
	// [CacheOracle]; the router itself does not read it.
	BlockSize int
	// Session is consistent_hash's key (SMG's X-SMG-Routing-Key); empty
	// means no key.
	Session string
	// Len is the prompt's length in tokens, for the caller's
	// [CacheOracle]; the router itself does not read it.
	Len int
}

// Reason says which branch of a policy chose the replica.
type Reason int

// The reasons, counted per router ([Router.Count]).
const (
	// CacheHit: cache_aware, balanced load and a match rate above
	// cache_threshold; the matched replica.
	CacheHit Reason = 1 + iota
	// Imbalanced: cache_aware, the load-balance fallback (the imbalance
	// test held); the least-loaded replica.
	Imbalanced
	// Miss: cache_aware, balanced load and a match rate at or below
	// cache_threshold; the miss rule's replica.
	Miss
	// MatchUnavailable: cache_aware matched a replica that is not
	// available; the first available one, and no tree insert (SGLang).
	MatchUnavailable
	// Cycled: round_robin.
	Cycled
	// Drawn: random.
	Drawn
	// PowerOfTwoChoice: power_of_two, the lower-loaded of two draws.
	PowerOfTwoChoice
	// HashRing: consistent_hash, the session key's point on the ring.
	HashRing
	// NoKey: consistent_hash or manual for a request without a session
	// key, random; prefix_hash for a request with no tokens, blocks or
	// text, the least loaded.
	NoKey
	// KVHit: kv_aware chose a replica that holds part of the prompt.
	KVHit
	// KVMiss: kv_aware chose a replica that holds none of it.
	KVMiss
	// SmoothRR: nginx_round_robin, or nginx_hash for a request without a
	// session key (nginx falls back to round robin on an empty key).
	SmoothRR
	// Ketama: nginx_hash, the session key's point on nginx's ring.
	Ketama
	// PrefixRing: prefix_hash, the replica at the prompt prefix's point on
	// the ring (its load passed the load-factor test).
	PrefixRing
	// PrefixBalanced: prefix_hash, the ring's replica was over the load
	// factor; the least loaded replica under it (or the ring's if none is).
	PrefixBalanced
	// StickyHit: manual, a replica the session key is mapped to.
	StickyHit
	// StickyNew: manual, a session key seen for the first time (or again
	// after max_idle); a replica by assignment_mode.
	StickyNew
	// StickyMoved: manual, none of the key's replicas is available; a new
	// one by assignment_mode, which the key remembers.
	StickyMoved
	// LeastWait: least_load, the least expected wait.
	LeastWait
	numReasons
)

var reasonNames = enum.New[Reason]("Reason", "reason",
	"cache_hit", "imbalanced", "miss", "match_unavailable", "round_robin", "random",
	"power_of_two", "hash_ring", "no_key", "kv_hit", "kv_miss", "smooth_round_robin", "ketama",
	"prefix_ring", "prefix_balanced", "sticky_hit", "sticky_new", "sticky_moved", "least_wait")

// String returns the reason's name as results files print it.
func (r Reason) String() string { return reasonNames.String(r) }

// Reasons lists every reason in order, for tables of decision counts.
func Reasons() []Reason {
	out := make([]Reason, 0, numReasons-1)
	for r := CacheHit; r < numReasons; r++ {
		out = append(out, r)
	}
	return out
}

// Decision is the router's answer for one request.
type Decision struct {
	// Replica is the chosen replica's index in [0, replicas).
	Replica int
	// Reason is the branch that chose it.
	Reason Reason
	// Matched is cache_aware's approximate match in symbols (characters or
	// tokens) and kv_aware's cached prefix of the chosen replica in tokens
	// (all tiers); 0 for the other policies or branches without a match.
	Matched int
}

// Cached is how many leading tokens of a prompt a replica holds, by tier:
// the first Device tokens on its GPUs, the next Host tokens in host memory,
// the next Storage tokens in the shared L3 store.
type Cached struct{ Device, Host, Storage int }

// CacheOracle answers kv_aware's and cache_aware_oracle's question: what
// replica r really holds of req's prompt. The caller implements it over
// the replicas' radix trees and models the signal delay
// (router.kv_signal_delay) by answering from a view that old. It must not
// keep req. HeldTokens is what replica r holds in all (device or host),
// cache_aware_oracle's tree size for miss_rule = smallest_tree.
type CacheOracle interface {
	CachedPrefix(r int, req *Request) Cached
	HeldTokens(r int) int
}

// Deps are what a router takes from its caller besides its config.
type Deps struct {
	// Rand is the router's own seeded stream. random, power_of_two and
	// consistent_hash need it; the others ignore it.
	Rand *rand.Rand
	// Oracle answers kv_aware's and cache_aware_oracle's cache queries;
	// they need it.
	Oracle CacheOracle
}

// ErrNoReplica is returned by [Router.Route] when no replica is available
// (SGLang answers 503).
var ErrNoReplica = errors.New("router: no available replica")

// Router chooses a replica for each request. It has no clock: the caller
// calls [Router.Tick] with the virtual time, hands it load snapshots with
// [Router.SetLoad] when its poll interval says so, and reports each
// request's end with [Router.Finish]. It is not safe for concurrent use.
type Router struct {
	cfg       Config
	rng       *rand.Rand
	oracle    CacheOracle
	available []bool
	inflight  []int
	processed []int64 // requests routed per replica: SMG's tie-break
	countLoad bool    // whether Load reports in-flight counts (SGLang's rule)
	snap      []float64
	snapOK    []bool
	reports   []LoadReport // least_load's polled reports
	sincePoll []int64      // least_load: prompt tokens routed since each report
	rr        uint64
	tree      *approxTree
	ring      *ring
	swrr      *smoothRR
	ketama    *ketama
	sticky    *sticky
	nextEvict time.Duration
	now       time.Duration // the last Tick's time
	reasons   [numReasons]int64

	cand   []int
	key    []symbol
	scores []float64
	cached []int
	ties   []int
}

// maxRingPoints bounds a hash ring (replicas x router.virtual_nodes): a
// point costs about 64 bytes in the tree map, so the bound is some 270 MB.
const maxRingPoints = 1 << 22

// New returns a router over replicas replicas (indices 0 to replicas-1),
// all available, with no load snapshot.
func New(cfg Config, replicas int, d Deps) (*Router, error) {
	return newRouter(cfg, replicas, d, "router", false)
}

func newRouter(cfg Config, replicas int, d Deps, prefix string, countAll bool) (*Router, error) {
	if err := cfg.validate(prefix); err != nil {
		return nil, err
	}
	if replicas < 1 {
		return nil, fmt.Errorf("router: replicas must be >= 1 (got %d)", replicas)
	}
	if p := cfg.Policy; (p == ConsistentHash || p == PrefixHash) && replicas*cfg.ConsistentHash.VirtualNodes > maxRingPoints {
		return nil, fmt.Errorf("%s.virtual_nodes: %d points for each of %d replicas make a ring of %d points; at most %d (about 64 bytes each)",
			prefix, cfg.ConsistentHash.VirtualNodes, replicas, replicas*cfg.ConsistentHash.VirtualNodes, maxRingPoints)
	}
	switch cfg.Policy {
	case Random, PowerOfTwo, ConsistentHash, Manual:
		if d.Rand == nil {
			return nil, fmt.Errorf("%s.policy: %v needs a seeded random stream", prefix, cfg.Policy)
		}
	case KVAware, CacheAwareOracle:
		if d.Oracle == nil {
			return nil, fmt.Errorf("%s.policy: %v needs a cache oracle", prefix, cfg.Policy)
		}
	}
	r := &Router{
		cfg:       cfg,
		rng:       d.Rand,
		oracle:    d.Oracle,
		available: make([]bool, replicas),
		inflight:  make([]int, replicas),
		processed: make([]int64, replicas),
		countLoad: countAll || cfg.Policy.countsLoad(),
		snap:      make([]float64, replicas),
		snapOK:    make([]bool, replicas),
		reports:   make([]LoadReport, replicas),
		sincePoll: make([]int64, replicas),
	}
	for i := range r.available {
		r.available[i] = true
	}
	switch cfg.Policy {
	case CacheAware:
		r.tree = newApproxTree(replicas)
		r.nextEvict = cfg.CacheAware.EvictionInterval
	case ConsistentHash, PrefixHash:
		r.ring = newRing(replicas, cfg.ConsistentHash.VirtualNodes)
	case Manual:
		r.sticky = newSticky()
		r.nextEvict = cfg.CacheAware.EvictionInterval
	case NginxRoundRobin, NginxHash:
		r.swrr = newSmoothRR(replicas)
	}
	if cfg.Policy == NginxHash {
		names := cfg.Nginx.Upstreams
		if names == nil {
			names = DefaultUpstreams(replicas)
		}
		if len(names) != replicas {
			return nil, fmt.Errorf("%s.upstreams: %d server names for %d replicas (one per replica)", prefix, len(names), replicas)
		}
		r.ketama = newKetama(names)
	}
	return r, nil
}

// Replicas returns the number of replicas.
func (r *Router) Replicas() int { return len(r.inflight) }

// SetAvailable marks replica i available (healthy, circuit closed) or not.
// Policies choose among available replicas only; requests in flight to an
// unavailable replica still finish.
func (r *Router) SetAvailable(i int, ok bool) { r.available[i] = ok }

// SetLoad hands the router replica i's polled load: for power_of_two the
// value compared (KV token usage in [0, 1] as SMG, or used plus queued
// tokens as the classic router), for kv_aware the KV usage in [0, 1]. It
// stays until the next call; staleness is the caller's poll interval.
func (r *Router) SetLoad(i int, v float64) {
	r.snap[i] = v
	r.snapOK[i] = true
}

// InFlight returns the requests routed to replica i and not yet finished.
func (r *Router) InFlight(i int) int { return r.inflight[i] }

// Load returns replica i's load as SGLang's Worker::load() reports it: the
// requests in flight, under cache_aware and kv_aware (and always in PD
// mode); 0 under the other policies, which SGLang's HTTP router does not
// count for.
func (r *Router) Load(i int) int {
	if r.countLoad {
		return r.inflight[i]
	}
	return 0
}

// Routed returns how many requests were routed to replica i.
func (r *Router) Routed(i int) int64 { return r.processed[i] }

// Count returns how many decisions were taken for reason why.
func (r *Router) Count(why Reason) int64 {
	if why < CacheHit || why >= numReasons {
		return 0
	}
	return r.reasons[why]
}

// TreeSize returns replica i's symbols in the approximate tree (0 without
// one).
func (r *Router) TreeSize(i int) int {
	if r.tree == nil {
		return 0
	}
	return r.tree.size[i]
}

// NextTick returns the virtual time of the next eviction (cache_aware's
// approximate tree, manual's idle keys), and false when the policy keeps
// neither. A caller schedules a Tick then.
func (r *Router) NextTick() (time.Duration, bool) {
	return r.nextEvict, r.tree != nil || r.sticky != nil
}

// Tick tells the router the virtual time now; the caller calls it before
// routing at a new instant (manual stamps each key's use with it). At or
// after each multiple of router.eviction_interval, cache_aware cuts every
// replica's part of the approximate tree to router.max_tree_size symbols
// and manual drops the keys idle for more than router.max_idle (one
// eviction however many multiples passed; a second would change nothing).
func (r *Router) Tick(now time.Duration) {
	r.now = now
	if r.tree == nil && r.sticky == nil || now < r.nextEvict {
		return
	}
	if r.tree != nil {
		r.tree.evict(r.cfg.CacheAware.MaxTreeSize)
	}
	if r.sticky != nil {
		r.sticky.evict(now, r.cfg.Manual.MaxIdle)
	}
	iv := r.cfg.CacheAware.EvictionInterval
	r.nextEvict = (now/iv + 1) * iv
}

// Route chooses a replica for req and counts it in flight there. Every
// successful Route must be followed by exactly one [Router.Finish] of the
// chosen replica.
func (r *Router) Route(req *Request) (Decision, error) {
	r.cand = r.cand[:0]
	for i, ok := range r.available {
		if ok {
			r.cand = append(r.cand, i)
		}
	}
	if len(r.cand) == 0 {
		return Decision{}, ErrNoReplica
	}
	var d Decision
	switch r.cfg.Policy {
	case CacheAware:
		d = r.cacheAware(req)
	case RoundRobin:
		d = Decision{Replica: r.cand[r.rr%uint64(len(r.cand))], Reason: Cycled}
		r.rr++
	case Random:
		d = Decision{Replica: r.cand[r.rng.IntN(len(r.cand))], Reason: Drawn}
	case PowerOfTwo:
		d = Decision{Replica: r.powerOfTwo(), Reason: PowerOfTwoChoice}
	case ConsistentHash, NginxHash, Manual:
		d = r.bySession(req)
	case KVAware:
		d = r.kvAware(req)
	case CacheAwareOracle:
		d = r.cacheAwareOracle(req)
	case NginxRoundRobin:
		d = Decision{Replica: r.swrr.pick(r.cand), Reason: SmoothRR}
	case PrefixHash:
		d = r.prefixHash(req)
	case LeastLoad:
		d = r.leastLoad(req)
	}
	r.inflight[d.Replica]++
	r.processed[d.Replica]++
	r.reasons[d.Reason]++
	return d, nil
}

// bySession routes under the policies keyed by the request's session:
// consistent_hash's ring, nginx_hash's ketama ring, manual's sticky map. A
// request without a key is drawn at random (nginx: round robin; manual: by
// its assignment mode).
func (r *Router) bySession(req *Request) Decision {
	switch {
	case r.cfg.Policy == Manual:
		return r.manual(req)
	case req.Session == "" && r.cfg.Policy == NginxHash:
		return Decision{Replica: r.swrr.pick(r.cand), Reason: SmoothRR}
	case req.Session == "":
		return Decision{Replica: r.cand[r.rng.IntN(len(r.cand))], Reason: NoKey}
	case r.cfg.Policy == ConsistentHash:
		return Decision{Replica: r.ring.lookup(req.Session, r.available), Reason: HashRing}
	}
	return Decision{Replica: r.ketama.lookup(req.Session, r.available), Reason: Ketama}
}

// Finish records that a request routed to replica i has ended (its last
// token was sent or it was aborted). It fails, changing nothing, when
// replica i has no request in flight.
func (r *Router) Finish(i int) error {
	if r.canFinish(i) {
		r.inflight[i]--
		return nil
	}
	if i < 0 || i >= len(r.inflight) {
		return fmt.Errorf("router: finish on replica %d of %d", i, len(r.inflight))
	}
	return fmt.Errorf("router: finish on replica %d with no request in flight", i)
}

func (r *Router) canFinish(i int) bool { return i >= 0 && i < len(r.inflight) && r.inflight[i] > 0 }

// leastLoaded returns the candidate with the least (load, requests routed,
// index): SMG's order (smg 823cbbf98); the classic router took the first
// minimum load in index order.
func (r *Router) leastLoaded() int {
	best := r.cand[0]
	for _, i := range r.cand[1:] {
		if l, b := r.Load(i), r.Load(best); l < b || l == b && r.processed[i] < r.processed[best] {
			best = i
		}
	}
	return best
}

func (r *Router) powerOfTwo() int {
	n := len(r.cand)
	if n == 1 {
		return r.cand[0]
	}
	i := r.rng.IntN(n)
	j := r.rng.IntN(n - 1)
	if j >= i {
		j++
	}
	a, b := r.cand[i], r.cand[j]
	if r.snapOK[a] && r.snapOK[b] {
		if r.snap[b] < r.snap[a] {
			return b
		}
		return a
	}
	if r.Load(b) < r.Load(a) {
		return b
	}
	return a
}
