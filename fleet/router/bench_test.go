package router

import (
	"math/rand/v2"
	"strconv"
	"testing"
	"time"
)

// benchPool is a fixed pool of long prompts, built once: each is one of
// 32 shared 4,096-token system prompts followed by its own random
// 4,096-token tail, so a cache-aware router sees a long hit and a long new
// branch per request, as under multi-turn chat or agent traffic.
var benchPool []*Request

func benchRequests() []*Request {
	if benchPool != nil {
		return benchPool
	}
	const n, sys, tail = 1024, 4096, 4096
	rng := rand.New(rand.NewPCG(1, 2))
	prefixes := make([][]int32, 32)
	for i := range prefixes {
		prefixes[i] = make([]int32, sys)
		for j := range prefixes[i] {
			prefixes[i][j] = rng.Int32N(32000)
		}
	}
	benchPool = make([]*Request, n)
	for i := range benchPool {
		toks := append(make([]int32, 0, sys+tail), prefixes[i%len(prefixes)]...)
		for range tail {
			toks = append(toks, rng.Int32N(32000))
		}
		benchPool[i] = &Request{Tokens: toks, Len: len(toks), Session: "session-" + strconv.Itoa(i)}
	}
	return benchPool
}

// constOracle says every replica holds a different part of every prompt.
type constOracle struct{}

func (constOracle) HeldTokens(int) int { return 0 }

func (constOracle) CachedPrefix(r int, req *Request) Cached {
	return Cached{Device: min(req.Len, 512*r), Host: min(req.Len-min(req.Len, 512*r), 256)}
}

// BenchmarkRoute measures one routing decision (Route and the Finish of
// the request 64 decisions earlier, with a Tick every 64 requests) on
// 8,192-token prompts cycled from a pool of 1,024, at 8 and 64 replicas,
// after 1,024 untimed decisions. cache_aware runs with max_tree_size 2^16
// tokens per replica, so that a replica has evicted a prompt's tail before
// the prompt comes round again (each tail is new to the tree, as a fresh
// turn is) and the tree stays at its steady size; it reports the hit ratio
// of the timed decisions.
func BenchmarkRoute(b *testing.B) {
	for _, policy := range []Policy{CacheAware, RoundRobin, Random, PowerOfTwo, ConsistentHash, KVAware, PrefixHash, Manual} {
		for _, n := range []int{8, 64} {
			b.Run("policy="+policy.String()+"/replicas="+strconv.Itoa(n), func(b *testing.B) {
				cfg := Default()
				cfg.Policy = policy
				cfg.CacheAware.EvictionInterval = time.Second
				cfg.CacheAware.MaxTreeSize = 1 << 16
				r, err := New(cfg, n, Deps{Rand: rand.New(rand.NewPCG(3, 4)), Oracle: constOracle{}})
				if err != nil {
					b.Fatal(err)
				}
				for i := range n {
					r.SetLoad(i, float64(i)/float64(n))
				}
				reqs := benchRequests()
				var window [64]int
				k := 0
				step := func() {
					if k >= len(window) {
						if err := r.Finish(window[k%len(window)]); err != nil {
							b.Fatal(err)
						}
					}
					d, err := r.Route(reqs[k%len(reqs)])
					if err != nil {
						b.Fatal(err)
					}
					window[k%len(window)] = d.Replica
					k++
					if k%64 == 0 {
						r.Tick(time.Duration(k) * time.Second / 64)
					}
				}
				warm := len(reqs)
				for range warm {
					step()
				}
				hits := r.Count(CacheHit)
				b.ReportAllocs()
				for b.Loop() {
					step()
				}
				if policy == CacheAware {
					b.ReportMetric(float64(r.Count(CacheHit)-hits)/float64(k-warm), "hit-ratio")
				}
			})
		}
	}
}
