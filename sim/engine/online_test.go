package engine_test

import (
	"strings"
	"testing"

	"github.com/kvsim/kvsim/internal/enginetest"
	"github.com/kvsim/kvsim/traces"
)

// Both models' online engines (their shared OnlineState) refuse what the
// Engine contract forbids: a submission before Now or before the previous
// one, a RunUntil before Now, and any call after Finish; a refused
// submission leaves the engine usable and its request unqueued.
func TestOnlineRefusals(t *testing.T) {
	for _, f := range factories() {
		t.Run(f.Info().Kind, func(t *testing.T) {
			e, err := f.New()
			if err != nil {
				t.Fatal(err)
			}
			rec := func(id string, at int64) traces.Record {
				toks := enginetest.Prompt(0, 16, 0, 8)
				return traces.Record{ID: id, Arrival: at, InputLen: len(toks), Tokens: toks, OutputLen: 2}
			}
			if _, err := e.RunUntil(100); err != nil {
				t.Fatal(err)
			}
			for _, c := range []struct {
				r    traces.Record
				want string
			}{
				{rec("early", 50), `request "early" submitted for 50 ns, before the simulation's time 100 ns`},
				{rec("b", 300), ""},
				{rec("late", 200), `request "late" arrives at 200 ns, before the previous submission (300 ns)`},
			} {
				if err := e.Submit(c.r); (err == nil) != (c.want == "") || err != nil && err.Error() != c.want {
					t.Errorf("Submit(%s) = %v, want %q", c.r.ID, err, c.want)
				}
			}
			if _, err := e.RunUntil(99); err == nil || err.Error() != "RunUntil(99) is before the simulation's time 100" {
				t.Errorf("RunUntil(99) = %v", err)
			}
			res, err := e.Finish()
			if err != nil {
				t.Fatal(err)
			}
			if len(res.Requests) != 1 || res.Requests[0].ID != "b" {
				t.Errorf("finished with %+v, want request b only", res.Requests)
			}
			if _, err := e.RunUntil(1e12); err == nil || !strings.HasSuffix(err.Error(), ": online simulation already finished") {
				t.Errorf("RunUntil after Finish = %v", err)
			}
			if err := e.Submit(rec("after", 2e12)); err == nil || !strings.HasSuffix(err.Error(), ": online simulation already finished") {
				t.Errorf("Submit after Finish = %v", err)
			}
		})
	}
}
