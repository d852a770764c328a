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
// token of every request in time order.
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
	_ = traces.Record{}
}
