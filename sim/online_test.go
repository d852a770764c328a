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
