package calibrate

import (
	"bytes"
	"cmp"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/kvsim/kvsim/internal/testutil"
	"github.com/kvsim/kvsim/replay"
	"github.com/kvsim/kvsim/sim/hw"
	"github.com/kvsim/kvsim/sim/llamacpp"
	"github.com/kvsim/kvsim/traces"
)

// perRequest turns a replay's results into the per-request trace that
// kvsim replay --per-request writes (Arrival = send time, Observed).
func perRequest(t *testing.T, recs []traces.Record, res *replay.Result) []traces.Record {
	t.Helper()
	var buf bytes.Buffer
	w, err := traces.NewWriter(&buf, traces.Header{Format: "kvsim"})
	if err != nil {
		t.Fatal(err)
	}
	if err := replay.WritePerRequest(w, recs, res); err != nil {
		t.Fatal(err)
	}
	rd, err := traces.NewReader(&buf, "per-request", traces.FormatKVSim)
	if err != nil {
		t.Fatal(err)
	}
	return testutil.ReadAll(t, rd.Next)
}

// Calibrating on the simulator's own replay of the calibration trace
// recovers its coefficients: prompt processing within 0.1% (every prompt
// runs alone; a fresh prompt that shares a token with a slot by chance is
// one shape with its cold repeats; each shape's median request is a real
// request, whatever its repeats' sizes), decode within 0.1% (steps are
// read from the streams, the ones that carried another prompt left out).
func TestCalibrateLlamaRecoversSimulator(t *testing.T) {
	truth := hw.Fitted{Prefill: [4]float64{3e6, 60e3, 40, 0}, Decode: [3]float64{1.2e6, 300e3, 150}}
	cfg := llamacpp.DefaultConfig()
	const truthCopy = 0.3    // ns per byte of slot state saved
	const truthFresh = 0.4   // ns more per byte saved beyond the cache's high-water mark
	const truthRestore = 0.3 // ns per byte restored: the save rate (the fit has one rate for both)
	const truthMedium = 90   // ns per pair in a call of 64 to 127 tokens
	const truthSmall = 400   // ns per pair in a call of at most 63 tokens
	recs, res := simCalibrationRun(t, cfg, &llamacpp.CPUCost{Fitted: truth, StateCopy: truthCopy, StateFresh: truthFresh, StateRestore: truthRestore, SmallCall: 63, SmallPair: truthSmall, MediumCall: 127, MediumPair: truthMedium}, 1, 0)
	for _, r := range res.Requests {
		if r.Failed != "" {
			t.Fatalf("%s failed: %s", r.ID, r.Failed)
		}
		switch {
		case strings.HasPrefix(r.ID, "ext-"):
			base := recs[r.Index].InputLen
			if r.CachedTokens == 0 || r.CachedTokens >= base {
				t.Errorf("%s: cached %d of %d", r.ID, r.CachedTokens, base)
			}
		case strings.HasPrefix(r.ID, "back-"):
			if r.CachedTokens != recs[r.Index].InputLen-8 {
				t.Errorf("%s: cached %d of %d, want all but its 8 new tokens (restored)", r.ID, r.CachedTokens, recs[r.Index].InputLen)
			}
		case strings.HasPrefix(r.ID, "hit-"):
			if r.CachedTokens != recs[r.Index].InputLen-1 {
				t.Errorf("%s: cached %d, want a full hit", r.ID, r.CachedTokens)
			}
		}
	}
	c, err := FitLlamaRuns([][]traces.Record{perRequest(t, recs, res)}, cfg, LlamaFit{SmallCall: 63, MediumCall: 127})
	if err != nil {
		t.Fatal(err)
	}
	if got := c.Cost.SmallPair; c.Cost.SmallCall != 63 || math.Abs(got-truthSmall) > 1e-3*truthSmall {
		t.Errorf("small calls: %d tokens, %g ns/pair; want 63 and %d within 0.1%%", c.Cost.SmallCall, got, truthSmall)
	}
	t.Logf("fitted %+v; prefill MAPE %.3f%%, decode MAPE %.3f%%, max batch %.2f", c.Cost, c.PrefillMAPE, c.DecodeMAPE, c.MaxBatch)
	if got := c.Cost.StateCopy; math.Abs(got-truthCopy) > 1e-3*truthCopy {
		t.Errorf("state save = %g ns/byte, want %g within 0.1%%", got, truthCopy)
	}
	if got := c.Cost.StateRestore; math.Abs(got-truthRestore) > 1e-3*truthRestore {
		t.Errorf("state restore = %g ns/byte, want %g within 0.1%%", got, truthRestore)
	}
	if got := c.Cost.StateFresh; math.Abs(got-truthFresh) > 1e-3*truthFresh {
		t.Errorf("fresh memory = %g ns/byte, want %g within 0.1%%", got, truthFresh)
	}
	if got := c.Cost.MediumPair; c.Cost.MediumCall != 127 || math.Abs(got-truthMedium) > 1e-3*truthMedium {
		t.Errorf("medium calls: %d tokens, %g ns/pair; want 127 and %d within 0.1%%", c.Cost.MediumCall, got, truthMedium)
	}
	for i := range 3 {
		if got, want := c.Cost.Prefill[i], truth.Prefill[i]; math.Abs(got-want) > 1e-3*want {
			t.Errorf("prefill[%d] = %g, want %g within 0.1%%", i, got, want)
		}
	}
	for i := range 3 {
		if got, want := c.Cost.Decode[i], truth.Decode[i]; math.Abs(got-want) > 1e-3*want {
			t.Errorf("decode[%d] = %g, want %g within 0.1%%", i, got, want)
		}
	}
	if c.MaxBatch < float64(cfg.Slots)-0.1 {
		t.Errorf("largest mean decode batch %.2f, want about %d", c.MaxBatch, cfg.Slots)
	}
	var out bytes.Buffer
	if err := c.WriteLlamaTOML(&out, cfg, "test"); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`kind = 'llamacpp'`, "parallel = 4", "[llamacpp.cost]", "prefill = [", "decode = [", "state_copy_ns_per_byte = 0.3", "state_fresh_ns_per_byte = 0.4", "state_restore_ns_per_byte = 0.3", "small_call_tokens = 63", "medium_call_tokens = 127", "medium_call_pair_ns = 90.0", "small_call_pair_ns = "} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("TOML lacks %q:\n%s", want, out.String())
		}
	}
}

// The median of each shape's repeats makes the fit insensitive to a
// stalled request: one repeat of every shape slowed tenfold changes
// nothing.
func TestCalibrateLlamaMedianIgnoresStalls(t *testing.T) {
	truth := hw.Fitted{Prefill: [4]float64{3e6, 60e3, 40, 0}, Decode: [3]float64{1.2e6, 300e3, 150}}
	cfg := llamacpp.DefaultConfig()
	recs, res := simCalibrationRun(t, cfg, &llamacpp.CPUCost{Fitted: truth}, 2, 0)
	pr := perRequest(t, recs, res)
	clean, err := FitLlama(pr, cfg, 0)
	if err != nil {
		t.Fatal(err)
	}
	// Stall every serial request of the second repeat tenfold; later
	// requests are sent that much later (the replay waited for it).
	var shift int64
	for i := range pr {
		pr[i].Arrival += shift
		kind, _, _ := strings.Cut(pr[i].ID, "-")
		concurrent := strings.HasPrefix(kind, "batch") || kind == "long" || kind == "lead" || kind == "mid"
		if strings.Contains(pr[i].ID, "-r2") && !concurrent {
			o := *pr[i].Observed
			o.TTFT *= 10
			o.E2E = o.TTFT + 10*(o.E2E-pr[i].Observed.TTFT)
			shift += o.E2E - pr[i].Observed.E2E
			pr[i].Observed = &o
		}
	}
	noisy, err := FitLlama(pr, cfg, 0)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		if a, b := clean.Cost.Prefill[i], noisy.Cost.Prefill[i]; math.Abs(a-b) > 1e-6*a+1e-6 {
			t.Errorf("prefill[%d]: %g clean, %g with stalls", i, a, b)
		}
	}
	if noisy.PrefillMAPEAll <= clean.PrefillMAPEAll {
		t.Errorf("all-sample MAPE %.2f%% with stalls, %.2f%% without: the stalls were not seen", noisy.PrefillMAPEAll, clean.PrefillMAPEAll)
	}
}

func TestLlamaCalibrationTraceChecks(t *testing.T) {
	_, err := LlamaCalibrationTrace(LlamaCalibrationConfig{Slots: 0, SlotContext: 10, Repeats: -1})
	if err == nil || !strings.Contains(err.Error(), "slots") || !strings.Contains(err.Error(), "slot context") || !strings.Contains(err.Error(), "repeats") {
		t.Errorf("err = %v", err)
	}
	recs, err := LlamaCalibrationTrace(LlamaCalibrationConfig{Slots: 2, SlotContext: 512, Repeats: 1})
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range recs {
		if r.InputLen+r.OutputLen > 512 {
			t.Errorf("%s: %d + %d tokens exceed the slot", r.ID, r.InputLen, r.OutputLen)
		}
	}
}

// Each repeat draws its lengths within a quarter of the shape's nominal
// ones (the small extension within 30..50 tokens, below the 64-token
// small-call bound), so the calibration does not measure only the sizes
// llama.cpp's kernels like best.
func TestLlamaCalibrationTraceJitters(t *testing.T) {
	recs, err := LlamaCalibrationTrace(LlamaCalibrationConfig{Slots: 4, SlotContext: 2048, Repeats: 5, Seed: 3})
	if err != nil {
		t.Fatal(err)
	}
	byTag := map[string]map[int]bool{}
	inputs := map[string]int{}
	for _, r := range recs {
		inputs[r.ID] = r.InputLen
		tag, ok := shapeTag(r.ID)
		if !ok {
			t.Fatalf("%s: no shape tag", r.ID)
		}
		kind, size, _ := strings.Cut(tag, "-")
		n := r.InputLen
		if kind == "back" {
			rep := r.ID[strings.LastIndex(r.ID, "-r"):]
			if n != inputs["ext-"+size+rep]+8 {
				t.Errorf("%s: %d tokens, want its extended prompt's %d and 8", r.ID, n, inputs["ext-"+size+rep])
			}
			continue
		}
		if kind == "ext" {
			base, ext, _ := strings.Cut(size, "+")
			n -= inputs["base-"+base+"+"+ext+r.ID[strings.LastIndex(r.ID, "-r"):]]
			size = ext
		} else if _, after, ok := strings.Cut(size, "+"); ok && kind == "base" {
			size = strings.TrimSuffix(size, "+"+after)
		}
		nominal, err := strconv.Atoi(size)
		if err != nil {
			t.Fatalf("%s: size %q", r.ID, size)
		}
		if n < nominal-nominal/4 || n > nominal+nominal/4 {
			t.Errorf("%s: %d tokens, nominal %d", r.ID, n, nominal)
		}
		if kind == "ext" && nominal == 40 && (n < 30 || n > 50) {
			t.Errorf("%s: small extension of %d tokens", r.ID, n)
		}
		if byTag[tag] == nil {
			byTag[tag] = map[int]bool{}
		}
		byTag[tag][n] = true
	}
	for tag, lens := range byTag {
		if len(lens) < 2 {
			t.Errorf("%s: every repeat has the same length %v", tag, lens)
		}
	}
}

func TestShapeTag(t *testing.T) {
	for id, want := range map[string]string{
		"cold-512-r3": "cold-512", "ext-1024+128-r0": "ext-1024+128", "batch3-64-r2-1": "batch3-64",
		"c0/1": "", "x-r": "", "x-rb": "", "batch-r1-x": "", "-r1": "", "sess-r2": "", "cold-r": "",
	} {
		got, ok := shapeTag(id)
		if got != want || ok != (want != "") {
			t.Errorf("shapeTag(%q) = %q, %v; want %q", id, got, ok, want)
		}
	}
}

// Runs of the calibration trace against fresh servers pool their repeats:
// each run's send times start at 0, so they are read one by one (requests
// of different runs never run together), and the fit over two runs
// recovers the coefficients as one run does.
func TestCalibrateLlamaRunsPools(t *testing.T) {
	truth := hw.Fitted{Prefill: [4]float64{3e6, 60e3, 40, 0}, Decode: [3]float64{1.2e6, 300e3, 150}}
	cfg := llamacpp.DefaultConfig()
	cost := &llamacpp.CPUCost{Fitted: truth, StateCopy: 0.5, StateRestore: 0.5, SmallCall: 63, SmallPair: 400, MediumCall: 127, MediumPair: 90, Delay: 7e5}
	var runs [][]traces.Record
	for seed := uint64(1); seed <= 2; seed++ {
		recs, res := simCalibrationRun(t, cfg, cost, seed, 1)
		runs = append(runs, perRequest(t, recs, res))
	}
	// The simulated server sees each request 0.7 ms after its send; told
	// so, the fit takes it out of the TTFTs and writes it back.
	c, err := FitLlamaRuns(runs, cfg, LlamaFit{SmallCall: 63, MediumCall: 127, RequestDelay: 7e5})
	if err != nil {
		t.Fatal(err)
	}
	if c.Cost.Delay != 7e5 {
		t.Errorf("request delay %d ns, want 700000", c.Cost.Delay)
	}
	one, err := FitLlamaRuns(runs[:1], cfg, LlamaFit{SmallCall: 63, MediumCall: 127, RequestDelay: 7e5})
	if err != nil {
		t.Fatal(err)
	}
	if c.PrefillSamples <= one.PrefillSamples {
		t.Errorf("%d prompt samples from two runs, %d from one", c.PrefillSamples, one.PrefillSamples)
	}
	if c.PrefillShapes != one.PrefillShapes {
		t.Errorf("%d shapes from two runs, %d from one: the runs' repeats were not pooled", c.PrefillShapes, one.PrefillShapes)
	}
	for i := range 3 {
		if got, want := c.Cost.Prefill[i], truth.Prefill[i]; math.Abs(got-want) > 1e-3*want {
			t.Errorf("prefill[%d] = %g, want %g", i, got, want)
		}
		if got, want := c.Cost.Decode[i], truth.Decode[i]; math.Abs(got-want) > 1e-3*want {
			t.Errorf("decode[%d] = %g, want %g", i, got, want)
		}
	}
	if math.Abs(c.Cost.StateRestore-0.5) > 5e-4 || math.Abs(c.Cost.StateCopy-0.5) > 5e-4 {
		t.Errorf("copies %g saved, %g restored per byte; want 0.5 both", c.Cost.StateCopy, c.Cost.StateRestore)
	}
	// The same records as one run overlap in time: (almost) no request
	// ran alone, and the fit says so.
	joined, err := FitLlamaRuns([][]traces.Record{append(slices.Clone(runs[0]), runs[1]...)}, cfg, LlamaFit{SmallCall: 63, MediumCall: 127, RequestDelay: 7e5})
	switch {
	case err != nil && !strings.Contains(err.Error(), "measured alone"):
		t.Errorf("two runs read as one: %v", err)
	case err == nil && joined.PrefillSamples >= c.PrefillSamples:
		t.Errorf("two runs read as one: %d prompt samples, not fewer than %d", joined.PrefillSamples, c.PrefillSamples)
	}
	if _, err := FitLlamaRuns(nil, cfg, LlamaFit{SmallCall: 63}); err == nil {
		t.Error("no runs: no error")
	}
	if _, err := FitLlamaRuns(runs, cfg, LlamaFit{RequestDelay: -1}); err == nil {
		t.Error("negative request delay: no error")
	}
}

// A tier no sample needs fits a pair rate of 0, which a config cannot
// hold: the fit drops the tier, says so, and the written config loads.
func TestCalibrateLlamaDropsEmptyTier(t *testing.T) {
	cfg := llamacpp.DefaultConfig()
	recs, res := simCalibrationRun(t, cfg, &llamacpp.CPUCost{Fitted: hw.Fitted{Prefill: [4]float64{3e6, 60e3, 40, 0}, Decode: [3]float64{1.2e6, 300e3, 150}}}, 4, 0)
	pr := perRequest(t, recs, res)
	// No prompt of the trace has 11 new tokens: the medium tier is empty.
	c, err := FitLlamaRuns([][]traces.Record{pr}, cfg, LlamaFit{SmallCall: 10, MediumCall: 11})
	if err != nil {
		t.Fatal(err)
	}
	if c.Cost.MediumCall != 0 || !strings.Contains(c.Method, "medium-call tier was dropped") {
		t.Errorf("medium tier %d tokens at %g ns, method %q; want it dropped", c.Cost.MediumCall, c.Cost.MediumPair, c.Method)
	}
	var out bytes.Buffer
	if err := c.WriteLlamaTOML(&out, cfg, "test"); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(out.String(), "medium_call") {
		t.Errorf("the config still has a medium tier:\n%s", out.String())
	}
}

// simCalibrationRun replays the calibration trace (seed, repeats; 0: the
// default) against the llamacpp model of cfg with cost, at the slot count
// and token ids 1..255, as e2e/fidelity.sh replays it against the server.
func simCalibrationRun(t *testing.T, cfg llamacpp.Config, cost *llamacpp.CPUCost, seed uint64, repeats int) ([]traces.Record, *replay.Result) {
	t.Helper()
	vocab := traces.Vocab{Lo: 1, Hi: 256}
	recs, err := LlamaCalibrationTrace(LlamaCalibrationConfig{Slots: cfg.Slots, SlotContext: cfg.SlotContext(), Repeats: repeats, Seed: seed, Vocab: vocab})
	if err != nil {
		t.Fatal(err)
	}
	rc := replay.Default()
	rc.MaxConcurrency = cfg.Slots
	rc.Vocab = vocab
	return recs, replaySim(t, replay.SimConfig{Engine: &llamacpp.Factory{Config: cfg, Cost: cost}}, rc, recs)
}

// With tiles, the fit recovers the simulator's tiled attention: prompt
// coefficients, the rate of short pairs and the copies within 0.1%, from
// features computed as the simulator computes its calls
// (llamacpp.Attention, micro-batches of -ub).
func TestCalibrateLlamaRecoversTiles(t *testing.T) {
	truth := llamacpp.CPUCost{Fitted: hw.Fitted{Prefill: [4]float64{2e6, 120e3, 110, 0}, Decode: [3]float64{0.8e6, 200e3, 600}},
		StateCopy: 0.3, StateFresh: 0.4, StateRestore: 0.3, Tile: 64, ShortPair: 600}
	cfg := llamacpp.DefaultConfig()
	recs, res := simCalibrationRun(t, cfg, &truth, 3, 1)
	c, err := FitLlamaRuns([][]traces.Record{perRequest(t, recs, res)}, cfg, LlamaFit{Tile: 64})
	if err != nil {
		t.Fatal(err)
	}
	near := func(name string, got, want float64) {
		if math.Abs(got-want) > 1e-3*want {
			t.Errorf("%s = %g, want %g within 0.1%%", name, got, want)
		}
	}
	for i := range 3 {
		near(fmt.Sprintf("prefill[%d]", i), c.Cost.Prefill[i], truth.Prefill[i])
		near(fmt.Sprintf("decode[%d]", i), c.Cost.Decode[i], truth.Decode[i])
	}
	near("short pair", c.Cost.ShortPair, truth.ShortPair)
	near("save", c.Cost.StateCopy, truth.StateCopy)
	near("fresh", c.Cost.StateFresh, truth.StateFresh)
	near("restore", c.Cost.StateRestore, truth.StateRestore)
	if c.Cost.Tile != 64 || c.Cost.SmallCall != 0 || c.Cost.MediumCall != 0 {
		t.Errorf("tile %d, small %d, medium %d; want 64, 0, 0", c.Cost.Tile, c.Cost.SmallCall, c.Cost.MediumCall)
	}
	var out bytes.Buffer
	if err := c.WriteLlamaTOML(&out, cfg, "test"); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"tile_size = 64", "short_pair_ns = 600", "ubatch_size = 512"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("TOML lacks %q:\n%s", want, out.String())
		}
	}
	if strings.Contains(out.String(), "small_call_tokens") {
		t.Errorf("TOML has the call-size tiers with tiles:\n%s", out.String())
	}
	if _, err := FitLlamaRuns([][]traces.Record{perRequest(t, recs, res)}, cfg, LlamaFit{Tile: 64, SmallCall: 63}); err == nil {
		t.Error("tiles with a small-call tier: no error")
	}
}

// A request whose stream had fewer chunks than tokens (the server held
// back a split UTF-8 character) gives no sample: its first chunk can come
// steps after its first token, and a gap can span several steps.
func TestCalibrateLlamaSkipsHeldStreams(t *testing.T) {
	cfg := llamacpp.DefaultConfig()
	cost := &llamacpp.CPUCost{Fitted: hw.Fitted{Prefill: [4]float64{2e6, 120e3, 110, 0}, Decode: [3]float64{0.8e6, 200e3, 600}}, Tile: 64, ShortPair: 600}
	recs, res := simCalibrationRun(t, cfg, cost, 5, 1)
	run := perRequest(t, recs, res)
	base, err := FitLlamaRuns([][]traces.Record{run}, cfg, LlamaFit{Tile: 64})
	if err != nil {
		t.Fatal(err)
	}
	held := slices.Clone(run)
	i := slices.IndexFunc(held, func(r traces.Record) bool { return r.ID == "cold-256-r1" })
	if i < 0 {
		t.Fatal("no cold-256-r1")
	}
	o := *held[i].Observed
	o.ITL = append([]int64{o.ITL[0] + o.ITL[1]}, o.ITL[2:]...) // two tokens in one chunk
	held[i].Observed = &o
	c, err := FitLlamaRuns([][]traces.Record{held}, cfg, LlamaFit{Tile: 64})
	if err != nil {
		t.Fatal(err)
	}
	if c.PrefillSamples != base.PrefillSamples-1 || c.DecodeSamples != base.DecodeSamples-1 {
		t.Errorf("with one held stream: %d prompt and %d decode samples, want one fewer than %d and %d", c.PrefillSamples, c.DecodeSamples, base.PrefillSamples, base.DecodeSamples)
	}
}

// llamaLogOf is the server log of a simulated calibration run, as
// ReadLlamaServerLog reads it: one task per request sent, in send order,
// whose prompt eval time is the truth's time for the prompt's calls (in
// chunks of -b; exact for a request that ran alone), rounded to the log's
// 10 µs, plus extra(record).
func llamaLogOf(pr []traces.Record, cfg llamacpp.Config, truth *llamacpp.CPUCost, extra func(traces.Record) int64) []LlamaLogTask {
	idx := make([]int, len(pr))
	for i := range idx {
		idx[i] = i
	}
	slices.SortStableFunc(idx, func(a, b int) int { return cmp.Compare(pr[a].Arrival, pr[b].Arrival) })
	var log []LlamaLogTask
	for k, i := range idx {
		r := pr[i]
		cached := int64(r.Observed.CachedTokens)
		var eval int64
		for left := int64(r.InputLen) - cached; left > 0; {
			n := min(left, int64(cfg.Batch))
			eval += truth.CallTime([]llamacpp.Chunk{{New: n, Cached: cached}}, cfg.UbatchSize())
			cached += n
			left -= n
		}
		eval = (eval+5000)/10000*10000 + extra(r)
		log = append(log, LlamaLogTask{Task: k, Line: k + 1, Selected: r.Arrival, Launched: r.Arrival, PromptEvalNs: eval, PromptEvalTokens: r.InputLen - r.Observed.CachedTokens, HasEval: true})
	}
	return log
}

// With the server's log, the copy rates come from each request's time
// outside the prompt call (TTFT less the log's prompt eval time), not from
// the prompt fit. A cost that grows with the copies but lies in the prompt
// call (here a third of the copy time added to the call, in the log and in
// the TTFT alike) leaves the logged rates at the truth, where the fit
// without the log takes it for copying.
func TestCalibrateLlamaCopiesFromServerLog(t *testing.T) {
	truth := llamacpp.CPUCost{Fitted: hw.Fitted{Prefill: [4]float64{2e6, 120e3, 110, 0}, Decode: [3]float64{0.8e6, 200e3, 600}},
		StateCopy: 0.3, StateFresh: 0.4, StateRestore: 0.3, Tile: 64, ShortPair: 600, Delay: 500e3}
	cfg := llamacpp.DefaultConfig()
	recs, res := simCalibrationRun(t, cfg, &truth, 3, 1)
	pr := perRequest(t, recs, res)
	fit := LlamaFit{Tile: 64, RequestDelay: truth.Delay}
	near := func(name string, got, want, tol float64) {
		t.Helper()
		if math.Abs(got-want) > tol*want {
			t.Errorf("%s = %g, want %g within %g%%", name, got, want, 100*tol)
		}
	}

	// The log's 10 µs resolution: the copy rates within 2%, the prompt fit
	// (the copies' time taken out of the TTFTs) within 1%. The log begins
	// with a replay's warm-up task, and a request that failed after it
	// reached the server (a client timeout) has its task.
	log := llamaLogOf(pr, cfg, &truth, func(traces.Record) int64 { return 0 })
	warm := LlamaLogTask{Task: -1, Line: 1, PromptEvalNs: 3e6, PromptEvalTokens: 12, HasEval: true}
	withFailure := slices.Clone(pr)
	i := slices.IndexFunc(withFailure, func(r traces.Record) bool { return r.ID == "batch3-64-r1-2" })
	if i < 0 {
		t.Fatal("no batch3-64-r1-2 in the calibration trace")
	}
	failed := *withFailure[i].Observed
	failed.Status, failed.TTFT, failed.CachedTokens = "timeout", 0, -1
	withFailure[i].Observed = &failed
	fit.Logs = [][]LlamaLogTask{append([]LlamaLogTask{warm}, log...)}
	c, err := FitLlamaRuns([][]traces.Record{withFailure}, cfg, fit)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("with the log: %+v; %d copy samples, %d shapes, MAPE %.2f%%, other %.0f ns", c.Cost, c.CopySamples, c.CopyShapes, c.CopyMAPE, c.CopyOtherNs)
	near("copy", c.Cost.StateCopy, truth.StateCopy, 0.02)
	near("restore", c.Cost.StateRestore, truth.StateRestore, 0.02)
	near("fresh", c.Cost.StateFresh, truth.StateFresh, 0.02)
	near("time outside the call and the copies", c.CopyOtherNs, float64(truth.Delay), 0.02)
	for i := range 3 {
		near(fmt.Sprintf("prefill[%d]", i), c.Cost.Prefill[i], truth.Prefill[i], 0.01)
	}
	near("short pair", c.Cost.ShortPair, truth.ShortPair, 0.01)
	if c.CopySamples == 0 || !strings.Contains(c.Method, "server logs") {
		t.Errorf("%d copy samples, method %q: want the logs named", c.CopySamples, c.Method)
	}

	// The confounded server: a third of each request's copy time more in
	// its prompt call (TTFT - eval - delay is the copy time of a request
	// that ran alone).
	extra := map[string]int64{}
	for i := range pr {
		o := pr[i].Observed
		if o == nil || o.TTFT <= 0 {
			continue
		}
		var eval int64
		for _, k := range log {
			if k.Selected == pr[i].Arrival {
				eval = k.PromptEvalNs
			}
		}
		if cp := o.TTFT - eval - truth.Delay; cp > 0 {
			extra[pr[i].ID] = cp / 3
		}
	}
	// The extra time delays the request's first token and end, and every
	// request sent after it.
	conf := slices.Clone(pr)
	slices.SortStableFunc(conf, func(a, b traces.Record) int { return cmp.Compare(a.Arrival, b.Arrival) })
	var shift int64
	for i := range conf {
		conf[i].Arrival += shift
		if e := extra[conf[i].ID]; e > 0 {
			o := *conf[i].Observed
			o.TTFT += e
			o.E2E += e
			conf[i].Observed = &o
			shift += e
		}
	}
	fit.Logs = [][]LlamaLogTask{llamaLogOf(conf, cfg, &truth, func(r traces.Record) int64 { return extra[r.ID] })}
	c, err = FitLlamaRuns([][]traces.Record{conf}, cfg, fit)
	if err != nil {
		t.Fatal(err)
	}
	near("copy, confounded, with the log", c.Cost.StateCopy, truth.StateCopy, 0.02)
	near("fresh, confounded, with the log", c.Cost.StateFresh, truth.StateFresh, 0.02)
	fit.Logs = nil
	c, err = FitLlamaRuns([][]traces.Record{conf}, cfg, fit)
	if err != nil {
		t.Fatal(err)
	}
	if c.Cost.StateCopy < 1.2*truth.StateCopy {
		t.Errorf("copy, confounded, without the log = %g, want it to take up the extra third (about %g)", c.Cost.StateCopy, truth.StateCopy*4/3)
	}
}

// A log that is not the run's is refused: too few tasks, or a task whose
// evaluated tokens differ from its request's new tokens.
func TestCalibrateLlamaRefusesOtherLog(t *testing.T) {
	truth := llamacpp.CPUCost{Fitted: hw.Fitted{Prefill: [4]float64{2e6, 120e3, 110, 0}, Decode: [3]float64{0.8e6, 200e3, 600}}, StateCopy: 0.3, Tile: 64, ShortPair: 600}
	cfg := llamacpp.DefaultConfig()
	recs, res := simCalibrationRun(t, cfg, &truth, 3, 1)
	pr := perRequest(t, recs, res)
	log := llamaLogOf(pr, cfg, &truth, func(traces.Record) int64 { return 0 })
	for _, c := range []struct {
		name string
		logs [][]LlamaLogTask
		want string
	}{
		{"one log for two runs", [][]LlamaLogTask{log}, "1 server logs for 2 runs"},
		{"too few tasks", [][]LlamaLogTask{log[1:], log}, "run 1: server log: "},
		{"shifted", [][]LlamaLogTask{log, append(slices.Clone(log[1:]), log[0])}, "run 2: server log:"},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := FitLlamaRuns([][]traces.Record{pr, pr}, cfg, LlamaFit{Tile: 64, Logs: c.logs})
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("error %v, want it to contain %q", err, c.want)
			}
		})
	}
}

// A request without a TTFT (its stream gave no first token time) gives no
// sample but was still in flight: a request sent beside it is not alone.
func TestCalibrateLlamaInFlightWithoutTTFT(t *testing.T) {
	cfg := llamacpp.DefaultConfig()
	cost := &llamacpp.CPUCost{Fitted: hw.Fitted{Prefill: [4]float64{2e6, 120e3, 110, 0}, Decode: [3]float64{0.8e6, 200e3, 600}}, Tile: 64, ShortPair: 600}
	recs, res := simCalibrationRun(t, cfg, cost, 3, 1)
	pr := perRequest(t, recs, res)
	fit := LlamaFit{Tile: 64}
	pre, _, _, _, err := llamaSamples(pr, nil, "", cfg, fit)
	if err != nil {
		t.Fatal(err)
	}
	i := slices.IndexFunc(pr, func(r traces.Record) bool { return r.ID == "batch2-512-r1-1" })
	if i < 0 {
		t.Fatal("no batch2-512-r1-1 in the calibration trace")
	}
	o := *pr[i].Observed
	o.TTFT = 0
	pr[i].Observed = &o
	pre2, _, _, _, err := llamaSamples(pr, nil, "", cfg, fit)
	if err != nil {
		t.Fatal(err)
	}
	if len(pre2) != len(pre) {
		t.Errorf("%d prompt samples with batch2-512-r1-1's TTFT gone, %d with it: its batch partner became a sample", len(pre2), len(pre))
	}
}

// The fit finds the simulator's extra time of decode steps after a prompt
// call from the streams' token times, and takes it out of the decode
// samples: the steady decode coefficients come out as without it. A
// constant term comes back at every point of the curve.
func TestCalibrateLlamaRecoversAfterPrompt(t *testing.T) {
	truth := llamacpp.CPUCost{Fitted: hw.Fitted{Prefill: [4]float64{2e6, 120e3, 110, 0}, Decode: [3]float64{0.8e6, 200e3, 600}},
		Tile: 64, ShortPair: 600, AfterPromptCurve: []llamacpp.AfterPromptPoint{{Ns: 1.1e6, Decay: 0.5}}}
	cfg := llamacpp.DefaultConfig()
	recs, res := simCalibrationRun(t, cfg, &truth, 3, 2)
	runs := [][]traces.Record{perRequest(t, recs, res)}
	c, err := FitLlamaRuns(runs, cfg, LlamaFit{Tile: 64})
	if err != nil {
		t.Fatal(err)
	}
	within := func(name string, got, want, tol float64) {
		t.Helper()
		if math.Abs(got-want) > tol*math.Abs(want) {
			t.Errorf("%s = %g, want %g within %.1f%%", name, got, want, 100*tol)
		}
	}
	if len(c.Cost.AfterPromptCurve) < 2 || len(c.AfterPromptBins) != len(c.Cost.AfterPromptCurve) {
		t.Fatalf("curve of %d points, %d bins; want several, one per bin", len(c.Cost.AfterPromptCurve), len(c.AfterPromptBins))
	}
	for i, p := range c.Cost.AfterPromptCurve {
		within(fmt.Sprintf("point %d (%d tokens): ns", i, p.Context), p.Ns, 1.1e6, 1e-3)
		within(fmt.Sprintf("point %d (%d tokens): decay", i, p.Context), p.Decay, 0.5, 1e-3)
		b := c.AfterPromptBins[i]
		if b.Context != p.Context || b.From > b.Context || b.Context >= b.To || (i > 0 && b.From < c.AfterPromptBins[i-1].To) || len(b.Extra) != afterPromptCalls {
			t.Errorf("bin %d: %+v after %+v", i, b, c.AfterPromptBins[max(i-1, 0)])
		}
		for j, e := range b.Extra {
			within(fmt.Sprintf("bin %d: extra %d calls after", i, j+1), e, 1.1e6*math.Pow(0.5, float64(j)), 1e-3)
		}
	}
	for i := range 3 {
		within(fmt.Sprintf("decode[%d]", i), c.Cost.Decode[i], truth.Decode[i], 1e-3)
	}
	var out bytes.Buffer
	if err := c.WriteLlamaTOML(&out, cfg, "test"); err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(out.String(), "[[llamacpp.cost.after_prompt]]\ncontext_tokens = "); n != len(c.Cost.AfterPromptCurve) {
		t.Errorf("TOML has %d after-prompt points, want %d:\n%s", n, len(c.Cost.AfterPromptCurve), out.String())
	}
	// Without the term the decode fit spreads the extra over every step.
	off, err := FitLlamaRuns(runs, cfg, LlamaFit{Tile: 64, NoAfterPrompt: true})
	if err != nil {
		t.Fatal(err)
	}
	if off.Cost.AfterPromptCurve != nil || off.Cost.Decode[0] <= truth.Decode[0]*1.05 {
		t.Errorf("without the term: curve %v, decode[0] %g; want none and above %g", off.Cost.AfterPromptCurve, off.Cost.Decode[0], truth.Decode[0]*1.05)
	}
	// A simulator without the term gives none.
	truth.AfterPromptCurve = nil
	recs, res = simCalibrationRun(t, cfg, &truth, 3, 2)
	none, err := FitLlamaRuns([][]traces.Record{perRequest(t, recs, res)}, cfg, LlamaFit{Tile: 64})
	if err != nil {
		t.Fatal(err)
	}
	if none.Cost.AfterPromptCurve != nil {
		t.Errorf("curve %v from a simulator without it, want none", none.Cost.AfterPromptCurve)
	}
}

// A term that grows with the decode call's context comes back as a curve
// through it: at each point within 3% of the truth there.
func TestCalibrateLlamaRecoversAfterPromptCurve(t *testing.T) {
	curve := []llamacpp.AfterPromptPoint{{Context: 200, Ns: 0.4e6, Decay: 0.3}, {Context: 1500, Ns: 1.5e6, Decay: 0.6}, {Context: 2500, Ns: 1.8e6, Decay: 0.7}}
	truth := llamacpp.CPUCost{Fitted: hw.Fitted{Prefill: [4]float64{2e6, 120e3, 110, 0}, Decode: [3]float64{0.8e6, 200e3, 600}},
		Tile: 64, ShortPair: 600, AfterPromptCurve: curve}
	cfg := llamacpp.DefaultConfig()
	recs, res := simCalibrationRun(t, cfg, &truth, 3, 2)
	c, err := FitLlamaRuns([][]traces.Record{perRequest(t, recs, res)}, cfg, LlamaFit{Tile: 64})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("curve %v", c.Cost.AfterPromptCurve)
	if len(c.Cost.AfterPromptCurve) < 3 {
		t.Fatalf("curve %v, want 3 points or more", c.Cost.AfterPromptCurve)
	}
	for _, p := range c.Cost.AfterPromptCurve {
		ns, decay := llamacpp.AfterPromptAt(curve, p.Context)
		if math.Abs(p.Ns-ns) > 0.03*ns || math.Abs(p.Decay-decay) > 0.03*decay {
			t.Errorf("at %d tokens: %g * %g^(j-1), want %g * %g^(j-1)", p.Context, p.Ns, p.Decay, ns, decay)
		}
	}
	for i := range 3 {
		if d, want := c.Cost.Decode[i], truth.Decode[i]; math.Abs(d-want) > 0.01*want {
			t.Errorf("decode[%d] = %g, want %g within 1%%", i, d, want)
		}
	}
}

// The call timeline groups tokens that came within 0.5 ms into one call,
// marks the calls in which a first token came, and counts the calls back
// to the last of them; the first chunk of a stream that held tokens back marks its
// call unsure instead (that prompt may have ended earlier), and every
// step whose window holds it is unsure.
func TestCallTimeline(t *testing.T) {
	ms := func(v float64) int64 { return int64(v * 1e6) }
	spans := []calSpan{{first: ms(10)}, {first: ms(20.2)}}
	times := [][]int64{
		{ms(10), ms(11), ms(12), ms(20), ms(21), ms(22)},
		{ms(20.2), ms(21.2), ms(22.2)},
	}
	for _, held := range []bool{false, true} {
		tl := newCallTimeline(spans, times, []bool{false, held})
		if len(tl.start) != 6 {
			t.Fatalf("held %v: %d calls, want 6: %v", held, len(tl.start), tl.start)
		}
		for _, c := range []struct {
			at     float64
			after  int
			unsure bool
		}{
			{11, 1, false},
			{12, 2, false},
			{20.2, 3, held}, // B's first chunk comes within A's call 3
			{21.2, map[bool]int{false: 1, true: 4}[held], held},
			{22, map[bool]int{false: 2, true: 5}[held], held},
		} {
			after, unsure := tl.after(ms(c.at))
			if after != c.after || unsure != c.unsure {
				t.Errorf("held %v: after(%v ms) = %v, unsure %v; want %v, %v", held, c.at, after, unsure, c.after, c.unsure)
			}
		}
	}
}

// The long decodes: Slots-1 long prompts sent with a leader, after the
// batches; each mid-size prompt waits for the one before (the first for the
// leader), so that one prompt call at a time meets the long decodes; the
// next repeat waits for them all.
func TestLlamaCalibrationTraceLongDecodes(t *testing.T) {
	recs, err := LlamaCalibrationTrace(LlamaCalibrationConfig{Slots: 4, SlotContext: 2048, Repeats: 2, Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	byID := map[string]traces.Record{}
	for _, r := range recs {
		byID[r.ID] = r
	}
	for _, rs := range []string{"-r1", "-r2"} {
		lead := byID["lead-64"+rs]
		var longs []string
		for i := 1; i <= 3; i++ {
			l, ok := byID[fmt.Sprintf("long-1800%s-%d", rs, i)]
			if !ok || l.OutputLen != 160 || l.InputLen < 1350 || l.InputLen+l.OutputLen > 2048 || !slices.Equal(l.WaitFor, lead.WaitFor) {
				t.Fatalf("long-1800%s-%d: %+v (leader waits for %v)", rs, i, l, lead.WaitFor)
			}
			longs = append(longs, l.ID)
		}
		if lead.OutputLen != 16 || !strings.HasPrefix(lead.WaitFor[0], "batch4-512"+rs) {
			t.Errorf("leader %s: %d outputs after %v", lead.ID, lead.OutputLen, lead.WaitFor)
		}
		prev := lead.ID
		for _, n := range []string{"64", "256", "512", "128"} {
			m := byID["mid-"+n+rs]
			if m.OutputLen != 24 || !slices.Equal(m.WaitFor, []string{prev}) {
				t.Errorf("%s: %d outputs after %v, want 24 after %s", m.ID, m.OutputLen, m.WaitFor, prev)
			}
			prev = m.ID
		}
		if rs == "-r1" {
			if next := byID["batch2-64-r2-1"]; !slices.Equal(next.WaitFor, append(longs, prev)) {
				t.Errorf("the next repeat waits for %v, want %v", next.WaitFor, append(longs, prev))
			}
		}
	}
}
