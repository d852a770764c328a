package engine_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/kvsim/kvsim/internal/enginetest"
	"github.com/kvsim/kvsim/sim/engine"
	"github.com/kvsim/kvsim/traces"
	"pgregory.net/rapid"
)

// factories are the two server models, small enough that requests queue,
// evict and reuse prefixes.
func factories() []engine.Factory {
	return []engine.Factory{enginetest.SGLang(), enginetest.Llama()}
}

// drawTrace draws requests sharing a few prompt prefixes, sorted by arrival.
func drawTrace(t *rapid.T, name string) []traces.Record {
	n := rapid.IntRange(1, 25).Draw(t, name+"-n")
	var recs []traces.Record
	var at int64
	for i := range n {
		at += rapid.Int64Range(0, 50e6).Draw(t, name+"-gap")
		prefix := rapid.IntRange(0, 3).Draw(t, name+"-prefix")
		plen := rapid.IntRange(0, 600).Draw(t, name+"-shared")
		own := rapid.IntRange(1, 400).Draw(t, name+"-own")
		toks := enginetest.Prompt(prefix, plen, i, own)
		recs = append(recs, traces.Record{
			ID: fmt.Sprintf("%s%d", name, i), Arrival: at, InputLen: len(toks), Tokens: toks,
			OutputLen: rapid.IntRange(1, 30).Draw(t, name+"-out"),
		})
	}
	return recs
}

// run drives engines on one loop and one virtual clock, as a fleet would:
// the next instant is the earliest pending arrival or engine event; the
// records arriving then are submitted first (before any engine reaches
// that time), then every engine runs until it, in index order. extra adds
// instants at which nothing is due, to split RunUntil calls further. It
// returns each engine's events as JSON lines and its final result as JSON.
func run(t *rapid.T, engines []engine.Engine, recs [][]traces.Record, extra []engine.Time) (events, results []string) {
	events = make([]string, len(engines))
	results = make([]string, len(engines))
	next := make([]int, len(engines))
	for {
		at, ok := engine.Never, false
		for i, e := range engines {
			if next[i] < len(recs[i]) {
				at, ok = min(at, engine.Time(recs[i][next[i]].Arrival)), true
			}
			if n, has := e.Next(); has {
				if n < e.Now() {
					t.Fatalf("engine %d: Next() = %d, before Now() = %d", i, n, e.Now())
				}
				at, ok = min(at, n), true
			}
		}
		if len(extra) > 0 && (!ok || extra[0] < at) && extra[0] >= engines[0].Now() {
			at, ok = extra[0], true
		}
		if len(extra) > 0 && extra[0] <= at {
			extra = extra[1:]
		}
		if !ok {
			break
		}
		for i, e := range engines {
			for next[i] < len(recs[i]) && engine.Time(recs[i][next[i]].Arrival) == at {
				if err := e.Submit(recs[i][next[i]]); err != nil {
					t.Fatalf("engine %d: %v", i, err)
				}
				next[i]++
			}
		}
		for i, e := range engines {
			evs, err := e.RunUntil(at)
			if err != nil {
				t.Fatalf("engine %d: %v", i, err)
			}
			if e.Now() != at {
				t.Fatalf("engine %d: Now() = %d after RunUntil(%d)", i, e.Now(), at)
			}
			for _, ev := range evs {
				if ev.Time > at {
					t.Fatalf("engine %d: event at %d from RunUntil(%d)", i, ev.Time, at)
				}
				b, _ := json.Marshal(ev)
				events[i] += string(b) + "\n"
			}
		}
	}
	for i, e := range engines {
		if e.Active() != 0 {
			t.Fatalf("engine %d: %d requests active with no event pending", i, e.Active())
		}
		res, err := e.Finish()
		if err != nil {
			t.Fatalf("engine %d: %v", i, err)
		}
		b, err := json.Marshal(res)
		if err != nil {
			t.Fatal(err)
		}
		results[i] = string(b)
	}
	return events, results
}

func newEngines(t *rapid.T, fs ...engine.Factory) []engine.Engine {
	var es []engine.Engine
	for _, f := range fs {
		e, err := f.New()
		if err != nil {
			t.Fatal(err)
		}
		es = append(es, e)
	}
	return es
}

// Two engines on one loop and one clock, one of each model, give each the
// byte-identical events and results it gives alone, whatever the other
// engine's traffic and however the shared loop splits the time; and an
// engine driven online gives the results of its factory's batch run.
func TestTwoEnginesOneClock(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		fs := factories()
		if rapid.Bool().Draw(t, "swap") {
			fs[0], fs[1] = fs[1], fs[0]
		}
		recs := [][]traces.Record{drawTrace(t, "a"), drawTrace(t, "b")}
		extra := rapid.SliceOfN(rapid.Int64Range(0, 2e9), 0, 20).Draw(t, "extra")
		slices.Sort(extra)
		var ticks []engine.Time
		for _, x := range extra {
			ticks = append(ticks, engine.Time(x))
		}
		evShared, resShared := run(t, newEngines(t, fs...), recs, ticks)
		for i, f := range fs {
			evAlone, resAlone := run(t, newEngines(t, f), recs[i:i+1], nil)
			if evAlone[0] != evShared[i] {
				t.Fatalf("engine %d (%s): events on a shared loop differ from alone:\n%s\nalone:\n%s", i, f.Info().Kind, evShared[i], evAlone[0])
			}
			if resAlone[0] != resShared[i] {
				t.Fatalf("engine %d (%s): results on a shared loop differ from alone:\n%s\nalone:\n%s", i, f.Info().Kind, resShared[i], resAlone[0])
			}
			batch, err := f.Run(engine.NewSliceSource(recs[i]))
			if err != nil {
				t.Fatal(err)
			}
			b, _ := json.Marshal(batch.Requests)
			var online engine.Result
			if err := json.Unmarshal([]byte(resAlone[0]), &online); err != nil {
				t.Fatal(err)
			}
			o, _ := json.Marshal(online.Requests)
			if string(b) != string(o) {
				t.Fatalf("engine %d (%s): online requests differ from the batch run:\n%s\nbatch:\n%s", i, f.Info().Kind, o, b)
			}
		}
	})
}

// A timeline row is the sample's fields, comma-separated, the time in
// seconds as fmt's %.3f writes it, under a header of as many columns; a
// file is the header then a row a sample, however many samples it holds.
func TestPropTimelineCSV(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		n := rapid.IntRange(0, 3000).Draw(t, "n")
		samples := make([]engine.Sample, n)
		for i := range samples {
			tok := rapid.Int64Range(0, 1<<40)
			samples[i] = engine.Sample{Time: engine.Time(rapid.Int64Range(0, 1<<62).Draw(t, "t")), Device: tok.Draw(t, "d"),
				Held: tok.Draw(t, "h"), Evictable: tok.Draw(t, "e"), Host: tok.Draw(t, "host"),
				HostReserved: tok.Draw(t, "r"), Storage: tok.Draw(t, "s"),
				Waiting: rapid.IntRange(0, 1<<20).Draw(t, "w"), Running: rapid.IntRange(0, 1<<20).Draw(t, "run")}
		}
		var want strings.Builder
		want.WriteString(engine.TimelineHeader + "\n")
		for _, x := range samples {
			fmt.Fprintf(&want, "%.3f,%d,%d,%d,%d,%d,%d,%d,%d\n", x.Time.Seconds(), x.Device, x.Held, x.Evictable,
				x.Host, x.HostReserved, x.Storage, x.Waiting, x.Running)
		}
		var got bytes.Buffer
		if err := engine.WriteTimeline(&got, samples); err != nil {
			t.Fatal(err)
		}
		if got.String() != want.String() {
			t.Fatalf("timeline file differs from fmt's:\n%.500s\nwant\n%.500s", got.String(), want.String())
		}
		if cols := strings.Count(engine.TimelineHeader, ",") + 1; n > 0 && strings.Count(string(samples[0].AppendCSV(nil)), ",")+1 != cols {
			t.Fatalf("a row has not the header's %d columns", cols)
		}
	})
}
