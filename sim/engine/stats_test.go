package engine

import (
	"cmp"
	"maps"
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"gonum.org/v1/gonum/floats"
	"pgregory.net/rapid"
)

// summarizeSlices is Summarize as it was before Stats: every latency kept in
// a slice, sorted, and handed to gonum. Stats must match it bit for bit.
func summarizeSlices(rs []RequestResult, itls []float64) Summary {
	var s Summary
	var ttft, tpot, e2e []float64
	first, last := Time(math.MaxInt64), Time(math.MinInt64)
	var cached, cachedDev, cachedHost, cachedL3, prompt int64
	for _, r := range rs {
		first = min(first, r.start())
		if r.Failed != "" {
			s.Failed++
			continue
		}
		last = max(last, r.Finish)
		s.Completed++
		s.TotalInput += r.PromptTokens
		s.TotalOutput += r.OutputTokens
		ttft = append(ttft, r.TTFT().Milliseconds())
		e2e = append(e2e, r.E2E().Milliseconds())
		if r.OutputTokens > 1 {
			tpot = append(tpot, (r.E2E()-r.TTFT()).Milliseconds()/float64(r.OutputTokens-1))
		}
		cached += r.CachedTokens
		cachedDev += r.CachedDevice
		cachedHost += r.CachedHost
		cachedL3 += r.CachedStorage
		prompt += r.PromptTokens
	}
	if s.Completed == 0 {
		return s
	}
	// The rates and dist (sort, then gonum) are the slice implementation
	// itself; what Stats does differently is keep runs and counts.
	s.setRates((last - first).Seconds(), sumF(e2e))
	s.MeanTTFT, s.MedianTTFT, s.StdTTFT, s.P90TTFT, s.P99TTFT = dist(ttft)
	s.MeanTPOT, s.MedianTPOT, s.StdTPOT, s.P90TPOT, s.P99TPOT = dist(tpot)
	s.MeanITL, s.MedianITL, s.StdITL, s.P90ITL, s.P99ITL = dist(itls)
	s.MeanE2E, s.MedianE2E, s.StdE2E, s.P90E2E, s.P99E2E = dist(e2e)
	if prompt > 0 {
		s.CacheHitRate = float64(cached) / float64(prompt)
		s.DeviceHitRate = float64(cachedDev) / float64(prompt)
		s.HostHitRate = float64(cachedHost) / float64(prompt)
		s.StorageHitRate = float64(cachedL3) / float64(prompt)
	}
	return s
}

// drawLatencies draws latencies as a decode loop makes them: runs of equal
// values (a batch's step) of random lengths, some values recurring later.
func drawLatencies(t *rapid.T, label string) []float64 {
	var xs []float64
	steps := rapid.IntRange(0, 40).Draw(t, label+"_steps")
	for range steps {
		v := float64(rapid.Int64Range(0, 5e9).Draw(t, label+"_ns")) / 1e6
		for range rapid.IntRange(1, 70).Draw(t, label+"_batch") {
			xs = append(xs, v)
		}
	}
	return xs
}

// TestPropStatsIsSummarize checks Stats, and so Summarize, against the
// slice implementation bit for bit.
func TestPropStatsIsSummarize(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		var rs []RequestResult
		for i := range rapid.IntRange(0, 30).Draw(t, "requests") {
			arr := Time(rapid.Int64Range(0, 1e12).Draw(t, "arrival"))
			first := arr + Time(rapid.Int64Range(0, 1e11).Draw(t, "ttft"))
			r := RequestResult{
				ID: "r", Arrival: arr, Admitted: arr, FirstToken: first,
				Finish:       first + Time(rapid.Int64Range(0, 1e11).Draw(t, "decode")),
				PromptTokens: rapid.Int64Range(1, 1e5).Draw(t, "prompt"),
				OutputTokens: rapid.Int64Range(1, 600).Draw(t, "out"),
				CachedTokens: rapid.Int64Range(0, 1e5).Draw(t, "cached"),
			}
			if rapid.IntRange(0, 9).Draw(t, "failed") == 0 {
				r.Failed = "x"
			}
			_ = i
			rs = append(rs, r)
		}
		itls := drawLatencies(t, "itl")
		got, want := Summarize(rs, itls), summarizeSlices(rs, itls)
		if got != want {
			t.Fatalf("Summarize = %+v\nslices give %+v", got, want)
		}
	})
}

// TestSumSortedIsFloatsSum checks the run-wise sum against gonum's on every
// length up to a few hundred (each tail of the unrolled loop) and on long
// runs of equal and distinct values.
func TestSumSortedIsFloatsSum(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		var b bag
		var xs []float64
		for range rapid.IntRange(1, 60).Draw(t, "runs") {
			v := rapid.Float64Range(0, 1e4).Draw(t, "v")
			n := rapid.Int64Range(1, 40).Draw(t, "n")
			b.add(floatKey(v), n)
			for range n {
				xs = append(xs, v)
			}
		}
		b.flush()
		slices.Sort(xs)
		if got, want := sumSorted(&runCursor{s: newStream(bagPart{&b, keyFloat})}, int64(len(xs))), floats.Sum(xs); got != want {
			t.Fatalf("sumSorted = %v, floats.Sum = %v (n %d)", got, want, len(xs))
		}
	})
}

// TestPropBagIsSortedMultiset checks a bag against a sorted slice: keys
// added in any order, enough of them to fill several buffers and merge
// blocks (and to end with a part-full buffer), come back from a stream in
// increasing order with their counts; and the blocks stay a binary
// counter's, each over twice the next.
func TestPropBagIsSortedMultiset(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		adds := rapid.IntRange(0, 9*bagBuf+3).Draw(t, "adds")
		// Thousands of draws from rapid are slow: the keys come from a
		// generator seeded by it, some close together and repeated, some
		// anywhere in the 64 bits.
		rng := rand.New(rand.NewPCG(rapid.Uint64().Draw(t, "seed"), 0))
		wide := rapid.Bool().Draw(t, "wide")
		// Small caps on a merged block's bytes make blocks that stay apart.
		b := bag{maxBlock: rapid.SampledFrom([]int{0, 4 << 10, 40 << 10}).Draw(t, "maxBlock"), rice: rapid.Bool().Draw(t, "rice")}
		// Counts mostly small, some either side of what a count byte
		// holds (256) once equal keys combine, some far larger.
		counts := rapid.SampledFrom([]int64{3, 300, 1 << 40}).Draw(t, "counts")
		want := map[uint64]int64{}
		var total int64
		for range adds {
			k := uint64(rng.IntN(3 * bagBuf))
			if wide && rng.IntN(2) == 0 {
				k = rng.Uint64()
			}
			n := 1 + rng.Int64N(3)
			if rng.IntN(4) == 0 {
				n = 1 + rng.Int64N(counts)
			}
			b.add(k, n)
			want[k] += n
			total += n
		}
		b.flush()
		for i, blk := range b.blocks {
			// Past bagBuf entries a block was merged: within the cap.
			if blk.entries > bagBuf && len(blk.data) > cmp.Or(b.maxBlock, bagMaxBlock) {
				t.Fatalf("merged block %d has %d bytes, over the cap %d", i, len(blk.data), b.maxBlock)
			}
		}
		for i := 1; i < len(b.blocks); i++ {
			x, y := b.blocks[i-1], b.blocks[i]
			if x.entries <= 2*y.entries && len(x.data)+len(y.data) <= cmp.Or(b.maxBlock, bagMaxBlock) {
				t.Fatalf("block %d has %d entries (%d bytes), the next %d (%d bytes): not merged", i-1, x.entries, len(x.data), y.entries, len(y.data))
			}
		}
		got := map[uint64]int64{}
		s := newStream(bagPart{&b, func(k uint64) float64 { return float64(k) }})
		for _, blk := range b.blocks {
			c := blk.cursor()
			for c.next() {
				got[c.k] += c.n
			}
		}
		if !maps.Equal(got, want) || total != b.n {
			t.Fatalf("bag holds %d distinct keys (n %d), want %d (n %d)", len(got), b.n, len(want), total)
		}
		var last float64
		for i := 0; ; i++ {
			v, n, ok := s.next()
			if !ok {
				break
			}
			if n <= 0 || (i > 0 && v < last) {
				t.Fatalf("stream entry %d: %v x %d after %v", i, v, n, last)
			}
			last = v
		}
	})
}

// TestPropFloatKeysKeepOrder checks that floatKey orders values as
// sort.Float64s does and keyFloat gives each back bit for bit (a NaN as
// a NaN), and that msKey, where it applies, gives back the same bits.
func TestPropFloatKeysKeepOrder(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		draw := func(label string) float64 {
			switch rapid.IntRange(0, 3).Draw(t, label+"_kind") {
			case 0:
				return float64(rapid.Int64Range(-1e12, 1e12).Draw(t, label+"_ns")) / 1e6
			case 1:
				return math.Float64frombits(rapid.Uint64().Draw(t, label+"_bits"))
			case 2:
				return rapid.SampledFrom([]float64{0, math.Copysign(0, -1), math.Inf(1), math.Inf(-1), math.NaN()}).Draw(t, label)
			default:
				return rapid.Float64().Draw(t, label)
			}
		}
		x, y := draw("x"), draw("y")
		for _, v := range []float64{x, y} {
			back := keyFloat(floatKey(v))
			if math.IsNaN(v) != math.IsNaN(back) || (!math.IsNaN(v) && math.Float64bits(back) != math.Float64bits(v)) {
				t.Fatalf("keyFloat(floatKey(%v)) = %v", v, back)
			}
			if k, ok := msKey(v); ok && math.Float64bits(nsMs(k)) != math.Float64bits(v) {
				t.Fatalf("nsMs(msKey(%v)) = %v", v, nsMs(k))
			}
		}
		if floatLess(x, y) && floatKey(x) >= floatKey(y) {
			t.Fatalf("%v < %v but keys %#x >= %#x", x, y, floatKey(x), floatKey(y))
		}
		if kx, okx := msKey(x); okx {
			if ky, oky := msKey(y); oky && floatLess(x, y) && kx >= ky {
				t.Fatalf("%v < %v but ns keys %#x >= %#x", x, y, kx, ky)
			}
		}
	})
}

// TestPropStatsLong checks Stats against Summarize's slice result bit for
// bit over enough latencies and requests to fill several bag buffers and
// merge their blocks: runs of one to three latencies in ns (in ms, as the
// simulator makes them), some not whole ns (kept as float bits), values
// recurring.
func TestPropStatsLong(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		runs := rapid.IntRange(bagBuf-2, 5*bagBuf+2).Draw(t, "runs")
		rng := rand.New(rand.NewPCG(rapid.Uint64().Draw(t, "seed"), 0))
		var st Stats
		// A small cap on a merged block's bytes leaves several blocks apart.
		maxBlock := rapid.SampledFrom([]int{0, 8 << 10}).Draw(t, "maxBlock")
		for _, b := range []*bag{&st.ttft, &st.e2e, &st.tpot, &st.itlNs, &st.itlF} {
			b.maxBlock = maxBlock
		}
		var xs []float64
		for range runs {
			v := float64(rng.Int64N(3000)*1e5+rng.Int64N(3)) / 1e6
			if rng.IntN(8) == 0 {
				v = float64(rng.IntN(5)) / 3
			}
			for range 1 + rng.IntN(3) {
				xs = append(xs, v)
				st.AddITL(v)
			}
		}
		var rs []RequestResult
		for range rapid.IntRange(1, 3*bagBuf).Draw(t, "requests") {
			arr := Time(rng.Int64N(1e12))
			first := arr + Time(rng.Int64N(1e11))
			r := RequestResult{ID: "r", Arrival: arr, FirstToken: first, Finish: first + Time(rng.Int64N(1e11)),
				PromptTokens: 10, OutputTokens: 1 + rng.Int64N(600)}
			rs = append(rs, r)
			st.Add(r)
		}
		got, want := st.Summary(), summarizeSlices(rs, xs)
		if got != want {
			t.Fatalf("Stats.Summary = %+v\nslices give %+v", got, want)
		}
		if again := st.Summary(); again != got {
			t.Fatalf("a second Summary = %+v, the first %+v", again, got)
		}
	})
}

// BenchmarkStatsAddITL adds 2 M inter-token latencies that each start a
// run (as a fleet's interleaved replicas make them) to a fresh Stats, and
// reports the cost per latency: how much growing the runs costs.
func BenchmarkStatsAddITL(b *testing.B) {
	const n = 2 << 20
	for b.Loop() {
		var st Stats
		for i := range n {
			st.AddITL(float64(i & 1))
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/n, "ns/latency")
}

func sumF(xs []float64) float64 {
	var t float64
	for _, x := range xs {
		t += x
	}
	return t
}

// A Stats copied after use panics when used (the copy would share blocks
// that merging frees); a copy of an unused one is a fresh Stats.
func TestStatsCopiedAfterUsePanics(t *testing.T) {
	var fresh Stats
	cp := fresh
	cp.AddITL(1)
	var st Stats
	st.AddITL(1)
	moved := st
	defer func() {
		if recover() == nil {
			t.Fatal("a copied Stats was used without a panic")
		}
	}()
	moved.AddITL(2)
}

// BenchmarkStatsSummary builds the summary of a Stats holding 200,000
// requests and 1 M runs of inter-token latencies (random ns counts up to
// 300 ms, as a long run's bags hold them) and reports the cost per entry
// added: the passes over the bags' blocks.
func BenchmarkStatsSummary(b *testing.B) {
	const requests, runs = 200_000, 1 << 20
	rng := rand.New(rand.NewPCG(1, 2))
	var st Stats
	for range runs {
		v := float64(rng.Int64N(3e8)) / 1e6
		for range 1 + rng.IntN(3) {
			st.AddITL(v)
		}
	}
	for range requests {
		arr := Time(rng.Int64N(1e12))
		first := arr + Time(rng.Int64N(1e10))
		st.Add(RequestResult{ID: "r", Arrival: arr, FirstToken: first, Finish: first + Time(rng.Int64N(1e11)),
			PromptTokens: 10, OutputTokens: 1 + rng.Int64N(600)})
	}
	for b.Loop() {
		st.Summary()
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/(runs+3*requests), "ns/entry")
}
