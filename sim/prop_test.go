package sim

import (
	"fmt"
	"os"
	"reflect"
	"testing"

	"github.com/kvsim/kvsim/internal/testutil"
	"github.com/kvsim/kvsim/sim/engine"
	"github.com/kvsim/kvsim/traces"
	"github.com/kvsim/kvsim/tree"
	"pgregory.net/rapid"
)

// TestMain raises rapid's default to 200 cases for plain `go test` unless
// -rapid.checks was given (make prop passes 2000).
func TestMain(m *testing.M) {
	os.Exit(testutil.MainWithDefaults(m, map[string]string{"rapid.checks": "200"}))
}

// drawConfig draws a small, often memory-starved server so that eviction,
// load-back, chunking and retraction all happen.
func drawConfig(t *rapid.T) Config {
	cfg := Default(int64(rapid.IntRange(64, 2048).Draw(t, "device_tokens")))
	cfg.Cache.PageSize = rapid.SampledFrom([]int{1, 4, 16}).Draw(t, "page_size")
	cfg.Cache.CP = rapid.IntRange(1, 4).Draw(t, "cp")
	cfg.Cache.Lanes = rapid.SampledFrom([]tree.LaneMode{tree.LanePages, tree.LaneTokens}).Draw(t, "lanes")
	cfg.Cache.Eviction = rapid.SampledFrom([]tree.Strategy{tree.LRU, tree.LFU, tree.FIFO, tree.MRU, tree.FILO, tree.Priority, tree.SLRU, tree.SegmentedLRU, tree.Belady}).Draw(t, "eviction")
	cfg.Cache.Planner = rapid.SampledFrom([]Planner{PlannerAuto, PlannerSGLang, PlannerOwnerLane}).Draw(t, "planner")
	if cfg.Cache.Eviction == tree.Belady && cfg.Cache.Planner == PlannerOwnerLane {
		cfg.Cache.Planner = PlannerAuto // the planner has its own order; Validate refuses the pair
	}
	if rapid.Bool().Draw(t, "hicache") {
		cfg.Cache.HostTokens = int64(rapid.IntRange(32, 4096).Draw(t, "host_tokens"))
		cfg.Cache.WritePolicy = rapid.SampledFrom([]tree.WritePolicy{tree.WriteThrough, tree.WriteThroughSelective, tree.WriteBack}).Draw(t, "write_policy")
		if rapid.Bool().Draw(t, "storage") {
			cfg.Storage = drawStorage(t)
		}
	}
	cfg.Cache.Disable = rapid.IntRange(0, 9).Draw(t, "disable") == 0
	cfg.Scheduler.Policy = rapid.SampledFrom([]SchedulePolicy{FCFS, LPM, DFSWeight, LOF, Random}).Draw(t, "policy")
	cfg.Scheduler.MaxRunningRequests = rapid.IntRange(1, 64).Draw(t, "max_running")
	cfg.Scheduler.MaxPrefillTokens = int64(rapid.IntRange(16, 4096).Draw(t, "max_prefill"))
	if rapid.Bool().Draw(t, "chunked") {
		cfg.Scheduler.ChunkedPrefillSize = int64(rapid.IntRange(16, 512).Draw(t, "chunk"))
	} else {
		cfg.Scheduler.ChunkedPrefillSize = -1
	}
	cfg.Links.KVBytesPerToken = 1e5
	cfg.Links.Layers = 8
	cfg.Seed = rapid.Uint64Range(1, 1000).Draw(t, "seed")
	return cfg
}

// drawStorage draws a storage tier small and slow enough, against the
// drawn traces, that prefetches are cut short, time out, hit the rate limit
// and find their pages evicted.
func drawStorage(t *rapid.T) StorageConfig {
	return StorageConfig{
		Enabled:               true,
		CapacityTokens:        int64(rapid.SampledFrom([]int{0, 64, 512, 4096}).Draw(t, "storage_capacity")),
		PrefetchPolicy:        rapid.SampledFrom([]PrefetchPolicy{BestEffort, WaitComplete, PrefetchTimeout}).Draw(t, "prefetch_policy"),
		PrefetchThreshold:     int64(rapid.IntRange(1, 64).Draw(t, "prefetch_threshold")),
		PrefetchTimeoutBase:   int64(rapid.IntRange(1, 50).Draw(t, "timeout_base_ms")) * 1e6,
		PrefetchTimeoutMax:    int64(rapid.IntRange(1, 100).Draw(t, "timeout_max_ms")) * 1e6,
		PrefetchCapacityRatio: rapid.SampledFrom([]float64{0.05, 0.5, 1}).Draw(t, "prefetch_capacity_ratio"),
		ReadBandwidth:         rapid.SampledFrom([]float64{1e9, 1e10, 1e11}).Draw(t, "read_bandwidth"),
		WriteBandwidth:        rapid.SampledFrom([]float64{1e9, 1e10, 1e11}).Draw(t, "write_bandwidth"),
		ReadLatency:           int64(rapid.IntRange(1, 500).Draw(t, "read_latency_us")) * 1e3,
		WriteLatency:          int64(rapid.IntRange(1, 500).Draw(t, "write_latency_us")) * 1e3,
	}
}

// drawTrace draws requests that share prefixes (a few system prompts, some
// follow-ups extending earlier prompts).
func drawTrace(t *rapid.T) []traces.Record {
	n := rapid.IntRange(1, 40).Draw(t, "requests")
	var recs []traces.Record
	at := int64(0)
	for i := 0; i < n; i++ {
		p := drawReusedPrefix(t, recs, func(r traces.Record) []int32 { return r.Tokens })
		p = append(p, tokens(rapid.IntRange(1, 300).Draw(t, "new"), int32(rapid.IntRange(0, 3).Draw(t, "alphabet"))*1000)...)
		at += int64(rapid.IntRange(0, 50).Draw(t, "gap_ms")) * 1e6
		recs = append(recs, rec(fmt.Sprint(i), at, p, rapid.IntRange(1, 40).Draw(t, "out")))
	}
	return recs
}

// drawReusedPrefix draws the start of a request's key after recs: nothing,
// or a prefix of an earlier request's key (key returns a record's tokens
// or blocks), so that drawn traces share prefixes.
func drawReusedPrefix[T any](t *rapid.T, recs []traces.Record, key func(traces.Record) []T) []T {
	if len(recs) == 0 || !rapid.Bool().Draw(t, "reuse") {
		return nil
	}
	base := key(recs[rapid.IntRange(0, len(recs)-1).Draw(t, "base")])
	return append([]T(nil), base[:rapid.IntRange(0, len(base)).Draw(t, "cut")]...)
}

// hostProtected returns a node under n with a host protection left, or nil.
func hostProtected(n *tree.Node) *tree.Node {
	var found *tree.Node
	n.Children(func(c *tree.Node) bool {
		if c.HostRef() != 0 {
			found = c
		} else {
			found = hostProtected(c)
		}
		return found == nil
	})
	return found
}

func TestPropSimulatorAccounting(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		checkRun(t, drawConfig(t), drawTrace(t))
	})
}

// TestPropStorageTier runs the same checks with a storage tier always on
// and a host tier one to three times the device, so that prefixes leave the
// host while storage keeps them and come back through prefetches.
func TestPropStorageTier(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		cfg := drawConfig(t)
		cfg.Cache.Disable = false
		cfg.Cache.HostTokens = cfg.Cache.DeviceTokens * int64(rapid.IntRange(1, 3).Draw(t, "host_ratio"))
		cfg.Storage = drawStorage(t)
		checkRun(t, cfg, drawTrace(t))
	})
}

// checkRun simulates recs under cfg and checks the accounting: every
// request finishes once with its output, cached tokens add up, times are
// ordered, no tier is over capacity, nothing stays held, locked, protected
// or reserved, and a second run gives identical results.
func checkRun(t *rapid.T, cfg Config, recs []traces.Record) {
	s, res := simulate(t, cfg, (*Sim).Run, recs)
	if len(res.Requests) != len(recs) {
		t.Fatalf("%d results for %d requests", len(res.Requests), len(recs))
	}
	seen := map[string]bool{}
	want := map[string]traces.Record{}
	for _, r := range recs {
		want[r.ID] = r
	}
	for _, r := range res.Requests {
		if seen[r.ID] {
			t.Fatalf("request %s finished twice", r.ID)
		}
		seen[r.ID] = true
		if r.Failed != "" {
			continue
		}
		w := want[r.ID]
		if r.OutputTokens != int64(w.OutputLen) {
			t.Fatalf("request %s generated %d tokens, want %d", r.ID, r.OutputTokens, w.OutputLen)
		}
		if r.CachedTokens < 0 || r.CachedTokens > r.PromptTokens-1 || r.CachedDevice+r.CachedHost+r.CachedStorage != r.CachedTokens ||
			r.CachedHost < 0 || r.CachedStorage < 0 || r.CachedStorage > r.StorageTokens {
			t.Fatalf("request %s: cached %d (device %d host %d storage %d, fetched %d) of a %d-token prompt",
				r.ID, r.CachedTokens, r.CachedDevice, r.CachedHost, r.CachedStorage, r.StorageTokens, r.PromptTokens)
		}
		if !cfg.Storage.Enabled && (r.StorageTokens != 0 || r.CachedStorage != 0) {
			t.Fatalf("request %s got %d tokens from a storage tier that is off", r.ID, r.StorageTokens)
		}
		if cfg.Cache.Disable && r.CachedTokens != 0 {
			t.Fatalf("request %s hit %d tokens with the cache disabled", r.ID, r.CachedTokens)
		}
		if !(r.Arrival <= r.Admitted && r.Admitted < r.FirstToken && r.FirstToken <= r.Finish) {
			t.Fatalf("request %s: times out of order %+v", r.ID, r)
		}
	}
	if s.tree.DeviceTotal()+s.tree.Held(0) > cfg.Cache.DeviceTokens*int64(cfg.Cache.CP) {
		t.Fatal("device over capacity at the end")
	}
	for o := 0; o < s.lanes; o++ {
		if s.tree.Held(o) != 0 || s.tree.Protected(o) != 0 || s.tree.HostReserved(o) != 0 {
			t.Fatalf("lane %d: %d tokens held, %d protected, %d host reserved after the run",
				o, s.tree.Held(o), s.tree.Protected(o), s.tree.HostReserved(o))
		}
	}
	if n := hostProtected(s.tree.Root()); n != nil {
		t.Fatalf("node %d keeps %d host protections after the run", n.ID(), n.HostRef())
	}
	if c := res.Counters; cfg.Storage.Enabled && c.PrefetchesIssued > 0 && c.StorageReadTokens == 0 && c.StoragePrefetchedTokens > 0 {
		t.Fatalf("prefetched %d tokens without reading any", c.StoragePrefetchedTokens)
	}
	// Determinism: the same inputs give the same results.
	s2, _ := New(cfg, linearCost{})
	res2, err := s2.Run(engine.NewSliceSource(recs))
	if err != nil || !reflect.DeepEqual(res, res2) {
		t.Fatalf("second run differs (err %v)", err)
	}
}

// runPager simulates recs under cfg with a pager that remembers every
// block (every = 0) or one that looks for blocks to forget before every
// prompt (every = 1), and returns the result and the blocks forgotten.
func runPager(t *rapid.T, cfg Config, recs []traces.Record, every int) (*engine.Result, int64) {
	s, err := New(cfg, linearCost{})
	if err != nil {
		t.Fatal(err)
	}
	s.pager = tree.NewPager(cfg.Cache.PageSize)
	if every > 0 {
		s.pager.Forget(s.markHeld, every)
	}
	res, err := s.RunClosedLoop(engine.NewSliceSource(recs))
	if err != nil {
		t.Fatal(err)
	}
	return res, s.pager.Forgotten()
}

// TestPropForgettingPagerSameResults: a pager that forgets the blocks the
// simulator no longer holds, sweeping as often as it can, gives results
// identical to one that remembers every block, on memory-starved servers
// with and without host and storage tiers, on block traces whose prompts
// come back to blocks long gone from every tier.
func TestPropForgettingPagerSameResults(t *testing.T) {
	var forgot int64
	rapid.Check(t, func(t *rapid.T) {
		cfg := drawConfig(t)
		if cfg.Cache.Eviction == tree.Belady {
			cfg.Cache.Eviction = tree.LRU
		}
		if !cfg.Cache.Disable && cfg.Cache.HostTokens > 0 && rapid.Bool().Draw(t, "force_storage") {
			cfg.Storage = drawStorage(t)
		}
		recs := drawBlockTrace(t, cfg.Cache.PageSize)
		want, _ := runPager(t, cfg, recs, 0)
		got, n := runPager(t, cfg, recs, 1)
		forgot += n
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("forgetting pager (%d blocks forgotten) changed the results:\n got %+v\nwant %+v", n, got.Summary, want.Summary)
		}
	})
	if forgot == 0 {
		t.Fatal("no block was ever forgotten: the property checked nothing")
	}
}
