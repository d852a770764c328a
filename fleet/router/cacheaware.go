package router

import (
	"slices"
	"unicode/utf8"
)

// routingKey turns req into the approximate tree's symbols: the characters
// of Text, else the token ids cut to whole router.tree_page_size pages,
// else the block hashes. The slice is the router's scratch buffer.
func (r *Router) routingKey(req *Request) []symbol {
	k := r.key[:0]
	switch {
	case req.Text != "":
		k = slices.Grow(k, utf8.RuneCountInString(req.Text))
		for _, c := range req.Text {
			k = append(k, symbol(c))
		}
	case len(req.Tokens) > 0:
		ps := r.cfg.CacheAware.TreePageSize
		toks := req.Tokens[:len(req.Tokens)/ps*ps]
		k = slices.Grow(k, len(toks))
		for _, t := range toks {
			k = append(k, symbol(uint32(t)))
		}
	default:
		k = slices.Grow(k, len(req.Blocks))
		for _, b := range req.Blocks {
			k = append(k, symbol(b))
		}
	}
	r.key = k
	return k
}

// imbalanced is SGLang's is_imbalanced on the router's in-flight counts of
// the available replicas: max-min > balance_abs_threshold and
// max > min * balance_rel_threshold (both must hold); or, SMG's KV-usage
// triggers, over the available replicas with a load snapshot: max-min
// usage > balance_token_usage_threshold, or max usage >
// overload_token_usage_threshold.
func (r *Router) imbalanced() bool {
	lo, hi := r.Load(r.cand[0]), r.Load(r.cand[0])
	uLo, uHi, snaps := 0.0, 0.0, 0
	for _, i := range r.cand {
		lo, hi = min(lo, r.Load(i)), max(hi, r.Load(i))
		if r.snapOK[i] {
			if snaps == 0 {
				uLo, uHi = r.snap[i], r.snap[i]
			}
			uLo, uHi = min(uLo, r.snap[i]), max(uHi, r.snap[i])
			snaps++
		}
	}
	c := r.cfg.CacheAware
	if hi-lo > c.BalanceAbsThreshold && float64(hi) > float64(lo)*c.BalanceRelThreshold {
		return true
	}
	return snaps > 0 && (uHi-uLo > c.BalanceTokenUsageThreshold || uHi > c.OverloadTokenUsageThreshold)
}

// cacheAware is SGLang's cache_aware policy (sgl-router
// src/policies/cache_aware.rs, SMG model_gateway/src/policies/cache_aware.rs):
// the imbalance test first; then a match rate strictly above
// cache_threshold goes to the matched replica; a miss goes by the miss rule.
// The chosen replica is inserted along the whole key in every branch but
// MatchUnavailable.
func (r *Router) cacheAware(req *Request) Decision {
	key := r.routingKey(req)
	if r.imbalanced() {
		d := Decision{Replica: r.leastLoaded(), Reason: Imbalanced}
		r.tree.insert(key, d.Replica)
		return d
	}
	matched, tenant := r.tree.match(key)
	denom := len(key)
	if req.Text == "" && len(req.Tokens) > 0 {
		// Token mode: whole pages match; the rate is over every token.
		ps := r.cfg.CacheAware.TreePageSize
		matched = matched / ps * ps
		denom = len(req.Tokens)
	}
	if matched > 0 && float64(matched)/float64(denom) > r.cfg.CacheAware.CacheThreshold {
		if !r.available[tenant] {
			return Decision{Replica: r.cand[0], Reason: MatchUnavailable, Matched: matched}
		}
		r.tree.insert(key, tenant)
		return Decision{Replica: tenant, Reason: CacheHit, Matched: matched}
	}
	d := Decision{Reason: Miss, Matched: matched}
	if r.cfg.CacheAware.MissRule == SmallestTree {
		d.Replica = r.cand[0]
		for _, i := range r.cand[1:] {
			if r.tree.size[i] < r.tree.size[d.Replica] {
				d.Replica = i
			}
		}
	} else {
		d.Replica = r.leastLoaded()
	}
	r.tree.insert(key, d.Replica)
	return d
}

// cacheAwareOracle is cache_aware's rules over the replicas' real caches
// (fleet-spec 5.11): the imbalance test first; then the available replica
// whose cache holds the longest prefix of the prompt (device then host,
// then L3 with router.oracle_storage; ties to the lowest index) gets the
// request if that prefix over the prompt's tokens is strictly above
// cache_threshold; a miss goes by the miss rule, smallest_tree by the
// tokens each replica holds. There is no tree to insert into or evict.
func (r *Router) cacheAwareOracle(req *Request) Decision {
	if r.imbalanced() {
		return Decision{Replica: r.leastLoaded(), Reason: Imbalanced}
	}
	best, matched := r.cand[0], -1
	for _, i := range r.cand {
		h := r.oracle.CachedPrefix(i, req)
		m := h.Device + h.Host
		if r.cfg.CacheAware.OracleStorage {
			m += h.Storage
		}
		if m > matched {
			best, matched = i, m
		}
	}
	n := req.Len
	if n <= 0 {
		n = len(req.Tokens)
	}
	if matched > 0 && n > 0 && float64(matched)/float64(n) > r.cfg.CacheAware.CacheThreshold {
		return Decision{Replica: best, Reason: CacheHit, Matched: matched}
	}
	d := Decision{Replica: r.leastLoaded(), Reason: Miss, Matched: matched}
	if r.cfg.CacheAware.MissRule == SmallestTree {
		d.Replica = r.cand[0]
		for _, i := range r.cand[1:] {
			if r.oracle.HeldTokens(i) < r.oracle.HeldTokens(d.Replica) {
				d.Replica = i
			}
		}
	}
	return d
}
