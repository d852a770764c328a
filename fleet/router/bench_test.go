package router

import (
	"math/rand/v2"
	"strconv"
	"testing"
	"time"
)

// benchRequests returns a fixed pool of long prompts: 32 shared system
// prompts of 4,096 tokens, each followed by a private 4,096-token
// conversation, so that a cache-aware router sees both long hits and
// long divergent tails (a multi-turn chat or agent workload's shape).
func benchRequests(n int) []*Request {
	rng := rand.New(rand.NewPCG(1, 2))
	const sys, tail = 4096, 4096
	prefixes := make([][]int32, 32)
	for i := range prefixes {
		prefixes[i] = make([]int32, sys)
		for j := range prefixes[i] {
			prefixes[i][j] = rng.Int32N(32000)
		}
	}
	reqs := make([]*Request, n)
	for i := range reqs {
		toks := append(make([]int32, 0, sys+tail), prefixes[i%len(prefixes)]...)
		for range tail {
			toks = append(toks, rng.Int32N(32000))
		}
		reqs[i] = &Request{Tokens: toks, Len: len(toks), Session: "session-" + strconv.Itoa(i)}
	}
	return reqs
}

// constOracle says every replica holds a different part of every prompt.
type constOracle struct{}

func (constOracle) CachedPrefix(r int, req *Request) Cached {
	return Cached{Device: min(req.Len, 512*r), Host: min(req.Len-min(req.Len, 512*r), 256)}
}

// BenchmarkRoute measures one routing decision (Route and its Finish, with
// a Tick every 64 requests) on 8,192-token prompts, at 8 and 64 replicas,
// with 64 requests kept in flight. cache_aware reports its hit ratio.
func BenchmarkRoute(b *testing.B) {
	reqs := benchRequests(512)
	for _, policy := range []Policy{CacheAware, RoundRobin, Random, PowerOfTwo, ConsistentHash, KVAware} {
		for _, n := range []int{8, 64} {
			b.Run("policy="+policy.String()+"/replicas="+strconv.Itoa(n), func(b *testing.B) {
				cfg := Default()
				cfg.Policy = policy
				cfg.CacheAware.EvictionInterval = time.Second
				r, err := New(cfg, n, Deps{Rand: rand.New(rand.NewPCG(3, 4)), Oracle: constOracle{}})
				if err != nil {
					b.Fatal(err)
				}
				for i := range n {
					r.SetLoad(i, float64(i)/float64(n))
				}
				var window [64]int
				k := 0
				b.ReportAllocs()
				for b.Loop() {
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
				if policy == CacheAware {
					b.ReportMetric(float64(r.Count(CacheHit))/float64(k), "hit-ratio")
				}
			})
		}
	}
}
