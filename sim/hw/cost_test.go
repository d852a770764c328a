package hw

import (
	"strings"
	"testing"
)

// A synthetic model and GPU with round numbers, so that every term of the
// roofline can be checked by hand.
//
//	body params = 1e9 - 2 * (1000 vocab * 1000 hidden) = 998e6
//	gemm        = 2 * 998e6 FLOP / 100e12 FLOP/s = 19,960 ns per token; LM head 20 ns per sequence
//	attention   = 10 layers * 10 heads * 2 * (100 + 100) / 100e12 = 0.4 ns per (query, key) pair
//	weights     = 2e9 B / 1000 GB/s = 2 ms; KV cell 10 heads * 200 * 10 layers * 2 B = 40000 B = 40 ns
func roundModel() (Model, GPU) {
	return Model{
			Name: "round", Params: 1e9, Layers: 10, Hidden: 1000, Vocab: 1000,
			Heads: 10, KVHeads: 10, HeadDim: 100, Attention: MHA,
			KVDtypeBytes: 2, WeightBytesPerParam: 2, ContextLen: 4096,
		}, GPU{
			Name: "round", MemoryMiB: 81920, PeakTFLOPS: 100, HBMGBps: 1000,
			NVLinkGBps: 100, HostLinkGBps: 10,
		}
}

// idealEfficiency runs at peak with no overheads.
func idealEfficiency() Efficiency {
	return Efficiency{GEMMMFU: 1, Attention: 1, HBM: 1, AllReduce: 1, AllReduceLatencyUs: 10}
}

func mustRoofline(t testing.TB, m Model, g GPU, s Server, e Efficiency) *Roofline {
	t.Helper()
	r, err := NewRoofline(m, g, s, e)
	if err != nil {
		t.Fatalf("NewRoofline() = %v", err)
	}
	return r
}

func TestRooflineByHand(t *testing.T) {
	m, g := roundModel()
	tp1 := mustRoofline(t, m, g, DefaultServer(), idealEfficiency())
	s2 := DefaultServer()
	s2.TPSize = 2
	e2 := idealEfficiency()
	e2.PrefillOverheadUs, e2.DecodeOverheadUs = 1000, 300
	tp2 := mustRoofline(t, m, g, s2, e2)
	cases := []struct {
		name string
		got  int64
		want int64
	}{
		// compute = 19,960*10 + 20 + 0.4*55 = 199,642 ns;
		// memory = 2e6 + 40*(0 cached + 2*10) = 2,000,800 ns (memory bound).
		{"prefill 10", tp1.PrefillTime([]Extend{{New: 10}}), 2_000_800},
		// compute = 19,960*1000 + 20 + 0.4*500,500 = 20,160,220 ns (compute bound:
		// memory is 2e6 + 40*2000 = 2,080,000).
		{"prefill 1000", tp1.PrefillTime([]Extend{{New: 1000}}), 20_160_220},
		// compute = 19,960*1e5 + 20 + 0.4*(1e5*100,001/2) = 1,996,000,000 + 20 + 2,000,020,000.
		{"prefill 100000", tp1.PrefillTime([]Extend{{New: 100000}}), 3_996_020_020},
		// pairs = 1000*9000 + 500,500 = 9,500,500 -> 3,800,200 ns of attention + 19,960,020 of GEMMs.
		{"prefill 1000 after 9000 cached", tp1.PrefillTime([]Extend{{New: 1000, Cached: 9000}}), 23_760_220},
		// Two sequences (the New 0 entry takes no part): 1500 tokens -> 29,940,000; 2 LM heads 40;
		// pairs 500,500 + (500*500 + 125,250) = 875,750 -> 350,300.
		{"prefill batch", tp1.PrefillTime([]Extend{{New: 1000}, {New: 500, Cached: 500}, {New: 0, Cached: 7}}), 30_290_340},
		{"prefill empty", tp1.PrefillTime(nil), 0},
		// memory = 2e6 + 40*(1000 + 4) = 2,040,160; compute 19,980*4 + 0.4*1000 = 80,320.
		{"decode 4", tp1.DecodeTime(4, 1000), 2_040_160},
		// memory = 2e6 + 40*(16,777,216 + 4096) = 673,252,480; compute 19,980*4096 + 0.4*16,777,216
		// = 88,548,966.4.
		{"decode 4096", tp1.DecodeTime(4096, 4096*4096), 673_252_480},
		{"decode empty", tp1.DecodeTime(0, 0), 0},
		// tp 2: weights 1 ms, cell 5 heads -> 20 ns/token, GEMMs and attention halved.
		// all-reduce: 2*10 layers calls; ring 2*(2-1)/2 = 1; 1000*2 B / 100 GB/s = 20 ns per call-token
		// -> 400 ns per token, plus 20*10 µs = 200 µs per forward.
		// prefill: max(9,980,000 + 10 + 100,100, 1e6 + 20*2000) + 400*1000 + 200,000 + 1,000,000 overhead.
		{"prefill tp2", tp2.PrefillTime([]Extend{{New: 1000}}), 11_680_110},
		// decode: (1e6 + 20*(8000 + 8)) + 400*8 + 200,000 + 300,000.
		{"decode tp2", tp2.DecodeTime(8, 8000), 1_663_360},
	}
	for _, c := range cases {
		if c.got != c.want {
			t.Errorf("%s = %d ns, want %d", c.name, c.got, c.want)
		}
	}
}

func TestRooflineMoE(t *testing.T) {
	// 4 routed experts of 3*1000*100 params in each of 10 layers: 12e6
	// params = 24e6 B = 24,000 ns to read all; one expert per token.
	m, g := roundModel()
	m.Experts, m.ExpertsPerToken, m.MoEIntermediate = 4, 1, 100
	m.ActiveParams = m.Params - 9e6 // 3 of 4 experts idle per token
	r := mustRoofline(t, m, g, DefaultServer(), idealEfficiency())
	// batch 1 touches 1 - 3/4 = 1/4 of the experts: 1,976,000 + 6,000 + 40*(0+1).
	if got, want := r.DecodeTime(1, 0), int64(1_982_040); got != want {
		t.Errorf("DecodeTime(1) = %d, want %d", got, want)
	}
	// batch 2: 1 - (3/4)^2 = 7/16: 1,976,000 + 10,500 + 80.
	if got, want := r.DecodeTime(2, 0), int64(1_986_580); got != want {
		t.Errorf("DecodeTime(2) = %d, want %d", got, want)
	}
	// A one-token prefill is memory bound: 1,976,000 + 6,000 + 40*2 = 1,982,080.
	if got, want := r.PrefillTime([]Extend{{New: 1}}), int64(1_982_080); got != want {
		t.Errorf("PrefillTime(1) = %d, want %d", got, want)
	}
	// Prefill compute uses the active params: body 991e6 - 2e6 = 989e6 -> 19,780 ns per token:
	// 197,800,000 + 20 + 0.4*50,005,000 = 217,802,020.
	if got, want := r.PrefillTime([]Extend{{New: 10000}}), int64(217_802_020); got != want {
		t.Errorf("PrefillTime(10000) = %d, want %d", got, want)
	}
}

// TestRooflinePublicFigures checks the presets against public figures, with
// generous bounds: the lower bound is the physical floor (peak FLOP/s or
// peak bandwidth), the upper bound what deployments report.
func TestRooflinePublicFigures(t *testing.T) {
	m8 := mustModel(t, "llama-3.1-8b")
	m70 := mustModel(t, "llama-3.1-70b")
	h100 := mustGPU(t, "h100-sxm")
	r8 := mustRoofline(t, m8, h100, DefaultServer(), DefaultEfficiency())
	s4 := DefaultServer()
	s4.TPSize = 4
	r70 := mustRoofline(t, m70, h100, s4, DefaultEfficiency())
	ms := func(ns int64) float64 { return float64(ns) / 1e6 }
	cases := []struct {
		name   string
		got    float64 // ms
		lo, hi float64
	}{
		// Llama-3.1-8B prefill of 8192 tokens on one H100. FLOPs:
		// 2 * 6.98e9 body params * 8192 = 1.144e14 (GEMMs) + 4 * 32 layers * 32 heads
		// * 128 * 8192*8193/2 = 1.76e13 (causal attention) = 1.32e14; at the dense
		// BF16 peak of 989.4 TFLOP/s that is 133 ms, the floor. End-to-end prefill
		// reaches 40-70% of peak on H100 (cuBLAS BF16 GEMMs of these shapes run at
		// 600-750 TFLOP/s), i.e. 190-330 ms; the model gives 229 ms.
		{"8b prefill 8k", ms(r8.PrefillTime([]Extend{{New: 8192}})), 133, 450},
		// 1024 tokens: 1.43e13 + 2.75e11 FLOPs -> 14.7 ms floor.
		{"8b prefill 1k", ms(r8.PrefillTime([]Extend{{New: 1024}})), 14.7, 50},
		// Decode at batch 1 streams all 16.06 GB of bf16 weights per token: 4.8 ms at
		// 3.35 TB/s. Reported batch-1 decode for 8B bf16 on H100 is 6-8 ms per token
		// (~130-160 tok/s in SGLang and vLLM); SGLang's own docs notebook log shows
		// 9.3 ms with LoRA adapters enabled.
		{"8b decode b1", ms(r8.DecodeTime(1, 1024)), 4.8, 8},
		// Llama-3.1-70B tp 4: 35.3 GB per rank -> 10.5 ms floor; 160 all-reduces per
		// step add ~1.6 ms. Reported tp-4 H100 batch-1 decode is 15-25 ms per token.
		{"70b tp4 decode b1", ms(r70.DecodeTime(1, 1024)), 10.5, 25},
		// Batch 64 with 2k context each: 16.06 GB weights + 64*2048*131072 B = 17.2 GB
		// KV -> 9.9 ms floor; still memory bound.
		{"8b decode b64", ms(r8.DecodeTime(64, 64*2048)), 9.9, 20},
	}
	for _, c := range cases {
		if c.got < c.lo || c.got > c.hi {
			t.Errorf("%s = %.2f ms, want in [%g, %g]", c.name, c.got, c.lo, c.hi)
		}
	}
}

func TestRooflineValidate(t *testing.T) {
	m, g := roundModel()
	_, err := NewRoofline(m, g, DefaultServer(), Efficiency{GEMMMFU: 1.5, AllReduceLatencyUs: -1, DecodeOverheadUs: nan()})
	checkErrors(t, err, []string{
		"hw.roofline.gemm_mfu: must be in (0, 1] (got 1.5)",
		"hw.roofline.attention_efficiency: must be in (0, 1] (got 0)",
		"hw.roofline.hbm_efficiency: must be in (0, 1] (got 0)",
		"hw.roofline.allreduce_efficiency: must be in (0, 1] (got 0)",
		"hw.roofline.allreduce_latency_us: must be >= 0 (got -1)",
		"hw.roofline.decode_overhead_us: must be >= 0 (got NaN)",
	})
	if err := DefaultEfficiency().Validate(); err != nil {
		t.Errorf("DefaultEfficiency().Validate() = %v", err)
	}
	s := DefaultServer()
	s.TPSize, s.DCPSize = 2, 2
	if _, err := NewRoofline(m, g, s, DefaultEfficiency()); err == nil || !strings.Contains(err.Error(), "hw.server.dcp_size") {
		t.Errorf("NewRoofline(mha, dcp 2) = %v, want a dcp_size error", err)
	}
	r := mustRoofline(t, m, g, DefaultServer(), DefaultEfficiency())
	if lines := r.Explain(); len(lines) < 5 || !strings.Contains(lines[0], "round") {
		t.Errorf("Explain() = %q", lines)
	}
}

func TestRooflinePanicsOnNegative(t *testing.T) {
	m, g := roundModel()
	r := mustRoofline(t, m, g, DefaultServer(), DefaultEfficiency())
	for name, f := range map[string]func(){
		"prefill": func() { r.PrefillTime([]Extend{{New: -1}}) },
		"decode":  func() { r.DecodeTime(1, -1) },
	} {
		func() {
			defer func() {
				if p := recover(); p == nil || !strings.HasPrefix(p.(string), "hw: ") {
					t.Errorf("%s: recover() = %v, want an hw: panic", name, p)
				}
			}()
			f()
		}()
	}
}

func TestFitted(t *testing.T) {
	f := Fitted{Prefill: [4]float64{1000, 20, 0.5, 100}, Decode: [3]float64{300, 10, 0.05}}
	if err := f.Validate(); err != nil {
		t.Fatal(err)
	}
	batch := []Extend{{New: 10, Cached: 5}, {New: 3}, {New: 0, Cached: 100}}
	// features [1, 13, 10*5 + 55 + 6 = 111, 2]: 1000 + 260 + 55.5 + 200 = 1515.5 -> 1516.
	if x := PrefillFeatures(batch); x != [4]float64{1, 13, 111, 2} {
		t.Errorf("PrefillFeatures() = %v", x)
	}
	if got := f.PrefillTime(batch); got != 1516 {
		t.Errorf("PrefillTime() = %d, want 1516", got)
	}
	if got := f.PrefillTime([]Extend{{Cached: 5}}); got != 0 {
		t.Errorf("PrefillTime(no new tokens) = %d, want 0", got)
	}
	// 300 + 10*4 + 0.05*1000 = 390.
	if got := f.DecodeTime(4, 1000); got != 390 {
		t.Errorf("DecodeTime(4, 1000) = %d, want 390", got)
	}
	if got := f.DecodeTime(0, 0); got != 0 {
		t.Errorf("DecodeTime(0, 0) = %d, want 0", got)
	}
	neg := Fitted{Prefill: [4]float64{-5000, 1, 0, 0}}
	if got := neg.PrefillTime([]Extend{{New: 10}}); got != 0 {
		t.Errorf("PrefillTime with a negative total = %d, want 0 (clamped)", got)
	}
	bad := Fitted{Prefill: [4]float64{-1, -2, nan(), 0}, Decode: [3]float64{0, 0, -0.5}}
	checkErrors(t, bad.Validate(), []string{
		"hw.fitted.prefill[1]: slope must be >= 0 (got -2)",
		"hw.fitted.prefill[2]: must be finite (got NaN)",
		"hw.fitted.decode[2]: slope must be >= 0 (got -0.5)",
	})
	if len(PrefillFeatureNames) != NumPrefillFeatures || len(DecodeFeatureNames) != NumDecodeFeatures {
		t.Error("feature names do not match the feature counts")
	}
}

// costModel is the interface the simulator declares; both models satisfy it.
type costModel interface {
	PrefillTime(batch []Extend) int64
	DecodeTime(batchSize int, contextTokens int64) int64
}

var (
	_ costModel = (*Roofline)(nil)
	_ costModel = (*Fitted)(nil)
)

func TestCostNoAllocs(t *testing.T) {
	m := mustModel(t, "deepseek-v3")
	g := mustGPU(t, "h200")
	s := DefaultServer()
	s.TPSize = 8
	r := mustRoofline(t, m, g, s, DefaultEfficiency())
	f := &Fitted{Prefill: [4]float64{1, 2, 3, 4}, Decode: [3]float64{1, 2, 3}}
	batch := benchBatch()
	for _, c := range []costModel{r, f} {
		if n := testing.AllocsPerRun(100, func() { c.PrefillTime(batch); c.DecodeTime(64, 1<<20) }); n != 0 {
			t.Errorf("%T: %v allocations per call, want 0", c, n)
		}
	}
}

// Check passes the presets' rooflines at a large server's biggest
// forwards and names the efficiency behind a step longer than MaxStep.
func TestRooflineCheck(t *testing.T) {
	m, g := Model{}, GPU{}
	var err error
	if m, err = ModelPreset("qwen2.5-14b"); err != nil {
		t.Fatal(err)
	}
	if g, err = GPUPreset("h200"); err != nil {
		t.Fatal(err)
	}
	w := Worst{PrefillRequests: 17, Prefill: Extend{New: 963, Cached: 31805}, DecodeBatch: 4096, DecodeContext: 540266}
	for _, c := range []struct {
		edit func(*Efficiency)
		want string
	}{
		{func(*Efficiency) {}, ""},
		{func(e *Efficiency) { e.GEMMMFU = 1e-12 }, "hw.roofline.gemm_mfu: makes the largest prefill forward (17 requests of 963 new tokens behind 31805 cached) take"},
		{func(e *Efficiency) { e.HBM = 1e-9 }, "hw.roofline.hbm_efficiency: makes the largest prefill forward"},
		{func(e *Efficiency) { e.DecodeOverheadUs = 1e30 }, "hw.roofline.decode_overhead_us: makes the largest decode step (4096 requests over 540266 context tokens) take 1e+24 s"},
	} {
		e := DefaultEfficiency()
		c.edit(&e)
		r, err := NewRoofline(m, g, DefaultServer(), e)
		if err != nil {
			t.Fatal(err)
		}
		err = r.Check(w)
		if (err == nil) != (c.want == "") || (err != nil && !strings.HasPrefix(err.Error(), c.want)) {
			t.Errorf("Check(%+v) = %v, want %q", e, err, c.want)
		}
	}
}

// Check on a fitted model names the coefficient of the largest term, and
// an overflowing one is caught rather than wrapped.
func TestFittedCheck(t *testing.T) {
	w := Worst{PrefillRequests: 1, Prefill: Extend{New: 8192}, DecodeBatch: 256, DecodeContext: 1 << 20}
	ok := Fitted{Prefill: [4]float64{1e6, 1e4, 1, 0}, Decode: [3]float64{2e6, 0, 1}}
	if err := ok.Check(w); err != nil {
		t.Fatalf("Check(%+v) = %v", ok, err)
	}
	bad := Fitted{Prefill: [4]float64{1e6, 1e4, 1e20, 0}, Decode: [3]float64{2e6, 1e300, 1}}
	err := bad.Check(w)
	if err == nil || !strings.Contains(err.Error(), "hw.fitted.prefill[2]: makes the largest prefill forward (1 requests of 8192 new tokens behind 0 cached)") ||
		!strings.Contains(err.Error(), "hw.fitted.decode[1]:") {
		t.Fatalf("Check(%+v) = %v", bad, err)
	}
}
