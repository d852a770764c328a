package llamacpp

import "slices"

// ramCache is llama-server's host-RAM prompt cache (server_prompt_cache):
// whole slot states (token sequence and KV), oldest first.
type ramCache struct {
	limitBytes  int64 // 0: no size limit (--cache-ram -1)
	limitTokens int64 // -c: the token limit, raised to limitBytes / bytes per token when that is larger
	perToken    int64
	states      []ramState
	bytes       int64
	tokens      int64
	peak        int64 // the most bytes the cache has held: memory the process has touched
	stats       *Stats
}

type ramState struct {
	tokens []int32
}

func newRAMCache(cfg Config, st *Stats) *ramCache {
	if cfg.CacheRAMMiB == 0 {
		return nil
	}
	c := &ramCache{limitTokens: int64(cfg.Context), perToken: cfg.StateBytesPerToken, stats: st}
	if cfg.CacheRAMMiB > 0 {
		c.limitBytes = cfg.CacheRAMMiB << 20
	}
	return c
}

func (c *ramCache) size(s ramState) int64 { return int64(len(s.tokens)) * c.perToken }

func (c *ramCache) removeAt(i int) {
	c.bytes -= c.size(c.states[i])
	c.tokens -= int64(len(c.states[i].tokens))
	c.states = slices.Delete(c.states, i, i+1)
}

// save stores a copy of a slot's tokens (server_prompt_cache::alloc): not
// when a cached state already contains them as a prefix; cached states that
// are prefixes of them are dropped as obsolete; a state larger than the
// whole limit is not stored; the oldest states make room for it. It returns
// the bytes copied (0 when nothing was stored) and how many of them lie
// beyond the cache's high-water mark: memory freed by states that left the
// cache is reused (the allocator hands it out again), the rest is memory
// the process touches for the first time.
func (c *ramCache) save(toks []int32) (n, fresh int64) {
	if len(toks) == 0 {
		return 0, 0
	}
	for _, s := range c.states {
		if lcp(s.tokens, toks) == len(toks) {
			c.stats.RAMSaveSkipped++
			return 0, 0
		}
	}
	for i := 0; i < len(c.states); {
		if lcp(c.states[i].tokens, toks) == len(c.states[i].tokens) {
			c.removeAt(i)
			c.stats.RAMObsolete++
			continue
		}
		i++
	}
	s := ramState{tokens: slices.Clone(toks)}
	n = c.size(s)
	if c.limitBytes > 0 && n > c.limitBytes {
		c.stats.RAMTooLarge++
		return 0, 0
	}
	for c.limitBytes > 0 && len(c.states) > 0 && c.bytes+n > c.limitBytes {
		c.stats.RAMEvictedTokens += int64(len(c.states[0].tokens))
		c.removeAt(0)
	}
	fresh = max(0, c.bytes+n-c.peak)
	c.states = append(c.states, s)
	c.bytes += n
	c.peak = max(c.peak, c.bytes)
	c.tokens += int64(len(s.tokens))
	c.stats.RAMSaves++
	return n, fresh
}

// load looks for a cached state that serves prompt better than the slot's
// own tokens (server_prompt_cache::load): it must keep at least a quarter of
// itself (f_keep >= 0.25) and beat the best so far on both the fraction of
// itself kept and the fraction of the prompt matched. The first such best
// state, in cache order, is taken out of the cache and returned.
func (c *ramCache) load(slotToks, prompt []int32) ([]int32, bool) {
	l := lcp(slotToks, prompt)
	keepBest := float32(-1)
	if len(slotToks) > 0 {
		keepBest = float32(l) / float32(len(slotToks))
	}
	simBest := float32(l) / float32(len(prompt))
	best := -1
	for i, s := range c.states {
		l := lcp(s.tokens, prompt)
		keep := float32(l) / float32(len(s.tokens))
		sim := float32(l) / float32(len(prompt))
		if keep < 0.25 {
			continue
		}
		if keepBest < keep && simBest < sim {
			keepBest, simBest, best = keep, sim, i
		}
	}
	if best < 0 {
		return nil, false
	}
	toks := c.states[best].tokens
	c.removeAt(best)
	c.stats.RAMRestores++
	return toks, true
}

// update enforces the limits after a change (server_prompt_cache::update):
// oldest first, always keeping one state.
func (c *ramCache) update() {
	for c.limitBytes > 0 && len(c.states) > 1 && c.bytes > c.limitBytes {
		c.stats.RAMEvictedTokens += int64(len(c.states[0].tokens))
		c.removeAt(0)
	}
	limit := c.limitTokens
	if c.limitBytes > 0 {
		perTok := max(1, float64(c.bytes)/float64(max(1, c.tokens)))
		limit = max(limit, int64(float64(c.limitBytes)/perTok))
	}
	for len(c.states) > 1 && c.tokens > limit {
		c.stats.RAMEvictedTokens += int64(len(c.states[0].tokens))
		c.removeAt(0)
	}
}

// lcp is the length of the longest common prefix of a and b.
func lcp(a, b []int32) int {
	n := min(len(a), len(b))
	for i := range n {
		if a[i] != b[i] {
			return i
		}
	}
	return n
}
