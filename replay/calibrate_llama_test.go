package replay

import (
	"bytes"
	"math"
	"strings"
	"testing"

	"github.com/kvsim/kvsim/sim/hw"
	"github.com/kvsim/kvsim/sim/llamacpp"
	"github.com/kvsim/kvsim/traces"
)

// perRequest turns a replay's results into the per-request trace that
// kvsim replay --per-request writes (Arrival = send time, Observed).
func perRequest(t *testing.T, recs []traces.Record, res *Result) []traces.Record {
	t.Helper()
	var buf bytes.Buffer
	w, err := traces.NewWriter(&buf, traces.Header{Format: "kvsim"})
	if err != nil {
		t.Fatal(err)
	}
	if err := WritePerRequest(w, recs, res); err != nil {
		t.Fatal(err)
	}
	rd, err := traces.NewReader(&buf, "per-request", traces.FormatKVSim)
	if err != nil {
		t.Fatal(err)
	}
	var out []traces.Record
	for {
		r, err := rd.Next()
		if err != nil {
			break
		}
		out = append(out, r)
	}
	return out
}

// Calibrating on the simulator's own replay of the calibration trace
// recovers its coefficients: prompt processing within 0.1% (every prompt
// runs alone; a fresh prompt that shares a token with a slot by chance is
// one shape with its cold repeats), decode within 2% (batches decode in
// lockstep except for the calls where a batch's prompts ride along).
func TestCalibrateLlamaRecoversSimulator(t *testing.T) {
	truth := hw.Fitted{Prefill: [4]float64{3e6, 60e3, 40, 0}, Decode: [3]float64{1.2e6, 300e3, 150}}
	cfg := llamacpp.DefaultConfig()
	recs, err := LlamaCalibrationTrace(LlamaCalibrationConfig{Slots: cfg.Slots, SlotContext: cfg.SlotContext(), Seed: 1, Vocab: traces.Vocab{Lo: 1, Hi: 256}})
	if err != nil {
		t.Fatal(err)
	}
	const truthCopy = 0.5  // ns per byte of slot state
	const truthSmall = 400 // ns per pair in a call of at most 32 tokens
	st, err := NewSimTarget(SimConfig{Llama: &cfg, LlamaCost: &llamacpp.CPUCost{Fitted: truth, StateCopy: truthCopy, SmallCall: 32, SmallPair: truthSmall}})
	if err != nil {
		t.Fatal(err)
	}
	rc := Default()
	rc.MaxConcurrency = cfg.Slots
	rc.Vocab = traces.Vocab{Lo: 1, Hi: 256}
	res := runSim(t, st, rc, recs)
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
		case strings.HasPrefix(r.ID, "hit-"):
			if r.CachedTokens != recs[r.Index].InputLen-1 {
				t.Errorf("%s: cached %d, want a full hit", r.ID, r.CachedTokens)
			}
		}
	}
	c, err := CalibrateLlama(perRequest(t, recs, res), cfg, 32)
	if err != nil {
		t.Fatal(err)
	}
	if got := c.Cost.SmallPair; c.Cost.SmallCall != 32 || math.Abs(got-truthSmall) > 1e-2*truthSmall {
		t.Errorf("small calls: %d tokens, %g ns/pair; want 32 and %d within 1%%", c.Cost.SmallCall, got, truthSmall)
	}
	t.Logf("fitted %+v; prefill MAPE %.3f%%, decode MAPE %.3f%%, max batch %.2f", c.Cost, c.PrefillMAPE, c.DecodeMAPE, c.MaxBatch)
	if got := c.Cost.StateCopy; math.Abs(got-truthCopy) > 1e-3*truthCopy {
		t.Errorf("state copy = %g ns/byte, want %g within 0.1%%", got, truthCopy)
	}
	for i := range 3 {
		if got, want := c.Cost.Prefill[i], truth.Prefill[i]; math.Abs(got-want) > 1e-3*want {
			t.Errorf("prefill[%d] = %g, want %g within 0.1%%", i, got, want)
		}
	}
	for i := range 3 {
		if got, want := c.Cost.Decode[i], truth.Decode[i]; math.Abs(got-want) > 0.02*want {
			t.Errorf("decode[%d] = %g, want %g within 2%%", i, got, want)
		}
	}
	if c.MaxBatch < float64(cfg.Slots)-0.1 {
		t.Errorf("largest mean decode batch %.2f, want about %d", c.MaxBatch, cfg.Slots)
	}
	var out bytes.Buffer
	if err := c.WriteLlamaTOML(&out, cfg, "test"); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`kind = "llamacpp"`, "parallel = 4", "[llamacpp.cost]", "prefill = [", "decode = [", "state_copy_ns_per_byte = 0.49", "small_call_tokens = 32", "small_call_pair_ns = "} {
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
	recs, err := LlamaCalibrationTrace(LlamaCalibrationConfig{Slots: cfg.Slots, SlotContext: cfg.SlotContext(), Seed: 2, Vocab: traces.Vocab{Lo: 1, Hi: 256}})
	if err != nil {
		t.Fatal(err)
	}
	st, err := NewSimTarget(SimConfig{Llama: &cfg, LlamaCost: &llamacpp.CPUCost{Fitted: truth}})
	if err != nil {
		t.Fatal(err)
	}
	rc := Default()
	rc.MaxConcurrency = cfg.Slots
	rc.Vocab = traces.Vocab{Lo: 1, Hi: 256}
	pr := perRequest(t, recs, runSim(t, st, rc, recs))
	clean, err := CalibrateLlama(pr, cfg, 0)
	if err != nil {
		t.Fatal(err)
	}
	// Stall every serial request of the second repeat tenfold; later
	// requests are sent that much later (the replay waited for it).
	var shift int64
	for i := range pr {
		pr[i].Arrival += shift
		if strings.Contains(pr[i].ID, "-r2") && !strings.HasPrefix(pr[i].ID, "batch") {
			o := *pr[i].Observed
			o.TTFT *= 10
			o.E2E = o.TTFT + 10*(o.E2E-pr[i].Observed.TTFT)
			shift += o.E2E - pr[i].Observed.E2E
			pr[i].Observed = &o
		}
	}
	noisy, err := CalibrateLlama(pr, cfg, 0)
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
