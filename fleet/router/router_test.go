package router

import (
	"errors"
	"math"
	"math/rand/v2"
	"slices"
	"strconv"
	"testing"
	"time"

	"pgregory.net/rapid"
)

func newRNG(seed uint64) *rand.Rand { return rand.New(rand.NewPCG(seed, 0x726f75746572)) }

// drawRequest draws a request whose prompt often extends an earlier one's.
func drawRequest(rt *rapid.T, earlier []*Request, text bool) *Request {
	toks := rapid.SliceOfN(rapid.Int32Range(0, 3), 0, 10).Draw(rt, "tokens")
	if len(earlier) > 0 && rapid.Bool().Draw(rt, "extend") {
		base := rapid.SampledFrom(earlier).Draw(rt, "base")
		cut := rapid.IntRange(0, len(base.Tokens)).Draw(rt, "cut")
		toks = append(slices.Clone(base.Tokens[:cut]), toks...)
	}
	req := &Request{Tokens: toks, Len: len(toks), Session: "s" + strconv.Itoa(rapid.IntRange(0, 5).Draw(rt, "session"))}
	if text {
		b := make([]rune, len(toks))
		for i, t := range toks {
			b[i] = 'α' + rune(t) // non-ASCII: the tree keys on characters, not bytes
		}
		req.Text = string(b)
	}
	return req
}

func lcp(a, b []int32) int {
	n := 0
	for n < len(a) && n < len(b) && a[n] == b[n] {
		n++
	}
	return n
}

// TestPropCacheAwareLongestMatch: with cache_threshold 0 and balance
// thresholds that never fire, cache_aware sends every request to a replica
// with the longest common prefix with some request that replica was sent
// (brute force over the history, no eviction; in whole tree pages for
// token keys), and reports a miss exactly when no replica shares one.
func TestPropCacheAwareLongestMatch(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		n := rapid.IntRange(1, 6).Draw(rt, "replicas")
		cfg := Default()
		cfg.CacheAware.CacheThreshold = 0
		cfg.CacheAware.BalanceAbsThreshold = math.MaxInt
		cfg.CacheAware.BalanceRelThreshold = math.Inf(1)
		cfg.CacheAware.MissRule = rapid.SampledFrom([]MissRule{MinLoad, SmallestTree}).Draw(rt, "miss_rule")
		text := rapid.Bool().Draw(rt, "text")
		ps := 1 // page size of the model's comparison: text ignores tree_page_size
		cfg.CacheAware.TreePageSize = rapid.SampledFrom([]int{1, 2, 4}).Draw(rt, "tree_page_size")
		if !text {
			ps = cfg.CacheAware.TreePageSize
		}
		r, err := New(cfg, n, Deps{})
		if err != nil {
			rt.Fatal(err)
		}
		sent := make([][]*Request, n)
		var all []*Request
		for range rapid.IntRange(1, 40).Draw(rt, "requests") {
			req := drawRequest(rt, all, text)
			best := make([]int, n)
			want := 0
			for i := range n {
				for _, s := range sent[i] {
					// only whole pages are held and matched
					best[i] = max(best[i], lcp(s.Tokens[:len(s.Tokens)/ps*ps], req.Tokens)/ps*ps)
				}
				want = max(want, best[i])
			}
			d, err := r.Route(req)
			if err != nil {
				rt.Fatal(err)
			}
			switch {
			case want > 0 && (d.Reason != CacheHit || d.Matched != want || best[d.Replica] != want):
				rt.Fatalf("Route(%v) = %+v; longest match %d, replica %d's is %d", req.Tokens, d, want, d.Replica, best[d.Replica])
			case want == 0 && d.Reason != Miss:
				rt.Fatalf("Route(%v) = %+v with no match, want a miss", req.Tokens, d)
			}
			sent[d.Replica] = append(sent[d.Replica], req)
			all = append(all, req)
			if rapid.Bool().Draw(rt, "finish") {
				if err := r.Finish(d.Replica); err != nil {
					rt.Fatal(err)
				}
			}
		}
	})
}

// fakeOracle answers kv_aware from a fixed table: replica r holds the first
// cached[r] tokens, split over the tiers as tiers[r] says.
type fakeOracle struct {
	held []Cached
	size []int // HeldTokens
}

func (o fakeOracle) HeldTokens(r int) int { return o.size[r] }

func (o fakeOracle) CachedPrefix(r int, req *Request) Cached {
	h := o.held[r]
	h.Device = min(h.Device, req.Len)
	h.Host = min(h.Host, req.Len-h.Device)
	h.Storage = min(h.Storage, req.Len-h.Device-h.Host)
	return h
}

func drawOracle(rt *rapid.T, n int) fakeOracle {
	o := fakeOracle{held: make([]Cached, n), size: make([]int, n)}
	for i := range o.held {
		o.size[i] = rapid.IntRange(0, 3).Draw(rt, "size")
		o.held[i] = Cached{
			Device:  rapid.IntRange(0, 8).Draw(rt, "device"),
			Host:    rapid.IntRange(0, 8).Draw(rt, "host"),
			Storage: rapid.IntRange(0, 8).Draw(rt, "storage"),
		}
	}
	return o
}

// TestPropRouteFinishConservation: under every policy, with replicas going
// unavailable and back, ticks and load snapshots, each route is counted in
// flight on an available replica until its one finish; a finish with
// nothing in flight fails and changes nothing; decisions are counted once
// by reason and by replica; once every request has finished every
// in-flight count is zero.
func TestPropRouteFinishConservation(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		n := rapid.IntRange(1, 5).Draw(rt, "replicas")
		cfg := Default()
		cfg.Policy = rapid.SampledFrom([]Policy{CacheAware, RoundRobin, Random, PowerOfTwo, ConsistentHash, KVAware, CacheAwareOracle, PrefixHash, Manual, LeastLoad}).Draw(rt, "policy")
		cfg.CacheAware.BalanceAbsThreshold = rapid.IntRange(0, 4).Draw(rt, "abs")
		cfg.CacheAware.MaxTreeSize = rapid.IntRange(0, 30).Draw(rt, "max_tree_size")
		cfg.CacheAware.EvictionInterval = time.Second
		r, err := New(cfg, n, Deps{Rand: newRNG(rapid.Uint64().Draw(rt, "seed")), Oracle: drawOracle(rt, n)})
		if err != nil {
			rt.Fatal(err)
		}
		inflight := make([]int, n)
		available := make([]bool, n)
		for i := range available {
			available[i] = true
		}
		var reqs []*Request
		var open []int // replicas of the requests in flight
		routes := int64(0)
		now := time.Duration(0)
		rt.Repeat(map[string]func(*rapid.T){
			"route": func(rt *rapid.T) {
				req := drawRequest(rt, reqs, false)
				reqs = append(reqs, req)
				d, err := r.Route(req)
				if !slices.Contains(available, true) {
					if !errors.Is(err, ErrNoReplica) {
						rt.Fatalf("Route with no replica available = %+v, %v", d, err)
					}
					return
				}
				if err != nil {
					rt.Fatal(err)
				}
				if !available[d.Replica] {
					rt.Fatalf("Route chose unavailable replica %d", d.Replica)
				}
				inflight[d.Replica]++
				open = append(open, d.Replica)
				routes++
			},
			"finish": func(rt *rapid.T) {
				if len(open) == 0 {
					i := rapid.IntRange(-1, n).Draw(rt, "replica")
					if err := r.Finish(i); err == nil {
						rt.Fatalf("Finish(%d) with nothing in flight = nil", i)
					}
					return
				}
				k := rapid.IntRange(0, len(open)-1).Draw(rt, "request")
				if err := r.Finish(open[k]); err != nil {
					rt.Fatal(err)
				}
				inflight[open[k]]--
				open = slices.Delete(open, k, k+1)
			},
			"availability": func(rt *rapid.T) {
				i := rapid.IntRange(0, n-1).Draw(rt, "replica")
				available[i] = !available[i]
				r.SetAvailable(i, available[i])
			},
			"tick": func(rt *rapid.T) {
				now += time.Duration(rapid.Int64Range(0, int64(3*time.Second)).Draw(rt, "dt"))
				r.Tick(now)
				if next, ok := r.NextTick(); ok && next <= now {
					rt.Fatalf("Tick(%v): next tick %v is not in the future", now, next)
				}
			},
			"load": func(rt *rapid.T) {
				r.SetLoad(rapid.IntRange(0, n-1).Draw(rt, "replica"), rapid.Float64Range(0, 1).Draw(rt, "load"))
			},
			"": func(rt *rapid.T) {
				var byReason, byReplica int64
				for _, why := range Reasons() {
					byReason += r.Count(why)
				}
				for i := range n {
					byReplica += r.Routed(i)
					if r.InFlight(i) != inflight[i] {
						rt.Fatalf("InFlight(%d) = %d, want %d", i, r.InFlight(i), inflight[i])
					}
				}
				if byReason != routes || byReplica != routes {
					rt.Fatalf("%d routes counted %d times by reason and %d by replica", routes, byReason, byReplica)
				}
			},
		})
		for _, i := range open {
			if err := r.Finish(i); err != nil {
				rt.Fatal(err)
			}
		}
		for i := range n {
			if r.InFlight(i) != 0 {
				rt.Fatalf("InFlight(%d) = %d after every request finished", i, r.InFlight(i))
			}
			if err := r.Finish(i); err == nil {
				rt.Fatalf("Finish(%d) after every request finished = nil", i)
			}
		}
	})
}

// TestPropRoundRobinCycles: request k goes to available[c mod
// len(available)] with c the requests routed so far; the counter is not
// reset when the available set changes (SGLang).
func TestPropRoundRobinCycles(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		n := rapid.IntRange(1, 8).Draw(rt, "replicas")
		cfg := Default()
		cfg.Policy = RoundRobin
		r, err := New(cfg, n, Deps{})
		if err != nil {
			rt.Fatal(err)
		}
		available := make([]bool, n)
		for i := range available {
			available[i] = true
		}
		c := 0
		for range rapid.IntRange(1, 60).Draw(rt, "steps") {
			if rapid.IntRange(0, 4).Draw(rt, "op") == 0 {
				i := rapid.IntRange(0, n-1).Draw(rt, "replica")
				available[i] = !available[i]
				r.SetAvailable(i, available[i])
				continue
			}
			var cand []int
			for i, ok := range available {
				if ok {
					cand = append(cand, i)
				}
			}
			d, err := r.Route(&Request{})
			if len(cand) == 0 {
				if err == nil {
					rt.Fatalf("Route with none available = %+v", d)
				}
				continue
			}
			if err != nil || d.Replica != cand[c%len(cand)] || d.Reason != Cycled {
				rt.Fatalf("request %d: Route = %+v, %v; want replica %d of %v", c, d, err, cand[c%len(cand)], cand)
			}
			if r.Load(d.Replica) != 0 {
				rt.Fatalf("round_robin Load(%d) = %d; SGLang does not count it", d.Replica, r.Load(d.Replica))
			}
			c++
		}
	})
}

// TestPropConsistentHashSticky: a session goes to one replica while the
// available set stays; when a replica becomes unavailable only its
// sessions move.
func TestPropConsistentHashSticky(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		n := rapid.IntRange(2, 8).Draw(rt, "replicas")
		cfg := Default()
		cfg.Policy = ConsistentHash
		cfg.ConsistentHash.VirtualNodes = rapid.IntRange(1, 200).Draw(rt, "virtual_nodes")
		r, err := New(cfg, n, Deps{Rand: newRNG(1)})
		if err != nil {
			rt.Fatal(err)
		}
		sessions := rapid.SliceOfNDistinct(rapid.StringN(1, 12, -1), 1, 30, rapid.ID[string]).Draw(rt, "sessions")
		home := map[string]int{}
		for range 3 {
			for _, s := range sessions {
				d, err := r.Route(&Request{Session: s})
				if err != nil || d.Reason != HashRing {
					rt.Fatalf("Route(%q) = %+v, %v", s, d, err)
				}
				if h, ok := home[s]; ok && h != d.Replica {
					rt.Fatalf("session %q went to %d, then to %d", s, h, d.Replica)
				}
				home[s] = d.Replica
			}
		}
		gone := rapid.IntRange(0, n-1).Draw(rt, "unavailable")
		r.SetAvailable(gone, false)
		for _, s := range sessions {
			d, err := r.Route(&Request{Session: s})
			if err != nil {
				rt.Fatal(err)
			}
			if d.Replica == gone || home[s] != gone && d.Replica != home[s] {
				rt.Fatalf("replica %d unavailable: session %q moved from %d to %d", gone, s, home[s], d.Replica)
			}
		}
	})
}

// TestConsistentHashRemap: growing the ring from N to N+1 replicas moves
// only keys to the new replica, and about 1/(N+1) of them (within a factor
// of 1.5 with 150 virtual nodes and 20,000 keys).
func TestConsistentHashRemap(t *testing.T) {
	const keys = 20000
	all := make([]bool, 65)
	for i := range all {
		all[i] = true
	}
	for _, n := range []int{1, 2, 3, 4, 7, 8, 15, 16, 31, 63} {
		before, after := newRing(n, 150), newRing(n+1, 150)
		checkRemap(t, n, keys, func(k string) int { return before.lookup(k, all) }, func(k string) int { return after.lookup(k, all) })
	}
}

// checkRemap checks that of keys session keys, those that before (a ring
// of n replicas) and after (the same plus replica n) send to different
// replicas all go to replica n, and that they are about 1/(n+1) of them
// (within a factor of 1.5).
func checkRemap(t *testing.T, n, keys int, before, after func(string) int) {
	t.Helper()
	moved := 0
	for k := range keys {
		key := "session-" + strconv.Itoa(k)
		a, b := before(key), after(key)
		if a != b {
			if b != n {
				t.Fatalf("N=%d: key %q moved from %d to %d, not to the new replica", n, key, a, b)
			}
			moved++
		}
	}
	frac, want := float64(moved)/float64(keys), 1/float64(n+1)
	t.Logf("N=%d -> %d: moved %.4f of keys, 1/(N+1) = %.4f", n, n+1, frac, want)
	if frac < want/1.5 || frac > want*1.5 {
		t.Errorf("N=%d -> %d: moved %.4f of keys, want about %.4f", n, n+1, frac, want)
	}
}

// TestPropSeededPoliciesDeterministic: random, power_of_two and
// consistent_hash (keyless requests draw) give the same decisions for the
// same seed and the same calls; power_of_two never picks the replica with
// the strictly highest load snapshot.
func TestPropSeededPoliciesDeterministic(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		n := rapid.IntRange(1, 8).Draw(rt, "replicas")
		cfg := Default()
		cfg.Policy = rapid.SampledFrom([]Policy{Random, PowerOfTwo, ConsistentHash}).Draw(rt, "policy")
		seed := rapid.Uint64().Draw(rt, "seed")
		loads := rapid.SliceOfN(rapid.Float64Range(0, 1), n, n).Draw(rt, "loads")
		var runs [2][]Decision
		for k := range runs {
			r, err := New(cfg, n, Deps{Rand: newRNG(seed)})
			if err != nil {
				rt.Fatal(err)
			}
			for i, l := range loads {
				r.SetLoad(i, l)
			}
			for range 50 {
				d, err := r.Route(&Request{})
				if err != nil {
					rt.Fatal(err)
				}
				runs[k] = append(runs[k], d)
			}
		}
		if !slices.Equal(runs[0], runs[1]) {
			rt.Fatalf("two runs with seed %d differ:\n%v\n%v", seed, runs[0], runs[1])
		}
		if cfg.Policy != PowerOfTwo || n < 2 {
			return
		}
		hi := 0
		for i, l := range loads {
			if l > loads[hi] {
				hi = i
			}
		}
		unique := true
		for i, l := range loads {
			unique = unique && (i == hi || l != loads[hi])
		}
		for _, d := range runs[0] {
			if unique && d.Replica == hi {
				rt.Fatalf("power_of_two chose replica %d with the highest load %v of %v", hi, loads[hi], loads)
			}
		}
	})
}

// TestRandomCoversReplicas: a seeded random router reaches every replica.
func TestRandomCoversReplicas(t *testing.T) {
	cfg := Default()
	cfg.Policy = Random
	r, err := New(cfg, 8, Deps{Rand: newRNG(7)})
	if err != nil {
		t.Fatal(err)
	}
	for range 800 {
		if _, err := r.Route(&Request{}); err != nil {
			t.Fatal(err)
		}
	}
	for i := range 8 {
		if got := r.Routed(i); got < 50 || got > 150 {
			t.Errorf("Routed(%d) = %d of 800 over 8 replicas, want about 100", i, got)
		}
	}
}

// TestPropCacheAwareDeterministic: two cache_aware routers given the same
// requests, finishes and ticks (with evictions cutting the tree) take the
// same decisions and keep the same tree sizes: no map order leaks into a
// decision or an eviction.
func TestPropCacheAwareDeterministic(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		n := rapid.IntRange(1, 5).Draw(rt, "replicas")
		cfg := Default()
		cfg.CacheAware.BalanceAbsThreshold = rapid.IntRange(0, 3).Draw(rt, "abs")
		cfg.CacheAware.MaxTreeSize = rapid.IntRange(0, 40).Draw(rt, "max_tree_size")
		cfg.CacheAware.EvictionInterval = time.Second
		var rs [2]*Router
		for k := range rs {
			r, err := New(cfg, n, Deps{})
			if err != nil {
				rt.Fatal(err)
			}
			rs[k] = r
		}
		var reqs []*Request
		var open []int
		for step := range rapid.IntRange(1, 80).Draw(rt, "steps") {
			switch rapid.IntRange(0, 3).Draw(rt, "op") {
			case 0, 1:
				req := drawRequest(rt, reqs, rapid.Bool().Draw(rt, "text"))
				reqs = append(reqs, req)
				a, err := rs[0].Route(req)
				if err != nil {
					rt.Fatal(err)
				}
				b, err := rs[1].Route(req)
				if err != nil || a != b {
					rt.Fatalf("step %d: decisions %+v and %+v (%v)", step, a, b, err)
				}
				open = append(open, a.Replica)
			case 2:
				if len(open) > 0 {
					k := rapid.IntRange(0, len(open)-1).Draw(rt, "finish")
					for _, r := range rs {
						if err := r.Finish(open[k]); err != nil {
							rt.Fatal(err)
						}
					}
					open = slices.Delete(open, k, k+1)
				}
			case 3:
				for _, r := range rs {
					r.Tick(time.Duration(step) * time.Second)
				}
			}
			for i := range n {
				if rs[0].TreeSize(i) != rs[1].TreeSize(i) {
					rt.Fatalf("step %d: replica %d tree sizes %d and %d", step, i, rs[0].TreeSize(i), rs[1].TreeSize(i))
				}
			}
		}
	})
}
