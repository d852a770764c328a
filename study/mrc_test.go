package study

import (
	"bytes"
	"io"
	"math"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"

	"pgregory.net/rapid"

	"github.com/kvsim/kvsim/internal/testutil"

	"github.com/kvsim/kvsim/traces"
)

// The miss-ratio curve agrees with traces.Stats' LRU hit rates (the same
// cache model, computed by simulating each LRU) on a Mooncake sample and
// the tiny token trace.
func TestMRCMatchesTraceStats(t *testing.T) {
	for _, path := range []string{"../cmd/kvsim/testdata/trace/mooncake.jsonl", "testdata/tiny_chat.jsonl"} {
		rd, err := traces.Open(path, traces.FormatAuto)
		if err != nil {
			t.Fatal(err)
		}
		c, err := computeMRC(rd)
		rd.Close()
		if err != nil {
			t.Fatal(err)
		}
		st, err := traces.ComputeStats(func() (*traces.Reader, error) { return traces.Open(path, traces.FormatAuto) }, traces.StatsOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if int64(st.UniqueBlocks) != c.unique {
			t.Errorf("%s: unique blocks %d, stats %d", path, c.unique, st.UniqueBlocks)
		}
		for _, f := range traces.DefaultLRUFractions {
			capacity := max(1, int64(math.Floor(float64(st.UniqueBlocks)*f)))
			_, blocks := c.hitRate(capacity)
			want, found := st.LRUHitRate[strconv.FormatFloat(f, 'f', -1, 64)]
			if !found {
				t.Fatalf("%s: stats have no LRU rate for %v: %v", path, f, st.LRUHitRate)
			}
			if math.Abs(blocks-want) > 1e-9 {
				t.Errorf("%s: LRU hit rate at %v of unique blocks (%d) = %v, stats say %v", path, f, capacity, blocks, want)
			}
		}
	}
}

// A brute-force LRU per capacity gives the curve's hit rates on random
// block streams (prefix semantics, duplicate blocks within a request).
func TestPropMRCMatchesBruteForceLRU(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		reqs, inputs := drawBlocks(t, 12, "blocks")
		c := blocksMRC(t, reqs, inputs)
		capacity := rapid.Int64Range(1, 14).Draw(t, "capacity")
		// Brute force: a slice, most recent first.
		var lru []uint64
		var hits, total float64
		for _, bl := range reqs {
			k := 0
			for k < len(bl) && slices.Contains(lru, bl[k]) {
				k++
			}
			hits += float64(k)
			total += float64(len(bl))
			for _, x := range bl {
				if i := slices.Index(lru, x); i >= 0 {
					lru = slices.Delete(lru, i, i+1)
				}
				lru = slices.Insert(lru, 0, x)
				if int64(len(lru)) > capacity {
					lru = lru[:capacity]
				}
			}
		}
		if _, got := c.hitRate(capacity); math.Abs(got-hits/total) > 1e-12 {
			t.Fatalf("capacity %d: curve hit rate %v, brute force %v", capacity, got, hits/total)
		}
	})
}

// drawBlocks draws 1 to 25 requests of 1 to 8 blocks of keys 1 to maxKey
// (named label), each with a prompt of 1 to 4 tokens in its last block of
// 4.
func drawBlocks(t *rapid.T, maxKey uint64, label string) (reqs [][]uint64, inputs []int) {
	for range rapid.IntRange(1, 25).Draw(t, "requests") {
		bl := rapid.SliceOfN(rapid.Uint64Range(1, maxKey), 1, 8).Draw(t, label)
		reqs = append(reqs, bl)
		inputs = append(inputs, 4*len(bl)-rapid.IntRange(0, 3).Draw(t, "short"))
	}
	return reqs, inputs
}

// blocksMRC computes the miss-ratio curve of a kvsim trace (block size 4)
// whose request i, arriving at i ns, has the blocks reqs[i] and
// inputs[i] prompt tokens.
func blocksMRC(t *rapid.T, reqs [][]uint64, inputs []int) *mrcCurve {
	var b bytes.Buffer
	b.WriteString(`{"kvsim_trace":1,"block_size":4}` + "\n")
	for i, bl := range reqs {
		b.WriteString(`{"id":"r` + itoa(i) + `","arrival_ns":` + itoa(i) + `,"input_len":` + itoa(inputs[i]) + `,"output_len":1,"block_size":4,"blocks":[`)
		for j, x := range bl {
			if j > 0 {
				b.WriteString(",")
			}
			b.WriteString(itoa(int(x)))
		}
		b.WriteString("]}\n")
	}
	rd, err := traces.NewReader(&b, "prop.jsonl", traces.FormatAuto)
	if err != nil {
		t.Fatal(err)
	}
	c, err := computeMRC(rd)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func itoa(i int) string { return formatValue(int64(i)) }

// TestPropMRCOPT: on random chained-hash traces (block ids equal exactly
// when prefixes are equal), the OPT column of the curve is one OPT replay
// per capacity, token-weighted as the LRU curve is; block-weighted it is
// never below LRU; and it never rises with capacity.
func TestPropMRCOPT(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		raw, inputs := drawBlocks(t, 4, "keys")
		reqs := testutil.ChainKeys(raw)
		c := blocksMRC(t, reqs, inputs)
		ob := traces.NewOPTBuilder()
		for _, bl := range reqs {
			if err := ob.Add(bl); err != nil {
				t.Fatal(err)
			}
		}
		o := ob.Build()
		pts := c.points(mrcPoints, 2)
		prev := math.Inf(1)
		for _, p := range pts {
			if math.IsNaN(p.OPTMissRatio) {
				continue
			}
			capacity := p.CapacityTokens / 4
			run := o.NewRun(int(capacity))
			var tok, total float64
			for i := 0; !run.Done(); i++ {
				tok += float64(min(4*run.Step(), inputs[i]))
				total += float64(inputs[i])
			}
			if want := 1 - tok/total; math.Abs(p.OPTMissRatio-want) > 1e-12 {
				t.Fatalf("capacity %d: OPT miss %v, a replay %v", capacity, p.OPTMissRatio, want)
			}
			if _, lruBlocks := c.hitRate(capacity); float64(run.Result().HitPages)/c.totalBlocks < lruBlocks {
				t.Fatalf("capacity %d: OPT block hit rate %v < LRU %v", capacity, float64(run.Result().HitPages)/c.totalBlocks, lruBlocks)
			}
			if p.OPTMissRatio > prev+1e-12 {
				t.Fatalf("capacity %d: OPT miss %v rises from %v", capacity, p.OPTMissRatio, prev)
			}
			prev = p.OPTMissRatio
		}
		if math.IsNaN(pts[len(pts)-1].OPTMissRatio) {
			t.Fatalf("no OPT figure at the largest capacity")
		}
	})
}

// TestMRCReadsOldAndNewCSV: mrc.csv with and without the OPT column.
func TestMRCReadsOldAndNewCSV(t *testing.T) {
	dir := t.TempDir()
	for _, c := range []struct {
		csv     string
		opt     []bool
		wantErr string
	}{
		{"# n\ncapacity_tokens,miss_ratio\n16,0.5\n32,0.4\n", []bool{false, false}, ""},
		{"# n\ncapacity_tokens,miss_ratio,opt_miss_ratio\n16,0.5,0.3\n32,0.4,\n", []bool{true, false}, ""},
		{"# n\ncapacity_tokens,miss_ratio,opt_miss_ratio\n16,0.5,x\n", nil, "mrc.csv:3: bad line"},
		{"# n\ncapacity_tokens,miss_ratio,opt_miss_ratio\n16,0.5,0.1,2\n", nil, "expected capacity_tokens,miss_ratio[,opt_miss_ratio]"},
	} {
		if err := writeAtomic(dir+"/"+MRCFile, func(w io.Writer) error { _, err := io.WriteString(w, c.csv); return err }); err != nil {
			t.Fatal(err)
		}
		pts, note, err := readMRC(dir)
		if c.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), c.wantErr) {
				t.Errorf("%q: err %v, want %q", c.csv, err, c.wantErr)
			}
			continue
		}
		if err != nil || note != "n" || len(pts) != len(c.opt) {
			t.Fatalf("%q: %v %q %v", c.csv, pts, note, err)
		}
		for i, has := range c.opt {
			if has == math.IsNaN(pts[i].OPTMissRatio) {
				t.Errorf("%q: point %d: OPT %v", c.csv, i, pts[i].OPTMissRatio)
			}
		}
	}
}

// TestMRCConversationOPT checks the bundled conversation trace's curve: at
// least 20 OPT capacities, OPT never above LRU there, and the pinned
// figure at the capacity of 5% of the unique blocks (9,139 blocks): the
// optimum reaches the unbounded cache's hit rate.
func TestMRCConversationOPT(t *testing.T) {
	c := conversationMRC(t)
	pts := c.points(mrcPoints, runtime.GOMAXPROCS(0))
	n := 0
	for _, p := range pts {
		if math.IsNaN(p.OPTMissRatio) {
			continue
		}
		n++
		if p.OPTMissRatio > p.MissRatio+1e-9 {
			t.Errorf("%d tokens: OPT miss %v > LRU %v", p.CapacityTokens, p.OPTMissRatio, p.MissRatio)
		}
	}
	if n < 20 {
		t.Errorf("%d OPT capacities, want >= 20", n)
	}
	if got := c.opt.Run(9139).HitPages; got != 105710 {
		t.Errorf("OPT hit blocks at 9139 = %d, want 105710 (sim/policy/testdata/belady_mooncake_conversation.golden)", got)
	}
}

func conversationMRC(tb testing.TB) *mrcCurve {
	tb.Helper()
	rd, err := traces.Open("../configs/traces/mooncake_conversation.jsonl.zst", traces.FormatAuto)
	if err != nil {
		tb.Fatal(err)
	}
	defer rd.Close()
	c, err := computeMRC(rd)
	if err != nil {
		tb.Fatal(err)
	}
	return c
}

// BenchmarkMRCConversation computes the bundled conversation trace's
// curve as writeMRC does: LRU stack distances, then OPT at about 40
// capacities on GOMAXPROCS goroutines.
func BenchmarkMRCConversation(b *testing.B) {
	for b.Loop() {
		c := conversationMRC(b)
		pts := c.points(mrcPoints, runtime.GOMAXPROCS(0))
		if len(pts) == 0 {
			b.Fatal("no points")
		}
	}
}

// hitRate returns the token- and block-weighted hit rates of an LRU of
// capacity blocks.
func (c *mrcCurve) hitRate(capacity int64) (tokens, blocks float64) {
	var t, b float64
	for i, k := range c.need {
		if k > capacity {
			break
		}
		t += c.tokens[i]
		b += c.blocks[i]
	}
	if c.totalTokens > 0 {
		tokens = t / c.totalTokens
	}
	if c.totalBlocks > 0 {
		blocks = b / c.totalBlocks
	}
	return tokens, blocks
}
