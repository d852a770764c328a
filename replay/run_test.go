package replay

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/kvsim/kvsim/traces"
)

// fakeTarget serves requests in (synctest) time: ttft before the first
// token, perToken before each later one, one chunk per token.
type fakeTarget struct {
	ttft, perToken time.Duration
	fail           map[string]string // id -> reason

	mu     sync.Mutex
	sends  map[string]time.Time
	order  []string
	inFly  int
	maxFly int
}

func (f *fakeTarget) Submit(ctx context.Context, req Request, sink Sink) (Response, error) {
	f.mu.Lock()
	if f.sends == nil {
		f.sends = map[string]time.Time{}
	}
	f.sends[req.ID] = time.Now()
	f.order = append(f.order, req.ID)
	f.inFly++
	f.maxFly = max(f.maxFly, f.inFly)
	f.mu.Unlock()
	defer func() { f.mu.Lock(); f.inFly--; f.mu.Unlock() }()
	resp := Response{PromptTokens: len(req.Tokens), CachedTokens: len(req.Tokens) / 2}
	if r := f.fail[req.ID]; r != "" {
		resp.End = time.Now()
		return resp, &RequestError{Reason: r}
	}
	for k := 1; k <= req.MaxNewTokens; k++ {
		d := f.perToken
		if k == 1 {
			d = f.ttft
		}
		if err := (WallClock{}).SleepUntil(ctx, time.Now().Add(d)); err != nil {
			resp.End = time.Now()
			return resp, &RequestError{Reason: "canceled", Err: err}
		}
		sink.Chunk(time.Now(), k)
		resp.CompletionTokens = k
	}
	resp.End = time.Now()
	return resp, nil
}

func (f *fakeTarget) sentAt(id string, t0 time.Time) time.Duration {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.sends[id].Sub(t0)
}

func rec(id string, arrivalMs int64, in, out int) traces.Record {
	return traces.Record{ID: id, Arrival: arrivalMs * 1e6, InputLen: in, OutputLen: out}
}

func TestRecorderSpreadsChunkGaps(t *testing.T) {
	t0 := time.Unix(0, 0)
	ms := func(x int) time.Time { return t0.Add(time.Duration(x) * time.Millisecond) }
	var r recorder
	r.Chunk(ms(5), 1)  // first token: TTFT
	r.Chunk(ms(10), 1) // no new token: ignored
	r.Chunk(ms(35), 3) // two tokens over 30 ms since the first chunk
	r.Chunk(ms(45), 4)
	want := []int64{15e6, 15e6, 10e6}
	if !slices.Equal(r.itl, want) || !r.first.Equal(ms(5)) || r.lastTokens != 4 {
		t.Fatalf("recorder: itl %v first %v tokens %d, want %v, 5ms, 4", r.itl, r.first.Sub(t0), r.lastTokens, want)
	}
}

func TestScheduleTimestampsAndRate(t *testing.T) {
	recs := []traces.Record{rec("a", 1000, 4, 1), rec("b", 1500, 4, 1), rec("c", 3000, 4, 1)}
	got := schedule(Config{Pacing: PaceTimestamps, Speedup: 2}, recs)
	if want := []int64{0, 250e6, 1000e6}; !slices.Equal(got, want) {
		t.Fatalf("schedule(timestamps x2) = %v, want %v", got, want)
	}
	a := schedule(Config{Pacing: PaceRate, Rate: 10, Seed: 7}, recs)
	b := schedule(Config{Pacing: PaceRate, Rate: 10, Seed: 7}, recs)
	c := schedule(Config{Pacing: PaceRate, Rate: 10, Seed: 8}, recs)
	if !slices.Equal(a, b) || slices.Equal(a, c) || a[0] != 0 || !slices.IsSorted(a) {
		t.Fatalf("schedule(rate) not seeded and sorted: %v %v %v", a, b, c)
	}
	u := schedule(Config{Pacing: PaceRate, Rate: 10, Distribution: DistUniform, Seed: 7}, recs)
	for i := 1; i < len(u); i++ {
		if gap := u[i] - u[i-1]; gap < 0 || gap >= 200e6 {
			t.Fatalf("uniform gap %d ns outside [0, 2/rate)", gap)
		}
	}
}

func TestRunPacesTimestampsDependenciesAndThinkTime(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ft := &fakeTarget{ttft: 100 * time.Millisecond, perToken: 10 * time.Millisecond}
		recs := []traces.Record{
			rec("a", 0, 8, 3),    // ends at 120 ms
			rec("b", 50, 8, 1),   // independent, at 50 ms
			rec("a2", 60, 16, 2), // waits for a (120 ms) + think 200 ms / 2
			rec("c", 2000, 8, 1), // at 1 s (speedup 2)
		}
		recs[2].Parent, recs[2].ThinkTime = "a", 200e6
		cfg := Default()
		cfg.Pacing, cfg.Speedup = PaceTimestamps, 2
		r := newWallRunner(t, cfg, ft)
		t0 := time.Now()
		res, err := r.Run(t.Context(), recs)
		if err != nil {
			t.Fatal(err)
		}
		want := map[string]time.Duration{"a": 0, "b": 25 * time.Millisecond, "a2": 220 * time.Millisecond, "c": time.Second}
		for id, w := range want {
			if got := ft.sentAt(id, t0); got != w {
				t.Errorf("%s sent at %v, want %v", id, got, w)
			}
		}
		a := res.Requests[0]
		if a.TTFT() != 100e6 || a.E2E() != 120e6 || !slices.Equal(a.ITL, []int64{10e6, 10e6}) || a.CachedTokens != 4 {
			t.Errorf("a: ttft %d e2e %d itl %v cached %d", a.TTFT(), a.E2E(), a.ITL, a.CachedTokens)
		}
		s := Summarize(res.Requests)
		if s.Completed != 4 || s.MeanLateness != 0 || s.CacheHitRate == nil || *s.CacheHitRate != 0.5 {
			t.Errorf("summary: completed %d lateness %v hit %v", s.Completed, s.MeanLateness, s.CacheHitRate)
		}
	})
}

// simultaneous returns n records due at 0 (4 prompt tokens, 2 output) and
// their ids, r0 to r(n-1).
func simultaneous(n int) ([]string, []traces.Record) {
	var ids []string
	var recs []traces.Record
	for i := range n {
		id := fmt.Sprintf("r%d", i)
		ids = append(ids, id)
		recs = append(recs, rec(id, 0, 4, 2))
	}
	return ids, recs
}

func TestRunConcurrencyCapIsFIFO(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ft := &fakeTarget{ttft: 10 * time.Millisecond, perToken: time.Millisecond}
		ids, recs := simultaneous(8)
		cfg := Default()
		cfg.MaxConcurrency = 3
		r := newWallRunner(t, cfg, ft)
		res, err := r.Run(t.Context(), recs)
		if err != nil {
			t.Fatal(err)
		}
		if ft.maxFly != 3 {
			t.Errorf("max in flight %d, want 3", ft.maxFly)
		}
		// Slots are granted in record order; requests granted at the same
		// instant race to the target, so compare batches of three.
		for i := 0; i < len(ids); i += 3 {
			got := slices.Sorted(slices.Values(ft.order[i:min(i+3, len(ids))]))
			if want := ids[i:min(i+3, len(ids))]; !slices.Equal(got, want) {
				t.Errorf("send batch %d = %v, want %v (order %v)", i/3, got, want, ft.order)
			}
		}
		s := Summarize(res.Requests)
		if s.Completed != 8 || s.MeanQueueWait <= 0 {
			t.Errorf("completed %d, mean queue wait %v", s.Completed, s.MeanQueueWait)
		}
	})
}

func TestRunRateFollowsSchedule(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ft := &fakeTarget{ttft: time.Millisecond}
		var recs []traces.Record
		for i := range 20 {
			recs = append(recs, rec(string(rune('a'+i)), 0, 4, 1))
		}
		cfg := Default()
		cfg.Pacing, cfg.Rate, cfg.Seed = PaceRate, 50, 3
		r := newWallRunner(t, cfg, ft)
		t0 := time.Now()
		if _, err := r.Run(t.Context(), recs); err != nil {
			t.Fatal(err)
		}
		sched := schedule(cfg, recs)
		for i, rc := range recs {
			if got := ft.sentAt(rc.ID, t0); got != time.Duration(sched[i]) {
				t.Fatalf("%s sent at %v, scheduled %v", rc.ID, got, time.Duration(sched[i]))
			}
		}
	})
}

func TestRunInterruptDrainsThenCancels(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ft := &fakeTarget{ttft: 10 * time.Second}
		recs := []traces.Record{rec("a", 0, 4, 1), rec("b", 100, 4, 1), rec("c", 5000, 4, 1)}
		cfg := Default()
		cfg.Pacing, cfg.Drain = PaceTimestamps, 2*time.Second
		r := newWallRunner(t, cfg, ft)
		ctx, cancel := context.WithCancel(t.Context())
		time.AfterFunc(time.Second, cancel)
		t0 := time.Now()
		res, err := r.Run(ctx, recs)
		if err != nil {
			t.Fatal(err)
		}
		if took := time.Since(t0); took != 3*time.Second {
			t.Errorf("run took %v, want 1 s + 2 s drain", took)
		}
		if !res.Interrupted {
			t.Error("not marked interrupted")
		}
		s := Summarize(res.Requests)
		if s.Failed != 2 || s.FailedReasons["interrupted"] != 2 || s.NotSent != 1 {
			t.Errorf("failed %d %v, not sent %d; want 2 interrupted, 1 not sent", s.Failed, s.FailedReasons, s.NotSent)
		}
	})
}

func TestRunTimeoutAndFailureReasons(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ft := &fakeTarget{ttft: time.Minute, fail: map[string]string{"b": "http 503"}}
		recs := []traces.Record{rec("a", 0, 4, 1), rec("b", 0, 4, 1)}
		cfg := Default()
		cfg.Timeout = 5 * time.Second
		r := newWallRunner(t, cfg, ft)
		t0 := time.Now()
		res, err := r.Run(t.Context(), recs)
		if err != nil {
			t.Fatal(err)
		}
		if took := time.Since(t0); took != 5*time.Second {
			t.Errorf("run took %v, want the 5 s timeout", took)
		}
		s := Summarize(res.Requests)
		if s.FailedReasons["timeout"] != 1 || s.FailedReasons["http 503"] != 1 || s.Completed != 0 || res.Interrupted {
			t.Errorf("reasons %v completed %d interrupted %v", s.FailedReasons, s.Completed, res.Interrupted)
		}
	})
}

func TestConfigValidateReportsEveryProblem(t *testing.T) {
	c := Config{Pacing: PaceRate, Rate: -1, Distribution: "zipf", Speedup: 0, MaxConcurrency: -2, Timeout: -1, Vocab: traces.Vocab{Lo: 5, Hi: 5}}
	err := c.Validate()
	if err == nil {
		t.Fatal("Validate() = nil")
	}
	for _, want := range []string{"rate:", "distribution:", "speedup:", "max-concurrency:", "timeout:", "vocab [5, 5)"} {
		if !contains(err.Error(), want) {
			t.Errorf("Validate() = %q, lacks %q", err, want)
		}
	}
}

func contains(s, sub string) bool { return strings.Contains(s, sub) }

// With a send gap, requests due together are sent one by one in record
// order, each at least the gap after the previous one, and the cap still
// holds.
func TestRunSendGapOrdersSimultaneousSends(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ft := &fakeTarget{ttft: 10 * time.Millisecond, perToken: time.Millisecond}
		ids, recs := simultaneous(8)
		cfg := Default()
		cfg.MaxConcurrency, cfg.SendGap = 3, 2*time.Millisecond
		r := newWallRunner(t, cfg, ft)
		t0 := time.Now()
		res, err := r.Run(t.Context(), recs)
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(ft.order, ids) || ft.maxFly != 3 {
			t.Fatalf("send order %v (max in flight %d), want %v with at most 3", ft.order, ft.maxFly, ids)
		}
		for i := 1; i < len(ids); i++ {
			if gap := ft.sentAt(ids[i], t0) - ft.sentAt(ids[i-1], t0); gap < cfg.SendGap {
				t.Errorf("%s sent %v after %s, want >= %v", ids[i], gap, ids[i-1], cfg.SendGap)
			}
		}
		// r1 and r2 wait for the gap only: 2 and 4 ms.
		if got := ft.sentAt("r2", t0); got != 4*time.Millisecond {
			t.Errorf("r2 sent at %v, want 4ms", got)
		}
		if s := Summarize(res.Requests); s.Completed != 8 {
			t.Errorf("completed %d", s.Completed)
		}
	})
}

// newWallRunner is New on the wall clock (synctest's fake one inside a
// bubble), failing the test on an error.
func newWallRunner(t testing.TB, cfg Config, target Target) *Replayer {
	t.Helper()
	r, err := New(cfg, target, WallClock{})
	if err != nil {
		t.Fatal(err)
	}
	return r
}
