package replay

import (
	"context"
	"fmt"
	"reflect"
	"slices"
	"sort"
	"testing"
	"time"

	"github.com/kvsim/kvsim/sim/engine"
	"github.com/kvsim/kvsim/traces"
	"pgregory.net/rapid"
)

// genStreamTrace draws a trace of up to 40 records with dependencies:
// parents and wait-for gates naming earlier records (now and then a later
// or unknown one, which the pacer ignores), think times, warm-up records,
// prompts sharing prefixes, and now and then a record whose prompt cannot
// be built.
func genStreamTrace(t *rapid.T) []traces.Record {
	n := rapid.IntRange(1, 40).Draw(t, "n")
	base := OutputTokens([]int32{7}, 200, traces.DefaultVocab)
	recs := make([]traces.Record, n)
	var at int64
	for i := range recs {
		at += int64(rapid.IntRange(0, 40).Draw(t, "gap_ms")) * 1e6
		keep := rapid.IntRange(0, 150).Draw(t, "keep")
		p := slices.Concat(base[:keep], OutputTokens([]int32{int32(i)}, rapid.IntRange(1, 50).Draw(t, "tail"), traces.DefaultVocab))
		r := traces.Record{ID: fmt.Sprintf("r%d", i), Arrival: at, InputLen: len(p), Tokens: p, OutputLen: rapid.IntRange(0, 8).Draw(t, "out")}
		name := func(label string) string {
			j := rapid.IntRange(0, i+1).Draw(t, label)
			if j >= i {
				return fmt.Sprintf("r%d", j+rapid.IntRange(0, 2).Draw(t, label+"_later")) // itself, later or unknown
			}
			return fmt.Sprintf("r%d", j)
		}
		if i > 0 && rapid.IntRange(0, 2).Draw(t, "has_parent") > 0 {
			r.Parent = name("parent")
			r.ThinkTime = int64(rapid.IntRange(0, 30).Draw(t, "think_ms")) * 1e6
		}
		for range rapid.IntRange(0, 2).Draw(t, "waits") {
			r.WaitFor = append(r.WaitFor, name("wait"))
		}
		if rapid.IntRange(0, 15).Draw(t, "warmup") == 0 {
			r.Kind = "warmup"
		}
		if rapid.IntRange(0, 25).Draw(t, "bad") == 0 {
			r.InputLen++ // more than its token ids
		}
		recs[i] = r
	}
	return recs
}

// genStreamConfig draws every pacing mode with and without a cap, a send
// gap and a timeout.
func genStreamConfig(t *rapid.T) Config {
	cfg := Default()
	cfg.Pacing = rapid.SampledFrom([]Pacing{PaceASAP, PaceTimestamps, PaceRate}).Draw(t, "pacing")
	cfg.Rate = rapid.SampledFrom([]float64{20, 200}).Draw(t, "rate")
	cfg.Distribution = rapid.SampledFrom([]string{DistPoisson, DistUniform}).Draw(t, "dist")
	cfg.Speedup = rapid.SampledFrom([]float64{0.5, 1, 3}).Draw(t, "speedup")
	cfg.Seed = rapid.Uint64Range(0, 3).Draw(t, "seed")
	cfg.MaxConcurrency = rapid.IntRange(0, 4).Draw(t, "cap")
	cfg.SendGap = time.Duration(rapid.SampledFrom([]int64{0, 0, 1e6}).Draw(t, "send_gap"))
	cfg.Timeout = time.Duration(rapid.SampledFrom([]int64{0, 0, 30e6}).Draw(t, "timeout"))
	return cfg
}

// handedOut is what RunStream handed to its out function, in order.
type handedOut struct {
	recs []traces.Record
	rrs  []RequestResult
}

func (h *handedOut) out(rec *traces.Record, rr *RequestResult) error {
	h.recs = append(h.recs, *rec)
	h.rrs = append(h.rrs, *rr)
	return nil
}

// TestPropStreamEqualsSlice: a replay that streams its trace (the pacer
// reads each record when the schedule reaches it and forgets it when it
// finishes; results are handed out as they finish and summarised from a
// few numbers a record) gives what the replay of the whole slice gave:
// the pacer holding every record from the start, every result kept, then
// Summarize over them and the per-request trace sorted by send time.
func TestPropStreamEqualsSlice(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		recs := genStreamTrace(t)
		cfg := genStreamConfig(t)

		// The model: the slice replay.
		rm, err := New(cfg, newSimTarget(t, 2000), WallClock{})
		if err != nil {
			t.Fatal(err)
		}
		rm.eager = true
		res, err := rm.Run(context.Background(), recs)
		if err != nil {
			t.Fatal(err)
		}
		want := Summarize(res.Requests)
		var order []int
		for i := range res.Requests {
			if res.Requests[i].Sent {
				order = append(order, i)
			}
		}
		sort.SliceStable(order, func(a, b int) bool { return res.Requests[order[a]].Start < res.Requests[order[b]].Start })

		r, err := New(cfg, newSimTarget(t, 2000), WallClock{})
		if err != nil {
			t.Fatal(err)
		}
		var got handedOut
		sr, err := r.RunStream(context.Background(), engine.NewSliceSource(recs), got.out)
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(sr.Summary, want) {
			t.Fatalf("summary:\n got %+v\nwant %+v", sr.Summary, want)
		}
		if len(got.rrs) != len(order) || sr.Records != len(recs) {
			t.Fatalf("handed out %d of %d records, want %d", len(got.rrs), sr.Records, len(order))
		}
		for k, i := range order {
			if !reflect.DeepEqual(got.rrs[k], res.Requests[i]) || !reflect.DeepEqual(got.recs[k], recs[i]) {
				t.Fatalf("handed out #%d:\n got %+v\nwant %+v", k, got.rrs[k], res.Requests[i])
			}
		}
	})
}

// countingSource is a slice source that counts the records read.
type countingSource struct {
	*engine.SliceSource
	n int
}

func (c *countingSource) Next() (traces.Record, error) {
	rec, err := c.SliceSource.Next()
	if err == nil {
		c.n++
	}
	return rec, err
}

// TestStreamWindowIsBounded: on a long trace without dependencies paced
// over time, or as fast as possible under a concurrency cap, the pacer
// never holds more records than were in flight at once, plus the next one
// to release, however long the trace; and results are handed out while
// the trace is still being read.
func TestStreamWindowIsBounded(t *testing.T) {
	const n = 3000
	var recs []traces.Record
	for i := range n {
		p := OutputTokens([]int32{int32(i)}, 32, traces.DefaultVocab)
		recs = append(recs, traces.Record{ID: fmt.Sprint(i), Arrival: int64(i) * 20e6, InputLen: len(p), Tokens: p, OutputLen: 4})
	}
	for _, pacing := range []Pacing{PaceTimestamps, PaceRate, PaceASAP} {
		cfg := Default()
		cfg.Pacing, cfg.Rate = pacing, 40
		if pacing == PaceASAP {
			cfg.MaxConcurrency = 8
		}
		r, err := New(cfg, newSimTarget(t, 4000), WallClock{})
		if err != nil {
			t.Fatal(err)
		}
		src := &countingSource{SliceSource: engine.NewSliceSource(recs)}
		var got handedOut
		readAtFirstOut := -1
		sr, err := r.RunStream(t.Context(), src, func(rec *traces.Record, rr *RequestResult) error {
			if readAtFirstOut < 0 {
				readAtFirstOut = src.n
			}
			return got.out(rec, rr)
		})
		if err != nil {
			t.Fatal(err)
		}
		if sr.Summary.Completed != n {
			t.Fatalf("%v: completed %d of %d", pacing, sr.Summary.Completed, n)
		}
		// The most requests in flight at once: a finish at t comes before a
		// send at t.
		type edge struct {
			at   int64
			send int
		}
		var edges []edge
		for _, rr := range got.rrs {
			edges = append(edges, edge{rr.Start, 1}, edge{rr.End, -1})
		}
		slices.SortFunc(edges, func(a, b edge) int {
			if a.at != b.at {
				return int(a.at - b.at)
			}
			return a.send - b.send
		})
		fly, most := 0, 0
		for _, e := range edges {
			fly += e.send
			most = max(most, fly)
		}
		if sr.MaxWindow > most+1 || sr.MaxWindow > 20 {
			t.Errorf("%v: the pacer held up to %d records; at most %d were in flight", pacing, sr.MaxWindow, most)
		}
		if readAtFirstOut < 0 || readAtFirstOut > n/2 {
			t.Errorf("%v: the first result was handed out after %d of %d records were read", pacing, readAtFirstOut, n)
		}
	}
}

// TestStreamRepeatedIDStopsTheRun: a repeated ID found while streaming
// stops the run with the error a slice replay gives before it starts.
func TestStreamRepeatedIDStopsTheRun(t *testing.T) {
	recs := []traces.Record{rec("a", 0, 4, 1), rec("b", 10, 4, 1), rec("a", 20, 4, 1)}
	cfg := Default()
	cfg.Pacing = PaceTimestamps
	r, err := New(cfg, newSimTarget(t, 2000), WallClock{})
	if err != nil {
		t.Fatal(err)
	}
	_, err1 := r.Run(t.Context(), recs)
	_, err2 := r.RunStream(t.Context(), engine.NewSliceSource(recs), nil)
	want := `record 2: id "a": expected unique ids, found a repeat`
	if err1 == nil || err2 == nil || err1.Error() != want || err2.Error() != want {
		t.Fatalf("Run: %v; RunStream: %v; want %q", err1, err2, want)
	}
}
