package sim

import (
	"fmt"
	"math"
	"reflect"
	"strings"
	"testing"

	"github.com/kvsim/kvsim/internal/testutil"
	"github.com/kvsim/kvsim/sim/engine"
	"github.com/kvsim/kvsim/sim/hw"
	"github.com/kvsim/kvsim/traces"
)

// linearCost is a cost model simple enough to compute by hand: a prefill
// forward costs 1 ms + 1 µs per new token, a decode step 10 ms + 1 ns per
// context token.
type linearCost struct{}

func (linearCost) PrefillTime(b []hw.Extend) int64 {
	t := int64(1e6)
	for _, e := range b {
		t += 1000 * e.New
	}
	return t
}

func (linearCost) DecodeTime(bs int, ctx int64) int64 { return 10e6 + ctx }

func tokens(n int, base int32) []int32 {
	t := make([]int32, n)
	for i := range t {
		t[i] = base + int32(i)
	}
	return t
}

func rec(id string, at int64, prompt []int32, out int) traces.Record {
	return traces.Record{ID: id, Arrival: at, InputLen: len(prompt), Tokens: prompt, OutputLen: out}
}

// runSim runs recs through a new simulator of cfg with the linear cost.
func runSim(t testutil.TB, cfg Config, recs ...traces.Record) *engine.Result {
	t.Helper()
	_, res := simulate(t, cfg, (*Sim).Run, recs)
	return res
}

// simulate runs recs through a new simulator of cfg with the linear cost,
// by run ((*Sim).Run or (*Sim).RunClosedLoop), and returns the simulator
// with its result.
func simulate(t testutil.TB, cfg Config, run func(*Sim, engine.Source) (*engine.Result, error), recs []traces.Record) (*Sim, *engine.Result) {
	t.Helper()
	s, err := New(cfg, linearCost{})
	if err != nil {
		t.Fatal(err)
	}
	res, err := run(s, engine.NewSliceSource(recs))
	if err != nil {
		t.Fatal(err)
	}
	return s, res
}

func byID(res *engine.Result) map[string]engine.RequestResult {
	m := map[string]engine.RequestResult{}
	for _, r := range res.Requests {
		m[r.ID] = r
	}
	return m
}

func TestSingleRequestTiming(t *testing.T) {
	res := runSim(t, Default(10000), rec("a", 0, tokens(100, 1), 4))
	r := res.Requests[0]
	// Prefill: 1 ms + 100 µs. Then 3 decode steps of 10 ms + context
	// (101, 102, 103 tokens of KV) ns.
	if got, want := r.TTFT(), engine.Time(1_100_000); got != want {
		t.Fatalf("TTFT = %d, want %d", got, want)
	}
	if got, want := r.E2E(), engine.Time(1_100_000+3*10_000_000+101+102+103); got != want {
		t.Fatalf("E2E = %d, want %d", got, want)
	}
	if r.CachedTokens != 0 || r.OutputTokens != 4 {
		t.Fatalf("result %+v", r)
	}
}

// A second request that shares a prefix hits it on the device: SGLang
// matches at most prompt-1 tokens, page-aligned.
func TestSharedPrefixHits(t *testing.T) {
	shared := tokens(64, 1)
	a := append(append([]int32{}, shared...), tokens(10, 500)...)
	b := append(append([]int32{}, shared...), tokens(10, 900)...)
	for _, tc := range []struct {
		page       int
		wantCached int64
	}{{1, 64}, {16, 64}, {5, 60}} {
		t.Run(fmt.Sprint("page", tc.page), func(t *testing.T) {
			cfg := Default(10000)
			cfg.Cache.PageSize = tc.page
			res := byID(runSim(t, cfg, rec("a", 0, a, 2), rec("b", 1e9, b, 2)))
			if got := res["b"].CachedTokens; got != tc.wantCached {
				t.Fatalf("cached_tokens = %d, want %d", got, tc.wantCached)
			}
			// The same prompt again hits all but the last token (page-aligned).
			res = byID(runSim(t, cfg, rec("a", 0, a, 2), rec("a2", 1e9, a, 2)))
			want := int64((len(a) - 1) / tc.page * tc.page)
			if got := res["a2"].CachedTokens; got != want {
				t.Fatalf("repeat cached_tokens = %d, want %d", got, want)
			}
		})
	}
}

// The cache-hit test kit's oracle (spec 7.5): in multi-turn chat, turn r
// caches at least floor((prev_prompt + output - 1) / page) * page tokens.
func TestMultiTurnOracle(t *testing.T) {
	const page = 4
	cfg := Default(100000)
	cfg.Cache.PageSize = page
	var recs []traces.Record
	var prompt []int32
	out := 8
	var prevOut []int32
	at := int64(0)
	for turn := 0; turn < 5; turn++ {
		prompt = append(append(prompt, prevOut...), tokens(30, int32(1000*turn+7))...)
		prevOut = tokens(out, int32(100000+1000*turn))
		r := rec(fmt.Sprint("t", turn), at, append([]int32(nil), prompt...), out)
		r.OutputTokens = prevOut
		recs = append(recs, r)
		at += 10e9 // far apart: each turn finishes before the next
	}
	res := byID(runSim(t, cfg, recs...))
	for turn := 1; turn < 5; turn++ {
		prev := recs[turn-1]
		want := int64((prev.InputLen + out - 1) / page * page)
		got := res[fmt.Sprint("t", turn)].CachedTokens
		if got < want {
			t.Errorf("turn %d: cached %d, want >= %d", turn, got, want)
		}
	}
}

func TestDisabledCacheHitsNothing(t *testing.T) {
	cfg := Default(10000)
	cfg.Cache.Disable = true
	p := tokens(50, 1)
	res := runSim(t, cfg, rec("a", 0, p, 3), rec("b", 1e9, p, 3))
	if res.Summary.CacheHitRate != 0 || res.Requests[1].CachedTokens != 0 {
		t.Fatalf("hits with the cache disabled: %+v", res.Requests)
	}
}

func TestDeterministic(t *testing.T) {
	var recs []traces.Record
	for i := 0; i < 200; i++ {
		p := append(tokens(40+i%7*30, int32(i%5)), tokens(i%13+1, int32(1000+i))...)
		recs = append(recs, rec(fmt.Sprint(i), int64(i)*3e6, p, 5+i%9))
	}
	cfg := Default(2000)
	cfg.Cache.HostTokens = 4000
	cfg.Scheduler.Policy = Random
	a := runSim(t, cfg, recs...)
	b := runSim(t, cfg, recs...)
	if !reflect.DeepEqual(a, b) {
		t.Fatal("two runs with the same seed differ")
	}
	if a.Summary.Completed+a.Summary.Failed != 200 {
		t.Fatalf("completed %d failed %d of 200", a.Summary.Completed, a.Summary.Failed)
	}
}

// Absurd lengths in a trace fail the request at once, without paging a
// petabyte-long prompt or decoding for ever.
func TestHugeRequestsFailFast(t *testing.T) {
	res := runSim(t, Default(10000),
		traces.Record{ID: "long-prompt", InputLen: 1 << 50, OutputLen: 1},
		traces.Record{ID: "long-output", Arrival: 1, InputLen: 10, Tokens: tokens(10, 1), OutputLen: 1 << 50},
		rec("ok", 2, tokens(10, 1), 2))
	got := byID(res)
	for _, id := range []string{"long-prompt", "long-output"} {
		if !strings.Contains(got[id].Failed, "exceeds the KV pool") {
			t.Errorf("%s: failed = %q", id, got[id].Failed)
		}
	}
	if got["ok"].Failed != "" || got["ok"].OutputTokens != 2 {
		t.Errorf("ok: %+v", got["ok"])
	}
}

// An idle gap costs no timeline samples: memory grows with the time the
// server is busy, not with the simulated span. Two requests 9e12 ms apart
// (the adversarial sweep's case, which used to sample every simulated
// second until it ran out of memory) give a handful of samples, and the
// samples around each request still show it.
func TestTimelineSkipsIdleGaps(t *testing.T) {
	const gap = engine.Time(9e18) // 9e12 ms, within int64 nanoseconds
	res := runSim(t, Default(10000), rec("a", 0, tokens(100, 1), 4), rec("b", int64(gap), tokens(100, 1), 4))
	if n := len(res.Timeline); n == 0 || n > 10 {
		t.Fatalf("%d timeline samples for two short requests", n)
	}
	var sawB bool
	for i, smp := range res.Timeline {
		if i > 0 && smp.Time < res.Timeline[i-1].Time {
			t.Fatalf("samples out of order: %+v", res.Timeline)
		}
		if smp.Time >= gap && smp.Held > 0 {
			sawB = true
		}
	}
	if !sawB {
		t.Fatalf("no sample shows the second request: %+v", res.Timeline)
	}
	if last := res.Timeline[len(res.Timeline)-1]; last.Running+last.Waiting != 0 {
		t.Fatalf("the last sample is not of the emptied server: %+v", last)
	}
}

// A prompt at or past the model's context length fails at arrival, as
// SGLang's tokenizer manager refuses it, even when the KV pool could hold
// it; the run goes on.
func TestContextLengthRefused(t *testing.T) {
	cfg := Default(10000)
	cfg.Scheduler.ContextLen = 512
	res := runSim(t, cfg, rec("long", 0, tokens(600, 1), 4), rec("edge", 1, tokens(510, 1), 4), rec("ok", 2, tokens(100, 1), 4))
	got := byID(res)
	if !strings.Contains(got["long"].Failed, "exceeds the model's context length of 512") ||
		!strings.Contains(got["edge"].Failed, "plus 4 output tokens exceeds the model's context length") {
		t.Errorf("long: %q, edge: %q", got["long"].Failed, got["edge"].Failed)
	}
	if got["ok"].Failed != "" || got["ok"].OutputTokens != 4 {
		t.Errorf("ok: %+v", got["ok"])
	}
}

// A trace whose times run past int64 nanoseconds stops the run with an
// error, never a clock that goes back.
func TestClockOverflowIsAnError(t *testing.T) {
	s, err := New(Default(10000), linearCost{})
	if err != nil {
		t.Fatal(err)
	}
	_, err = s.Run(engine.NewSliceSource([]traces.Record{rec("a", math.MaxInt64-1000, tokens(100, 1), 4)}))
	if err == nil || !strings.Contains(err.Error(), "would pass 9223372036854775807 ns (292 years)") {
		t.Fatalf("Run = %v", err)
	}
}

// A step far longer than the timeline interval costs one sample, not one
// per simulated second: memory follows the events.
func TestTimelineSkipsSlowSteps(t *testing.T) {
	// linearCost's decode step is 10 ms; the interval is 1 µs.
	cfg := Default(10000)
	cfg.TimelineInterval = 1000
	res := runSim(t, cfg, rec("a", 0, tokens(100, 1), 1000))
	if n := len(res.Timeline); n > 2*1000+10 {
		t.Fatalf("%d samples for 1000 steps of 10 ms at a 1 µs interval", n)
	}
}
