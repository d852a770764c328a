package replay

import (
	"encoding/json"
	"fmt"
	"math"
	"slices"
	"testing"
	"time"

	"github.com/kvsim/kvsim/internal/enginetest"
	"github.com/kvsim/kvsim/internal/testutil"
	"github.com/kvsim/kvsim/sim"
	"github.com/kvsim/kvsim/sim/hw"
	"github.com/kvsim/kvsim/traces"
)

// testFitted is a cost model with round coefficients: 1 ms + 10 µs per new
// token (+ 1 ns per attention pair) for prefill, 2 ms + 1 ns per context
// token for a decode step.
var testFitted = enginetest.Fitted

// testSimConfig is a server with a device pool of deviceTokens and a host
// tier twice as large.
func testSimConfig(deviceTokens int64) sim.Config {
	cfg := sim.Default(deviceTokens)
	cfg.Cache.HostTokens = 2 * deviceTokens
	return cfg
}

func newSimTarget(t testutil.TB, deviceTokens int64) *SimTarget {
	t.Helper()
	cfg := testSimConfig(deviceTokens)
	cost := testFitted
	st, err := NewSimTarget(SimConfig{Engine: &sim.Factory{Config: cfg, Cost: &cost}, Model: "sim-model"})
	if err != nil {
		t.Fatal(err)
	}
	return st
}

func chatTrace(t testing.TB, clients, rounds int) []traces.Record {
	t.Helper()
	recs, err := traces.GenerateChat(traces.ChatConfig{
		Clients: clients, Rounds: rounds, RequestLength: 64, OutputLength: 8, SubQuestionLength: 16,
		Rate: math.Inf(1), Order: "fifo", Seed: 3, Vocab: traces.DefaultVocab,
	})
	if err != nil {
		t.Fatal(err)
	}
	return recs
}

// runReplay replays recs against target under cfg on the wall clock.
func runReplay(t testing.TB, target Target, cfg Config, recs []traces.Record) *Result {
	t.Helper()
	res, err := newWallRunner(t, cfg, target).Run(t.Context(), recs)
	if err != nil {
		t.Fatal(err)
	}
	return res
}

// One request alone: TTFT is one prefill forward, every ITL one decode
// step at batch 1 over the request's context, exactly as the cost model
// says.
func TestSimTargetTimesFollowTheCostModel(t *testing.T) {
	st := newSimTarget(t, 100000)
	recs := []traces.Record{{ID: "a", InputLen: 100, OutputLen: 4}}
	res := runReplay(t, st, Default(), recs)
	rr := res.Requests[0]
	if rr.Failed != "" {
		t.Fatalf("failed: %s %s", rr.Failed, rr.Detail)
	}
	f := testFitted
	wantTTFT := f.PrefillTime([]hw.Extend{{New: 100}})
	if rr.TTFT() != wantTTFT {
		t.Errorf("TTFT %d, want %d", rr.TTFT(), wantTTFT)
	}
	var want []int64
	for k := 1; k < 4; k++ {
		want = append(want, f.DecodeTime(1, int64(100+k)))
	}
	if !slices.Equal(rr.ITL, want) || rr.OutputTokens != 4 || rr.CachedTokens != 0 || rr.ServerPromptTokens != 100 {
		t.Errorf("itl %v (want %v) output %d cached %d prompt %d", rr.ITL, want, rr.OutputTokens, rr.CachedTokens, rr.ServerPromptTokens)
	}
	if rr.Start != 0 || rr.Slot != 0 || rr.Due != 0 {
		t.Errorf("due %d slot %d start %d, want 0", rr.Due, rr.Slot, rr.Start)
	}
}

// A closed-loop chat whose turns echo the simulator's own output ids hits
// the whole previous turn (prompt + output, minus the last output token
// whose KV is never computed).
func TestSimTargetEchoedOutputsHit(t *testing.T) {
	st := newSimTarget(t, 100000)
	first := traces.Record{ID: "t1", InputLen: 64, Tokens: OutputTokens([]int32{7}, 64, traces.DefaultVocab), OutputLen: 8}
	out := OutputTokens(first.Tokens, 8, traces.DefaultVocab)
	p2 := append(append(slices.Clone(first.Tokens), out...), 42, 43, 44)
	second := traces.Record{ID: "t2", Parent: "t1", InputLen: len(p2), Tokens: p2, OutputLen: 8}
	res := runReplay(t, st, Default(), []traces.Record{first, second})
	if got := res.Requests[1].CachedTokens; got != 64+8-1 {
		t.Fatalf("turn 2 cached %d, want %d", got, 64+8-1)
	}
	if !slices.Equal(res.Requests[0].OutputIDs, out) {
		t.Fatalf("output ids %v, want %v", res.Requests[0].OutputIDs, out)
	}
	if res.Requests[1].Start != res.Requests[0].End {
		t.Errorf("turn 2 sent at %d, turn 1 ended at %d", res.Requests[1].Start, res.Requests[0].End)
	}
}

// The same trace, configuration and seed give byte-identical results, and
// the pacer's rules hold: the concurrency cap, turns after their parent,
// think time under timestamps.
func TestSimTargetDeterministicAndPaced(t *testing.T) {
	recs := chatTrace(t, 6, 3)
	for i := range recs {
		recs[i].ThinkTime = 5e6
	}
	cfg := Default()
	cfg.Pacing, cfg.Speedup, cfg.MaxConcurrency = PaceTimestamps, 1, 3
	var outs [][]byte
	for range 2 {
		res := runReplay(t, newSimTarget(t, 100000), cfg, recs)
		b, err := json.Marshal(res)
		if err != nil {
			t.Fatal(err)
		}
		outs = append(outs, b)
		idx := map[string]int{}
		for i, r := range recs {
			idx[r.ID] = i
		}
		for i, rr := range res.Requests {
			if rr.Failed != "" || !rr.Sent {
				t.Fatalf("%s: failed %q sent %v", rr.ID, rr.Failed, rr.Sent)
			}
			if p := recs[i].Parent; p != "" {
				if pe := res.Requests[idx[p]].End; rr.Due != pe+5e6 {
					t.Errorf("%s due %d, want parent end %d + 5 ms think", rr.ID, rr.Due, pe)
				}
			}
			if rr.Start != rr.Slot || rr.Slot < rr.Due {
				t.Errorf("%s: due %d slot %d start %d", rr.ID, rr.Due, rr.Slot, rr.Start)
			}
			inFlight := 0
			for _, o := range res.Requests {
				if o.Start <= rr.Start && rr.Start < o.End {
					inFlight++
				}
			}
			if inFlight > 3 {
				t.Errorf("%s sent with %d in flight, cap 3", rr.ID, inFlight)
			}
		}
		s := Summarize(res.Requests)
		if s.Completed != 18 || s.CacheHitRate == nil || *s.CacheHitRate < 0.5 {
			t.Errorf("completed %d hit rate %v", s.Completed, s.CacheHitRate)
		}
	}
	if string(outs[0]) != string(outs[1]) {
		t.Fatal("two runs of the same inputs differ")
	}
}

// Flush empties the cache: the same prompt misses again; without a flush
// the cache carries over between runs, as on a server.
func TestSimTargetFlushAndWarmup(t *testing.T) {
	st := newSimTarget(t, 100000)
	toks := OutputTokens([]int32{1}, 50, traces.DefaultVocab)
	rec := traces.Record{ID: "a", InputLen: 50, Tokens: toks, OutputLen: 2}
	first := runReplay(t, st, Default(), []traces.Record{rec})
	again := runReplay(t, st, Default(), []traces.Record{rec})
	if err := st.Flush(t.Context()); err != nil {
		t.Fatal(err)
	}
	flushed := runReplay(t, st, Default(), []traces.Record{rec})
	got := []int{first.Requests[0].CachedTokens, again.Requests[0].CachedTokens, flushed.Requests[0].CachedTokens}
	if want := []int{0, 49, 0}; !slices.Equal(got, want) {
		t.Fatalf("cached %v, want %v", got, want)
	}
	if !flushed.Start.After(again.Start) {
		t.Errorf("virtual time went back across a flush: %v then %v", again.Start, flushed.Start)
	}
}

// A prompt larger than the KV pool is rejected by the simulator and fails
// alone; the virtual per-request timeout frees the slot at the deadline.
func TestSimTargetRejectsAndTimesOut(t *testing.T) {
	st := newSimTarget(t, 1000)
	recs := []traces.Record{
		{ID: "big", InputLen: 5000, OutputLen: 2},
		{ID: "slow", InputLen: 100, OutputLen: 500},
		{ID: "ok", InputLen: 100, OutputLen: 2},
	}
	cfg := Default()
	cfg.MaxConcurrency, cfg.Timeout = 1, 50e6
	res := runReplay(t, st, cfg, recs)
	s := Summarize(res.Requests)
	if s.FailedReasons["rejected"] != 1 || s.FailedReasons["timeout"] != 1 || s.Completed != 1 {
		t.Fatalf("reasons %v completed %d", s.FailedReasons, s.Completed)
	}
	slow, ok := res.Requests[1], res.Requests[2]
	if slow.E2E() != 50e6 || ok.Start != slow.End {
		t.Errorf("slow e2e %d; ok sent at %d, slow ended %d", slow.E2E(), ok.Start, slow.End)
	}
}

// The simulated target applies the send gap in virtual time exactly.
func TestSimTargetSendGap(t *testing.T) {
	var recs []traces.Record
	for i := range 6 {
		recs = append(recs, traces.Record{ID: fmt.Sprintf("g%d", i), InputLen: 64, OutputLen: 4})
	}
	cfg := Default()
	cfg.MaxConcurrency, cfg.SendGap = 4, 3*time.Millisecond
	res := runReplay(t, newSimTarget(t, 100000), cfg, recs)
	for i, rr := range res.Requests {
		if !rr.Sent || rr.Failed != "" {
			t.Fatalf("%s: sent %v failed %q", rr.ID, rr.Sent, rr.Failed)
		}
		if i > 0 && i < 4 {
			if want := res.Requests[i-1].Start + 3e6; rr.Start != want {
				t.Errorf("%s started at %d, want the previous send + 3 ms = %d", rr.ID, rr.Start, want)
			}
		}
		if i > 0 && rr.Start-res.Requests[i-1].Start < 3e6 {
			t.Errorf("%s started %d ns after %s", rr.ID, rr.Start-res.Requests[i-1].Start, res.Requests[i-1].ID)
		}
	}
}

// TestSimTargetKeepsNoResults: the simulated server behind a replay keeps
// no per-request results, timeline or inter-token latencies of its own
// (the replay measures every request from its events), whichever model it
// is, so that its memory follows the requests in flight.
func TestSimTargetKeepsNoResults(t *testing.T) {
	recs := chatTrace(t, 3, 4)
	for name, target := range map[string]*SimTarget{"sglang": newSimTarget(t, 4000), "llamacpp": newLlamaTarget(t, 2, false)} {
		res := runReplay(t, target, Default(), recs)
		if sum := Summarize(res.Requests); sum.Completed != int64(len(recs)) {
			t.Fatalf("%s: %d of %d requests completed", name, sum.Completed, len(recs))
		}
		kept, err := target.o.Finish()
		if err != nil {
			t.Fatal(err)
		}
		if kept.Requests != nil || kept.Timeline != nil || kept.Summary.MeanITL != 0 || kept.Counters.Requests != int64(len(recs)) {
			t.Errorf("%s: the engine kept %d results, %d samples, ITL p50 %v over %d requests", name,
				len(kept.Requests), len(kept.Timeline), kept.Summary.MeanITL, kept.Counters.Requests)
		}
	}
}
