package sim

import (
	"errors"
	"fmt"
	"reflect"
	"testing"

	"github.com/kvsim/kvsim/sim/engine"
	"github.com/kvsim/kvsim/traces"
	"pgregory.net/rapid"
)

// TestPropStreamIsResult checks that a run streamed to a Sink sends exactly
// the per-request results and timeline samples, in the same order, that the
// same run keeps in its Result, and reports the same summary, on random
// traces (shared prefixes, bursts) and random server sizes.
func TestPropStreamIsResult(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		var recs []traces.Record
		at := int64(0)
		for i := range rapid.IntRange(1, 60).Draw(t, "requests") {
			at += rapid.Int64Range(0, 50e6).Draw(t, "gap")
			p := append(tokens(rapid.IntRange(1, 200).Draw(t, "shared"), 0), tokens(rapid.IntRange(0, 50).Draw(t, "own"), int32(1000+i*100))...)
			recs = append(recs, rec(fmt.Sprint(i), at, p, rapid.IntRange(1, 40).Draw(t, "out")))
		}
		cfg := Default(int64(rapid.IntRange(300, 3000).Draw(t, "device")))
		if rapid.Bool().Draw(t, "host") {
			cfg.Cache.HostTokens = int64(rapid.IntRange(300, 6000).Draw(t, "host_tokens"))
		}
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
