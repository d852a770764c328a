package fleet_test

import (
	"fmt"
	"math"
	"testing"

	"github.com/kvsim/kvsim/fleet"
	"github.com/kvsim/kvsim/fleet/router"
	"github.com/kvsim/kvsim/internal/enginetest"
	"github.com/kvsim/kvsim/sim"
	"github.com/kvsim/kvsim/sim/engine"
	"github.com/kvsim/kvsim/traces"
	"github.com/kvsim/kvsim/tree"
	"pgregory.net/rapid"
)

// observed is an SGLang factory that reports its shared store's events to
// obs.
type observed struct {
	*sim.Factory
	obs func(sim.L3Event)
}

func (o observed) NewWithL3(l3 *sim.SharedL3) (engine.Engine, error) {
	l3.Observe(o.obs)
	return o.Factory.NewWithL3(l3)
}

// drawStorage draws a small SGLang server with a storage tier (write
// through, so prefixes reach L3 soon; writes at the default rate or slow)
// of capTokens tokens, with exact LRU or Mooncake eviction.
func drawStorage(t *rapid.T, capTokens int64) *sim.Factory {
	sc := sim.Default(int64(rapid.SampledFrom([]int{512, 2048}).Draw(t, "device")))
	sc.Cache.HostTokens = int64(rapid.SampledFrom([]int{1024, 4096}).Draw(t, "host"))
	sc.Cache.WritePolicy = tree.WriteThrough
	sc.Storage.Enabled = true
	sc.Storage.CapacityTokens = capTokens
	sc.Storage.PrefetchThreshold = int64(rapid.SampledFrom([]int{1, 64}).Draw(t, "threshold"))
	// 1 kB of KV a token; slow writes leave backups in flight while other
	// replicas look up.
	sc.Links.KVBytesPerToken = 1000
	sc.Storage.WriteBandwidth = rapid.SampledFrom([]float64{0, 1e8, 1e7}).Draw(t, "write")
	sc.Storage.PrefetchPolicy = rapid.SampledFrom([]sim.PrefetchPolicy{sim.BestEffort, sim.WaitComplete, sim.PrefetchTimeout}).Draw(t, "prefetch")
	drawEviction(t, &sc.Storage)
	return &sim.Factory{Config: sc, Cost: &fitted, OpenLoop: true}
}

// drawEviction draws the storage tier's eviction: exact LRU or Mooncake's
// rounds with the defaults or other watermarks, ratios and leases.
func drawEviction(t *rapid.T, st *sim.StorageConfig) {
	st.Eviction = rapid.SampledFrom([]sim.StorageEviction{sim.StorageLRU, sim.StorageMooncake}).Draw(t, "eviction")
	if st.Eviction == sim.StorageMooncake {
		st.HighWatermark = rapid.SampledFrom([]float64{0, 0.5, 1}).Draw(t, "watermark")
		st.EvictionRatio = rapid.SampledFrom([]float64{0, 0.3, 1}).Draw(t, "ratio")
		st.LeaseTTL = rapid.SampledFrom([]int64{0, 1e6, 1e9}).Draw(t, "lease")
	}
}

// While a store never reaches its Mooncake watermark, Mooncake eviction
// changes nothing: the fleet's results, shared or private stores, are
// byte-identical to exact LRU's, and neither evicts.
func TestMooncakeBelowWatermarkIsLRU(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		recs := drawTrace(t)
		var total int64
		for _, r := range recs {
			total += int64(len(r.Tokens)) + int64(r.OutputLen)
		}
		// Every token stored once is the most a store can hold; double
		// it is above any watermark drawn (>= 0.5).
		fac := drawStorage(t, 2*total+2)
		n := rapid.IntRange(1, 4).Draw(t, "replicas")
		ns := rapid.SampledFrom([]string{"", "m"}).Draw(t, "shared")
		cfg := drawRouter(t)
		lru := *fac
		lru.Config.Storage.Eviction = sim.StorageLRU
		_, want := runFleet(t, l3Replicas(n, &lru, ns), cfg, 3, recs)
		moon := *fac
		moon.Config.Storage.Eviction = sim.StorageMooncake
		_, got := runFleet(t, l3Replicas(n, &moon, ns), cfg, 3, recs)
		if want.L3 != nil && want.L3.PagesEvicted+got.L3.PagesEvicted != 0 {
			t.Fatalf("a store of %d tokens evicted: %+v, %+v", 2*total+2, want.L3, got.L3)
		}
		if a, b := jsonOf(t, want), jsonOf(t, got); a != b {
			t.Fatalf("mooncake below its watermark differs from lru:\n%s\n%s", b, a)
		}
	})
}

func l3Replicas(n int, fac engine.Factory, ns string) []fleet.Replica {
	var reps []fleet.Replica
	for range n {
		reps = append(reps, fleet.Replica{Group: "g", Factory: fac, SharedL3: ns})
	}
	return reps
}

// A fleet of one replica whose storage is shared is the single server,
// byte for byte: requests, summary and counters. With an aggregate
// bandwidth cap, it is the single server with the same cap on its own
// store, and, with the cap at or above its links, the single server
// without a cap.
func TestSharedL3OfOneIsTheServer(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		fac, f := drawCap(t, drawStorage(t, rapid.SampledFrom([]int64{0, 300, 3000}).Draw(t, "capacity")), 1, 0)
		recs := drawTrace(t)
		_, res := runFleet(t, l3Replicas(1, fac, "m"), drawRouter(t), 1, recs)
		server := *fac
		if f >= 1 {
			server.Config.Storage.AggregateBandwidth = 0
		}
		single, err := server.Run(engine.NewSliceSource(recs))
		if err != nil {
			t.Fatal(err)
		}
		r := res.Replicas[0].Result
		sameReplica(t, "replica 0", r, single)
		if g, w := jsonOf(t, r.Counters), jsonOf(t, single.Counters); g != w {
			t.Fatalf("counters differ from the single-server run:\n%s\n%s", g, w)
		}
		if x := res.Replicas[0].L3.CrossReplicaPagesRead; x != 0 {
			t.Fatalf("one replica read %d pages another wrote", x)
		}
		if f >= 1 && res.L3.Slowed != 0 {
			t.Fatalf("a cap above the links slowed %d transfers", res.L3.Slowed)
		}
	})
}

// Under round_robin (routes independent of the caches), an unlimited
// shared L3 never gives the fleet a lower hit rate than private L3s on the
// same trace, when the device and host pools never evict; the private
// stores see no cross-replica read. With pools that evict it does not
// hold: an extra storage hit changes a replica's LRU order, which can
// evict a prefix a later request would have hit
// (TestSharedL3CanLowerHitRateWithEviction).
func TestSharedL3NeverLowersHitRate(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		fac := drawStorage(t, 0)
		fac.Config.Cache.DeviceTokens = 1 << 20
		fac.Config.Cache.HostTokens = 1 << 21
		n := rapid.IntRange(1, 4).Draw(t, "replicas")
		recs := drawTrace(t)
		cfg := router.Default()
		cfg.Policy = router.RoundRobin
		_, private := runFleet(t, l3Replicas(n, fac, ""), cfg, 1, recs)
		_, shared := runFleet(t, l3Replicas(n, fac, "m"), cfg, 1, recs)
		if p, s := private.Summary.CacheHitRate, shared.Summary.CacheHitRate; s < p {
			t.Fatalf("hit rate %v with a shared L3, %v with private ones", s, p)
		}
		if x := private.L3.CrossReplicaPagesRead; x != 0 {
			t.Fatalf("private stores read %d pages of other replicas", x)
		}
	})
}

// Every page a replica finds in a shared store was written by some
// replica's backup that landed at or before the lookup, and, with an
// unlimited store, no page is written by two replicas (a writer skips the
// pages another's backup in flight is writing). A replica's own backups
// in flight are not merged, as a single server's are not: each checks
// the store when it is queued, so two of them may write one page (rapid
// found it with write times that round to 0 ns). The same run again is
// byte-identical. In Mooncake mode no page is evicted while a lookup's
// lease on it lasts.
func TestSharedL3Visibility(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		capTokens := rapid.SampledFrom([]int64{0, 300, 3000}).Draw(t, "capacity")
		type write struct {
			at     engine.Time
			writer int
		}
		written := map[string]write{}
		leased := map[string]engine.Time{} // page -> end of its latest lease
		var ttl engine.Time                // the lease, in Mooncake mode
		key := func(p []tree.PageID) string { return fmt.Sprint(p) }
		hits, evicted := 0, 0
		obs := func(e sim.L3Event) {
			for d := e.From; d < len(e.Path); d++ {
				k := key(e.Path[:d+1])
				w, ok := written[k]
				at := w.at
				switch e.Kind {
				case sim.L3Evict:
					evicted++
					if end := leased[k]; end > e.At {
						t.Fatalf("page %d of %v evicted at %d under a lease until %d", d, e.Path, e.At, end)
					}
				case sim.L3Land:
					if ok && capTokens == 0 && w.writer != e.Replica {
						t.Fatalf("page %d of %v written at %d by replica %d and again at %d by replica %d", d, e.Path, at, w.writer, e.At, e.Replica)
					}
					if !ok {
						written[k] = write{e.At, e.Replica}
					}
				case sim.L3Hit:
					hits++
					if !ok || at > e.At {
						t.Fatalf("replica %d found page %d of %v at %d; written: %v at %d", e.Replica, d, e.Path, e.At, ok, at)
					}
					if ttl > 0 {
						leased[k] = max(leased[k], e.At+ttl)
					}
				}
			}
		}
		fac := observed{drawStorage(t, capTokens), obs}
		if st := fac.Config.WithDefaults().Storage; st.Eviction == sim.StorageMooncake {
			ttl = engine.Time(st.LeaseTTL)
		}
		n := rapid.IntRange(1, 4).Draw(t, "replicas")
		reps := l3Replicas(n, fac, "m")
		cfg, recs := drawRouter(t), drawTrace(t)
		_, res := runFleet(t, reps, cfg, 7, recs)
		t.Logf("%d pages found in the store, %d evicted", hits, evicted)
		written, leased = map[string]write{}, map[string]engine.Time{}
		_, again := runFleet(t, reps, cfg, 7, recs)
		if a, b := jsonOf(t, res), jsonOf(t, again); a != b {
			t.Fatalf("two runs differ:\n%s\n%s", a, b)
		}
		if a, b := jsonOf(t, res.Requests), jsonOf(t, again.Requests); a != b {
			t.Fatalf("two runs' requests differ")
		}
	})
}

// Two replicas, round robin: the second request's prefix, computed and
// backed up by replica 0, is a storage hit on replica 1 (a cross-replica
// read, which wait_complete waits for); with private stores it is
// recomputed, and so is a prompt of other tokens in the same positions
// (the replicas share one page-id space: equal ids are equal pages).
func TestSharedL3CrossReplicaHit(t *testing.T) {
	sc := sim.Default(4096)
	sc.Cache.HostTokens = 8192
	sc.Cache.WritePolicy = tree.WriteThrough
	sc.Storage.Enabled = true
	sc.Storage.PrefetchPolicy = sim.WaitComplete
	fac := &sim.Factory{Config: sc, Cost: &fitted, OpenLoop: true}
	prompt := func(base, last int32) []int32 {
		p := make([]int32, 0, 2001)
		for i := range int32(2000) {
			p = append(p, base+i)
		}
		return append(p, last)
	}
	cfg := router.Default()
	cfg.Policy = router.RoundRobin
	for _, c := range []struct {
		ns    string
		b     []int32
		cross int64
	}{{"", prompt(0, 90002), 0}, {"m", prompt(0, 90002), 2000}, {"m", prompt(50000, 90002), 0}} {
		recs := []traces.Record{
			{ID: "a", Arrival: 0, InputLen: 2001, Tokens: prompt(0, 90001), OutputLen: 2},
			{ID: "b", Arrival: 5e9, InputLen: 2001, Tokens: c.b, OutputLen: 2},
		}
		f, err := fleet.New(l3Replicas(2, fac, c.ns), cfg, 1)
		if err != nil {
			t.Fatal(err)
		}
		res, err := f.Run(engine.NewSliceSource(recs))
		if err != nil {
			t.Fatal(err)
		}
		if got := res.Replicas[1].L3.CrossReplicaPagesRead; got != c.cross {
			t.Errorf("namespace %q, b from %d: replica 1 read %d pages replica 0 wrote, want %d", c.ns, c.b[0], got, c.cross)
		}
		if got, want := res.Replicas[1].L3.HitTokens, c.cross; got != want {
			t.Errorf("namespace %q, b from %d: replica 1 took %d prompt tokens from L3, want %d", c.ns, c.b[0], got, want)
		}
		if c.ns != "" && (len(res.SharedL3) != 1 || res.SharedL3[0].StoredTokens < 2000) {
			t.Errorf("shared stores %+v", res.SharedL3)
		}
	}
}

// The counterexample rapid found to "a shared L3 never lowers the hit
// rate" with pools that evict (2,048 device and 1,024 host tokens,
// wait_complete, two replicas behind round_robin): request r10's
// 32-token storage hit, written by replica 1, changes what replica 0
// holds and when (a host insertion and a load-back instead of a prefill),
// and r22 later finds 32 tokens of its 515-token prefix on the
// device instead of 505. The property holds only without eviction
// (TestSharedL3NeverLowersHitRate).
func TestSharedL3CanLowerHitRateWithEviction(t *testing.T) {
	// gap ns, prefix, prefix length, own tokens, output tokens: drawTrace's
	// records.
	rows := [][5]int64{{0, 0, 0, 1, 1}, {0, 3, 32, 1, 1}, {0, 0, 0, 1, 1}, {20000000, 0, 0, 1, 1}, {0, 1, 515, 70, 14}, {0, 0, 0, 1, 1},
		{0, 2, 247, 13, 12}, {0, 0, 0, 1, 1}, {0, 0, 0, 12, 1}, {0, 0, 0, 1, 1}, {0, 3, 600, 220, 16}, {0, 0, 0, 1, 1}, {200000000, 0, 319, 12, 1},
		{0, 0, 0, 1, 1}, {0, 0, 0, 1, 1}, {0, 0, 0, 314, 23}, {0, 1, 90, 400, 8}, {200000000, 0, 26, 62, 4}, {200000000, 3, 32, 1, 28},
		{20000000, 2, 375, 4, 16}, {0, 2, 52, 321, 13}, {0, 1, 312, 2, 8}, {20000000, 3, 505, 96, 1}}
	var recs []traces.Record
	var at int64
	for i, r := range rows {
		at += r[0]
		toks := enginetest.Prompt(int(r[1]), int(r[2]), i, int(r[3]))
		recs = append(recs, traces.Record{ID: fmt.Sprintf("r%d", i), Arrival: at, InputLen: len(toks), Tokens: toks, OutputLen: int(r[4])})
	}
	sc := sim.Default(2048)
	sc.Cache.HostTokens = 1024
	sc.Cache.WritePolicy = tree.WriteThrough
	sc.Links.KVBytesPerToken = 1000
	sc.Storage = sim.StorageConfig{Enabled: true, PrefetchThreshold: 1, PrefetchPolicy: sim.WaitComplete}
	fac := &sim.Factory{Config: sc, Cost: &fitted, OpenLoop: true}
	cfg := router.Default()
	cfg.Policy = router.RoundRobin
	rate := func(ns string) (float64, int64) {
		f, err := fleet.New(l3Replicas(2, fac, ns), cfg, 1)
		if err != nil {
			t.Fatal(err)
		}
		res, err := f.Run(engine.NewSliceSource(recs))
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range res.Requests {
			if r.ID == "r22" {
				return res.Summary.CacheHitRate, r.CachedDevice
			}
		}
		t.Fatal("r22 did not finish")
		return 0, 0
	}
	private, privDev := rate("")
	shared, sharedDev := rate("m")
	if !(shared < private) || privDev != 505 || sharedDev != 32 {
		t.Fatalf("hit rate %v shared, %v private; r22's device hit %d shared, %d private; want lower shared, 32 against 505", shared, private, sharedDev, privDev)
	}
}

// BenchmarkFleetSharedL3 runs BenchmarkFleet's 1,000 requests on N small
// SGLang replicas with a storage tier behind round_robin, each with its
// own store (private) or all with one (shared): the difference is the
// shared store's cost (landing every replica's backups in order, the
// in-flight check of each backup). It reports ns per request, the fleet's
// hit rate and the cross-replica pages read.
//
//	go test ./fleet -run '^$' -bench FleetSharedL3
func BenchmarkFleetSharedL3(b *testing.B) {
	recs := benchTrace(1000)
	cfg := router.Default()
	cfg.Policy = router.RoundRobin
	sc := sim.Default(2048)
	sc.Cache.HostTokens = 1024
	sc.Cache.WritePolicy = tree.WriteThrough
	sc.Links.KVBytesPerToken = 1000
	sc.Storage.Enabled = true
	sc.Storage.PrefetchPolicy = sim.WaitComplete // idle replicas would admit before any read
	fac := &sim.Factory{Config: sc, Cost: &fitted, OpenLoop: true}
	for _, n := range []int{4, 16} {
		for _, ns := range []string{"", "m"} {
			name := map[string]string{"": "private", "m": "shared"}[ns]
			b.Run(fmt.Sprintf("%s/replicas=%d", name, n), func(b *testing.B) {
				var res *fleet.Result
				for b.Loop() {
					f, err := fleet.New(l3Replicas(n, fac, ns), cfg, 1)
					if err != nil {
						b.Fatal(err)
					}
					if res, err = f.Run(engine.NewSliceSource(recs)); err != nil {
						b.Fatal(err)
					}
				}
				b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(len(recs)), "ns/request")
				b.ReportMetric(res.Summary.CacheHitRate, "hit-rate")
				b.ReportMetric(float64(res.L3.CrossReplicaPagesRead), "cross-pages")
			})
		}
	}
}

// In a disaggregated fleet the prefill replicas can share one L3: every
// page a prefill replica finds there was written by a backup landed by
// then, every request finishes, and a second run is byte-identical.
func TestSharedL3PD(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		reps, cfg, _ := drawPD(t)
		written := map[string]engine.Time{}
		obs := func(e sim.L3Event) {
			for d := e.From; d < len(e.Path); d++ {
				k := fmt.Sprint(e.Path[:d+1])
				at, ok := written[k]
				switch {
				case e.Kind == sim.L3Land && !ok:
					written[k] = e.At
				case e.Kind == sim.L3Hit && (!ok || at > e.At):
					t.Fatalf("replica %d found page %d of %v at %d; written: %v at %d", e.Replica, d, e.Path, e.At, ok, at)
				}
			}
		}
		for i := range reps {
			if reps[i].Role != fleet.Prefill {
				continue
			}
			sc := reps[i].Factory.(*sim.Factory).Config
			sc.Cache.WritePolicy = tree.WriteThrough
			sc.Storage.Enabled = true
			sc.Storage.PrefetchThreshold = 1
			reps[i].Factory = observed{&sim.Factory{Config: sc, Cost: &fitted, OpenLoop: true}, obs}
			reps[i].SharedL3 = "m"
		}
		recs := drawTrace(t)
		res, _ := pdRun(t, reps, cfg, recs)
		if len(res.Requests) != len(recs) || res.L3 == nil || len(res.SharedL3) != 1 {
			t.Fatalf("%d of %d requests finished; L3 %+v, stores %+v", len(res.Requests), len(recs), res.L3, res.SharedL3)
		}
		written = map[string]engine.Time{}
		again, _ := pdRun(t, reps, cfg, recs)
		if a, b := jsonOf(t, res), jsonOf(t, again); a != b {
			t.Fatalf("two runs differ:\n%s\n%s", a, b)
		}
	})
}

// drawCap draws a store's aggregate bandwidth cap for fac's servers (n
// of them) as a share of the sum of every replica's read and write links,
// which it returns: tight, between, at or above the links, or one of
// more (0: no cap).
func drawCap(t *rapid.T, fac *sim.Factory, n int, more ...float64) (*sim.Factory, float64) {
	c := fac.Config.WithDefaults()
	links := float64(n*c.Cache.CP) * (c.Storage.ReadBandwidth + c.Storage.WriteBandwidth)
	f := rapid.SampledFrom(append([]float64{0.01, 0.3, 1, 2.5}, more...)).Draw(t, "cap share of the links")
	capped := *fac
	capped.Config.Storage.AggregateBandwidth = math.Ceil(f * links)
	return &capped, f
}

// With the aggregate cap at or above the sum of every replica's links,
// the fleet's results are byte-identical to no cap: no transfer is
// slowed. Below, every request completes and a second run is
// byte-identical (the store's own checks panic if a reservation exceeds
// the cap or starts before the pruned part of its profile).
func TestSharedL3Cap(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		fac := drawStorage(t, rapid.SampledFrom([]int64{0, 3000}).Draw(t, "capacity"))
		n := rapid.IntRange(1, 4).Draw(t, "replicas")
		capped, f := drawCap(t, fac, n)
		recs := drawTrace(t)
		cfg := drawRouter(t)
		_, got := runFleet(t, l3Replicas(n, capped, "m"), cfg, 3, recs)
		if f < 1 {
			if len(got.Requests) != len(recs) {
				t.Fatalf("%d of %d requests completed", len(got.Requests), len(recs))
			}
			_, again := runFleet(t, l3Replicas(n, capped, "m"), cfg, 3, recs)
			if a, b := jsonOf(t, got), jsonOf(t, again); a != b {
				t.Fatalf("a second run differs:\n%s\n%s", b, a)
			}
			return
		}
		_, want := runFleet(t, l3Replicas(n, fac, "m"), cfg, 3, recs)
		if a, b := jsonOf(t, want), jsonOf(t, got); a != b {
			t.Fatalf("a cap of %v bytes/s above the links changed the results:\n%s\n%s", capped.Config.Storage.AggregateBandwidth, b, a)
		}
	})
}

// A cap a hundredth of the links, with prompts that reach L3, slows
// transfers and counts them; the run completes every request.
func TestSharedL3TightCapSlows(t *testing.T) {
	fac := &sim.Factory{Config: sim.Default(2048), Cost: &fitted, OpenLoop: true}
	sc := &fac.Config
	sc.Cache.HostTokens = 4096
	sc.Cache.WritePolicy = tree.WriteThrough
	sc.Storage.Enabled = true
	sc.Links.KVBytesPerToken = 1e5
	sc.Storage.AggregateBandwidth = 1e8 // 5e9 + 3e9 per replica
	var recs []traces.Record
	for i := range 40 {
		toks := make([]int32, 600)
		for k := range toks {
			toks[k] = int32(k + 1000*(i%5))
		}
		recs = append(recs, traces.Record{ID: fmt.Sprint(i), Arrival: int64(i) * 5e7, InputLen: len(toks), Tokens: toks, OutputLen: 4})
	}
	f, err := fleet.New(l3Replicas(2, fac, "m"), router.Default(), 1)
	if err != nil {
		t.Fatal(err)
	}
	res, err := f.Run(engine.NewSliceSource(recs))
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Requests) != len(recs) {
		t.Fatalf("%d of %d requests completed", len(res.Requests), len(recs))
	}
	if res.L3.Slowed == 0 || res.L3.DelayNs <= 0 {
		t.Fatalf("a cap of 1e8 bytes/s slowed nothing: %+v", res.L3)
	}
	if res.L3.Slowed != res.Replicas[0].L3.Slowed+res.Replicas[1].L3.Slowed {
		t.Fatalf("fleet %+v, replicas %+v %+v", res.L3, res.Replicas[0].L3, res.Replicas[1].L3)
	}
}
