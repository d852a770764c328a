package hw

import (
	"errors"
	"fmt"
	"maps"
	"math"
	"slices"
	"strconv"
	"strings"

	"github.com/kvsim/kvsim/internal/fielderr"
)

// Attention is a model's attention kind, which decides how much KV cache one
// token takes. The zero value is invalid.
type Attention int

const (
	// MHA is multi-head attention, including grouped-query attention (GQA):
	// every layer stores a key and a value vector per KV head per token.
	MHA Attention = 1 + iota
	// MLA is DeepSeek's multi-head latent attention: every layer stores one
	// compressed latent (kv_lora_rank) plus a shared RoPE key
	// (qk_rope_head_dim) per token, the same on every TP rank.
	MLA
)

var attentionNames = [...]string{MHA: "mha", MLA: "mla"}

// String returns "mha" or "mla".
func (a Attention) String() string {
	if a > 0 && int(a) < len(attentionNames) {
		return attentionNames[a]
	}
	return strconv.Itoa(int(a))
}

// MarshalText implements [encoding.TextMarshaler], so TOML writes "mha"/"mla".
func (a Attention) MarshalText() ([]byte, error) {
	if a != MHA && a != MLA {
		return nil, fmt.Errorf("hw: invalid attention kind %d", int(a))
	}
	return []byte(a.String()), nil
}

// UnmarshalText implements [encoding.TextUnmarshaler]: "mha" or "mla".
func (a *Attention) UnmarshalText(b []byte) error {
	switch string(b) {
	case "mha":
		*a = MHA
	case "mla":
		*a = MLA
	default:
		return fmt.Errorf(`expected "mha" or "mla", found %q`, b)
	}
	return nil
}

// Model is the shape of a decoder-only transformer, as far as memory and
// time need it. Field names follow the Hugging Face config.json keys given
// in each comment; counts are plain integers, not thousands or billions.
type Model struct {
	// Name identifies the model in reports, e.g. "llama-3.1-8b".
	Name string `toml:"name"`
	// Params is the total parameter count (the safetensors total), which
	// sets the weight memory. > 0.
	Params int64 `toml:"params"`
	// ActiveParams is the parameter count one token passes through (MoE:
	// shared parts plus experts_per_token routed experts; it includes the
	// embedding and LM head, as published totals do). 0 means Params (a
	// dense model). Sets the GEMM FLOPs per token.
	ActiveParams int64 `toml:"active_params"`
	// Layers is num_hidden_layers. > 0.
	Layers int `toml:"layers"`
	// Hidden is hidden_size. > 0.
	Hidden int `toml:"hidden"`
	// Intermediate is intermediate_size (dense MLP width); informational
	// here, since FLOPs come from ActiveParams.
	Intermediate int `toml:"intermediate"`
	// Vocab is vocab_size; the LM head GEMM runs once per sequence per step.
	Vocab int `toml:"vocab"`
	// TiedEmbeddings is tie_word_embeddings: the LM head reuses the
	// embedding matrix (counted once in Params).
	TiedEmbeddings bool `toml:"tied_embeddings"`
	// Heads is num_attention_heads (query heads). > 0.
	Heads int `toml:"heads"`
	// KVHeads is num_key_value_heads (MHA/GQA). MHA: > 0 and divides Heads.
	KVHeads int `toml:"kv_heads"`
	// HeadDim is head_dim (hidden_size / num_attention_heads when the config
	// has no head_dim). MHA: > 0. Unused for MLA.
	HeadDim int `toml:"head_dim"`
	// VHeadDim is v_head_dim. MHA: 0 means HeadDim. MLA: required (the
	// value head width used in prefill attention).
	VHeadDim int `toml:"v_head_dim"`
	// Attention is "mha" (MHA and GQA) or "mla".
	Attention Attention `toml:"attention"`
	// KVLoraRank is kv_lora_rank, the MLA latent width. MLA: > 0.
	KVLoraRank int `toml:"kv_lora_rank"`
	// QKRopeHeadDim is qk_rope_head_dim. MLA: > 0.
	QKRopeHeadDim int `toml:"qk_rope_head_dim"`
	// QKNopeHeadDim is qk_nope_head_dim. MLA: > 0.
	QKNopeHeadDim int `toml:"qk_nope_head_dim"`
	// Experts is n_routed_experts (0 for a dense model).
	Experts int `toml:"experts"`
	// ExpertsPerToken is num_experts_per_tok. MoE: in [1, Experts].
	ExpertsPerToken int `toml:"experts_per_token"`
	// MoEIntermediate is moe_intermediate_size, the width of one routed
	// expert (gate, up and down projections: 3*hidden*width parameters).
	MoEIntermediate int `toml:"moe_intermediate"`
	// DenseLayers is first_k_dense_replace: the leading layers with a dense
	// MLP instead of experts. MoE: in [0, Layers).
	DenseLayers int `toml:"dense_layers"`
	// KVDtypeBytes is the size of one KV cache element: 2 for bf16/fp16
	// (SGLang's --kv-cache-dtype auto with a bf16 model), 1 for fp8. > 0.
	KVDtypeBytes int `toml:"kv_dtype_bytes"`
	// WeightBytesPerParam is the average stored size of one parameter: 2
	// for bf16, 1 for fp8 checkpoints, 1.0625 for GGUF Q8_0. > 0.
	WeightBytesPerParam float64 `toml:"weight_bytes_per_param"`
	// ContextLen is SGLang's context_len: max_position_embeddings (times
	// the rope_scaling factor only for rope types without
	// original_max_position_embeddings, which none of the presets need).
	// > 0. It sets the default request-slot pool size.
	ContextLen int64 `toml:"context_len"`
}

// ErrUnknownPreset is matched (errors.Is) by the errors of [ModelPreset] and
// [GPUPreset].
var ErrUnknownPreset = errors.New("unknown preset")

// modelPresets are taken from each model's Hugging Face config.json; Params
// is the safetensors total, which model_test.go recomputes from the shapes.
var modelPresets = map[string]Model{
	// meta-llama/Llama-3.1-8B-Instruct config.json: hidden_size 4096,
	// intermediate_size 14336, num_hidden_layers 32, num_attention_heads 32,
	// num_key_value_heads 8 (head_dim 4096/32 = 128), vocab_size 128256,
	// max_position_embeddings 131072 (rope_type llama3: SGLang applies no
	// factor), tie_word_embeddings false, torch_dtype bfloat16.
	// 8,030,261,248 parameters.
	"llama-3.1-8b": {
		Name: "llama-3.1-8b", Params: 8_030_261_248,
		Layers: 32, Hidden: 4096, Intermediate: 14336, Vocab: 128256,
		Heads: 32, KVHeads: 8, HeadDim: 128, Attention: MHA,
		KVDtypeBytes: 2, WeightBytesPerParam: 2, ContextLen: 131072,
	},
	// meta-llama/Llama-3.1-70B-Instruct config.json: hidden_size 8192,
	// intermediate_size 28672, num_hidden_layers 80, num_attention_heads 64,
	// num_key_value_heads 8 (head_dim 128), vocab_size 128256,
	// max_position_embeddings 131072, tie_word_embeddings false, bfloat16.
	// 70,553,706,496 parameters.
	"llama-3.1-70b": {
		Name: "llama-3.1-70b", Params: 70_553_706_496,
		Layers: 80, Hidden: 8192, Intermediate: 28672, Vocab: 128256,
		Heads: 64, KVHeads: 8, HeadDim: 128, Attention: MHA,
		KVDtypeBytes: 2, WeightBytesPerParam: 2, ContextLen: 131072,
	},
	// Qwen/Qwen2.5-7B-Instruct config.json: hidden_size 3584,
	// intermediate_size 18944, num_hidden_layers 28, num_attention_heads 28,
	// num_key_value_heads 4 (head_dim 128), vocab_size 152064,
	// max_position_embeddings 32768 (the Instruct release; the base model
	// says 131072), tie_word_embeddings false, q/k/v biases, bfloat16.
	// 7,615,616,512 parameters.
	"qwen2.5-7b": {
		Name: "qwen2.5-7b", Params: 7_615_616_512,
		Layers: 28, Hidden: 3584, Intermediate: 18944, Vocab: 152064,
		Heads: 28, KVHeads: 4, HeadDim: 128, Attention: MHA,
		KVDtypeBytes: 2, WeightBytesPerParam: 2, ContextLen: 32768,
	},
	// Qwen/Qwen2.5-14B-Instruct config.json: hidden_size 5120,
	// intermediate_size 13824, num_hidden_layers 48, num_attention_heads 40,
	// num_key_value_heads 8 (head_dim 128), vocab_size 152064,
	// max_position_embeddings 32768, tie_word_embeddings false, q/k/v
	// biases, bfloat16. 14,770,033,664 parameters.
	"qwen2.5-14b": {
		Name: "qwen2.5-14b", Params: 14_770_033_664,
		Layers: 48, Hidden: 5120, Intermediate: 13824, Vocab: 152064,
		Heads: 40, KVHeads: 8, HeadDim: 128, Attention: MHA,
		KVDtypeBytes: 2, WeightBytesPerParam: 2, ContextLen: 32768,
	},
	// deepseek-ai/DeepSeek-V3 config.json: hidden_size 7168,
	// intermediate_size 18432 (the 3 dense layers), moe_intermediate_size
	// 2048, num_hidden_layers 61, first_k_dense_replace 3,
	// n_routed_experts 256, n_shared_experts 1, num_experts_per_tok 8,
	// num_attention_heads 128, num_key_value_heads 128 (unused by MLA),
	// q_lora_rank 1536, kv_lora_rank 512, qk_rope_head_dim 64,
	// qk_nope_head_dim 128, v_head_dim 128, vocab_size 129280,
	// max_position_embeddings 163840 (rope_scaling yarn has
	// original_max_position_embeddings, so SGLang applies no factor),
	// tie_word_embeddings false, FP8 block-quantized weights
	// (quantization_config fp8 e4m3, 128x128 blocks). 671B parameters
	// without the multi-token-prediction layer (which SGLang loads only for
	// speculative decoding): 671,026,419,200 counted from these shapes
	// (with the gates' e_score_correction_bias), 37,552,297,472 active; KV
	// cache bf16.
	"deepseek-v3": {
		Name: "deepseek-v3", Params: 671_026_419_200, ActiveParams: 37_552_297_472,
		Layers: 61, Hidden: 7168, Intermediate: 18432, Vocab: 129280,
		Heads: 128, KVHeads: 128, VHeadDim: 128, Attention: MLA,
		KVLoraRank: 512, QKRopeHeadDim: 64, QKNopeHeadDim: 128,
		Experts: 256, ExpertsPerToken: 8, MoEIntermediate: 2048, DenseLayers: 3,
		KVDtypeBytes: 2, WeightBytesPerParam: 1, ContextLen: 163840,
	},
	// HuggingFaceTB/SmolLM-135M config.json: hidden_size 576,
	// intermediate_size 1536, num_hidden_layers 30, num_attention_heads 9,
	// num_key_value_heads 3 (head_dim 64), vocab_size 49152,
	// max_position_embeddings 2048, tie_word_embeddings true.
	// 134,515,008 parameters. The shapes of the llama-server recipe's
	// smol135m (shared/tools/llama-server/make_random_gguf.py), which is
	// quantized to GGUF Q8_0 (34 bytes per block of 32 weights = 1.0625 B)
	// with an f16 KV cache (llama.cpp's default). That recipe writes a
	// 32768-token context into the GGUF; SmolLM's own is 2048.
	"smollm-135m": {
		Name: "smollm-135m", Params: 134_515_008,
		Layers: 30, Hidden: 576, Intermediate: 1536, Vocab: 49152, TiedEmbeddings: true,
		Heads: 9, KVHeads: 3, HeadDim: 64, Attention: MHA,
		KVDtypeBytes: 2, WeightBytesPerParam: 1.0625, ContextLen: 2048,
	},
}

// ModelPreset returns the named model preset (see [ModelPresets]).
func ModelPreset(name string) (Model, error) { return preset(modelPresets, "model", name) }

// ModelPresets lists the model preset names, sorted.
func ModelPresets() []string { return slices.Sorted(maps.Keys(modelPresets)) }

// preset returns the preset called name in table, or an error matching
// [ErrUnknownPreset] that lists the kind's presets.
func preset[T any](table map[string]T, kind, name string) (T, error) {
	v, ok := table[name]
	if !ok {
		return v, fmt.Errorf("%s %w %q (want one of %s)", kind, ErrUnknownPreset, name, strings.Join(slices.Sorted(maps.Keys(table)), ", "))
	}
	return v, nil
}

// MaxContextLen bounds a model's context length: 2^30 tokens.
const MaxContextLen = 1 << 30

// Validate reports every invalid field at once, each named by its key path
// in a study, as a [fielderr.Error] (hw.model.<key>).
func (m Model) Validate() error {
	var errs []error
	bad := func(key, rule string, got any) {
		errs = append(errs, fielderr.New(fielderr.Key("hw", "model", key), "%s (got %v)", rule, got))
	}
	m.validateShape(bad)
	m.validateBounds(bad)
	m.validateAttention(bad)
	m.validateExperts(bad)
	if len(errs) == 0 {
		// Only meaningful once the parts are valid.
		if body := m.bodyActiveParams(); body <= 0 {
			bad("active_params", "must exceed the embedding and LM head parameters (vocab*hidden each)", m.activeParams())
		}
		if m.Experts > 0 && m.routedExpertParams() >= m.Params {
			bad("params", "must exceed the routed expert parameters experts*3*hidden*moe_intermediate*(layers-dense_layers)", m.Params)
		}
	}
	return errors.Join(errs...)
}

// badKey records that the field at key breaks rule; got is its value.
type badKey func(key, rule string, got any)

// validateShape checks the sizes every model needs and the context length.
func (m Model) validateShape(bad badKey) {
	if m.Params <= 0 {
		bad("params", "must be > 0", m.Params)
	}
	if m.ActiveParams < 0 || m.ActiveParams > m.Params {
		bad("active_params", "must be in [0, params] (0 means params)", m.ActiveParams)
	}
	if m.Layers <= 0 {
		bad("layers", "must be > 0", m.Layers)
	}
	if m.Hidden <= 0 {
		bad("hidden", "must be > 0", m.Hidden)
	}
	if m.Intermediate < 0 {
		bad("intermediate", "must be >= 0", m.Intermediate)
	}
	if m.Vocab <= 0 {
		bad("vocab", "must be > 0", m.Vocab)
	}
	if m.Heads <= 0 {
		bad("heads", "must be > 0", m.Heads)
	}
	if m.KVDtypeBytes <= 0 {
		bad("kv_dtype_bytes", "must be > 0", m.KVDtypeBytes)
	}
	if !(m.WeightBytesPerParam > 0) || math.IsInf(m.WeightBytesPerParam, 0) {
		bad("weight_bytes_per_param", "must be > 0", m.WeightBytesPerParam)
	}
	if m.ContextLen < 2 || m.ContextLen > MaxContextLen {
		// SGLang serves a request only while prompt + output < context_len
		// (tokenizer_manager._validate_one_request): below 2 no request,
		// one prompt token and one generated, can run. Above 2^30 tokens
		// (a thousand times today's longest contexts) the sizing's
		// products would overflow.
		bad("context_len", fmt.Sprintf("must be from 2 (room for one prompt token and one generated token) to %d", MaxContextLen), m.ContextLen)
	}
}

// validateBounds checks upper bounds far past any real model, so that the
// sizing's products stay inside int64 and float64's exact integers.
func (m Model) validateBounds(bad badKey) {
	for _, c := range []struct {
		key string
		v   float64
		max float64
	}{
		{"params", float64(m.Params), 1e16}, {"active_params", float64(m.ActiveParams), 1e16},
		{"layers", float64(m.Layers), 1 << 16}, {"hidden", float64(m.Hidden), 1 << 24},
		{"intermediate", float64(m.Intermediate), 1 << 26}, {"vocab", float64(m.Vocab), 1 << 31},
		{"heads", float64(m.Heads), 1 << 20}, {"kv_heads", float64(m.KVHeads), 1 << 20},
		{"head_dim", float64(m.HeadDim), 1 << 20}, {"v_head_dim", float64(m.VHeadDim), 1 << 20},
		{"kv_lora_rank", float64(m.KVLoraRank), 1 << 20}, {"qk_rope_head_dim", float64(m.QKRopeHeadDim), 1 << 20},
		{"qk_nope_head_dim", float64(m.QKNopeHeadDim), 1 << 20},
		{"kv_dtype_bytes", float64(m.KVDtypeBytes), 64}, {"weight_bytes_per_param", m.WeightBytesPerParam, 64},
	} {
		if c.v > c.max && !math.IsInf(c.v, 1) { // +Inf is refused above
			bad(c.key, "must be at most "+plainNum(c.max), plainNum(c.v))
		}
	}
}

// validateAttention checks the attention kind and its head shapes.
func (m Model) validateAttention(bad badKey) {
	switch m.Attention {
	case MHA:
		if m.KVHeads <= 0 || (m.Heads > 0 && m.Heads%m.KVHeads != 0) {
			bad("kv_heads", "must be > 0 and divide heads", m.KVHeads)
		}
		if m.HeadDim <= 0 {
			bad("head_dim", "must be > 0 for mha", m.HeadDim)
		}
		if m.VHeadDim < 0 {
			bad("v_head_dim", "must be >= 0 (0 means head_dim)", m.VHeadDim)
		}
	case MLA:
		if m.KVLoraRank <= 0 {
			bad("kv_lora_rank", "must be > 0 for mla", m.KVLoraRank)
		}
		if m.QKRopeHeadDim <= 0 {
			bad("qk_rope_head_dim", "must be > 0 for mla", m.QKRopeHeadDim)
		}
		if m.QKNopeHeadDim <= 0 {
			bad("qk_nope_head_dim", "must be > 0 for mla", m.QKNopeHeadDim)
		}
		if m.VHeadDim <= 0 {
			bad("v_head_dim", "must be > 0 for mla", m.VHeadDim)
		}
	default:
		bad("attention", "must be mha or mla", m.Attention)
	}
}

// validateExperts checks the mixture-of-experts fields.
func (m Model) validateExperts(bad badKey) {
	if m.Experts < 0 {
		bad("experts", "must be >= 0", m.Experts)
	}
	if m.Experts > 0 {
		if m.ExpertsPerToken < 1 || m.ExpertsPerToken > m.Experts {
			bad("experts_per_token", "must be in [1, experts]", m.ExpertsPerToken)
		}
		if m.MoEIntermediate <= 0 {
			bad("moe_intermediate", "must be > 0 when experts > 0", m.MoEIntermediate)
		}
		if m.DenseLayers < 0 || (m.Layers > 0 && m.DenseLayers >= m.Layers) {
			bad("dense_layers", "must be in [0, layers)", m.DenseLayers)
		}
	}
}

// activeParams is ActiveParams, or Params for a dense model.
func (m Model) activeParams() int64 {
	if m.ActiveParams == 0 {
		return m.Params
	}
	return m.ActiveParams
}

// lmHeadParams is the LM head's vocab*hidden, a GEMM run once per sequence.
func (m Model) lmHeadParams() int64 { return int64(m.Vocab) * int64(m.Hidden) }

// bodyActiveParams is the parameters every token multiplies through: the
// active count minus the embedding table (a lookup, no FLOPs) and the LM
// head (run for the last token of each sequence only).
func (m Model) bodyActiveParams() int64 {
	body := m.activeParams() - m.lmHeadParams() // the embedding table
	if !m.TiedEmbeddings {
		body -= m.lmHeadParams() // a separate LM head matrix
	}
	return body
}

// routedExpertParams is the parameters of all routed experts of all MoE
// layers (0 for a dense model).
func (m Model) routedExpertParams() int64 {
	if m.Experts == 0 {
		return 0
	}
	return int64(m.Experts) * 3 * int64(m.Hidden) * int64(m.MoEIntermediate) * int64(m.Layers-m.DenseLayers)
}

// vHeadDim is the value head width.
func (m Model) vHeadDim() int {
	if m.VHeadDim == 0 {
		return m.HeadDim
	}
	return m.VHeadDim
}

// kvHeadsPerRank is SGLang's get_num_kv_heads(tp): the KV heads one rank
// stores, at least one (heads are replicated when there are fewer than tp).
func (m Model) kvHeadsPerRank(tp int) int {
	return max(1, m.KVHeads/tp)
}

// CellBytes is the KV cache bytes one token takes on one rank across all
// layers: SGLang's cell_size (model_runner profile_max_num_token) and the
// host pool's size_per_token.
//
//	MHA: kv_heads_per_rank * (head_dim + v_head_dim) * layers * kv_dtype_bytes
//	MLA: (kv_lora_rank + qk_rope_head_dim) * layers * kv_dtype_bytes
//
// kv_heads_per_rank is max(1, kv_heads / tp). MLA's latent is replicated on
// every TP rank. tp must be >= 1.
func (m Model) CellBytes(tp int) int64 {
	if m.Attention == MLA {
		return int64(m.KVLoraRank+m.QKRopeHeadDim) * int64(m.Layers) * int64(m.KVDtypeBytes)
	}
	return int64(m.kvHeadsPerRank(tp)) * int64(m.HeadDim+m.vHeadDim()) * int64(m.Layers) * int64(m.KVDtypeBytes)
}

// WeightBytes is the weight memory of one TP rank: params *
// weight_bytes_per_param / tp, rounded down. It assumes every tensor is
// split tp ways; the small replicated tensors (norms, MLA's q_a/kv_a
// projections, MoE gates) are ignored.
func (m Model) WeightBytes(tp int) int64 {
	return int64(float64(m.Params) * m.WeightBytesPerParam / float64(tp))
}

// plainNum prints a number as a user wrote it: integers in full
// (1073741824, not 1.073741824e+09), others in the shortest form.
func plainNum(v float64) string {
	if v == math.Trunc(v) && math.Abs(v) < 1e21 {
		return strconv.FormatFloat(v, 'f', -1, 64)
	}
	return strconv.FormatFloat(v, 'g', -1, 64)
}
