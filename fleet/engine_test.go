package fleet_test

import (
	"testing"

	"github.com/kvsim/kvsim/fleet"
	"github.com/kvsim/kvsim/sim/engine"
	"github.com/kvsim/kvsim/traces"
	"pgregory.net/rapid"
)

// The fleet as an engine keeps the Engine contract: submitting each
// request as late as allowed, then advancing in steps of drawn lengths
// (RunUntil limits that fall anywhere, with or without events), gives
// byte-identical results to Fleet.Run; the events RunUntil reports are in
// non-decreasing time and never past its limit, a request's token events
// count its tokens one by one up to its output length, and Active counts
// the requests submitted and not finished.
func TestOnlineStepsAreRun(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		n := rapid.IntRange(1, 4).Draw(t, "replicas")
		var reps []fleet.Replica
		for range n {
			reps = append(reps, fleet.Replica{Group: "g", Factory: rapid.SampledFrom([]func() engine.Factory{sglang, llama}).Draw(t, "model")()})
		}
		cfg := drawRouter(t)
		recs := drawTrace(t)
		_, want := runFleet(t, reps, cfg, 7, recs)

		e, err := fleet.Factory{Replicas: reps, Router: cfg, Seed: 7}.New()
		if err != nil {
			t.Fatal(err)
		}
		o := e.(*fleet.Online)
		done := 0
		tokens := map[string]int64{}
		step := func(to engine.Time) {
			evs, err := o.RunUntil(to)
			if err != nil {
				t.Fatal(err)
			}
			last := engine.Time(-1)
			for _, ev := range evs {
				if ev.Time < last || ev.Time > to {
					t.Fatalf("event at %d after one at %d, limit %d", ev.Time, last, to)
				}
				last = ev.Time
				if ev.Done {
					done++
					continue
				}
				tokens[ev.ID]++
				if ev.Tokens != tokens[ev.ID] {
					t.Fatalf("request %q: token event %d says %d tokens", ev.ID, tokens[ev.ID], ev.Tokens)
				}
			}
			if o.Now() != to {
				t.Fatalf("Now() = %d after RunUntil(%d)", o.Now(), to)
			}
		}
		submitted := 0
		for _, rec := range recs {
			// Walk towards the arrival in drawn steps, then submit.
			for engine.Time(rec.Arrival) > o.Now()+1 {
				gap := int64(engine.Time(rec.Arrival) - o.Now() - 1)
				step(o.Now() + engine.Time(rapid.Int64Range(1, gap).Draw(t, "step")))
			}
			if err := o.Submit(rec); err != nil {
				t.Fatal(err)
			}
			submitted++
			if got := o.Active(); got != submitted-done {
				t.Fatalf("Active() = %d, want %d submitted - %d done", got, submitted, done)
			}
		}
		// Either FinishFleet runs what is left, or the steps see every event.
		seeAll := rapid.Bool().Draw(t, "step to the end")
		for at, ok := o.Next(); seeAll && ok; at, ok = o.Next() {
			step(at)
		}
		got, err := o.FinishFleet()
		if err != nil {
			t.Fatal(err)
		}
		if g, w := jsonOf(t, got), jsonOf(t, want); g != w {
			t.Fatalf("stepped online:\n%s\nFleet.Run:\n%s", g, w)
		}
		if g, w := jsonOf(t, got.Requests), jsonOf(t, want.Requests); g != w {
			t.Fatalf("requests differ:\n%s\n%s", g, w)
		}
		for _, r := range got.Requests {
			if seeAll && r.Failed == "" && tokens[r.ID] != r.OutputTokens {
				t.Fatalf("request %q: %d token events, %d output tokens", r.ID, tokens[r.ID], r.OutputTokens)
			}
		}
		// The engine cannot be used after Finish.
		if err := o.Submit(traces.Record{ID: "late", InputLen: 1, OutputLen: 1}); err == nil {
			t.Fatal("submit after Finish accepted")
		}
	})
}
