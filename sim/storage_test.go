package sim

import (
	"math"
	"slices"
	"sort"
	"testing"

	"github.com/kvsim/kvsim/internal/testutil"
	"github.com/kvsim/kvsim/sim/engine"
	"github.com/kvsim/kvsim/sim/hw"
	"github.com/kvsim/kvsim/traces"
	"github.com/kvsim/kvsim/tree"
	"pgregory.net/rapid"
)

// storageConfig is a server small enough to push a prefix out of the host
// tier with two fillers, with round numbers for hand computation (page size
// 1, KV 1000 B per token):
//
//   - device 2000 tokens, host 3000;
//   - H2D and D2H at 1e9 B/s: 1 µs per token, plus 10 µs per copy;
//   - storage reads at 1e8 B/s: 10 µs per token, plus 100 µs per call of
//     up to 128 pages; writes at 1e9 B/s, 100 µs per call.
//
// Prefill costs 1 ms + 1 µs per new token (linearCost).
func storageConfig(policy PrefetchPolicy) Config {
	cfg := Default(2000)
	cfg.Cache.HostTokens = 3000
	cfg.Links.KVBytesPerToken = 1000
	cfg.Links.H2DBandwidth = 1e9
	cfg.Links.D2HBandwidth = 1e9
	cfg.Storage = StorageConfig{
		Enabled: true, PrefetchPolicy: policy,
		ReadBandwidth: 1e8, WriteBandwidth: 1e9,
		ReadLatency: 100_000, WriteLatency: 100_000,
	}
	return cfg
}

// evictedToStorage is a trace in which request a's 1000-token prompt is
// written through to the host and backed up to storage, then pushed out of
// the device by filler f1 and out of the host by filler f2 (their
// write-throughs evict host-only a, LRU first). Request b, arriving at 1 s
// with a's prompt, finds it in storage only.
func evictedToStorage(extra ...traces.Record) []traces.Record {
	prompt := tokens(1000, 1)
	recs := []traces.Record{
		rec("a", 0, prompt, 1),
		rec("f1", 100e6, tokens(1500, 100_000), 1),
		rec("f2", 200e6, tokens(1500, 200_000), 1),
		rec("b", 1e9, prompt, 1),
	}
	recs = append(recs, extra...)
	sort.SliceStable(recs, func(i, j int) bool { return recs[i].Arrival < recs[j].Arrival })
	return recs
}

// b gets a's prefix back from storage: under wait_complete it is held until
// the whole hit is read, then loads it back with its prefill.
//
// Storage hit: 1000 pages, 8 calls. The hit query takes 8 * 100 µs; the
// reads take 7 * (100 + 128*10) µs + (100 + 104*10) µs = 10.8 ms, so b is
// admitted at 1 s + 0.8 ms + 10.8 ms = 1.0116 s. It matches 999 tokens (at
// most prompt - 1) on the host and loads them back: 10 µs + 999 µs of H2D
// overlapped with a prefill of 1 ms + 1 µs (one layer), so the forward takes
// 1009 + 1001 µs and the first token comes at 1.01361 s (and 1 ns: the H2D
// time is rounded up to whole ns after float arithmetic).
func TestStoragePrefetchWaitComplete(t *testing.T) {
	res := runSim(t, storageConfig(WaitComplete), evictedToStorage()...)
	b := byID(res)["b"]
	if got, want := b.Admitted, engine.Time(1_011_600_000); got != want {
		t.Fatalf("b admitted at %d, want %d (after the whole fetch)", got, want)
	}
	if got, want := b.TTFT(), engine.Time(13_610_001); got != want {
		t.Fatalf("b TTFT = %d, want %d", got, want)
	}
	if b.CachedTokens != 999 || b.CachedStorage != 999 || b.CachedHost != 0 || b.CachedDevice != 0 || b.StorageTokens != 1000 {
		t.Fatalf("b cached %d (device %d host %d storage %d), fetched %d; want 999 from storage of 1000 fetched",
			b.CachedTokens, b.CachedDevice, b.CachedHost, b.CachedStorage, b.StorageTokens)
	}
	c := res.Counters
	if c.PrefetchesIssued != 1 || c.PrefetchesTerminatedEarly != 0 || c.StorageReadTokens != 1000 || c.StoragePrefetchedTokens != 1000 {
		t.Fatalf("counters %+v", c)
	}
	// Backed up: a, f1, f2 (1000 + 1500 + 1500 tokens) and b's generated
	// page-less tail adds nothing new; reads 1000 tokens of 1000 B.
	if c.StorageWriteTokens != 4000 || c.StorageReadBytes != 1e6 {
		t.Fatalf("storage wrote %d tokens, read %v bytes", c.StorageWriteTokens, c.StorageReadBytes)
	}
	if got, want := res.Summary.StorageHitRate, 999.0/5000; got != want {
		t.Fatalf("storage_hit_rate = %v, want %v", got, want)
	}
}

// Under best_effort b is admitted at the first iteration after it arrives,
// with what has been read by then. A decode step of g keeps the GPU busy
// from 0.9951 s to 1.0051001 s: by then 3 of the 8 batches are read (at
// 1.00218, 1.00356 and 1.00494 s), so b gets 384 tokens from storage; the
// fourth batch, already started, is read but not used.
func TestStoragePrefetchBestEffortPartial(t *testing.T) {
	// g: prefill 1 ms + 100 µs from 0.994 s, then 10 ms + 101 ns of decode.
	g := rec("g", 994e6, tokens(100, 300_000), 3)
	res := runSim(t, storageConfig(BestEffort), evictedToStorage(g)...)
	b := byID(res)["b"]
	if got, want := b.Admitted, engine.Time(1_005_100_101); got != want {
		t.Fatalf("b admitted at %d, want %d", got, want)
	}
	if b.StorageTokens != 384 || b.CachedStorage != 384 || b.CachedTokens != 384 {
		t.Fatalf("b fetched %d, cached %d from storage of %d; want 384", b.StorageTokens, b.CachedStorage, b.CachedTokens)
	}
	c := res.Counters
	if c.PrefetchesTerminatedEarly != 1 || c.StorageReadTokens != 512 || c.StoragePrefetchedTokens != 384 {
		t.Fatalf("counters %+v", c)
	}

	// With an idle GPU the check comes at once: nothing has been read, so
	// b recomputes its prompt.
	res = runSim(t, storageConfig(BestEffort), evictedToStorage()...)
	b = byID(res)["b"]
	if b.Admitted != 1e9 || b.CachedTokens != 0 || res.Counters.PrefetchesTerminatedEarly != 1 || res.Counters.StoragePrefetchedTokens != 0 {
		t.Fatalf("idle best_effort: b %+v, counters %+v", b, res.Counters)
	}
}

// Under timeout b waits for the whole fetch or until the timeout passes:
// here 1 ms + 1000 * 1 ms / 1024 = 1,976,562 ns, so b is admitted at the
// first iteration after 1 s + 1,976,562 ns, with nothing read (the first
// batch lands at 1.00218 s). The timeout wake comes 1 ns after the limit.
func TestStoragePrefetchTimeout(t *testing.T) {
	cfg := storageConfig(PrefetchTimeout)
	cfg.Storage.PrefetchTimeoutBase = 1e6
	cfg.Storage.PrefetchTimeoutPerKiToken = 1e6
	res := runSim(t, cfg, evictedToStorage()...)
	b := byID(res)["b"]
	if got, want := b.Admitted, engine.Time(1e9+1_976_563); got != want {
		t.Fatalf("b admitted at %d, want %d", got, want)
	}
	if b.StorageTokens != 0 || res.Counters.PrefetchesTerminatedEarly != 1 {
		t.Fatalf("b fetched %d, counters %+v", b.StorageTokens, res.Counters)
	}
	// A generous timeout behaves as wait_complete.
	cfg.Storage.PrefetchTimeoutBase = 1e9
	res = runSim(t, cfg, evictedToStorage()...)
	if b := byID(res)["b"]; b.Admitted != 1_011_600_000 || b.CachedStorage != 999 {
		t.Fatalf("long timeout: b admitted at %d with %d from storage", b.Admitted, b.CachedStorage)
	}
}

// The prefetch capacity limit (a share of the host pool) stops new
// prefetches while reservations reach it; a request held by wait_complete
// is passed by the others.
func TestStoragePrefetchRateLimit(t *testing.T) {
	cfg := storageConfig(WaitComplete)
	cfg.Storage.PrefetchCapacityRatio = 0.2 // 600 tokens: one 1000-token prefetch reaches it
	b2 := rec("b2", 1e9, tokens(1000, 1), 1)
	res := runSim(t, cfg, evictedToStorage(b2)...)
	c := res.Counters
	if c.PrefetchesIssued != 1 || c.PrefetchesRateLimited != 1 {
		t.Fatalf("issued %d rate limited %d, want 1 and 1", c.PrefetchesIssued, c.PrefetchesRateLimited)
	}
	got := byID(res)
	if got["b2"].Admitted != 1e9 || got["b"].Admitted != 1_011_600_000 {
		t.Fatalf("b2 admitted at %d (want 1 s: it passes b), b at %d", got["b2"].Admitted, got["b"].Admitted)
	}
	// b2 computed the prompt itself and inserted it on the device, so b's
	// fetched pages were all duplicates: nothing was inserted for it.
	if got["b2"].CachedTokens != 0 || got["b"].StorageTokens != 0 || got["b"].CachedDevice != 999 {
		t.Fatalf("b2 cached %d; b fetched %d and hit %d on the device", got["b2"].CachedTokens, got["b"].StorageTokens, got["b"].CachedDevice)
	}
}

// Hits shorter than the threshold (256 tokens by default, at least a page)
// are not prefetched.
func TestStoragePrefetchThreshold(t *testing.T) {
	short := func(cfg Config) *engine.Result {
		p := tokens(200, 1)
		return runSim(t, cfg,
			rec("a", 0, p, 1),
			rec("f1", 100e6, tokens(1500, 100_000), 1),
			rec("f2", 200e6, tokens(1500, 200_000), 1),
			rec("b", 1e9, p, 1))
	}
	res := short(storageConfig(WaitComplete))
	if c := res.Counters; c.PrefetchesIssued != 0 || byID(res)["b"].CachedTokens != 0 {
		t.Fatalf("a 200-token hit was prefetched: %+v", c)
	}
	cfg := storageConfig(WaitComplete)
	cfg.Storage.PrefetchThreshold = 128
	res = short(cfg)
	if b := byID(res)["b"]; res.Counters.PrefetchesIssued != 1 || b.CachedStorage != 199 {
		t.Fatalf("threshold 128: issued %d, b from storage %d", res.Counters.PrefetchesIssued, b.CachedStorage)
	}
	// The threshold is at least one page.
	cfg = storageConfig(WaitComplete)
	cfg.Cache.PageSize = 64
	cfg.Storage.PrefetchThreshold = 1
	s, err := New(cfg, linearCost{})
	if err != nil {
		t.Fatal(err)
	}
	if s.st.threshold != 64 {
		t.Fatalf("threshold %d, want the page size 64", s.st.threshold)
	}
}

// Storage capacity drops the least recently used pages; a lookup stops at
// the first missing page.
func TestStorageCapacityLRU(t *testing.T) {
	cfg := storageConfig(WaitComplete)
	// a (1000) and f1 (1500) fit; f2 pushes a's 1000 pages out. b then
	// recomputes a's prompt, and its backup pushes out 1000 of f1's.
	cfg.Storage.CapacityTokens = 3000
	res := runSim(t, cfg, evictedToStorage()...)
	if b := byID(res)["b"]; res.Counters.PrefetchesRevoked == 0 || b.CachedTokens != 0 || b.StorageTokens != 0 {
		t.Fatalf("b found a's evicted pages: %+v, counters %+v", b, res.Counters)
	}
	if res.Counters.StorageEvictedTokens != 2000 {
		t.Fatalf("evicted %d tokens from storage, want 2000", res.Counters.StorageEvictedTokens)
	}
}

func TestStorageConfigValidate(t *testing.T) {
	cfg := Default(100)
	cfg.Storage = StorageConfig{Enabled: true, PrefetchPolicy: PrefetchPolicy(99), ReadBandwidth: -1, PrefetchCapacityRatio: 2}
	err := cfg.Validate()
	want := "storage.read_bandwidth: must be >= 0 (got -1)\n" +
		"storage.prefetch_policy: must be one of best_effort, wait_complete, timeout (got PrefetchPolicy(99))\n" +
		"storage.enabled: must be false without a host tier (HiCache off or host_tokens = 0) (got true)\n" +
		"storage.prefetch_capacity_ratio: must be in (0, 1] (got 2)"
	if err == nil || err.Error() != want {
		t.Fatalf("Validate() = %v, want\n%s", err, want)
	}
}

// defaultStorageConfig is configs/default.toml with the storage tier on,
// built by hand (package configs imports sim): Qwen2.5-14B on a TP-4 group
// of H200s, page size 1, a host pool of twice the device pool, links at
// 85% of the GPU's host link, storage at its defaults (unlimited capacity,
// best_effort).
func defaultStorageConfig(tb testing.TB) (Config, CostModel) {
	tb.Helper()
	m, err := hw.ModelPreset("qwen2.5-14b")
	if err != nil {
		tb.Fatal(err)
	}
	g, err := hw.GPUPreset("h200")
	if err != nil {
		tb.Fatal(err)
	}
	srv := hw.DefaultServer()
	srv.TPSize = 4
	srv.PageSize = 1
	srv.HiCacheRatio = 2
	z, err := hw.Size(m, g, srv)
	if err != nil {
		tb.Fatal(err)
	}
	cost, err := hw.NewRoofline(m, g, srv, hw.DefaultEfficiency())
	if err != nil {
		tb.Fatal(err)
	}
	cfg := Config{Seed: 1}
	cfg.Cache = CacheConfig{PageSize: 1, DeviceTokens: z.DeviceTokens, HostTokens: z.HostTokens, Eviction: tree.LRU, WritePolicy: tree.WriteThrough}
	cfg.Scheduler = SchedulerConfig{Policy: FCFS, MaxRunningRequests: z.MaxRunningRequests,
		MaxPrefillTokens: z.MaxPrefillTokens, ChunkedPrefillSize: z.ChunkedPrefillSize}
	bw := g.HostLinkGBps * 1e9 * 0.85
	lat := int64(g.HostLinkLatencyUs * 1e3)
	cfg.Links = LinkConfig{KVBytesPerToken: float64(z.CellBytes), Layers: m.Layers,
		H2DBandwidth: bw, D2HBandwidth: bw, H2DLatency: lat, D2HLatency: lat}
	cfg.Storage = StorageConfig{Enabled: true}
	return cfg, cost
}

// conversation is the bundled Mooncake conversation trace (12,031
// requests; configs/traces/NOTICE).
const conversation = "../configs/traces/mooncake_conversation.jsonl.zst"

// benchConversation runs the whole conversation trace through a new
// simulator of cfg and cost at every b.Loop, by run ((*Sim).Run or
// (*Sim).RunClosedLoop), and returns the last result.
func benchConversation(b *testing.B, cfg Config, cost CostModel, run func(*Sim, engine.Source) (*engine.Result, error)) *engine.Result {
	b.Helper()
	b.ReportAllocs()
	var res *engine.Result
	for b.Loop() {
		s, err := New(cfg, cost)
		if err != nil {
			b.Fatal(err)
		}
		rd, err := traces.Open(conversation, traces.FormatMooncake)
		if err != nil {
			b.Fatal(err)
		}
		res, err = run(s, rd)
		if cerr := rd.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			b.Fatal(err)
		}
	}
	return res
}

// BenchmarkDefaultStorage runs the whole bundled Mooncake trace (12,031
// requests of about 12k tokens, page size 1) through the default server,
// without (off) and with (on) the storage tier: the case that took minutes
// while storage kept one map entry per page. The difference is the storage
// tier's cost.
//
//	go test ./sim -run '^$' -bench DefaultStorage -benchtime 1x
func BenchmarkDefaultStorage(b *testing.B) {
	testutil.RunBool(b, "off", "on", func(b *testing.B, on bool) {
		cfg, cost := defaultStorageConfig(b)
		cfg.Storage.Enabled = on
		res := benchConversation(b, cfg, cost, (*Sim).Run)
		b.ReportMetric(res.Summary.CacheHitRate, "hit-rate")
		if on {
			b.ReportMetric(res.Summary.StorageHitRate, "storage-hit-rate")
			b.ReportMetric(float64(res.Counters.StorageWriteTokens), "storage-write-tokens")
		}
	})
}

// pageStore is the storage tier as first written, one map entry per page:
// prefixes interned as (prefix id, page) -> prefix id and a linked LRU
// list of stored pages. The trie (l3Store) must behave exactly like it.
type pageStore struct {
	ids      map[[2]uint64]int32 // (parent prefix id, page) -> prefix id
	ents     []pageEnt           // by prefix id; 0 is the empty prefix and the LRU sentinel
	pages    int64
	evicted  int64
	capPages int64 // 0: unlimited
	// Mooncake mode, page by page as fleet-spec 3.3 says.
	mooncake        bool
	hwPages         int64
	ratio           float64
	ttl, now        engine.Time
	rounds, refused int64
}

type pageEnt struct {
	prev, next int32
	present    bool
	lease      engine.Time
}

func newPageStore(capPages int64) *pageStore {
	return &pageStore{ids: map[[2]uint64]int32{}, ents: make([]pageEnt, 1), capPages: capPages}
}

// id returns the prefix id of path, interning it.
func (m *pageStore) id(path []tree.PageID) int32 {
	id := int32(0)
	for _, p := range path {
		k := [2]uint64{uint64(id), uint64(p)}
		next, ok := m.ids[k]
		if !ok {
			next = int32(len(m.ents))
			m.ents = append(m.ents, pageEnt{})
			m.ids[k] = next
		}
		id = next
	}
	return id
}

func (m *pageStore) unlink(id int32) {
	e := m.ents[id]
	m.ents[e.prev].next = e.next
	m.ents[e.next].prev = e.prev
}

func (m *pageStore) pushBack(id int32) {
	last := m.ents[0].prev
	m.ents[id].prev, m.ents[id].next = last, 0
	m.ents[last].next = id
	m.ents[0].prev = id
}

func (m *pageStore) write(id int32) {
	if m.mooncake && !m.ents[id].present {
		m.writeMooncake(id)
		return
	}
	if m.ents[id].present {
		m.unlink(id)
	} else {
		m.ents[id].present = true
		m.pages++
	}
	m.pushBack(id)
	for m.capPages > 0 && m.pages > m.capPages {
		v := m.ents[0].next
		m.unlink(v)
		m.ents[v].present = false
		m.pages--
		m.evicted++
	}
}

// writeMooncake adds absent page id: a full store runs a round first and
// refuses the page if still full; reaching the watermark runs a round
// after.
func (m *pageStore) writeMooncake(id int32) {
	if m.pages >= m.capPages {
		m.round(m.pages + 1 - m.capPages)
		if m.pages >= m.capPages {
			m.refused++
			return
		}
	}
	m.ents[id].present = true
	m.ents[id].lease = 0
	m.pages++
	m.pushBack(id)
	if m.pages >= m.hwPages {
		m.round(0)
	}
}

// round evicts max(need, ceil(ratio x pages), 1) pages not under lease,
// least recently used first.
func (m *pageStore) round(need int64) {
	k := max(need, int64(math.Ceil(m.ratio*float64(m.pages))), 1)
	dropped := false
	for id := m.ents[0].next; id != 0 && k > 0; {
		next := m.ents[id].next
		if m.ents[id].lease <= m.now {
			m.unlink(id)
			m.ents[id].present, m.ents[id].lease = false, 0
			m.pages--
			m.evicted++
			k--
			dropped = true
		}
		id = next
	}
	if dropped {
		m.rounds++
	}
}

// lease is an existence query's lease on page id, if stored.
func (m *pageStore) lease(id int32) {
	if m.mooncake && m.ents[id].present {
		m.ents[id].lease = max(m.ents[id].lease, m.now+m.ttl)
	}
}

func (m *pageStore) touch(id int32) {
	if m.ents[id].present {
		m.unlink(id)
		m.pushBack(id)
	}
}

// order returns the stored prefix ids, least recently used first.
func (m *pageStore) order() []int32 {
	var ids []int32
	for id := m.ents[0].next; id != 0; id = m.ents[id].next {
		ids = append(ids, id)
	}
	return ids
}

// trieOrder returns the trie's stored pages as the model's prefix ids,
// least recently used first.
func trieOrder(s *l3Store, m *pageStore) []int32 {
	type stamped struct {
		stamp int64
		id    int32
	}
	var all []stamped
	var walk func(n *l3Node, path []tree.PageID)
	walk = func(n *l3Node, path []tree.PageID) {
		for i, p := range n.pages {
			path = append(path, p)
			if n.present {
				all = append(all, stamped{n.stamp + int64(i), m.id(path)})
			}
		}
		kids := n.kids
		if n.index != nil {
			kids = nil
			for _, c := range n.index {
				kids = append(kids, c)
			}
		}
		for _, c := range kids {
			walk(c, slices.Clip(path))
		}
	}
	walk(s.root, nil)
	sort.Slice(all, func(i, j int) bool { return all[i].stamp < all[j].stamp })
	ids := make([]int32, len(all))
	for i, x := range all {
		ids[i] = x.id
	}
	return ids
}

// TestStateMachineStorageTrie drives the trie and the page-per-entry model
// with the same writes (spans of a path), reads and lookups, on paths that
// share prefixes, with and without a capacity, in LRU and Mooncake mode
// (where lookups lease what they find and time passes), and checks that
// lookups, absent spans, counts and the whole LRU order agree, that the
// store never holds more than its capacity (verify) and that a write never
// evicts a page under lease.
func TestStateMachineStorageTrie(t *testing.T) {
	// Mostly a few pages, so that paths share prefixes, and enough others
	// that a node outgrows its child slice (l3SmallFanout).
	alphabet := []tree.PageID{1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16}
	rapid.Check(t, func(t *rapid.T) {
		capPages := int64(rapid.SampledFrom([]int{0, 0, 1, 3, 8, 20, 40}).Draw(t, "capacity"))
		s := newL3Store(capPages, 1)
		m := newPageStore(capPages)
		if capPages > 0 && rapid.Bool().Draw(t, "mooncake") {
			wm := rapid.SampledFrom([]float64{0.5, 0.8, 0.95, 1}).Draw(t, "watermark")
			ratio := rapid.SampledFrom([]float64{0.05, 0.2, 0.5, 1}).Draw(t, "ratio")
			ttl := engine.Time(rapid.IntRange(1, 10).Draw(t, "ttl"))
			s.setMooncake(wm, ratio, ttl)
			m.mooncake, m.hwPages, m.ratio, m.ttl = true, s.hwPages, ratio, ttl
			if want := max(int64(math.Ceil(wm*float64(capPages))), 1); s.hwPages != want {
				t.Fatalf("watermark %v of %d pages: %d, want %d", wm, capPages, s.hwPages, want)
			}
		}
		var pool [][]tree.PageID
		drawPath := func() []tree.PageID {
			var base []tree.PageID
			if len(pool) > 0 {
				b := rapid.SampledFrom(pool).Draw(t, "base")
				if rapid.IntRange(0, 3).Draw(t, "whole") == 0 {
					return b
				}
				base = b[:rapid.IntRange(0, len(b)).Draw(t, "cut")]
			}
			ext := rapid.SliceOfN(rapid.SampledFrom(alphabet), 1, 12).Draw(t, "ext")
			p := append(slices.Clone(base), ext...)
			pool = append(pool, p)
			return p
		}
		// keyOf cuts p into runs, as a tree path is cut into nodes.
		keyOf := func(p []tree.PageID) pathKey {
			cuts := rapid.SliceOfN(rapid.IntRange(0, len(p)), 0, 3).Draw(t, "cuts")
			slices.Sort(cuts)
			var runs [][]tree.PageID
			last := 0
			for _, c := range cuts {
				runs = append(runs, p[last:c])
				last = c
			}
			return newPathKey(append(runs, p[last:])...)
		}
		write := func(p []tree.PageID, in []bool) {
			var spans []span
			for i, b := range in {
				switch {
				case !b:
				case len(spans) > 0 && spans[len(spans)-1].hi == i:
					spans[len(spans)-1].hi++
				default:
					spans = append(spans, span{i, i + 1})
				}
			}
			var leased []int32
			for id := m.ents[0].next; id != 0; id = m.ents[id].next {
				if m.ents[id].lease > m.now {
					leased = append(leased, id)
				}
			}
			s.write(keyOf(p), spans, m.now)
			for _, sp := range spans {
				for i := sp.lo; i < sp.hi; i++ {
					m.write(m.id(p[:i+1]))
				}
			}
			stored := trieOrder(s, m)
			for _, id := range leased {
				if !slices.Contains(stored, id) {
					t.Fatalf("page %d under lease until %d evicted at %d", id, m.ents[id].lease, m.now)
				}
			}
		}
		// Whole paths first, enough to give a node more than l3SmallFanout
		// children when the capacity allows.
		for range rapid.IntRange(0, 20).Draw(t, "prefill") {
			first := tree.PageID(rapid.IntRange(1, 16).Draw(t, "first"))
			p := append([]tree.PageID{first}, rapid.SliceOfN(rapid.SampledFrom(alphabet), 0, 6).Draw(t, "rest")...)
			pool = append(pool, p)
			write(p, slices.Repeat([]bool{true}, len(p)))
		}
		t.Repeat(map[string]func(*rapid.T){
			"write": func(t *rapid.T) {
				p := drawPath()
				write(p, rapid.SliceOfN(rapid.Bool(), len(p), len(p)).Draw(t, "in"))
			},
			"read": func(t *rapid.T) {
				p := drawPath()
				lo := rapid.IntRange(0, len(p)-1).Draw(t, "lo")
				hi := rapid.IntRange(lo+1, len(p)).Draw(t, "hi")
				s.touch(keyOf(p), lo, hi)
				for i := lo; i < hi; i++ {
					m.touch(m.id(p[:i+1]))
				}
			},
			"hit": func(t *rapid.T) {
				p := drawPath()
				from := rapid.IntRange(0, len(p)).Draw(t, "from")
				want := 0
				for from+want < len(p) && m.ents[m.id(p[:from+want+1])].present {
					want++
				}
				k := keyOf(p)
				if got := s.hit(k, from); got != want {
					t.Fatalf("hit(%v, %d) = %d, want %d", p, from, got, want)
				}
				s.lease(k, from, from+want, m.now)
				for i := from; i < from+want; i++ {
					m.lease(m.id(p[:i+1]))
				}
			},
			"tick": func(t *rapid.T) {
				m.now += engine.Time(rapid.IntRange(0, 4).Draw(t, "dt"))
			},
			"absent": func(t *rapid.T) {
				p := drawPath()
				lo := rapid.IntRange(0, len(p)).Draw(t, "lo")
				hi := rapid.IntRange(lo, len(p)).Draw(t, "hi")
				var want []span
				for i := lo; i < hi; i++ {
					if m.ents[m.id(p[:i+1])].present {
						continue
					}
					if len(want) > 0 && want[len(want)-1].hi == i {
						want[len(want)-1].hi++
					} else {
						want = append(want, span{i, i + 1})
					}
				}
				if got := s.absent(keyOf(p), lo, hi, nil); !slices.Equal(got, want) {
					t.Fatalf("absent(%v, %d, %d) = %v, want %v", p, lo, hi, got, want)
				}
			},
			"": func(t *rapid.T) {
				if err := s.verify(); err != nil {
					t.Fatal(err)
				}
				if s.pages != m.pages || s.evicted != m.evicted || s.rounds != m.rounds || s.refused != m.refused {
					t.Fatalf("trie stores %d pages, evicted %d in %d rounds, refused %d; model %d, %d, %d, %d",
						s.pages, s.evicted, s.rounds, s.refused, m.pages, m.evicted, m.rounds, m.refused)
				}
				if got, want := trieOrder(s, m), m.order(); !slices.Equal(got, want) {
					t.Fatalf("LRU order %v, want %v", got, want)
				}
			},
		})
	})
}
