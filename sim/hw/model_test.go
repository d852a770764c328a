package hw

import (
	"errors"
	"strings"
	"testing"

	"github.com/pelletier/go-toml/v2"

	"github.com/kvsim/kvsim/internal/testutil"
)

// shapeParams counts a preset's parameters from its config.json shapes,
// independently of the Params field: embeddings, per-layer attention, MLP
// or MoE, RMSNorm weights, and the LM head when untied. qkvBias is Qwen2's
// attention_bias; qLoraRank is DeepSeek's q_lora_rank; sharedExperts is
// n_shared_experts. It returns the total and the per-token active count.
func shapeParams(m Model, qkvBias bool, qLoraRank, sharedExperts int64) (total, active int64) {
	h, v, L := int64(m.Hidden), int64(m.Vocab), int64(m.Layers)
	total = v * h // embed_tokens
	if !m.TiedEmbeddings {
		total += v * h // lm_head
	}
	total += h // final norm
	var attn int64
	if m.Attention == MLA {
		heads, nope, rope, vd, kvr := int64(m.Heads), int64(m.QKNopeHeadDim), int64(m.QKRopeHeadDim), int64(m.VHeadDim), int64(m.KVLoraRank)
		attn = h*qLoraRank + qLoraRank + // q_a_proj, q_a_layernorm
			qLoraRank*heads*(nope+rope) + // q_b_proj
			h*(kvr+rope) + kvr + // kv_a_proj_with_mqa, kv_a_layernorm
			kvr*heads*(nope+vd) + // kv_b_proj
			heads*vd*h // o_proj
	} else {
		q, kv := int64(m.Heads*m.HeadDim), int64(m.KVHeads*m.HeadDim)
		attn = h*q + 2*h*kv + q*h
		if qkvBias {
			attn += q + 2*kv
		}
	}
	dense := 3 * h * int64(m.Intermediate) // gate, up, down
	total += L * (attn + 2*h)              // attention and two norms per layer
	if m.Experts == 0 {
		total += L * dense
		return total, total
	}
	expert := 3 * h * int64(m.MoEIntermediate)
	moeLayers := L - int64(m.DenseLayers)
	total += int64(m.DenseLayers) * dense
	total += moeLayers * (int64(m.Experts)*expert + sharedExperts*expert + int64(m.Experts)*h + int64(m.Experts)) // experts, shared, gate, correction bias
	active = total - moeLayers*int64(m.Experts-m.ExpertsPerToken)*expert
	return total, active
}

func TestModelPresetParams(t *testing.T) {
	cases := []struct {
		name          string
		qkvBias       bool
		qLora, shared int64
	}{
		{"llama-3.1-8b", false, 0, 0},
		{"llama-3.1-70b", false, 0, 0},
		{"qwen2.5-7b", true, 0, 0},
		{"qwen2.5-14b", true, 0, 0},
		{"deepseek-v3", false, 1536, 1},
		{"smollm-135m", false, 0, 0},
	}
	if len(cases) != len(ModelPresets()) {
		t.Fatalf("ModelPresets() = %v, the test covers %d", ModelPresets(), len(cases))
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			m := mustModel(t, c.name)
			if err := m.Validate(); err != nil {
				t.Fatalf("Validate() = %v", err)
			}
			if m.Name != c.name {
				t.Errorf("Name = %q, want %q", m.Name, c.name)
			}
			total, active := shapeParams(m, c.qkvBias, c.qLora, c.shared)
			if m.Params != total {
				t.Errorf("Params = %d, shapes give %d", m.Params, total)
			}
			if m.activeParams() != active {
				t.Errorf("active params = %d, shapes give %d", m.activeParams(), active)
			}
		})
	}
}

func TestModelPresetFacts(t *testing.T) {
	// Published headline figures the presets must reproduce.
	ds := mustModel(t, "deepseek-v3")
	if ds.Params/1e9 != 671 || ds.activeParams()/1e9 != 37 {
		t.Errorf("deepseek-v3 = %d total / %d active, want 671B / 37B", ds.Params, ds.activeParams())
	}
	// SmolLM-135M as the llama-server recipe builds it: 30 layers, hidden
	// 576, 9 heads, 3 KV heads, head dim 64, context 2048.
	s := mustModel(t, "smollm-135m")
	if s.Layers != 30 || s.Hidden != 576 || s.Heads != 9 || s.KVHeads != 3 || s.HeadDim != 64 || s.ContextLen != 2048 {
		t.Errorf("smollm-135m = %+v", s)
	}
	for _, name := range ModelPresets() {
		m := mustModel(t, name)
		if m.Attention == MHA && m.HeadDim*m.Heads != m.Hidden {
			t.Errorf("%s: head_dim %d * heads %d != hidden %d (these configs have no explicit head_dim)", name, m.HeadDim, m.Heads, m.Hidden)
		}
	}
}

func TestUnknownPreset(t *testing.T) {
	_, err := ModelPreset("llama-9")
	if !errors.Is(err, ErrUnknownPreset) || !strings.Contains(err.Error(), "llama-3.1-8b") {
		t.Errorf("ModelPreset(llama-9) = %v, want ErrUnknownPreset listing the presets", err)
	}
	_, err = GPUPreset("h300")
	if !errors.Is(err, ErrUnknownPreset) || !strings.Contains(err.Error(), "h100-sxm") {
		t.Errorf("GPUPreset(h300) = %v, want ErrUnknownPreset listing the presets", err)
	}
}

func TestCellBytes(t *testing.T) {
	cases := []struct {
		model string
		tp    int
		want  int64
	}{
		// 8 kv heads * (128 + 128) * 32 layers * 2 B = 131072.
		{"llama-3.1-8b", 1, 131072},
		// 8/4 = 2 heads per rank: 2 * 256 * 32 * 2 = 32768.
		{"llama-3.1-8b", 4, 32768},
		// 8/8 = 1 head per rank: 16384.
		{"llama-3.1-8b", 8, 16384},
		// 8/16 = 0 -> at least 1 head, replicated: still 16384.
		{"llama-3.1-8b", 16, 16384},
		// 8 * 256 * 80 * 2 = 327680; tp 4: 2 heads -> 81920.
		{"llama-3.1-70b", 1, 327680},
		{"llama-3.1-70b", 4, 81920},
		// 4 * 256 * 28 * 2 = 57344.
		{"qwen2.5-7b", 1, 57344},
		// 8 * 256 * 48 * 2 = 196608.
		{"qwen2.5-14b", 1, 196608},
		// MLA: (512 + 64) * 61 * 2 = 70272 on every rank.
		{"deepseek-v3", 1, 70272},
		{"deepseek-v3", 8, 70272},
		// 3 * (64 + 64) * 30 * 2 = 23040.
		{"smollm-135m", 1, 23040},
	}
	for _, c := range cases {
		m := mustModel(t, c.model)
		if got := m.CellBytes(c.tp); got != c.want {
			t.Errorf("%s CellBytes(%d) = %d, want %d", c.model, c.tp, got, c.want)
		}
	}
}

func TestModelValidate(t *testing.T) {
	base := mustModel(t, "llama-3.1-8b")
	mla := mustModel(t, "deepseek-v3")
	cases := []struct {
		name string
		m    func() Model
		want []string
	}{
		{"zero", func() Model { return Model{} }, []string{
			"hw.model.params: must be > 0 (got 0)",
			"hw.model.layers: must be > 0 (got 0)",
			"hw.model.hidden: must be > 0 (got 0)",
			"hw.model.vocab: must be > 0 (got 0)",
			"hw.model.heads: must be > 0 (got 0)",
			"hw.model.kv_dtype_bytes: must be > 0 (got 0)",
			"hw.model.weight_bytes_per_param: must be > 0 (got 0)",
			"hw.model.context_len: must be from 2 (room for one prompt token and one generated token) to 1073741824 (got 0)",
			"hw.model.attention: must be mha or mla (got 0)",
		}},
		{"gqa", func() Model { m := base; m.KVHeads = 5; return m }, []string{
			"hw.model.kv_heads: must be > 0 and divide heads (got 5)"}},
		{"active above total", func() Model { m := base; m.ActiveParams = m.Params + 1; return m }, []string{
			"hw.model.active_params: must be in [0, params] (0 means params) (got 8030261249)"}},
		{"embeddings only", func() Model { m := base; m.Params = 2 * 128256 * 4096; return m }, []string{
			"hw.model.active_params: must exceed the embedding and LM head parameters (vocab*hidden each) (got 1050673152)"}},
		{"mla without latent", func() Model { m := mla; m.KVLoraRank = 0; m.VHeadDim = 0; return m }, []string{
			"hw.model.kv_lora_rank: must be > 0 for mla (got 0)",
			"hw.model.v_head_dim: must be > 0 for mla (got 0)"}},
		{"moe", func() Model { m := mla; m.ExpertsPerToken = 300; m.DenseLayers = 61; return m }, []string{
			"hw.model.experts_per_token: must be in [1, experts] (got 300)",
			"hw.model.dense_layers: must be in [0, layers) (got 61)"}},
		{"nan weights", func() Model { m := base; m.WeightBytesPerParam = nan(); return m }, []string{
			"hw.model.weight_bytes_per_param: must be > 0 (got NaN)"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			checkErrors(t, c.m().Validate(), c.want)
		})
	}
}

// checkErrors asserts that err joins exactly the want messages, in order.
func checkErrors(t *testing.T, err error, want []string) {
	t.Helper()
	if err == nil {
		t.Fatalf("error = nil, want %q", want)
	}
	got := strings.Split(err.Error(), "\n")
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("error =\n%s\nwant\n%s", err, strings.Join(want, "\n"))
	}
}

func TestAttentionText(t *testing.T) {
	testutil.TextRoundTrip(t, MHA, MLA)
	var a Attention
	if err := a.UnmarshalText([]byte("gqa")); err == nil {
		t.Error("UnmarshalText(gqa) = nil error")
	}
	if _, err := Attention(0).MarshalText(); err == nil {
		t.Error("MarshalText(0) = nil error")
	}
}

// TestTOMLTags decodes a study's [hw] tables the way package configs will,
// so a renamed tag or an undecodable type shows up here.
func TestTOMLTags(t *testing.T) {
	const doc = `
[model]
name = "tiny"
params = 1000000
layers = 2
hidden = 64
vocab = 100
heads = 4
kv_heads = 2
head_dim = 16
attention = "mha"
kv_dtype_bytes = 2
weight_bytes_per_param = 2
context_len = 4096

[gpu]
name = "g"
memory_mib = 81559
peak_tflops = 989.4
hbm_gbps = 3350
nvlink_gbps = 450
host_link_gbps = 63
host_link_latency_us = 10

[server]
tp_size = 2
page_size = 64
hicache_size = 100

[roofline]
gemm_mfu = 0.5

[fitted]
prefill = [1000, 20, 0.5, 100]
decode = [300, 10, 0.05]
`
	var cfg struct {
		Model    Model      `toml:"model"`
		GPU      GPU        `toml:"gpu"`
		Server   Server     `toml:"server"`
		Roofline Efficiency `toml:"roofline"`
		Fitted   Fitted     `toml:"fitted"`
	}
	cfg.Server = DefaultServer()
	cfg.Roofline = DefaultEfficiency()
	dec := toml.NewDecoder(strings.NewReader(doc))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&cfg); err != nil {
		t.Fatal(err)
	}
	if cfg.Model.Attention != MHA || cfg.Model.HeadDim != 16 || cfg.GPU.MemoryMiB != 81559 {
		t.Errorf("decoded model/gpu = %+v / %+v", cfg.Model, cfg.GPU)
	}
	if cfg.Server.TPSize != 2 || cfg.Server.PageSize != 64 || cfg.Server.HiCacheSizeGB != 100 || cfg.Server.HiCacheRatio != 2 {
		t.Errorf("decoded server = %+v (defaults must survive)", cfg.Server)
	}
	if cfg.Roofline.GEMMMFU != 0.5 || cfg.Roofline.HBM != 0.8 {
		t.Errorf("decoded roofline = %+v", cfg.Roofline)
	}
	if cfg.Fitted.Prefill != [4]float64{1000, 20, 0.5, 100} || cfg.Fitted.Decode != [3]float64{300, 10, 0.05} {
		t.Errorf("decoded fitted = %+v", cfg.Fitted)
	}
	if err := errors.Join(cfg.Model.Validate(), cfg.GPU.Validate(), cfg.Server.Validate(), cfg.Roofline.Validate(), cfg.Fitted.Validate()); err != nil {
		t.Errorf("Validate() = %v", err)
	}
}
