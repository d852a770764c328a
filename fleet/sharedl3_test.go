package fleet_test

import (
	"fmt"
	"testing"

	"github.com/kvsim/kvsim/fleet"
	"github.com/kvsim/kvsim/fleet/router"
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
// of capTokens tokens.
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
	return &sim.Factory{Config: sc, Cost: &fitted, OpenLoop: true}
}

func l3Replicas(n int, fac engine.Factory, ns string) []fleet.Replica {
	var reps []fleet.Replica
	for range n {
		reps = append(reps, fleet.Replica{Group: "g", Factory: fac, SharedL3: ns})
	}
	return reps
}

// A fleet of one replica whose storage is shared is the single server,
// byte for byte: requests, summary and counters.
func TestSharedL3OfOneIsTheServer(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		fac := drawStorage(t, rapid.SampledFrom([]int64{0, 300, 3000}).Draw(t, "capacity"))
		recs := drawTrace(t)
		_, res := runFleet(t, l3Replicas(1, fac, "m"), drawRouter(t), 1, recs)
		single, err := fac.Run(engine.NewSliceSource(recs))
		if err != nil {
			t.Fatal(err)
		}
		r := res.Replicas[0].Result
		sameResult(t, "replica 0", r.Requests, r.Summary, single)
		if g, w := jsonOf(t, r.Counters), jsonOf(t, single.Counters); g != w {
			t.Fatalf("counters differ from the single-server run:\n%s\n%s", g, w)
		}
		if x := res.Replicas[0].L3.CrossReplicaPagesRead; x != 0 {
			t.Fatalf("one replica read %d pages another wrote", x)
		}
	})
}

// Under round_robin (routes independent of the caches), an unlimited
// shared L3 never gives the fleet a lower hit rate than private L3s of the
// same size on the same trace; the private stores see no cross-replica
// read.
func TestSharedL3NeverLowersHitRate(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		fac := drawStorage(t, 0)
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
// unlimited store, no page is written twice (a writer skips the pages
// another's backup in flight is writing). The same run again is
// byte-identical.
func TestSharedL3Visibility(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		capTokens := rapid.SampledFrom([]int64{0, 300, 3000}).Draw(t, "capacity")
		written := map[string]engine.Time{}
		key := func(p []tree.PageID) string { return fmt.Sprint(p) }
		hits := 0
		obs := func(e sim.L3Event) {
			for d := e.From; d < len(e.Path); d++ {
				k := key(e.Path[:d+1])
				at, ok := written[k]
				switch e.Kind {
				case sim.L3Land:
					if ok && capTokens == 0 {
						t.Fatalf("page %d of %v written at %d and again at %d by replica %d", d, e.Path, at, e.At, e.Replica)
					}
					if !ok {
						written[k] = e.At
					}
				case sim.L3Hit:
					hits++
					if !ok || at > e.At {
						t.Fatalf("replica %d found page %d of %v at %d; written: %v at %d", e.Replica, d, e.Path, e.At, ok, at)
					}
				}
			}
		}
		fac := observed{drawStorage(t, capTokens), obs}
		n := rapid.IntRange(1, 4).Draw(t, "replicas")
		reps := l3Replicas(n, fac, "m")
		cfg, recs := drawRouter(t), drawTrace(t)
		_, res := runFleet(t, reps, cfg, 7, recs)
		t.Logf("%d pages found in the store", hits)
		written = map[string]engine.Time{}
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
// recomputed.
func TestSharedL3CrossReplicaHit(t *testing.T) {
	sc := sim.Default(4096)
	sc.Cache.HostTokens = 8192
	sc.Cache.WritePolicy = tree.WriteThrough
	sc.Storage.Enabled = true
	sc.Storage.PrefetchPolicy = sim.WaitComplete
	fac := &sim.Factory{Config: sc, Cost: &fitted, OpenLoop: true}
	prefix := make([]int32, 2000)
	for i := range prefix {
		prefix[i] = int32(i)
	}
	recs := []traces.Record{
		{ID: "a", Arrival: 0, InputLen: 2001, Tokens: append(append([]int32{}, prefix...), 90001), OutputLen: 2},
		{ID: "b", Arrival: 5e9, InputLen: 2001, Tokens: append(append([]int32{}, prefix...), 90002), OutputLen: 2},
	}
	cfg := router.Default()
	cfg.Policy = router.RoundRobin
	for _, c := range []struct {
		ns    string
		cross int64
	}{{"", 0}, {"m", 2000}} {
		f, err := fleet.New(l3Replicas(2, fac, c.ns), cfg, 1)
		if err != nil {
			t.Fatal(err)
		}
		res, err := f.Run(engine.NewSliceSource(recs))
		if err != nil {
			t.Fatal(err)
		}
		if got := res.Replicas[1].L3.CrossReplicaPagesRead; got != c.cross {
			t.Errorf("namespace %q: replica 1 read %d pages replica 0 wrote, want %d", c.ns, got, c.cross)
		}
		if got, want := res.Replicas[1].L3.HitTokens, c.cross; got != want {
			t.Errorf("namespace %q: replica 1 took %d prompt tokens from L3, want %d", c.ns, got, want)
		}
		if c.ns != "" && (len(res.SharedL3) != 1 || res.SharedL3[0].StoredTokens < 2000) {
			t.Errorf("shared stores %+v", res.SharedL3)
		}
	}
}
