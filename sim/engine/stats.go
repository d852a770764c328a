package engine

import (
	"cmp"
	"math"
	"slices"
)

// Stats accumulates, request by request and token by token, what
// [Summarize] needs, so that a run can report its exact summary without
// keeping every request's record or every inter-token latency.
//
// It keeps three float64 numbers a finished request (TTFT, E2E and TPOT,
// in completion order: 24 bytes) and the inter-token latencies as runs of
// equal values (16 bytes a run). A decode step gives every request in the
// batch the same latency, one after another, so a run of the default
// configuration holds about one run a decode step, a few per request. The
// runs are kept in chunks of itlChunk that are never reallocated: a long
// run (a fleet interleaves its replicas' steps, so it has a run nearly
// every token) adds fresh chunks instead of copying all its runs into a
// slice twice as large, whose new pages this machine pays dearly for. The
// summary is computed from these exactly: the same sums in the same order,
// the same order statistics, bit for bit what Summarize gives for the same
// requests and latencies.
//
// The zero Stats is empty and ready to use.
type Stats struct {
	failed, completed    int64
	totalIn, totalOut    int64
	cached, cachedDev    int64
	cachedHost, cachedL3 int64
	prompt               int64
	first, last          Time
	started              bool
	ttft, e2e, tpot      []float64
	itl                  [][]latencyRun // chunks, each of capacity itlChunk but the first
	itlN                 int64
}

// itlChunk is the number of runs in a chunk of Stats' inter-token runs
// (64 KiB). The first chunk grows by append up to it, so that a short run
// allocates little.
const itlChunk = 4096

// latencyRun is n consecutive equal latencies.
type latencyRun struct {
	v float64
	n int64
}

// Add records a finished (or failed) request.
func (st *Stats) Add(r RequestResult) {
	if !st.started {
		st.started = true
		st.first, st.last = Time(math.MaxInt64), Time(math.MinInt64)
	}
	st.first = min(st.first, r.start())
	if r.Failed != "" {
		st.failed++
		return
	}
	st.last = max(st.last, r.Finish)
	st.completed++
	st.totalIn += r.PromptTokens
	st.totalOut += r.OutputTokens
	st.ttft = append(st.ttft, r.TTFT().Milliseconds())
	st.e2e = append(st.e2e, r.E2E().Milliseconds())
	if r.OutputTokens > 1 {
		st.tpot = append(st.tpot, (r.E2E()-r.TTFT()).Milliseconds()/float64(r.OutputTokens-1))
	}
	st.cached += r.CachedTokens
	st.cachedDev += r.CachedDevice
	st.cachedHost += r.CachedHost
	st.cachedL3 += r.CachedStorage
	st.prompt += r.PromptTokens
}

// AddITL records one inter-token latency in milliseconds.
func (st *Stats) AddITL(ms float64) {
	st.itlN++
	c := len(st.itl) - 1
	if c >= 0 {
		if n := len(st.itl[c]); n > 0 && st.itl[c][n-1].v == ms {
			st.itl[c][n-1].n++
			return
		}
	}
	if c < 0 || len(st.itl[c]) == itlChunk {
		st.itl = append(st.itl, nil)
		c++
		if c > 0 {
			st.itl[c] = make([]latencyRun, 0, itlChunk)
		}
	}
	st.itl[c] = append(st.itl[c], latencyRun{v: ms, n: 1})
}

// Summary returns the metric set over what was added, as Summarize does.
func (st *Stats) Summary() Summary {
	var s Summary
	s.Failed = st.failed
	s.Completed = st.completed
	if s.Completed == 0 {
		return s
	}
	s.TotalInput, s.TotalOutput = st.totalIn, st.totalOut
	s.setRates((st.last - st.first).Seconds(), st.e2e)
	s.MeanTTFT, s.MedianTTFT, s.StdTTFT, s.P90TTFT, s.P99TTFT = dist(st.ttft)
	s.MeanTPOT, s.MedianTPOT, s.StdTPOT, s.P90TPOT, s.P99TPOT = dist(st.tpot)
	s.MeanITL, s.MedianITL, s.StdITL, s.P90ITL, s.P99ITL = distRuns(slices.Concat(st.itl...), st.itlN)
	s.MeanE2E, s.MedianE2E, s.StdE2E, s.P90E2E, s.P99E2E = dist(st.e2e)
	if st.prompt > 0 {
		s.CacheHitRate = float64(st.cached) / float64(st.prompt)
		s.DeviceHitRate = float64(st.cachedDev) / float64(st.prompt)
		s.HostHitRate = float64(st.cachedHost) / float64(st.prompt)
		s.StorageHitRate = float64(st.cachedL3) / float64(st.prompt)
	}
	return s
}

// setRates sets s's duration to dur seconds and, when it is positive, the
// throughputs of s's counts over it and the mean concurrency of the
// completed requests, whose E2E latencies in ms are e2e.
func (s *Summary) setRates(dur float64, e2e []float64) {
	s.Duration = dur
	s.SimulatedSec = dur
	if dur > 0 {
		s.RequestThroughput = float64(s.Completed) / dur
		s.InputThroughput = float64(s.TotalInput) / dur
		s.OutputThroughput = float64(s.TotalOutput) / dur
		s.TotalThroughput = float64(s.TotalInput+s.TotalOutput) / dur
		s.Concurrency = sumF(e2e) / 1e3 / dur
	}
}

// distRuns is dist over the n values the runs hold, computed without
// expanding them: the runs are sorted by value in place, the mean is
// gonum's sum (see sumSorted) over the sorted values divided by n, the
// population standard deviation gonum's corrected two-pass formula in the
// same order, and the percentiles pick the same order statistics.
func distRuns(runs []latencyRun, n int64) (mean, median, std, p90, p99 float64) {
	if n == 0 {
		return 0, 0, 0, 0, 0
	}
	slices.SortFunc(runs, func(a, b latencyRun) int { return cmp.Compare(a.v, b.v) })
	sorted := runs
	mean = sumSorted(sorted, n) / float64(n)
	var ss, comp float64
	for _, r := range sorted {
		for range r.n {
			d := r.v - mean
			ss += d * d
			comp += d
		}
	}
	std = math.Sqrt((ss - comp*comp/float64(n)) / float64(n))
	return mean, percentileRuns(sorted, n, 50), std, percentileRuns(sorted, n, 90), percentileRuns(sorted, n, 99)
}

// percentileRuns is Percentile over the n sorted values the runs hold.
func percentileRuns(sorted []latencyRun, n int64, p float64) float64 {
	h := (float64(n) - 1) * p / 100
	lo := math.Floor(h)
	i := int64(lo)
	if i >= n-1 {
		return sorted[len(sorted)-1].v
	}
	at := func(k int64) float64 {
		for _, r := range sorted {
			if k < r.n {
				return r.v
			}
			k -= r.n
		}
		panic("engine: rank past the runs")
	}
	x, y := at(i), at(i+1)
	return x + (h-lo)*(y-x)
}

// runCursor yields the values the runs hold, in order.
type runCursor struct {
	runs []latencyRun
	i    int
	left int64
}

func (c *runCursor) next() float64 {
	for c.left == 0 {
		c.left = c.runs[c.i].n
		c.i++
	}
	c.left--
	return c.runs[c.i-1].v
}
