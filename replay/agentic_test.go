package replay

import (
	"container/heap"
	"path/filepath"
	"testing"

	"github.com/kvsim/kvsim/internal/testutil"
	"github.com/kvsim/kvsim/sim"
	"github.com/kvsim/kvsim/sim/engine"
	"github.com/kvsim/kvsim/sim/hw"
	"github.com/kvsim/kvsim/traces"
)

// pacerStarts runs the pacer in virtual time with request i taking
// service(i) and returns every request's send time.
func pacerStarts(t *testing.T, cfg Config, recs []traces.Record, service func(i int) int64) []int64 {
	t.Helper()
	p := newPacer(cfg, engine.NewSliceSource(recs))
	starts := make([]int64, len(recs))
	var done minHeap[wait]
	var seq uint64
	now := int64(0)
	for !p.allGranted() || len(done) > 0 {
		for _, g := range p.poll(now) {
			starts[g.idx] = g.slot
			seq++
			heap.Push(&done, wait{at: g.slot + service(g.idx), seq: seq, idx: g.idx})
		}
		// Finishes at now come first, then the next wake.
		if len(done) > 0 && done[0].at <= now {
			w := heap.Pop(&done).(wait)
			p.finish(w.idx, w.at)
			continue
		}
		next, ok := p.nextWake()
		if len(done) > 0 && (!ok || done[0].at < next) {
			next, ok = done[0].at, true
		}
		if !ok {
			break
		}
		now = max(now, next)
	}
	return starts
}

// TestPacerReproducesWEKARecording: replayed with their recorded service
// times (api_time), the shared sub-agent files send every request at its
// recorded t.
func TestPacerReproducesWEKARecording(t *testing.T) {
	for _, name := range []string{"trace_0003.json", "trace_0010.json"} {
		p := filepath.Join("../../shared/data/traces/weka_kv_cache_tester_subagents", name)
		r, err := traces.OpenFiles([]string{p}, traces.FormatWEKA)
		if err != nil {
			t.Skipf("shared trace not available: %v", err)
		}
		recs := testutil.ReadAll(t, r.Next)
		r.Close()
		cfg := Default()
		cfg.Pacing = PaceTimestamps
		starts := pacerStarts(t, cfg, recs, func(i int) int64 {
			if o := recs[i].Observed; o != nil {
				return o.E2E
			}
			return 0
		})
		for i, s := range starts {
			if d := s - recs[i].Arrival; d < 0 || d > 1e6 {
				t.Fatalf("%s: %s sent at %d ns, recorded at %d ns", name, recs[i].ID, s, recs[i].Arrival)
			}
		}
	}
}

// readTraceFile reads every record of a trace file.
func readTraceFile(t *testing.T, path string) []traces.Record {
	t.Helper()
	r, err := traces.Open(path, traces.FormatAuto)
	if err != nil {
		t.Skipf("trace not available: %v", err)
	}
	defer r.Close()
	return testutil.ReadAll(t, r.Next)
}

// closedLoopPair runs recs through kvsim sim's closed loop
// (sim.RunClosedLoop) and through a replay against the simulator under
// --timestamps, on the same server, and returns both results. The sim gets
// the prompts and output ids the replay sends, so the two see the same
// tokens.
func closedLoopPair(t *testing.T, cfg sim.Config, cost sim.CostModel, recs []traces.Record) (*engine.Result, *Result) {
	t.Helper()
	direct := make([]traces.Record, len(recs))
	for i, rec := range recs {
		req, err := requestFor(&rec, traces.DefaultVocab, false)
		if err != nil {
			t.Fatal(err)
		}
		rec.Tokens, rec.Blocks, rec.BlockSize = req.Tokens, nil, 0
		rec.InputLen, rec.OutputLen = len(req.Tokens), req.MaxNewTokens
		rec.OutputTokens = OutputTokens(req.Tokens, req.MaxNewTokens, traces.DefaultVocab)
		direct[i] = rec
	}
	s, err := sim.New(cfg, cost)
	if err != nil {
		t.Fatal(err)
	}
	sres, err := s.RunClosedLoop(engine.NewSliceSource(direct))
	if err != nil {
		t.Fatal(err)
	}
	st, err := NewSimTarget(SimConfig{Engine: &sim.Factory{Config: cfg, Cost: cost}})
	if err != nil {
		t.Fatal(err)
	}
	rcfg := Default()
	rcfg.Pacing = PaceTimestamps
	rres := runReplay(t, st, rcfg, recs)
	return sres, rres
}

// TestSimClosedLoopMatchesReplay: kvsim sim (closed loop) releases every
// request of a DAG trace (sub-agents, joins, delays) at the instant kvsim
// replay --target sim sends it.
func TestSimClosedLoopMatchesReplay(t *testing.T) {
	slow := hw.Fitted{Prefill: [4]float64{1e8, 1e6, 1, 0}, Decode: [3]float64{5e7, 0, 1}}
	for _, c := range []struct {
		name, path string
		cost       hw.Fitted
	}{
		{"weka.json", "../traces/testdata/weka.json", testFitted},
		{"weka.json/slow", "../traces/testdata/weka.json", slow},
		{"trace_0010.json/slow", "../../shared/data/traces/weka_kv_cache_tester_subagents/trace_0010.json", slow},
	} {
		t.Run(c.name, func(t *testing.T) {
			if testing.Short() && c.name != "weka.json" && c.name != "weka.json/slow" {
				t.Skip("a long trace: not with -short")
			}
			recs := readTraceFile(t, c.path)
			fitted := c.cost
			sres, rres := closedLoopPair(t, testSimConfig(1<<20), &fitted, recs)
			rel := map[string]engine.RequestResult{}
			for _, r := range sres.Requests {
				rel[r.ID] = r
			}
			waited := 0
			for i, rr := range rres.Requests {
				sr, ok := rel[recs[i].ID]
				if !ok {
					t.Fatalf("%s: not in the sim's results", recs[i].ID)
				}
				if int64(sr.Release) != rr.Start {
					t.Fatalf("%s: sim releases it at %d ns, the replay sends it at %d ns", recs[i].ID, sr.Release, rr.Start)
				}
				if int64(sr.DepWait) != int64(sr.Release)-recs[i].Arrival {
					t.Fatalf("%s: dep wait %d, want release - arrival = %d", recs[i].ID, sr.DepWait, int64(sr.Release)-recs[i].Arrival)
				}
				if sr.DepWait > 0 {
					waited++
				}
			}
			t.Logf("%d requests, %d released after their arrival", len(recs), waited)
		})
	}
}
