package engine

import (
	"cmp"
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
	s.setRates((last - first).Seconds(), e2e)
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
		var runs []latencyRun
		var xs []float64
		for range rapid.IntRange(1, 60).Draw(t, "runs") {
			v := rapid.Float64Range(0, 1e4).Draw(t, "v")
			n := rapid.Int64Range(1, 40).Draw(t, "n")
			runs = append(runs, latencyRun{v: v, n: n})
			for range n {
				xs = append(xs, v)
			}
		}
		slices.SortFunc(runs, func(a, b latencyRun) int { return cmp.Compare(a.v, b.v) })
		xs = xs[:0]
		for _, r := range runs {
			for range r.n {
				xs = append(xs, r.v)
			}
		}
		if got, want := sumSorted(runs, int64(len(xs))), floats.Sum(xs); got != want {
			t.Fatalf("sumSorted = %v, floats.Sum = %v (n %d)", got, want, len(xs))
		}
	})
}

// TestPropStatsChunks checks Stats across the chunks of its inter-token
// runs: runs of one to three latencies, enough of them to fill one to three
// chunks (the boundaries, with a run continuing or not across them), give
// Summarize's slice result bit for bit, and no chunk is ever reallocated:
// every one but the first is allocated at itlChunk and stays at most that
// long.
func TestPropStatsChunks(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		runs := rapid.IntRange(itlChunk-2, 3*itlChunk+2).Draw(t, "runs")
		// Thousands of draws from rapid are slow: the values come from a
		// generator seeded by it.
		rng := rand.New(rand.NewPCG(rapid.Uint64().Draw(t, "seed"), 0))
		var st Stats
		var xs []float64
		v := 0.0
		for range runs {
			// A new value each run, from a small set so that values recur.
			v = float64((int(v) + 1 + rng.IntN(6)) % 7)
			for range 1 + rng.IntN(3) {
				xs = append(xs, v)
				st.AddITL(v)
			}
		}
		for i, c := range st.itl {
			if len(c) > itlChunk || (i > 0 && cap(c) != itlChunk) || (i < len(st.itl)-1 && len(c) != itlChunk) {
				t.Fatalf("chunk %d of %d: len %d, cap %d (chunk size %d)", i, len(st.itl), len(c), cap(c), itlChunk)
			}
		}
		if want := (runs + itlChunk - 1) / itlChunk; len(st.itl) != want {
			t.Fatalf("%d runs in %d chunks, want %d", runs, len(st.itl), want)
		}
		// One request, so that the summary is computed at all.
		r := RequestResult{ID: "r", FirstToken: 1e6, Finish: 9e6, PromptTokens: 10, OutputTokens: 5}
		st.Add(r)
		got, want := st.Summary(), summarizeSlices([]RequestResult{r}, xs)
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
