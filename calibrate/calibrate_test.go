package calibrate

import (
	"math"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/kvsim/kvsim/replay"
	"github.com/kvsim/kvsim/sim"
	"github.com/kvsim/kvsim/sim/hw"
	"github.com/kvsim/kvsim/traces"
)

// replaySim replays recs with rc against the in-process simulator of sc
// (kvsim replay --target sim).
func replaySim(t testing.TB, sc replay.SimConfig, rc replay.Config, recs []traces.Record) *replay.Result {
	t.Helper()
	st, err := replay.NewSimTarget(sc)
	if err != nil {
		t.Fatal(err)
	}
	r, err := replay.New(rc, st, replay.WallClock{})
	if err != nil {
		t.Fatal(err)
	}
	res, err := r.Run(t.Context(), recs)
	if err != nil {
		t.Fatal(err)
	}
	return res
}

// calibrationTrace is a concurrency-1 replay of the simulator with known
// fitted coefficients, written as a per-request trace: prompts of 200 to
// 12,000 tokens (some chunked at 8192), half of them sharing a prefix with
// an earlier one, 2 to 17 output tokens.
func calibrationTrace(t testing.TB, truth hw.Fitted, n int) []traces.Record {
	t.Helper()
	cfg := sim.Default(400000)
	rng := rand.New(rand.NewPCG(11, 12))
	var recs []traces.Record
	var prompts [][]int32
	for i := range n {
		var p []int32
		if len(prompts) > 0 && rng.IntN(2) == 0 {
			base := prompts[rng.IntN(len(prompts))]
			p = append(p, base[:1+rng.IntN(len(base))]...)
		}
		extra := 200 + rng.IntN(12000-len(p)+1)
		for range extra {
			p = append(p, int32(1000+rng.IntN(29000)))
		}
		if len(p) > 12000 {
			p = p[:12000]
		}
		prompts = append(prompts, p)
		recs = append(recs, traces.Record{ID: string(rune('A'+i%26)) + strings.Repeat("x", i/26), InputLen: len(p), Tokens: p, OutputLen: 2 + rng.IntN(16)})
	}
	c := replay.Default()
	c.MaxConcurrency = 1
	res := replaySim(t, replay.SimConfig{Engine: &sim.Factory{Config: cfg, Cost: &truth}}, c, recs)
	var out []traces.Record
	for i, rr := range res.Requests {
		rec := recs[i]
		rec.Arrival = rr.Start
		rec.Observed = &traces.Observed{CachedTokens: rr.CachedTokens, TTFT: rr.TTFT(), ITL: rr.ITL, E2E: rr.E2E(), Status: "ok"}
		if rr.Failed != "" {
			t.Fatalf("%s failed: %s", rr.ID, rr.Detail)
		}
		out = append(out, rec)
	}
	return out
}

// Calibrating on the simulator's own measurements recovers the
// coefficients it ran with (a3 and b1 fold into the intercepts at batch 1).
func TestCalibrateRecoversKnownCoefficients(t *testing.T) {
	truth := hw.Fitted{Prefill: [4]float64{2.5e6, 45, 0.015, 4e5}, Decode: [3]float64{7e6, 2e5, 35}}
	recs := calibrationTrace(t, truth, 60)
	c, err := Calibrate(recs, Default())
	if err != nil {
		t.Fatal(err)
	}
	want := []struct {
		name      string
		got, want float64
	}{
		{"a0+a3", c.Fitted.Prefill[0] + c.Fitted.Prefill[3], truth.Prefill[0] + truth.Prefill[3]},
		{"a1", c.Fitted.Prefill[1], truth.Prefill[1]},
		{"a2", c.Fitted.Prefill[2], truth.Prefill[2]},
		{"b0+b1", c.Fitted.Decode[0] + c.Fitted.Decode[1], truth.Decode[0] + truth.Decode[1]},
		{"b2", c.Fitted.Decode[2], truth.Decode[2]},
	}
	for _, w := range want {
		if e := math.Abs(w.got-w.want) / w.want; e > 0.02 {
			t.Errorf("%s = %v, want %v (error %.2f%%)", w.name, w.got, w.want, 100*e)
		}
	}
	t.Logf("fitted %v / %v; R² %.6f %.6f; MAPE %.4f%% %.4f%%", c.Fitted.Prefill, c.Fitted.Decode, c.PrefillR2, c.DecodeR2, c.TTFTMAPE, c.ITLMAPE)
	for _, w := range want {
		t.Logf("%s: %.4f%% off", w.name, 100*math.Abs(w.got-w.want)/w.want)
	}
	if c.PrefillR2 < 0.999 || c.DecodeR2 < 0.999 || c.TTFTMAPE > 0.5 || c.ITLMAPE > 0.5 {
		t.Errorf("fit quality %+v", c)
	}
	var b strings.Builder
	if err := c.WriteTOML(&b, "test"); err != nil || !strings.Contains(b.String(), "[cost.fitted]\nprefill = [") {
		t.Fatalf("toml %q %v", b.String(), err)
	}
}

// The slopes stay non-negative even when the data pull one below zero,
// and the solution matches a brute-force search over the clamped subsets.
func TestNNLSClampsNegativeSlopes(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	var rows [][]float64
	var y []float64
	for range 50 {
		x1, x2 := rng.Float64()*100, rng.Float64()*100
		rows = append(rows, []float64{1, x1, x2})
		y = append(y, 10+3*x1-0.5*x2+rng.NormFloat64())
	}
	x, err := nnlsFreeIntercept(rows, y, false)
	if err != nil {
		t.Fatal(err)
	}
	if x[2] != 0 || x[1] <= 0 {
		t.Fatalf("x = %v, want the negative slope clamped to 0", x)
	}
	// Refit with x2 dropped: the same answer.
	var r1 [][]float64
	for _, r := range rows {
		r1 = append(r1, r[:2])
	}
	x1, err := nnlsFreeIntercept(r1, y, false)
	if err != nil {
		t.Fatal(err)
	}
	if math.Abs(x1[0]-x[0]) > 1e-6*math.Abs(x1[0]) || math.Abs(x1[1]-x[1]) > 1e-6*x1[1] {
		t.Fatalf("active set %v, subset refit %v", x, x1)
	}
}

func TestCalibrateNeedsSamples(t *testing.T) {
	if _, err := Calibrate([]traces.Record{{ID: "a", InputLen: 10, OutputLen: 1, Observed: &traces.Observed{Status: "ok", TTFT: 5, CachedTokens: 0}}}, Default()); err == nil || !strings.Contains(err.Error(), "usable TTFT samples") {
		t.Fatalf("err %v", err)
	}
}

// With 2% multiplicative noise on every measurement (a real server's
// jitter), the coefficients still come back within a few percent.
func TestCalibrateWithNoise(t *testing.T) {
	truth := hw.Fitted{Prefill: [4]float64{2.5e6, 45, 0.015, 0}, Decode: [3]float64{7e6, 0, 35}}
	recs := calibrationTrace(t, truth, 200)
	rng := rand.New(rand.NewPCG(5, 6))
	noisy := func(x int64) int64 { return int64(float64(x) * (1 + 0.02*rng.NormFloat64())) }
	for i := range recs {
		o := recs[i].Observed
		o.TTFT = noisy(o.TTFT)
		for j := range o.ITL {
			o.ITL[j] = noisy(o.ITL[j])
		}
	}
	c, err := Calibrate(recs, Default())
	if err != nil {
		t.Fatal(err)
	}
	got := []float64{c.Fitted.Prefill[0], c.Fitted.Prefill[1], c.Fitted.Prefill[2], c.Fitted.Decode[0], c.Fitted.Decode[2]}
	want := []float64{truth.Prefill[0], truth.Prefill[1], truth.Prefill[2], truth.Decode[0], truth.Decode[2]}
	for i := range got {
		e := math.Abs(got[i]-want[i]) / want[i]
		t.Logf("coefficient %d: %.4g, want %.4g (%.2f%% off)", i, got[i], want[i], 100*e)
		if e > 0.05 {
			t.Errorf("coefficient %d = %v, want %v within 5%%", i, got[i], want[i])
		}
	}
	if c.TTFTMAPE > 3 || c.ITLMAPE > 3 {
		t.Errorf("MAPE %v %v, want about the noise (1.6%%)", c.TTFTMAPE, c.ITLMAPE)
	}
}
