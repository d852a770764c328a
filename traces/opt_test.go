package traces

import (
	"math"
	"slices"
	"strconv"
	"testing"

	"pgregory.net/rapid"

	"github.com/kvsim/kvsim/internal/testutil"
)

// genOPTTrace draws a small trace with heavy prefix sharing (up to 30
// requests) over a small alphabet of keys from 1 upwards.
func genOPTTrace(t *rapid.T) [][]uint64 { return testutil.DrawPrefixTrace(t, 30, 5, 8, 0) }

func buildOPT(tb interface{ Fatal(...any) }, reqs [][]uint64) *OPT {
	b := NewOPTBuilder()
	for _, r := range reqs {
		if err := b.Add(r); err != nil {
			tb.Fatal(err)
		}
	}
	return b.Build()
}

// priorityStack is the brute-force one-pass twin of OPT (Mattson et al.'s
// priority stack, 1970): stack[:C] is the cache at capacity C, for every C
// at once, rebuilt after each request as "the C nearest of the old
// stack[:C] and the request's pages", position by position. It is
// O(pages^2) per request and only exists to check the inclusion property
// that makes it a stack.
type priorityStack struct {
	o     *OPT
	stack []int32 // nodes, nearest next reference first
	key   []int64 // per node: its current key
}

// step replays request r and returns, for each of its pages, the least
// capacity at which it is a hit (0 when never: not cached at any C).
func (p *priorityStack) step(r int) []int {
	o := p.o
	lo, hi := o.reqStart[r], o.reqStart[r+1]
	need := make([]int, hi-lo)
	run := 0 // running max of stack positions: a prefix hit needs all
	for i := lo; i < hi; i++ {
		at := slices.Index(p.stack, o.node[i])
		if at < 0 || run < 0 {
			run = -1
			continue
		}
		run = max(run, at+1)
		need[i-lo] = run
	}
	var req []int32
	for i := lo; i < hi; i++ {
		n := o.node[i]
		p.key[n] = int64(o.next[i])
		if o.next[i] < 0 {
			p.key[n] = optInf | int64(n)
		}
		req = append(req, n)
	}
	var out []int32
	inOut := map[int32]bool{}
	total := len(p.stack)
	for _, n := range req {
		if !slices.Contains(p.stack, n) {
			total++
		}
	}
	for c := 1; c <= total; c++ {
		// The C nearest of stack[:c] ∪ req must contain out (inclusion);
		// the new one is the nearest candidate not yet in out.
		best := int32(-1)
		cands := append(slices.Clone(p.stack[:min(c, len(p.stack))]), req...)
		for _, n := range cands {
			if !inOut[n] && (best < 0 || p.key[n] < p.key[best]) {
				best = n
			}
		}
		if best < 0 {
			break
		}
		out = append(out, best)
		inOut[best] = true
	}
	p.stack = out
	return need
}

// TestPropOPTInclusion checks the stack property: after every request, the
// cache at capacity C is a subset of the cache at C+1, and the
// per-capacity runs agree, page by page, with the one-pass priority stack
// (a page hits at C exactly when its least capacity is <= C).
func TestPropOPTInclusion(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		reqs := genOPTTrace(t)
		o := buildOPT(t, reqs)
		maxC := o.UniquePages() + 1
		runs := make([]*OPTRun, maxC+1)
		for c := range runs {
			runs[c] = o.NewRun(c)
		}
		ps := &priorityStack{o: o, key: make([]int64, o.UniquePages())}
		for r := range o.Requests() {
			need := ps.step(r)
			for c, run := range runs {
				h := run.Step()
				if err := run.Check(); err != nil {
					t.Fatalf("C=%d request %d: %v", c, r, err)
				}
				want := 0
				for i, n := range need {
					if n > 0 && n <= c {
						want = i + 1
					}
				}
				if h != want {
					t.Fatalf("C=%d request %d: %d hits, priority stack says %d (least capacities %v)", c, r, h, want, need)
				}
			}
			for c := 1; c < len(runs); c++ {
				for q := 0; q <= r; q++ {
					for i := range o.RequestPages(q) {
						if runs[c-1].Cached(q, i) && !runs[c].Cached(q, i) {
							t.Fatalf("after request %d: page %d of request %d cached at C=%d, not at C=%d", r, i, q, c-1, c)
						}
					}
				}
			}
		}
	})
}

// TestOPTHandWorked: capacity 2, requests [a b] [c] [a b] [c] [a], page
// positions 0..6. Request 2 brings c (next at 5) beside a (next at 3) and
// b (next at 4): c goes. Request 3 hits a b. Request 4 misses c, which is
// never used again, nor is b: of the two, c (created last) goes. Request 5
// hits a. Keeping c instead of b at request 2 would trade request 3's
// second hit for request 4's: 3 hits either way.
func TestOPTHandWorked(t *testing.T) {
	o := buildOPT(t, [][]uint64{{1, 2}, {3}, {1, 2}, {3}, {1}})
	run := o.NewRun(2)
	var got []int
	for !run.Done() {
		got = append(got, run.Step())
	}
	if want := []int{0, 0, 2, 0, 1}; !slices.Equal(got, want) {
		t.Fatalf("hits %v, want %v", got, want)
	}
	if res := run.Result(); res.HitPages != 3 || res.Evictions != 2 || res.Cached != 2 {
		t.Fatalf("result %+v", res)
	}
	if u := o.UniquePages(); u != 3 || o.TotalPages() != 7 {
		t.Fatalf("unique %d total %d", u, o.TotalPages())
	}
}

// TestOPTZeroCapacity: nothing is ever cached.
func TestOPTZeroCapacity(t *testing.T) {
	o := buildOPT(t, [][]uint64{{1, 2}, {1, 2}})
	if r := o.Run(0); r.HitPages != 0 || r.Evictions != 4 || r.Cached != 0 {
		t.Fatalf("%+v", r)
	}
	if r := o.Run(-3); r.HitPages != 0 {
		t.Fatalf("negative capacity: %+v", r)
	}
}

// TestPropStatsOPT: on chained-hash traces, Stats' OPT hit rate is at
// least the LRU one and at most the ideal one at every fraction, never
// decreases with the fraction, equals the ideal when every block fits, and
// is the hit rate of an OPT run at the fraction's capacity.
func TestPropStatsOPT(t *testing.T) {
	fractions := []float64{0.01, 0.1, 0.2, 0.3, 0.5, 0.75, 1}
	rapid.Check(t, func(t *rapid.T) {
		reqs := testutil.ChainKeys(genOPTTrace(t))
		var recs []Record
		for i, bl := range reqs {
			recs = append(recs, Record{ID: strconv.Itoa(i), Arrival: int64(i), InputLen: len(bl) * 16, Blocks: bl, BlockSize: 16})
		}
		d := &wekaDecoder{recs: recs}
		st, err := ComputeStats(func() (*Reader, error) { return &Reader{path: "mem", dec: d, format: FormatKVSim}, nil }, StatsOptions{Fractions: fractions})
		if err != nil {
			t.Fatal(err)
		}
		if st.TotalBlocks == 0 {
			return
		}
		o := buildOPT(t, reqs)
		prev := 0.0
		for _, f := range fractions {
			k := strconv.FormatFloat(f, 'f', -1, 64)
			got := st.OPTHitRate[k]
			if got < st.LRUHitRate[k] || got > *st.IdealHitRate || got < prev {
				t.Fatalf("fraction %s: OPT %v, LRU %v, ideal %v, OPT at the smaller fraction %v", k, got, st.LRUHitRate[k], *st.IdealHitRate, prev)
			}
			prev = got
			c := max(1, int(math.Floor(float64(st.UniqueBlocks)*f)))
			if want := float64(o.Run(c).HitPages) / float64(st.TotalBlocks); got != want {
				t.Fatalf("fraction %s: OPT %v, a run at %d pages %v", k, got, c, want)
			}
		}
		if st.OPTHitRate["1"] != *st.IdealHitRate {
			t.Fatalf("OPT with every block %v, ideal %v", st.OPTHitRate["1"], *st.IdealHitRate)
		}
	})
}

// TestPropOPTKeyRelabelling: node ids follow creation order, not key
// values, so relabelling the keys one to one builds the same OPT. The
// relabelling sends odd keys far past the builder's dense key table (to its
// edge map), keeps even ones, and adds key 0, so both halves of the trie
// index and their mix are exercised.
func TestPropOPTKeyRelabelling(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		reqs, far := testutil.RelabelFar(genOPTTrace(t), 9) // 9 is not a key of genOPTTrace
		a, b := buildOPT(t, reqs), buildOPT(t, far)
		if !slices.Equal(a.node, b.node) || !slices.Equal(a.parent, b.parent) || !slices.Equal(a.next, b.next) || !slices.Equal(a.reqStart, b.reqStart) {
			t.Fatalf("relabelled keys build another OPT:\nnodes %v\n  vs %v\nparents %v\n  vs %v", a.node, b.node, a.parent, b.parent)
		}
	})
}
