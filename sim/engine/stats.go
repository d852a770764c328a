package engine

import "math"

// Stats accumulates, request by request and token by token, what
// [Summarize] needs, so that a run can report its exact summary without
// keeping every request's record or every inter-token latency.
//
// It keeps each finished request's TTFT and E2E (as ns counts) and TPOT
// (as a float64's bits), and the inter-token latencies as runs of equal
// values (a decode step gives every request in the batch the same latency,
// one after another), each in a bag: a multiset kept sorted in compressed
// blocks (see bag; Rice codes for TTFT, E2E and TPOT, whose gaps are
// near-geometric): on the 24-times conversation trace 3.2 bytes a
// distinct TTFT, 3.1 an E2E, 5.0 a TPOT and 2.4 a distinct latency with
// its count, 15 bytes a finished request in all. A latency
// whose value is a whole number of ns in ms (the simulators' and replays'
// are) is kept as that count; any other as its float64's bits. The sum of
// the E2E latencies that the concurrency needs is kept in completion
// order. The summary is computed from these exactly: the same sums in the
// same order, the same order statistics, bit for bit what Summarize gives
// for the same requests and latencies (a NaN's payload is not kept: every
// NaN is math.NaN(); and -0 sorts before +0, which sort.Float64s leaves in
// input order).
//
// The zero Stats is empty and ready to use. A Stats must not be copied
// after its first use (that panics).
type Stats struct {
	failed, completed    int64
	totalIn, totalOut    int64
	cached, cachedDev    int64
	cachedHost, cachedL3 int64
	prompt               int64
	first, last          Time
	started              bool
	e2eSum               float64 // the E2E latencies in ms, added in completion order
	ttft, e2e            bag     // nsKey of each finished request's
	tpot                 bag     // floatKey of each finished request's with over one output token
	itlNs, itlF          bag     // the latency runs: msKey where there is one, else floatKey
	runV                 float64 // the latest run of latencies, not yet in a bag: runN of runV
	runN                 int64
	itlN                 int64
	// self is the Stats at its first use: a copy of a used Stats would
	// share its bags' blocks, which merging frees, so using one panics.
	self *Stats
}

// use panics if st is a copy of a Stats used before (as strings.Builder does).
func (st *Stats) use() {
	if st.self == nil {
		st.self = st
		st.ttft.rice, st.e2e.rice, st.tpot.rice = true, true, true
	} else if st.self != st {
		panic("engine: a Stats copied after use")
	}
}

// Add records a finished (or failed) request.
func (st *Stats) Add(r RequestResult) {
	st.use()
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
	st.ttft.add(nsKey(r.TTFT()), 1)
	st.e2e.add(nsKey(r.E2E()), 1)
	st.e2eSum += r.E2E().Milliseconds()
	if r.OutputTokens > 1 {
		st.tpot.add(floatKey((r.E2E()-r.TTFT()).Milliseconds()/float64(r.OutputTokens-1)), 1)
	}
	st.cached += r.CachedTokens
	st.cachedDev += r.CachedDevice
	st.cachedHost += r.CachedHost
	st.cachedL3 += r.CachedStorage
	st.prompt += r.PromptTokens
}

// AddITL records one inter-token latency in milliseconds.
func (st *Stats) AddITL(ms float64) {
	st.use()
	st.itlN++
	if st.runN > 0 && math.Float64bits(ms) == math.Float64bits(st.runV) {
		st.runN++
		return
	}
	st.flushRun()
	st.runV, st.runN = ms, 1
}

// flushRun moves the latest run of latencies into its bag.
func (st *Stats) flushRun() {
	if st.runN == 0 {
		return
	}
	if k, ok := msKey(st.runV); ok {
		st.itlNs.add(k, st.runN)
	} else {
		st.itlF.add(floatKey(st.runV), st.runN)
	}
	st.runN = 0
}

// Summary returns the metric set over what was added, as Summarize does.
func (st *Stats) Summary() Summary {
	st.use()
	var s Summary
	s.Failed = st.failed
	s.Completed = st.completed
	if s.Completed == 0 {
		return s
	}
	st.flushRun()
	for _, b := range []*bag{&st.ttft, &st.e2e, &st.tpot, &st.itlNs, &st.itlF} {
		b.flush()
	}
	s.TotalInput, s.TotalOutput = st.totalIn, st.totalOut
	s.setRates((st.last - st.first).Seconds(), st.e2eSum)
	s.MeanTTFT, s.MedianTTFT, s.StdTTFT, s.P90TTFT, s.P99TTFT = distStream(newStream(bagPart{&st.ttft, nsMs}), st.ttft.n)
	s.MeanTPOT, s.MedianTPOT, s.StdTPOT, s.P90TPOT, s.P99TPOT = distStream(newStream(bagPart{&st.tpot, keyFloat}), st.tpot.n)
	s.MeanITL, s.MedianITL, s.StdITL, s.P90ITL, s.P99ITL = distStream(newStream(bagPart{&st.itlNs, nsMs}, bagPart{&st.itlF, keyFloat}), st.itlN)
	s.MeanE2E, s.MedianE2E, s.StdE2E, s.P90E2E, s.P99E2E = distStream(newStream(bagPart{&st.e2e, nsMs}), st.e2e.n)
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
// completed requests, whose E2E latencies in ms sum to e2eSum.
func (s *Summary) setRates(dur, e2eSum float64) {
	s.Duration = dur
	s.SimulatedSec = dur
	if dur > 0 {
		s.RequestThroughput = float64(s.Completed) / dur
		s.InputThroughput = float64(s.TotalInput) / dur
		s.OutputThroughput = float64(s.TotalOutput) / dur
		s.TotalThroughput = float64(s.TotalInput+s.TotalOutput) / dur
		s.Concurrency = e2eSum / 1e3 / dur
	}
}

// distStream is dist over the n values s yields, computed without
// expanding them: the mean is gonum's sum (see sumSorted) over the sorted
// values divided by n, the population standard deviation gonum's corrected
// two-pass formula in the same order, and the percentiles pick the same
// order statistics, read in the standard deviation's pass: two passes over
// the values in all.
func distStream(s *valueStream, n int64) (mean, median, std, p90, p99 float64) {
	if n == 0 {
		return 0, 0, 0, 0, 0
	}
	mean = sumSorted(&runCursor{s: s}, n) / float64(n)
	s.reset()
	pct := [3]float64{50, 90, 99}
	var ranks [6]int64 // the two order statistics each percentile reads
	for j, p := range pct {
		ranks[2*j], ranks[2*j+1] = percentileRanks(n, p)
	}
	var vals [6]float64
	var ss, comp float64
	var at int64 // the rank of the entry's first value
	for {
		v, k, ok := s.next()
		if !ok {
			break
		}
		for j, r := range ranks {
			if r >= at && r < at+k {
				vals[j] = v
			}
		}
		at += k
		for range k {
			d := v - mean
			ss += d * d
			comp += d
		}
	}
	if at != n {
		panic("engine: stream length differs from its count")
	}
	std = math.Sqrt((ss - comp*comp/float64(n)) / float64(n))
	var q [3]float64
	for j, p := range pct {
		q[j] = interpolate(n, p, vals[2*j], vals[2*j+1])
	}
	return mean, q[0], std, q[1], q[2]
}

// percentileRanks returns the ranks (from 0) of the two order statistics
// that Percentile p of n sorted values interpolates between (the same one
// twice at the top).
func percentileRanks(n int64, p float64) (lo, hi int64) {
	i := int64(math.Floor((float64(n) - 1) * p / 100))
	if i >= n-1 {
		return n - 1, n - 1
	}
	return i, i + 1
}

// interpolate is Percentile p of n sorted values given the values x and y
// of the ranks percentileRanks returns.
func interpolate(n int64, p float64, x, y float64) float64 {
	h := (float64(n) - 1) * p / 100
	lo := math.Floor(h)
	if int64(lo) >= n-1 {
		return x
	}
	return x + (h-lo)*(y-x)
}

// runCursor yields the values a stream holds, one at a time, in order.
type runCursor struct {
	s    *valueStream
	v    float64
	left int64
}

func (c *runCursor) next() float64 {
	for c.left == 0 {
		var ok bool
		c.v, c.left, ok = c.s.next()
		if !ok {
			panic("engine: value past the stream")
		}
	}
	c.left--
	return c.v
}
