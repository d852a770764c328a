package router

import (
	"math"
	"testing"

	"pgregory.net/rapid"
)

// TestPropCacheAwareOracle: cache_aware_oracle takes every decision as a
// direct reading of its rules says, from the router's public counts and
// the oracle's answers: imbalanced (the two thresholds on in-flight
// counts) -> the least (in flight, routed, index); else the candidate
// holding the longest prefix (device + host, + L3 with oracle_storage;
// ties to the lowest index) when that prefix over the prompt is strictly
// above cache_threshold; else the miss rule's replica (fewest held tokens
// for smallest_tree).
func TestPropCacheAwareOracle(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		n := rapid.IntRange(1, 5).Draw(rt, "replicas")
		cfg := Default()
		cfg.Policy = CacheAwareOracle
		ca := &cfg.CacheAware
		ca.CacheThreshold = rapid.SampledFrom([]float64{0, 0.25, 0.5, 1}).Draw(rt, "threshold")
		ca.BalanceAbsThreshold = rapid.IntRange(0, 3).Draw(rt, "abs")
		ca.BalanceRelThreshold = rapid.SampledFrom([]float64{0, 1.5, math.Inf(1)}).Draw(rt, "rel")
		ca.MissRule = rapid.SampledFrom([]MissRule{MinLoad, SmallestTree}).Draw(rt, "miss")
		ca.OracleStorage = rapid.Bool().Draw(rt, "storage")
		o := drawOracle(rt, n)
		r, err := New(cfg, n, Deps{Oracle: o})
		if err != nil {
			rt.Fatal(err)
		}
		for range rapid.IntRange(1, 30).Draw(rt, "steps") {
			if i := rapid.IntRange(0, n-1).Draw(rt, "finish"); r.InFlight(i) > 0 && rapid.Bool().Draw(rt, "do finish") {
				if err := r.Finish(i); err != nil {
					rt.Fatal(err)
				}
			}
			for i := range n {
				r.SetAvailable(i, i == 0 || rapid.Bool().Draw(rt, "available"))
			}
			req := &Request{Len: rapid.IntRange(1, 30).Draw(rt, "len")}
			want := oracleModel(r, o, req, n)
			d, err := r.Route(req)
			if err != nil {
				rt.Fatal(err)
			}
			if d.Replica != want.Replica || d.Reason != want.Reason {
				rt.Fatalf("decision %+v, want %+v", d, want)
			}
		}
	})
}

// oracleModel is cache_aware_oracle's decision read off its rules.
func oracleModel(r *Router, o fakeOracle, req *Request, n int) Decision {
	ca := r.cfg.CacheAware
	var cand []int
	for i := range n {
		if r.available[i] {
			cand = append(cand, i)
		}
	}
	least := cand[0]
	lo, hi := r.InFlight(cand[0]), r.InFlight(cand[0])
	for _, i := range cand {
		lo, hi = min(lo, r.InFlight(i)), max(hi, r.InFlight(i))
		if l, b := r.InFlight(i), r.InFlight(least); l < b || l == b && r.Routed(i) < r.Routed(least) {
			least = i
		}
	}
	if hi-lo > ca.BalanceAbsThreshold && float64(hi) > float64(lo)*ca.BalanceRelThreshold {
		return Decision{Replica: least, Reason: Imbalanced}
	}
	best, most := -1, -1
	for _, i := range cand {
		h := o.CachedPrefix(i, req)
		m := h.Device + h.Host
		if ca.OracleStorage {
			m += h.Storage
		}
		if m > most {
			best, most = i, m
		}
	}
	if most > 0 && float64(most)/float64(req.Len) > ca.CacheThreshold {
		return Decision{Replica: best, Reason: CacheHit}
	}
	if ca.MissRule == SmallestTree {
		small := cand[0]
		for _, i := range cand {
			if o.HeldTokens(i) < o.HeldTokens(small) {
				small = i
			}
		}
		return Decision{Replica: small, Reason: Miss}
	}
	return Decision{Replica: least, Reason: Miss}
}
