package router

import (
	"testing"

	"pgregory.net/rapid"
)

func kvRouter(t testing.TB, n int, o CacheOracle, edit func(*KVAwareConfig)) *Router {
	cfg := Default()
	cfg.Policy = KVAware
	edit(&cfg.KVAware)
	r, err := New(cfg, n, Deps{Oracle: o})
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// TestPropKVAwarePrefixOnly: with only the prefix scorer weighted, kv_aware
// picks the first replica with the most tier-weighted cached tokens, and
// says kv_hit exactly when that replica holds some of the prompt.
func TestPropKVAwarePrefixOnly(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		n := rapid.IntRange(1, 6).Draw(rt, "replicas")
		o := drawOracle(rt, n)
		r := kvRouter(t, n, o, func(c *KVAwareConfig) {
			c.LoadWeight, c.UsageWeight = 0, 0
			c.HostWeight = rapid.Float64Range(0, 1).Draw(rt, "host_weight")
			c.StorageWeight = rapid.Float64Range(0, 1).Draw(rt, "storage_weight")
		})
		c := r.cfg.KVAware
		req := &Request{Len: rapid.IntRange(0, 30).Draw(rt, "len")}
		best, bestScore := 0, -1.0
		for i := range n {
			h := o.CachedPrefix(i, req)
			if s := float64(h.Device)*c.DeviceWeight + float64(h.Host)*c.HostWeight + float64(h.Storage)*c.StorageWeight; s > bestScore {
				best, bestScore = i, s
			}
		}
		d, err := r.Route(req)
		if err != nil {
			rt.Fatal(err)
		}
		h := o.CachedPrefix(best, req)
		if d.Replica != best || d.Matched != h.Device+h.Host+h.Storage || (d.Reason == KVHit) != (bestScore > 0) {
			rt.Fatalf("Route = %+v, want replica %d (score %v, %+v)", d, best, bestScore, h)
		}
	})
}

// TestKVAwareLoadAgainstPrefix: the load scorer pulls requests off a busy
// replica once its prefix advantage is outweighed.
func TestKVAwareLoadAgainstPrefix(t *testing.T) {
	o := fakeOracle{held: []Cached{{Device: 100}, {Device: 50}, {}}}
	r := kvRouter(t, 3, o, func(c *KVAwareConfig) { c.UsageWeight = 0 }) // prefix 3, load 2
	req := &Request{Len: 100}
	// Scores: prefix normalised 1, 0.5, 0; load all equal (1 each).
	if d := mustRoute(t, r, req); d.Replica != 0 || d.Reason != KVHit || d.Matched != 100 {
		t.Fatalf("first = %+v, want replica 0, kv_hit, 100", d)
	}
	// Loads 1, 0, 0: replica 0 scores 3+0 = 3, replica 1 1.5+2 = 3.5.
	if d := mustRoute(t, r, req); d.Replica != 1 {
		t.Fatalf("second = %+v, want replica 1", d)
	}
	// Loads 1, 1, 0: 3+0, 1.5+0, 0+2: replica 0 again.
	if d := mustRoute(t, r, req); d.Replica != 0 {
		t.Fatalf("third = %+v, want replica 0", d)
	}
	r.SetLoad(0, 0.99) // replica 0's KV nearly full: usage scorer 0.02
	r.SetLoad(1, 0.0)
	r.SetLoad(2, 0.0)
	r.cfg.KVAware.UsageWeight = 2
	// Loads 2, 1, 0: replica 0 scores 3+0+0.02, replica 1 1.5+1+2 = 4.5,
	// replica 2 0+2+2 = 4.
	if d := mustRoute(t, r, req); d.Replica != 1 || d.Reason != KVHit {
		t.Fatalf("fourth = %+v, want replica 1", d)
	}
}

// TestKVAwareMiss: when no replica holds any of the prompt the load
// decides and the reason is kv_miss.
func TestKVAwareMiss(t *testing.T) {
	r := kvRouter(t, 2, fakeOracle{held: make([]Cached, 2), size: make([]int, 2)}, func(*KVAwareConfig) {})
	mustRoute(t, r, &Request{Len: 10})
	if d := mustRoute(t, r, &Request{Len: 10}); d.Replica != 1 || d.Reason != KVMiss {
		t.Fatalf("Route = %+v, want replica 1 for kv_miss", d)
	}
}
