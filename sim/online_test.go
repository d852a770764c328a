package sim

import (
	"errors"
	"fmt"
	"reflect"
	"testing"

	"github.com/kvsim/kvsim/sim/engine"
	"github.com/kvsim/kvsim/traces"
	"github.com/kvsim/kvsim/tree"
	"pgregory.net/rapid"
)

// Submitting a trace request by request, advancing time in arbitrary steps,
// gives exactly the results of a batch run, and the events stream every
// token of every request in time order. With DropResults the run keeps no
// per-request results nor timeline, and its summary is the same.
func TestPropOnlineMatchesBatch(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		cfg := drawConfig(t)
		recs := drawTrace(t)
		want := runSim(t, cfg, recs...)
		o, err := NewOnline(cfg, linearCost{})
		if cfg.Cache.Eviction == tree.Belady {
			// The oracle needs the trace in advance: online is refused.
			if !errors.Is(err, ErrOracleOnline) {
				t.Fatalf("NewOnline(belady) = %v, want ErrOracleOnline", err)
			}
			return
		}
		if err != nil {
			t.Fatal(err)
		}
		drop := rapid.Bool().Draw(t, "drop_results")
		if drop {
			o.DropResults()
		}
		tokens := map[string]int64{}
		last := engine.Time(0)
		check := func(evs []engine.Event) {
			for _, e := range evs {
				if e.Time < last {
					t.Fatalf("event at %d after one at %d", e.Time, last)
				}
				last = e.Time
				if !e.Done {
					if e.Tokens != tokens[e.ID]+1 {
						t.Fatalf("request %s: token %d after %d", e.ID, e.Tokens, tokens[e.ID])
					}
					tokens[e.ID] = e.Tokens
				}
			}
		}
		for _, r := range recs {
			// Advance to a random point before the arrival, then submit.
			if engine.Time(r.Arrival) > o.Now() {
				step := o.Now() + engine.Time(rapid.Int64Range(0, r.Arrival-int64(o.Now())).Draw(t, "advance"))
				evs, err := o.RunUntil(step)
				if err != nil {
					t.Fatal(err)
				}
				check(evs)
			}
			if err := o.Submit(r); err != nil {
				t.Fatal(err)
			}
		}
		got, err := o.Finish()
		if err != nil {
			t.Fatal(err)
		}
		if drop {
			if got.Requests != nil || got.Timeline != nil || got.Summary != want.Summary || got.Counters != want.Counters {
				t.Fatalf("with DropResults: %d results, %d samples kept; summary or counters differ", len(got.Requests), len(got.Timeline))
			}
			return
		}
		if !reflect.DeepEqual(got.Requests, want.Requests) || got.Summary != want.Summary {
			t.Fatalf("online results differ from the batch run")
		}
		for _, r := range got.Requests {
			if r.Failed == "" && tokens[r.ID] != r.OutputTokens && r.OutputTokens > 0 {
				// Tokens emitted after the last RunUntil are reported by
				// Finish's processing but not returned; count only what
				// was seen.
				if tokens[r.ID] > r.OutputTokens {
					t.Fatalf("request %s streamed %d tokens of %d", r.ID, tokens[r.ID], r.OutputTokens)
				}
			}
		}
	})
}

// With OmitTokenEvents an online run reports exactly the completion
// events of the same run without, and the same results.
func TestPropOmitTokenEvents(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		cfg := drawConfig(t)
		if cfg.Cache.Eviction == tree.Belady {
			cfg.Cache.Eviction = tree.LRU
		}
		recs := drawTrace(t)
		var runs [2]*Online
		for k := range runs {
			o, err := NewOnline(cfg, linearCost{})
			if err != nil {
				t.Fatal(err)
			}
			runs[k] = o
		}
		runs[1].OmitTokenEvents()
		step := func(at engine.Time) {
			all, err := runs[0].RunUntil(at)
			if err != nil {
				t.Fatal(err)
			}
			var done []engine.Event
			for _, e := range all {
				if e.Done {
					done = append(done, e)
				}
			}
			got, err := runs[1].RunUntil(at)
			if err != nil {
				t.Fatal(err)
			}
			if len(got) != len(done) || (len(got) > 0 && !reflect.DeepEqual(got, done)) {
				t.Fatalf("RunUntil(%d): events %v, want the completions %v", at, got, done)
			}
		}
		for _, r := range recs {
			if engine.Time(r.Arrival) > runs[0].Now() {
				step(runs[0].Now() + engine.Time(rapid.Int64Range(0, r.Arrival-int64(runs[0].Now())).Draw(t, "advance")))
			}
			for _, o := range runs {
				if err := o.Submit(r); err != nil {
					t.Fatal(err)
				}
			}
		}
		step(engine.Never)
		a, errA := runs[0].Finish()
		b, errB := runs[1].Finish()
		if errA != nil || errB != nil {
			t.Fatal(errA, errB)
		}
		if !reflect.DeepEqual(a, b) {
			t.Fatalf("results differ with token events omitted")
		}
	})
}

func TestOnlineRejectsThePast(t *testing.T) {
	o, err := NewOnline(Default(1000), linearCost{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := o.RunUntil(100); err != nil {
		t.Fatal(err)
	}
	if err := o.Submit(rec("a", 50, tokens(10, 1), 2)); err == nil {
		t.Fatal("a submission in the past was accepted")
	}
	if err := o.Submit(rec("b", 200, tokens(10, 1), 2)); err != nil {
		t.Fatal(err)
	}
	evs, err := o.RunUntil(1e9)
	if err != nil {
		t.Fatal(err)
	}
	var kinds []string
	for _, e := range evs {
		kinds = append(kinds, fmt.Sprint(e.Tokens, e.Done))
	}
	if want := []string{"1 false", "2 false", "2 true"}; !reflect.DeepEqual(kinds, want) {
		t.Fatalf("events %v, want %v", kinds, want)
	}
	if _, err := o.RunUntil(10); err == nil {
		t.Fatal("RunUntil went back in time")
	}
}

// TestPropStreamIsResult checks that a run streamed to a Sink sends exactly
// the per-request results and timeline samples, in the same order, that the
// same run keeps in its Result, and reports the same summary, on the
// servers and traces the accounting property draws.
func TestPropStreamIsResult(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		cfg := drawConfig(t)
		recs := drawTrace(t)
		cfg.TimelineInterval = rapid.Int64Range(1e6, 1e9).Draw(t, "interval")
		run := func(sink Sink) *engine.Result {
			s, err := New(cfg, linearCost{})
			if err != nil {
				t.Fatal(err)
			}
			s.Stream(sink)
			res, err := s.Run(engine.NewSliceSource(recs))
			if err != nil {
				t.Fatal(err)
			}
			return res
		}
		kept := run(Sink{})
		var rs []engine.RequestResult
		var smps []engine.Sample
		streamed := run(Sink{
			Result: func(r engine.RequestResult) error { rs = append(rs, r); return nil },
			Sample: func(x engine.Sample) error { smps = append(smps, x); return nil },
		})
		if streamed.Requests != nil || streamed.Timeline != nil {
			t.Fatalf("a streamed run kept %d results and %d samples", len(streamed.Requests), len(streamed.Timeline))
		}
		if !reflect.DeepEqual(rs, kept.Requests) {
			t.Fatalf("streamed results differ:\n%+v\nkept:\n%+v", rs, kept.Requests)
		}
		if !reflect.DeepEqual(smps, kept.Timeline) {
			t.Fatalf("streamed samples differ:\n%+v\nkept:\n%+v", smps, kept.Timeline)
		}
		if streamed.Summary != kept.Summary || streamed.Counters != kept.Counters {
			t.Fatalf("summary %+v, kept %+v", streamed.Summary, kept.Summary)
		}
	})
}

// A sink's error stops the run, and Run returns it.
func TestStreamErrorStopsRun(t *testing.T) {
	full := errors.New("no space left on device")
	for _, name := range []string{"result", "sample"} {
		s, err := New(Default(10000), linearCost{})
		if err != nil {
			t.Fatal(err)
		}
		var n int
		fail := func() error { n++; return full }
		sink := Sink{Result: func(engine.RequestResult) error { return nil }}
		if name == "result" {
			sink.Result = func(engine.RequestResult) error { return fail() }
		} else {
			sink.Sample = func(engine.Sample) error { return fail() }
		}
		s.Stream(sink)
		var recs []traces.Record
		for i := range 50 {
			recs = append(recs, rec(fmt.Sprint(i), int64(i)*2e9, tokens(100, int32(i)), 4))
		}
		res, err := s.Run(engine.NewSliceSource(recs))
		if !errors.Is(err, full) || res != nil {
			t.Fatalf("%s: Run = %v, %v; want the sink's error", name, res, err)
		}
		if n != 1 {
			t.Fatalf("%s: the sink was called %d times after failing", name, n)
		}
	}
}

// When a request arrives at the instant of the sample that found the
// server empty (and after it in event order), the timeline looks at that
// instant twice and keeps the later look; a stream must send that one, once.
// Here the sample at 1 s finds a and c done, and b, whose arrival was
// scheduled when c arrived (after that sample), comes at 1 s too.
func TestStreamSameInstantSample(t *testing.T) {
	cfg := Default(10000)
	cfg.TimelineInterval = 1e9
	const tick = 1e9
	recs := []traces.Record{rec("a", 0, tokens(100, 1), 4), rec("c", tick/2, tokens(100, 300), 4), rec("b", tick, tokens(100, 500), 4)}
	kept := runSim(t, cfg, recs...)
	var at []engine.Sample
	for _, x := range kept.Timeline {
		if x.Time == tick {
			at = append(at, x)
		}
	}
	if len(at) != 1 || at[0].Held == 0 {
		t.Fatalf("the kept timeline at 1 s is %+v, want one sample that shows b", at)
	}
	s, err := New(cfg, linearCost{})
	if err != nil {
		t.Fatal(err)
	}
	var smps []engine.Sample
	s.Stream(Sink{Sample: func(x engine.Sample) error { smps = append(smps, x); return nil }})
	if _, err := s.Run(engine.NewSliceSource(recs)); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(smps, kept.Timeline) {
		t.Fatalf("streamed samples differ:\n%+v\nkept:\n%+v", smps, kept.Timeline)
	}
}

// TokenUsage is SGLang's token_usage: a request's tokens count from its
// admission (held outside the tree while it prefills, then locked in it
// while it decodes), and an idle server's tree, all evictable, counts
// nothing.
func TestTokenUsage(t *testing.T) {
	o, err := NewOnline(Default(1000), linearCost{})
	if err != nil {
		t.Fatal(err)
	}
	if u := o.TokenUsage(); u != 0 {
		t.Fatalf("empty server: token usage %g", u)
	}
	if err := o.Submit(rec("a", 0, tokens(400, 1), 20)); err != nil {
		t.Fatal(err)
	}
	for _, at := range []engine.Time{0, 50e6} { // prefilling, decoding
		if _, err := o.RunUntil(at); err != nil {
			t.Fatal(err)
		}
		if u := o.TokenUsage(); u < 0.4 || u > 0.421 {
			t.Fatalf("at %d ns: token usage %g, want the request's 400 to 421 tokens of 1000", at, u)
		}
	}
	if _, err := o.RunUntil(1e9); err != nil {
		t.Fatal(err)
	}
	if u, w, r := o.TokenUsage(), len(o.s.waiting), len(o.s.running); u != 0 || w+r != 0 {
		t.Fatalf("idle again: token usage %g (%d waiting, %d running)", u, w, r)
	}
}

// LoadReport: a request waiting for memory counts its whole prompt as
// queued until it is admitted, the generated tokens only grow, and an
// idle server queues nothing.
func TestLoadReport(t *testing.T) {
	o, err := NewOnline(Default(1000), linearCost{})
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range []traces.Record{rec("a", 0, tokens(700, 1), 20), rec("b", 0, tokens(600, 2), 20)} {
		if err := o.Submit(r); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := o.RunUntil(0); err != nil {
		t.Fatal(err)
	}
	// a (700) is admitted; b (600) cannot fit beside it in 1000 tokens and waits
	if _, q, _ := o.LoadReport(); q != 600 {
		t.Fatalf("queued %d tokens, want b's 600 while a runs", q)
	}
	var last int64
	for _, at := range []engine.Time{50e6, 1e9, 5e9} {
		if _, err := o.RunUntil(at); err != nil {
			t.Fatal(err)
		}
		_, q, gen := o.LoadReport()
		if gen < last {
			t.Fatalf("at %d: generated %d < %d", at, gen, last)
		}
		last = gen
		if at == 5e9 && (q != 0 || gen != 40) {
			t.Fatalf("idle: queued %d, generated %d, want 0 and 40", q, gen)
		}
	}
}
