package replay

import (
	"strconv"
	"testing"
	"time"

	"github.com/kvsim/kvsim/replay/replaytest"
	"github.com/kvsim/kvsim/traces"
)

// BenchmarkReplayLoopback measures the client's sustained rate of streamed
// requests against the fake SGLang server on loopback (which shares the
// CPUs): 16-token prompts, 4 output tokens in 4 events each, 64 requests in
// flight, 1000 requests per iteration.
func BenchmarkReplayLoopback(b *testing.B) {
	_, tg := fakeServer(b, replaytest.Config{}, APISGLang)
	cfg := Default()
	cfg.MaxConcurrency = 64
	r := newWallRunner(b, cfg, tg)
	const n = 1000
	recs := make([]traces.Record, n)
	for i := range recs {
		recs[i] = traces.Record{ID: strconv.Itoa(i), InputLen: 16, OutputLen: 4}
	}
	b.ReportAllocs()
	var late float64
	total := benchReplay(b, r, recs, func(s Summary) { late = max(late, s.P99Lateness) })
	b.ReportMetric(float64(n*b.N)/total.Seconds(), "req/s")
	b.ReportMetric(late, "p99-lateness-ms")
}

// benchReplay runs r on recs at every b.Loop, each run having to complete
// every request, calls each (if not nil) with the run's summary, and
// returns the wall time the runs took.
func benchReplay(b *testing.B, r *Replayer, recs []traces.Record, each func(Summary)) time.Duration {
	b.Helper()
	var total time.Duration
	for b.Loop() {
		start := time.Now()
		res, err := r.Run(b.Context(), recs)
		if err != nil {
			b.Fatal(err)
		}
		total += time.Since(start)
		s := Summarize(res.Requests)
		if s.Completed != int64(len(recs)) {
			b.Fatalf("completed %d of %d: %v", s.Completed, len(recs), s.FailedReasons)
		}
		if each != nil {
			each(s)
		}
	}
	return total
}
