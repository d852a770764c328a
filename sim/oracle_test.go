package sim

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/kvsim/kvsim/traces"
	"github.com/kvsim/kvsim/tree"
	"pgregory.net/rapid"
)

// drawBlockTrace draws block-hash requests that share prefixes, with a
// block size that is a multiple of the page size (the oracle's block
// trie) or not (its page trie).
func drawBlockTrace(t *rapid.T, pageSize int) []traces.Record {
	bs := pageSize * rapid.IntRange(1, 4).Draw(t, "pages_per_block")
	if rapid.IntRange(0, 4).Draw(t, "unaligned") == 0 {
		bs = pageSize*2 + 1
	}
	n := rapid.IntRange(1, 40).Draw(t, "requests")
	var recs []traces.Record
	at := int64(0)
	next := uint64(1)
	for i := 0; i < n; i++ {
		bl := drawReusedPrefix(t, recs, func(r traces.Record) []uint64 { return r.Blocks })
		for k := rapid.IntRange(1, 8).Draw(t, "new"); k > 0; k-- {
			bl = append(bl, next)
			next++
		}
		in := len(bl)*bs - rapid.IntRange(0, bs-1).Draw(t, "short")
		at += int64(rapid.IntRange(0, 50).Draw(t, "gap_ms")) * 1e6
		recs = append(recs, traces.Record{ID: fmt.Sprint(i), Arrival: at, InputLen: in, Blocks: bl, BlockSize: bs,
			OutputLen: rapid.IntRange(1, 40).Draw(t, "out")})
	}
	return recs
}

// TestPropBeladyBlocks runs checkRun's accounting (and its determinism
// check) under the oracle on block-hash traces, whose oracle is a trie of
// blocks, with the tree's invariants checked after every event in
// -tags invariants builds. drawConfig covers token traces.
func TestPropBeladyBlocks(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		cfg := drawConfig(t)
		cfg.Cache.Eviction = tree.Belady
		if cfg.Cache.Planner == PlannerOwnerLane {
			cfg.Cache.Planner = PlannerAuto
		}
		checkRun(t, cfg, drawBlockTrace(t, cfg.Cache.PageSize))
	})
}

// TestBeladyRefusedOnline: serve and online replay go through NewOnline,
// which refuses the oracle; the owner-lane planner, which has its own
// order, is refused with it.
func TestBeladyRefusedOnline(t *testing.T) {
	cfg := Default(4096)
	cfg.Cache.Eviction = tree.Belady
	if _, err := NewOnline(cfg, linearCost{}); !errors.Is(err, ErrOracleOnline) {
		t.Fatalf("NewOnline(belady) = %v, want ErrOracleOnline", err)
	}
	cfg.Cache.Planner = PlannerOwnerLane
	err := cfg.Validate()
	if err == nil || !strings.Contains(err.Error(), `cache.planner: must be "auto" or "sglang" under cache.eviction = "belady"`) {
		t.Fatalf("Validate(belady, owner-lane) = %v", err)
	}
}

// TestBeladyBeatsLRUOnConversation replays the first 1,500 requests of the
// bundled Mooncake conversation trace on a device of 300k tokens without a
// host tier: the oracle serves more prompt tokens from cache than LRU.
// (Timing makes this an observation, not a theorem: the full simulator
// batches and queues; policy mode's properties are the theorems.)
func TestBeladyBeatsLRUOnConversation(t *testing.T) {
	recs := mooncakeHead(t, 1500)
	cached := map[string]int64{}
	for _, ev := range []tree.Strategy{tree.LRU, tree.Belady} {
		cfg := Default(300_000)
		cfg.Cache.PageSize = 16
		cfg.Cache.Eviction = ev
		for _, r := range runSim(t, cfg, recs...).Requests {
			cached[ev.String()] += r.CachedTokens
		}
	}
	t.Logf("cached prompt tokens: lru %d, belady %d", cached["lru"], cached["belady"])
	if cached["belady"] <= cached["lru"] {
		t.Fatalf("belady cached %d prompt tokens, lru %d", cached["belady"], cached["lru"])
	}
}
