package fleet

import (
	"github.com/kvsim/kvsim/fleet/router"
	"github.com/kvsim/kvsim/traces"
)

// RouterEstimate compares, over the requests a cache-aware router sent to
// a replica for its cached prefix (cache_aware's cache_hit decisions,
// kv_aware's kv_hit and kv_miss, cache_aware_oracle's cache_hit), the
// prefix the router expected the replica to hold with the hit the replica
// really gave the request (its cached tokens, all tiers). cache_aware's
// expectation is its approximate tree's match, which never sees the
// replicas' evictions; kv_aware's its index of their KV events, as old as
// kv_signal_delay; the oracle's the replicas' caches at the decision. A
// request can also hit less than expected because the prefix was evicted
// between the decision and its admission, or more because an earlier
// request inserted more meanwhile.
type RouterEstimate struct {
	// Requests are the completed requests routed on an expected prefix.
	Requests int64 `json:"requests"`
	// Expected and Cached are the tokens the router expected those
	// requests to find cached and the tokens they found.
	Expected int64 `json:"expected_tokens"`
	Cached   int64 `json:"cached_tokens"`
	// Over and Under count the requests that found fewer, and more,
	// tokens than expected.
	Over  int64 `json:"over"`
	Under int64 `json:"under"`
	// MeanAbsError is the mean of |expected - cached|, tokens.
	MeanAbsError float64 `json:"mean_abs_error_tokens"`
}

// estimates is the run's RouterEstimate in the making: the expectation of
// each request in flight, by id.
type estimates struct {
	blocks bool // cache_aware: a match counts the approximate tree's symbols, blocks for a block-hash trace
	expect map[string]int64
	est    RouterEstimate
	absErr int64
}

// newEstimates returns the estimates of a regular fleet behind policy, or
// nil if its decisions expect no prefix.
func newEstimates(policy router.Policy) *estimates {
	switch policy {
	case router.CacheAware, router.KVAware, router.CacheAwareOracle:
		return &estimates{blocks: policy == router.CacheAware, expect: map[string]int64{}}
	}
	return nil
}

// routed notes d's expectation for rec as tokens of its prompt: kv_aware's
// and the oracle's matches are tokens, cache_aware's symbols of its tree,
// which are blocks for a block-hash trace.
func (e *estimates) routed(rec *traces.Record, d router.Decision) {
	if d.Reason != router.CacheHit && d.Reason != router.KVHit && d.Reason != router.KVMiss {
		return
	}
	x := int64(d.Matched)
	if e.blocks && len(rec.Tokens) == 0 && rec.BlockSize > 0 {
		x = min(x*int64(rec.BlockSize), int64(rec.InputLen))
	}
	e.expect[rec.ID] = x
}

// finished compares the expectation for request id, if any, with the
// tokens it found cached (failed: no comparison).
func (e *estimates) finished(id string, cached int64, failed bool) {
	x, ok := e.expect[id]
	if !ok {
		return
	}
	delete(e.expect, id)
	if failed {
		return
	}
	e.est.Requests++
	e.est.Expected += x
	e.est.Cached += cached
	switch {
	case cached < x:
		e.est.Over++
		e.absErr += x - cached
	case cached > x:
		e.est.Under++
		e.absErr += cached - x
	}
}

// result returns the comparison (nil for no estimates).
func (e *estimates) result() *RouterEstimate {
	if e == nil {
		return nil
	}
	out := e.est
	if out.Requests > 0 {
		out.MeanAbsError = float64(e.absErr) / float64(out.Requests)
	}
	return &out
}
