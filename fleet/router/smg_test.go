package router

import (
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"gonum.org/v1/gonum/stat"
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
				if cfg.Manual.MinLoad && r.InFlight(d.Replica)-1 != least {
					rt.Fatalf("min_load sent a keyless request to replica %d with %d in flight, least was %d", d.Replica, r.InFlight(d.Replica)-1, least)
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

// least_load against a direct reading of SMG's rule: each decision goes to
// the first replica of least expected wait, where a replica with a report
// waits (queued + tokens routed to it since the report) / throughput (its
// own, or the default) + weight * k / (1 - k), one without a report while
// another has one waits in flight * mean prefill / the mean reported
// throughput, and with no report at all the fewest in flight wins.
func TestPropLeastLoadExpectedWait(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		n := rapid.IntRange(1, 5).Draw(rt, "replicas")
		ll := LeastLoadConfig{
			KVPressureWeight:  rapid.SampledFrom([]float64{0, 0.15, 2}).Draw(rt, "weight"),
			DefaultThroughput: rapid.SampledFrom([]float64{100, 2000}).Draw(rt, "default_tp"),
			MeanPrefillTokens: rapid.IntRange(1, 2048).Draw(rt, "mean_prefill"),
		}
		r, _ := smgRouter(rt, LeastLoad, n, 0, func(c *Config) { c.LeastLoad = ll })
		reports := make([]*LoadReport, n)
		since := make([]int64, n)
		for range rapid.IntRange(1, 40).Draw(rt, "steps") {
			if rapid.IntRange(0, 2).Draw(rt, "poll") == 0 {
				i := rapid.IntRange(0, n-1).Draw(rt, "polled")
				rep := LoadReport{
					Usage:         rapid.SampledFrom([]float64{0, 0.5, 0.9, 1, 1.2}).Draw(rt, "usage"),
					QueuedTokens:  rapid.Int64Range(0, 5000).Draw(rt, "queued"),
					GenThroughput: rapid.SampledFrom([]float64{0, 50, 1000}).Draw(rt, "tp"),
				}
				r.SetLoadReport(i, rep)
				reports[i], since[i] = &rep, 0
			}
			var rates []float64 // the positive reported throughputs
			any := slices.ContainsFunc(reports, func(r *LoadReport) bool { return r != nil })
			for _, rep := range reports {
				if rep != nil && rep.GenThroughput > 0 {
					rates = append(rates, rep.GenThroughput)
				}
			}
			nominal := ll.DefaultThroughput
			if len(rates) > 0 {
				nominal = stat.Mean(rates, nil)
			}
			wait := func(i int) float64 {
				rep := reports[i]
				switch {
				case rep != nil:
					tp := rep.GenThroughput
					if tp == 0 {
						tp = ll.DefaultThroughput
					}
					u := min(max(rep.Usage, 0), 0.999)
					return float64(rep.QueuedTokens+since[i])/tp + ll.KVPressureWeight*u/(1-u)
				case any:
					return float64(r.InFlight(i)*ll.MeanPrefillTokens) / nominal
				}
				return float64(r.InFlight(i))
			}
			want := 0
			for i := 1; i < n; i++ {
				if wait(i) < wait(want) {
					want = i
				}
			}
			length := rapid.IntRange(0, 3000).Draw(rt, "len")
			d, err := r.Route(&Request{Len: length})
			if err != nil {
				rt.Fatal(err)
			}
			if d.Replica != want || d.Reason != LeastWait {
				rt.Fatalf("routed to %d (%v), want %d: waits %v", d.Replica, d.Reason, want, func() (w []float64) {
					for i := range n {
						w = append(w, wait(i))
					}
					return
				}())
			}
			if length == 0 {
				length = ll.MeanPrefillTokens
			}
			since[want] += int64(length)
			if rapid.Bool().Draw(rt, "finish") {
				if err := r.Finish(d.Replica); err != nil {
					rt.Fatal(err)
				}
			}
		}
	})
}

// Between two polls least_load water-fills: equal replicas take equal
// requests in turn, and a replica near a full KV pool is avoided however
// short its queue.
func TestLeastLoadSpreadsBetweenPolls(t *testing.T) {
	r, _ := smgRouter(t, LeastLoad, 3, 0, func(*Config) {})
	for i := range 3 {
		r.SetLoadReport(i, LoadReport{GenThroughput: 1000})
	}
	var got []int
	for range 6 {
		got = append(got, mustRoute(t, r, &Request{Len: 100}).Replica)
	}
	if want := []int{0, 1, 2, 0, 1, 2}; !slices.Equal(got, want) {
		t.Errorf("equal replicas took %v, want %v", got, want)
	}
	r.SetLoadReport(0, LoadReport{GenThroughput: 1000, Usage: 0.99})
	r.SetLoadReport(1, LoadReport{GenThroughput: 1000, QueuedTokens: 4000})
	r.SetLoadReport(2, LoadReport{GenThroughput: 1000, QueuedTokens: 8000})
	// waits: 0.15*99 = 14.85 s, 4 s, 8 s
	if d := mustRoute(t, r, &Request{Len: 100}); d.Replica != 1 {
		t.Errorf("routed to %d, want 1 (replica 0's KV is 99%% full)", d.Replica)
	}
}

// A hash ring is bounded: replicas x virtual_nodes over 2^22 points is
// refused at router.virtual_nodes, for both ring policies, before any is
// built (64 x 65536 would pass, but takes seconds to build).
func TestRingBound(t *testing.T) {
	for _, p := range []Policy{ConsistentHash, PrefixHash} {
		cfg := Default()
		cfg.Policy, cfg.ConsistentHash.VirtualNodes = p, 65536
		_, err := New(cfg, 65, Deps{Rand: newRNG(1)})
		if err == nil || !strings.Contains(err.Error(), "router.virtual_nodes") {
			t.Errorf("%v: 65 x 65536 points: %v, want an error at router.virtual_nodes", p, err)
		}
	}
}
