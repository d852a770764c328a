package router

import (
	"testing"
	"time"
)

func mustRoute(t *testing.T, r *Router, req *Request) Decision {
	t.Helper()
	d, err := r.Route(req)
	if err != nil {
		t.Fatal(err)
	}
	return d
}

func cacheAwareRouter(t *testing.T, n int, edit func(*CacheAwareConfig)) *Router {
	t.Helper()
	cfg := Default()
	edit(&cfg.CacheAware)
	r, err := New(cfg, n, Deps{})
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// TestCacheAwareImbalance: the imbalance test (both thresholds) runs before
// the tree and sends to the least loaded replica, which is then inserted.
func TestCacheAwareImbalance(t *testing.T) {
	r := cacheAwareRouter(t, 2, func(c *CacheAwareConfig) {
		c.BalanceAbsThreshold = 2
		c.BalanceRelThreshold = 1.5
	})
	req := &Request{Text: "the same long system prompt"}
	want := []Decision{
		{0, Miss, 0},       // loads 0, 0: miss, min load by index
		{0, CacheHit, 27},  // 1, 0: 1-0 > 2 fails
		{0, CacheHit, 27},  // 2, 0
		{1, Imbalanced, 0}, // 3, 0: 3 > 2 and 3 > 0*1.5
	}
	for k, w := range want {
		if d := mustRoute(t, r, req); d != w {
			t.Fatalf("request %d: %+v, want %+v (in flight %d, %d)", k, d, w, r.InFlight(0), r.InFlight(1))
		}
	}
	// Loads 3, 1: 2 > 2 fails. Replica 1 was inserted for the text in the
	// imbalanced branch; the node's creator (0) still wins the match.
	if d := mustRoute(t, r, req); d.Replica != 0 || d.Reason != CacheHit {
		t.Fatalf("request 4: %+v, want a cache hit on the creator 0", d)
	}
	if r.TreeSize(1) != 27 {
		t.Fatalf("TreeSize(1) = %d, want 27 (inserted in the imbalanced branch)", r.TreeSize(1))
	}
	if r.Count(Imbalanced) != 1 || r.Count(CacheHit) != 3 || r.Count(Miss) != 1 {
		t.Fatalf("counts: imbalanced %d, hit %d, miss %d", r.Count(Imbalanced), r.Count(CacheHit), r.Count(Miss))
	}
}

// TestCacheAwareThresholdStrict: a match rate equal to cache_threshold is a
// miss (SGLang compares with >).
func TestCacheAwareThresholdStrict(t *testing.T) {
	r := cacheAwareRouter(t, 2, func(c *CacheAwareConfig) { c.CacheThreshold = 0.5 })
	mustRoute(t, r, &Request{Text: "abcd"})
	if d := mustRoute(t, r, &Request{Text: "abxy"}); d.Reason != Miss || d.Matched != 2 || d.Replica != 1 {
		t.Fatalf("match 2/4 at threshold 0.5 = %+v, want a miss to replica 1 (the least loaded)", d)
	}
	if d := mustRoute(t, r, &Request{Text: "abcde"}); d.Reason != CacheHit || d.Replica != 0 || d.Matched != 4 {
		t.Fatalf("match 4/5 = %+v, want a hit on 0", d)
	}
}

// TestCacheAwareMissRules: fresh prefixes under balanced load spread by
// load under min_load and by tree size under smallest_tree.
func TestCacheAwareMissRules(t *testing.T) {
	for _, tc := range []struct {
		rule MissRule
		want int
	}{{MinLoad, 0}, {SmallestTree, 1}} {
		t.Run(tc.rule.String(), func(t *testing.T) {
			r := cacheAwareRouter(t, 2, func(c *CacheAwareConfig) { c.MissRule = tc.rule })
			if d := mustRoute(t, r, &Request{Text: "a long prompt"}); d.Replica != 0 {
				t.Fatalf("first request went to %d", d.Replica)
			}
			if err := r.Finish(0); err != nil {
				t.Fatal(err)
			}
			if d := mustRoute(t, r, &Request{Text: "b"}); d.Replica != 1 {
				t.Fatalf("second request went to %d, want 1 (fewer routed, smaller tree)", d.Replica)
			}
			// Replica 0: idle, 13 symbols; replica 1: one in flight, 1 symbol.
			d := mustRoute(t, r, &Request{Text: "c"})
			if d.Replica != tc.want || d.Reason != Miss {
				t.Fatalf("third request = %+v, want a miss to %d", d, tc.want)
			}
		})
	}
}

// TestCacheAwareEvictionTick: with max_tree_size 0 the first tick at the
// eviction interval empties the tree and a repeat becomes a miss; ticks
// between multiples change nothing.
func TestCacheAwareEvictionTick(t *testing.T) {
	r := cacheAwareRouter(t, 2, func(c *CacheAwareConfig) {
		c.MaxTreeSize = 0
		c.EvictionInterval = 30 * time.Second
	})
	req := &Request{Tokens: []int32{5, 6, 7, 8}}
	mustRoute(t, r, req)
	r.Tick(29 * time.Second)
	if d := mustRoute(t, r, req); d.Reason != CacheHit {
		t.Fatalf("before the first eviction: %+v, want a hit", d)
	}
	r.Tick(95 * time.Second)
	if r.TreeSize(0) != 0 || len(r.tree.root.children) != 0 {
		t.Fatalf("after the tick: size %d, %d root children; want an empty tree", r.TreeSize(0), len(r.tree.root.children))
	}
	if next, ok := r.NextTick(); !ok || next != 120*time.Second {
		t.Fatalf("NextTick() = %v, %v; want 2m0s, true", next, ok)
	}
	if d := mustRoute(t, r, req); d.Reason != Miss {
		t.Fatalf("after eviction: %+v, want the miss rule", d)
	}
}

// TestCacheAwareMatchUnavailable: a match on an unavailable replica goes to
// the first available one, without an insert.
func TestCacheAwareMatchUnavailable(t *testing.T) {
	r := cacheAwareRouter(t, 3, func(*CacheAwareConfig) {})
	req := &Request{Text: "shared prefix"}
	mustRoute(t, r, req) // to 0
	r.SetAvailable(0, false)
	d := mustRoute(t, r, req)
	if d.Replica != 1 || d.Reason != MatchUnavailable {
		t.Fatalf("Route = %+v, want replica 1 for reason match_unavailable", d)
	}
	if r.TreeSize(1) != 0 {
		t.Fatalf("TreeSize(1) = %d, want 0 (no insert)", r.TreeSize(1))
	}
}

// TestCacheAwareTokenPages: with tree_page_size 4 the tree holds whole
// pages of tokens and a match counts whole pages, over every token.
func TestCacheAwareTokenPages(t *testing.T) {
	r := cacheAwareRouter(t, 2, func(c *CacheAwareConfig) { c.TreePageSize = 4 })
	mustRoute(t, r, &Request{Tokens: []int32{1, 2, 3, 4, 5, 6, 7, 8, 9, 10}})
	if r.TreeSize(0) != 8 {
		t.Fatalf("TreeSize(0) = %d, want 8 (two whole pages)", r.TreeSize(0))
	}
	// 7 tokens in common, one whole page: 4/8 = 0.5 > 0.3.
	if d := mustRoute(t, r, &Request{Tokens: []int32{1, 2, 3, 4, 5, 6, 7, 99}}); d.Reason != CacheHit || d.Matched != 4 {
		t.Fatalf("Route = %+v, want a hit matching 4", d)
	}
	// 3 tokens in common: no whole page.
	if d := mustRoute(t, r, &Request{Tokens: []int32{1, 2, 3, 99}}); d.Reason != Miss || d.Matched != 0 {
		t.Fatalf("Route = %+v, want a miss matching 0", d)
	}
}

// TestCacheAwareBlocks: block-hash requests match block by block, with
// distinct hashes distinct symbols however large.
func TestCacheAwareBlocks(t *testing.T) {
	r := cacheAwareRouter(t, 2, func(*CacheAwareConfig) {})
	mustRoute(t, r, &Request{Blocks: []uint64{10, 1 << 40, 30}})
	if d := mustRoute(t, r, &Request{Blocks: []uint64{10, 1 << 40, 40}}); d.Replica != 0 || d.Reason != CacheHit || d.Matched != 2 {
		t.Fatalf("Route = %+v, want a hit on 0 matching 2 blocks", d)
	}
	if d := mustRoute(t, r, &Request{Blocks: []uint64{10 + 1<<40}}); d.Reason != Miss {
		t.Fatalf("Route = %+v, want a miss: a different hash", d)
	}
	if r.TreeSize(0)+r.TreeSize(1) != 5 {
		t.Fatalf("tree sizes %d + %d, want 5 blocks", r.TreeSize(0), r.TreeSize(1))
	}
}

// TestCacheAwareUsageTriggers: SMG's KV-usage triggers make a balanced
// in-flight load imbalanced from the load snapshots.
func TestCacheAwareUsageTriggers(t *testing.T) {
	for _, tc := range []struct {
		name           string
		balance, over  float64
		usage0, usage1 float64
		want           Reason
	}{
		{"defaults_off", 1, 1, 0.99, 0, CacheHit},
		{"spread", 0.5, 1, 0.7, 0.1, Imbalanced},
		{"spread_equal_is_not_above", 0.5, 1, 0.6, 0.1, CacheHit},
		{"overload", 1, 0.9, 0.95, 0.9, Imbalanced},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := cacheAwareRouter(t, 2, func(c *CacheAwareConfig) {
				c.BalanceTokenUsageThreshold, c.OverloadTokenUsageThreshold = tc.balance, tc.over
			})
			req := &Request{Text: "a shared prefix"}
			mustRoute(t, r, req) // to 0, no snapshots yet
			r.SetLoad(0, tc.usage0)
			r.SetLoad(1, tc.usage1)
			if d := mustRoute(t, r, req); d.Reason != tc.want {
				t.Fatalf("Route = %+v, want %v", d, tc.want)
			}
		})
	}
}
