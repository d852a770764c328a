package policy

import (
	"errors"
	"math/bits"
	"testing"

	"github.com/kvsim/kvsim/traces"
	"pgregory.net/rapid"
)

func toRequests(reqs [][]uint64) []Request {
	in := make([]Request, len(reqs))
	for i, r := range reqs {
		in[i] = Request{Timestamp: int64(i), Pages: r}
	}
	return in
}

// beladyPerRequest replays reqs under Belady at l1 and returns the hits of
// each request, checking the run's invariants (capacity, prefix closure,
// heap) after every request.
func beladyPerRequest(t *rapid.T, l1 int, reqs [][]uint64) ([]int, Result) {
	hits := make([]int, len(reqs))
	res, err := RunBeladyEach(l1, toRequests(reqs), func(i, h int, run *traces.OPTRun) {
		if err := run.Check(); err != nil {
			t.Fatalf("C=%d after request %d: %v", l1, i+1, err)
		}
		hits[i] = h
	})
	if err != nil {
		t.Fatal(err)
	}
	return hits, res
}

// TestPropBeladyBeatsEveryPolicy: on random traces, Belady at L1 pages has
// at least the L1 hits of every policy with that L1 (whatever its L2), and
// Belady at L1+L2 pages has at least its L1+L2 hits: a two-tier cache
// holds at most L1+L2 distinct pages, each cached because a request used
// it, so its hits are those of one eviction schedule of that capacity,
// which the optimum beats. With L2 = 0, main_write_through is plain LRU.
func TestPropBeladyBeatsEveryPolicy(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		cfg, reqs, _, _, res, ok := drawCompleteRun(t)
		if !ok {
			return
		}
		_, opt := beladyPerRequest(t, cfg.L1Pages, reqs)
		if opt.L1HitPages < res.L1HitPages {
			t.Fatalf("belady C=%d: %d hits, %v: %d L1 hits", cfg.L1Pages, opt.L1HitPages, cfg.Policy, res.L1HitPages)
		}
		_, both := beladyPerRequest(t, cfg.L1Pages+cfg.L2Pages, reqs)
		if both.L1HitPages < res.L1HitPages+res.L2HitPages {
			t.Fatalf("belady C=%d: %d hits, %v with L1 %d L2 %d: %d + %d", cfg.L1Pages+cfg.L2Pages, both.L1HitPages,
				cfg.Policy, cfg.L1Pages, cfg.L2Pages, res.L1HitPages, res.L2HitPages)
		}
		if opt.L1HitPages+opt.MissPages != opt.TotalInputPages || opt.L2HitPages != 0 || opt.HPages != 0 ||
			opt.DPages > cfg.L1Pages || opt.Requests != len(reqs) {
			t.Fatalf("belady counters %+v", opt)
		}
	})
}

// TestPropBeladyMonotone: hits never decrease with C, request by request
// (the inclusion property; package traces checks the cache sets).
func TestPropBeladyMonotone(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		reqs := genTrace(t)
		small := rapid.IntRange(0, 15).Draw(t, "c")
		big := small + rapid.IntRange(1, 10).Draw(t, "more")
		a, _ := beladyPerRequest(t, small, reqs)
		b, _ := beladyPerRequest(t, big, reqs)
		for i := range a {
			if a[i] > b[i] {
				t.Fatalf("request %d: %d hits at C=%d, %d at C=%d", i+1, a[i], small, b[i], big)
			}
		}
	})
}

// bruteForceOPT is the most hit pages of any eviction schedule: after each
// request the cache may keep any subset of (cache ∪ request pages) of at
// most c pages, not only prefix-closed ones, and a request's hit is its
// longest cached prefix. Cache states are bitmasks over trie nodes (at most
// 64); keeping fewer pages than allowed never helps, so only subsets of
// size min(c, |candidates|) are tried.
func bruteForceOPT(reqs [][]uint64, c int) int {
	type edge struct {
		parent int
		page   uint64
	}
	ids := map[edge]int{}
	paths := make([][]int, len(reqs))
	for i, r := range reqs {
		cur := -1
		for _, p := range r {
			id, ok := ids[edge{cur, p}]
			if !ok {
				id = len(ids)
				ids[edge{cur, p}] = id
			}
			paths[i] = append(paths[i], id)
			cur = id
		}
	}
	best := map[uint64]int{0: 0}
	for _, path := range paths {
		var mask uint64
		for _, id := range path {
			mask |= 1 << id
		}
		next := map[uint64]int{}
		for s, v := range best {
			h := 0
			for _, id := range path {
				if s&(1<<id) == 0 {
					break
				}
				h++
			}
			u := s | mask
			k := min(c, bits.OnesCount64(u))
			var members []int
			for b := u; b != 0; b &= b - 1 {
				members = append(members, bits.TrailingZeros64(b))
			}
			var choose func(from, left int, set uint64)
			choose = func(from, left int, set uint64) {
				if left == 0 {
					if old, ok := next[set]; !ok || v+h > old {
						next[set] = v + h
					}
					return
				}
				for i := from; i <= len(members)-left; i++ {
					choose(i+1, left-1, set|1<<members[i])
				}
			}
			choose(0, k, 0)
		}
		best = next
	}
	m := 0
	for _, v := range best {
		m = max(m, v)
	}
	return m
}

// TestPropBeladyIsOptimal: Belady's hits equal the exhaustive optimum on
// tiny traces and capacities.
func TestPropBeladyIsOptimal(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		n := rapid.IntRange(0, 8).Draw(t, "requests")
		alpha := rapid.Uint64Range(1, 4).Draw(t, "alphabet")
		var reqs [][]uint64
		pages := 0
		for range n {
			var r []uint64
			if len(reqs) > 0 && rapid.Bool().Draw(t, "extend") {
				prev := reqs[rapid.IntRange(0, len(reqs)-1).Draw(t, "prev")]
				r = append(r, prev[:rapid.IntRange(0, len(prev)).Draw(t, "keep")]...)
			}
			for k := rapid.IntRange(0, 3).Draw(t, "add"); k > 0 && pages < 14; k-- {
				r = append(r, rapid.Uint64Range(1, alpha).Draw(t, "page"))
				pages++
			}
			reqs = append(reqs, r)
		}
		c := rapid.IntRange(0, 5).Draw(t, "c")
		_, res := beladyPerRequest(t, c, reqs)
		if want := bruteForceOPT(reqs, c); res.L1HitPages != want {
			t.Fatalf("belady C=%d: %d hits, exhaustive optimum %d", c, res.L1HitPages, want)
		}
	})
}

func TestBeladyConfig(t *testing.T) {
	if _, err := New(Config{Policy: Belady, L1Pages: 4, WriteThroughThreshold: 1}); !errors.Is(err, ErrNeedsTrace) {
		t.Errorf("New(belady) = %v, want ErrNeedsTrace", err)
	}
	err := Config{Policy: Belady, L1Pages: 4, L2Pages: 2, WriteThroughThreshold: 1}.Validate()
	if err == nil || err.Error() != "l2_pages: must be 0 under belady, which models L1 only (got 2)" {
		t.Errorf("Validate(belady, l2 2) = %v", err)
	}
	if p, err := ParsePolicy("belady"); p != Belady || err != nil {
		t.Errorf("ParsePolicy(belady) = %v, %v", p, err)
	}
	r, err := Run(Config{Policy: Belady, L1Pages: 2, WriteThroughThreshold: 1}, []Request{
		{Timestamp: 2, Pages: []uint64{3}}, {Timestamp: 1, Pages: []uint64{1, 2}}, {Timestamp: 3, Pages: []uint64{1, 2}},
	})
	if err != nil || r.L1HitPages != 2 || r.TotalInputPages != 5 || r.L1Evictions != 1 || r.DPages != 2 || r.Policy != Belady {
		t.Errorf("Run(belady) = %+v, %v", r, err)
	}
}
