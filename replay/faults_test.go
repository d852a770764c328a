package replay

import (
	"cmp"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/kvsim/kvsim/replay/replaytest"
	"github.com/kvsim/kvsim/traces"
)

// TestFaultSuite replays 24 requests, 4 at a time with a 0.4 s timeout,
// against a fake server that misbehaves in one way per case, on both
// APIs. For every case: every request is accounted for (sent = completed +
// failed, failures by the expected reason, each with a detail), nothing
// outlives the timeout, the client's memory stays bounded, and requests
// that met a connection the server had closed are resent, not lost. Run
// under -race by make faults.
func TestFaultSuite(t *testing.T) {
	const n = 24
	recs := make([]traces.Record, n)
	for i := range recs {
		toks := make([]int32, 64)
		for j := range toks {
			toks[j] = int32(1000 + (i*64+j)%5000)
		}
		recs[i] = traces.Record{ID: string(rune('a'+i%26)) + strconv.Itoa(i), InputLen: len(toks), Tokens: toks, OutputLen: 4}
	}
	for _, tc := range []struct {
		name    string
		fault   replaytest.Fault
		gap     time.Duration // between sends (idle-timeout cases)
		reason  string        // the failure reason of the failed ones ("" none)
		failed  int           // how many fail
		detail  string        // in every failure's detail
		retried bool          // some requests were resent
		timeout time.Duration // per request (default 0.4 s)
	}{
		{name: "close after every stream (llama-server)", fault: replaytest.Fault{DropAfter: 1}, retried: true},
		{name: "close after 3 requests", fault: replaytest.Fault{DropAfter: 3}, retried: true},
		{name: "idle timeout", fault: replaytest.Fault{IdleTimeout: 20 * time.Millisecond}, gap: 25 * time.Millisecond},
		{name: "500 every 3rd", fault: replaytest.Fault{Status: 500, Every: 3}, reason: "http 500", failed: n / 3, detail: "fault: status 500"},
		{name: "429 with Retry-After", fault: replaytest.Fault{Status: 429, Every: 2, RetryAfter: "7"}, reason: "http 429", failed: n / 2, detail: "(Retry-After: 7)"},
		{name: "503 without Retry-After", fault: replaytest.Fault{Status: 503}, reason: "http 503", failed: n, detail: "fault: status 503"},
		{name: "stream cut", fault: replaytest.Fault{CutAfter: 2}, reason: "stream cut", failed: n},
		{name: "malformed SSE line", fault: replaytest.Fault{Malformed: "garbage without a field"}, reason: "malformed event", failed: n, detail: "not an SSE data line"},
		{name: "malformed JSON", fault: replaytest.Fault{Malformed: "data: {\"text\": tru"}, reason: "malformed event", failed: n, detail: "{\"text\": tru"},
		{name: "stall before headers", fault: replaytest.Fault{StallHeaders: time.Minute}, reason: "timeout", failed: n},
		{name: "stall mid-stream", fault: replaytest.Fault{StallStream: time.Minute}, reason: "timeout", failed: n},
		{name: "64 MiB event", fault: replaytest.Fault{HugeEvent: 64 << 20}, reason: "malformed event", failed: n, detail: "longer than 4 MiB", timeout: 10 * time.Second},
	} {
		for _, api := range []API{APISGLang, APIOpenAI} {
			t.Run(tc.name+"/"+api.String(), func(t *testing.T) {
				if testing.Short() && (tc.fault.HugeEvent > 0 || tc.fault.StallHeaders > 0 || tc.fault.StallStream > 0) {
					t.Skip("slow case")
				}
				srv := replaytest.NewServer(replaytest.Config{Fault: tc.fault})
				defer srv.Close()
				cfg := Default()
				cfg.MaxConcurrency, cfg.Timeout = 4, cmp.Or(tc.timeout, 400*time.Millisecond)
				if tc.gap > 0 {
					cfg.Pacing, cfg.Rate, cfg.Distribution = PaceRate, float64(time.Second/tc.gap), DistUniform
					cfg.MaxConcurrency = 1
				}
				tg, err := NewHTTPTarget(HTTPConfig{BaseURL: srv.URL, API: api, Model: "fake-model"}, WallClock{})
				if err != nil {
					t.Fatal(err)
				}
				defer tg.CloseIdle()
				r := newWallRunner(t, cfg, tg)
				runtime.GC()
				peak := heapPeak()
				start := time.Now()
				res, err := r.Run(t.Context(), recs)
				if err != nil {
					t.Fatal(err)
				}
				took := time.Since(start)
				s := Summarize(res.Requests)
				if s.NumPrompts != n || int64(s.Completed)+s.Failed != n {
					t.Fatalf("sent %d, completed %d, failed %d: not every request is accounted for", s.NumPrompts, s.Completed, s.Failed)
				}
				if s.Failed != int64(tc.failed) || (tc.failed > 0 && s.FailedReasons[tc.reason] != int64(tc.failed)) {
					t.Fatalf("failed %d %v, want %d x %q", s.Failed, s.FailedReasons, tc.failed, tc.reason)
				}
				for _, rr := range res.Requests {
					if rr.Failed != "" && (rr.Detail == "" && rr.Failed != "timeout" || !strings.Contains(rr.Detail, tc.detail)) {
						t.Errorf("request %s failed %q with detail %q, want it to say %q", rr.ID, rr.Failed, rr.Detail, tc.detail)
					}
				}
				if tc.retried && (s.Retried == 0 || srv.Dropped() == 0) {
					t.Errorf("no request was resent (%d dropped by the server)", srv.Dropped())
				}
				if tc.fault.DropAfter > 0 && s.Retried > srv.Dropped() {
					t.Errorf("%d requests resent but the server dropped only %d", s.Retried, srv.Dropped())
				}
				// 24 requests, 4 at a time, each bounded by the timeout.
				if limit := time.Duration(n/cfg.MaxConcurrency)*cfg.Timeout + time.Duration(n)*tc.gap + 2*time.Second; took > limit {
					t.Errorf("the run took %v, more than the timeouts allow (%v)", took, limit)
				}
				// What a request in flight may hold is bounded (a 4 MiB
				// line at most), not by what the server sends (64 MiB to
				// each of the 24).
				if p := peak(); p > 256<<20 {
					t.Errorf("the heap peaked at %d MiB during the run", p>>20)
				}
			})
		}
	}
}

// heapPeak samples the heap in use every millisecond until the returned
// function is called, which returns the largest sample.
func heapPeak() func() uint64 {
	stop, done := make(chan struct{}), make(chan uint64)
	go func() {
		var m runtime.MemStats
		var max uint64
		tick := time.NewTicker(time.Millisecond)
		defer tick.Stop()
		for {
			runtime.ReadMemStats(&m)
			if m.HeapInuse > max {
				max = m.HeapInuse
			}
			select {
			case <-tick.C:
			case <-stop:
				done <- max
				return
			}
		}
	}()
	return func() uint64 { close(stop); return <-done }
}
