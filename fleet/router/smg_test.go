package router

import (
	"slices"
	"strconv"
	"testing"
	"time"

	"pgregory.net/rapid"
)

// smgRouter returns a router of policy p over n replicas, its config
// edited by edit, with the stream seed; it fails t on an error.
func smgRouter(t fataler, p Policy, n int, seed uint64, edit func(*Config)) (*Router, Config) {
	cfg := Default()
	cfg.Policy = p
	edit(&cfg)
	r, err := New(cfg, n, Deps{Rand: newRNG(seed)})
	if err != nil {
		t.Fatal(err)
	}
	return r, cfg
}

// prefix_hash against a model of SMG's rule: the ring's replica for the
// prefix when its in-flight count is at most load_factor times the mean
// with the request counted, else the least loaded replica under that bound
// (lowest index among equals), else the ring's. The ring's replica is what
// the same prefix gets on an idle router, so the model needs no ring of
// its own; requests that share their first prefix_token_count tokens share
// it whatever follows.
func TestPropPrefixHashLoadBound(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		n := rapid.IntRange(1, 6).Draw(rt, "replicas")
		ph := PrefixHashConfig{
			TokenCount: rapid.IntRange(1, 4).Draw(rt, "prefix_token_count"),
			LoadFactor: rapid.SampledFrom([]float64{0.5, 1, 1.25, 2}).Draw(rt, "load_factor"),
		}
		edit := func(c *Config) { c.PrefixHash = ph }
		r, cfg := smgRouter(rt, PrefixHash, n, 0, edit)
		idle, _ := smgRouter(rt, PrefixHash, n, 0, edit)
		for range rapid.IntRange(1, 30).Draw(rt, "requests") {
			for i := range n {
				r.SetAvailable(i, rapid.IntRange(0, 4).Draw(rt, "up") > 0)
				idle.SetAvailable(i, r.available[i])
			}
			if !slices.Contains(r.available, true) {
				continue
			}
			toks := rapid.SliceOfN(rapid.Int32Range(0, 2), 1, 6).Draw(rt, "tokens")
			req := &Request{Tokens: toks}
			ringD, err := idle.Route(&Request{Tokens: toks[:min(len(toks), cfg.PrefixHash.TokenCount)]})
			if err != nil {
				rt.Fatal(err)
			}
			if err := idle.Finish(ringD.Replica); err != nil {
				rt.Fatal(err)
			}
			total, up := 0, 0
			for i := range n {
				if r.available[i] {
					total += r.InFlight(i)
					up++
				}
			}
			fits := func(i int) bool {
				return r.available[i] && (total == 0 || float64(r.InFlight(i)) <= float64(total+1)/float64(up)*cfg.PrefixHash.LoadFactor)
			}
			want, why := ringD.Replica, PrefixRing
			if !fits(want) {
				why = PrefixBalanced
				for i := range n {
					if fits(i) && (!fits(want) || r.InFlight(i) < r.InFlight(want)) {
						want = i
					}
				}
			}
			d, err := r.Route(req)
			if err != nil {
				rt.Fatal(err)
			}
			if d.Replica != want || d.Reason != why {
				rt.Fatalf("routed to %d (%v), want %d (%v); in flight %v, ring replica %d", d.Replica, d.Reason, want, why, r.inflight, ringD.Replica)
			}
			if rapid.Bool().Draw(rt, "finish") {
				open := []int{}
				for i := range n {
					if r.InFlight(i) > 0 {
						open = append(open, i)
					}
				}
				if err := r.Finish(rapid.SampledFrom(open).Draw(rt, "done")); err != nil {
					rt.Fatal(err)
				}
			}
		}
	})
}

// A request with nothing to hash (a length-only trace) goes to the least
// loaded replica; block and text prompts hash their first blocks and
// characters.
func TestPrefixHashKeys(t *testing.T) {
	r, cfg := smgRouter(t, PrefixHash, 3, 0, func(c *Config) { c.PrefixHash.TokenCount = 1024 })
	if _, err := r.Route(&Request{Len: 10}); err != nil {
		t.Fatal(err)
	}
	d, err := r.Route(&Request{Len: 10})
	if err != nil || d.Replica != 1 || d.Reason != NoKey {
		t.Fatalf("second keyless request: %+v, %v; want replica 1, no_key", d, err)
	}
	for _, tc := range []struct {
		name string
		a, b Request
		same bool
	}{
		{"blocks within the prefix", Request{Blocks: []uint64{1, 2, 3}, BlockSize: 512}, Request{Blocks: []uint64{1, 2, 4}, BlockSize: 512}, true},
		{"blocks differ in the prefix", Request{Blocks: []uint64{1, 2}, BlockSize: 512}, Request{Blocks: []uint64{1, 3}, BlockSize: 512}, false},
		{"text within the prefix", Request{Text: string(make([]rune, 1024)) + "a"}, Request{Text: string(make([]rune, 1024)) + "b"}, true},
	} {
		ha, _ := prefixKey(&tc.a, cfg.PrefixHash.TokenCount)
		hb, _ := prefixKey(&tc.b, cfg.PrefixHash.TokenCount)
		if (ha == hb) != tc.same {
			t.Errorf("%s: keys %x and %x, want same = %v", tc.name, ha, hb, tc.same)
		}
	}
}

// manual against a model of SMG's routing map: a key goes to the first of
// its (at most two, oldest first) remembered replicas that is available;
// otherwise to a new available replica, the fewest in flight under
// min_load, which it remembers, forgetting the oldest of two. Keys unused
// for more than max_idle are forgotten at the eviction ticks. Requests
// without a key are not remembered.
func TestPropManualSticky(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		n := rapid.IntRange(1, 5).Draw(rt, "replicas")
		m := ManualConfig{
			MinLoad: rapid.Bool().Draw(rt, "min_load"),
			MaxIdle: time.Duration(rapid.IntRange(1, 5).Draw(rt, "max_idle_s")) * time.Second,
		}
		r, cfg := smgRouter(rt, Manual, n, rapid.Uint64().Draw(rt, "seed"), func(c *Config) {
			c.Manual, c.CacheAware.EvictionInterval = m, time.Second
		})
		type key struct {
			cand []int
			last time.Duration
		}
		model := map[string]*key{}
		var now, lastEvict time.Duration
		for range rapid.IntRange(1, 50).Draw(rt, "steps") {
			now += time.Duration(rapid.IntRange(0, 1500).Draw(rt, "dt_ms")) * time.Millisecond
			r.Tick(now)
			if tick := now / time.Second * time.Second; tick > lastEvict {
				lastEvict = tick
				for k, e := range model {
					if now-e.last > cfg.Manual.MaxIdle {
						delete(model, k)
					}
				}
			}
			if r.Keys() != len(model) {
				rt.Fatalf("at %v the router remembers %d keys, the model %d", now, r.Keys(), len(model))
			}
			i := rapid.IntRange(0, n-1).Draw(rt, "toggle")
			r.SetAvailable(i, rapid.IntRange(0, 3).Draw(rt, "up") > 0)
			if !slices.Contains(r.available, true) {
				r.SetAvailable(i, true)
			}
			session := ""
			if rapid.IntRange(0, 5).Draw(rt, "keyed") > 0 {
				session = "k" + strconv.Itoa(rapid.IntRange(0, 4).Draw(rt, "key"))
			}
			least := -1
			for j := range n {
				if r.available[j] && (least < 0 || r.InFlight(j) < least) {
					least = r.InFlight(j)
				}
			}
			d, err := r.Route(&Request{Session: session})
			if err != nil {
				rt.Fatal(err)
			}
			if !r.available[d.Replica] {
				rt.Fatalf("routed to unavailable replica %d", d.Replica)
			}
			if session == "" {
				if d.Reason != NoKey {
					rt.Fatalf("keyless request: reason %v", d.Reason)
				}
			} else {
				e := model[session]
				want := -1
				if e != nil {
					for _, c := range e.cand {
						if r.available[c] {
							want = c
							break
						}
					}
				}
				switch {
				case want >= 0:
					if d.Replica != want || d.Reason != StickyHit {
						rt.Fatalf("key %s remembered %v: got %d (%v), want %d", session, e.cand, d.Replica, d.Reason, want)
					}
				case e == nil && d.Reason != StickyNew, e != nil && d.Reason != StickyMoved:
					rt.Fatalf("key %s (remembered: %v): reason %v", session, e != nil, d.Reason)
				case cfg.Manual.MinLoad && r.InFlight(d.Replica)-1 != least:
					rt.Fatalf("min_load assigned replica %d with %d in flight, least was %d", d.Replica, r.InFlight(d.Replica)-1, least)
				}
				if e == nil {
					e = &key{}
					model[session] = e
				}
				if want < 0 {
					e.cand = append(e.cand, d.Replica)
					if len(e.cand) > 2 {
						e.cand = e.cand[1:]
					}
				}
				e.last = now
			}
			if rapid.Bool().Draw(rt, "finish") {
				if err := r.Finish(d.Replica); err != nil {
					rt.Fatal(err)
				}
			}
		}
	})
}
