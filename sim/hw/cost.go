package hw

import (
	"errors"
	"fmt"
	"math"

	"github.com/kvsim/kvsim/internal/fielderr"
)

// Extend is one request's part of a prefill batch.
type Extend struct {
	// New is the tokens computed in this forward (the extend length), >= 0.
	New int64
	// Cached is the tokens of the request's prefix already in the KV cache
	// (cache hits, loaded-back host hits, or earlier chunks), >= 0.
	Cached int64
}

// Efficiency scales the roofline's peak rates to what an SGLang forward
// achieves, and adds the costs the rates do not cover. Fractions are of the
// GPU's peak; times are in microseconds. [DefaultEfficiency] explains each
// default.
type Efficiency struct {
	// GEMMMFU is the fraction of peak BF16 FLOP/s the linear layers reach,
	// in (0, 1]. Default 0.6.
	GEMMMFU float64 `toml:"gemm_mfu"`
	// Attention is the fraction of peak FLOP/s the attention kernels reach,
	// in (0, 1]. Default 0.5.
	Attention float64 `toml:"attention_efficiency"`
	// HBM is the fraction of peak memory bandwidth reached when streaming
	// weights and KV, in (0, 1]. Default 0.8.
	HBM float64 `toml:"hbm_efficiency"`
	// AllReduce is the fraction of the per-direction GPU-to-GPU bandwidth a
	// ring all-reduce reaches, in (0, 1]. Default 0.7.
	AllReduce float64 `toml:"allreduce_efficiency"`
	// AllReduceLatencyUs is the fixed cost of one all-reduce call, >= 0.
	// Default 10.
	AllReduceLatencyUs float64 `toml:"allreduce_latency_us"`
	// PrefillOverheadUs is added to every prefill forward (scheduling, batch
	// metadata, eager kernel launches), >= 0. Default 1000.
	PrefillOverheadUs float64 `toml:"prefill_overhead_us"`
	// DecodeOverheadUs is added to every decode step (scheduling and a CUDA
	// graph replay), >= 0. Default 300.
	DecodeOverheadUs float64 `toml:"decode_overhead_us"`
}

// DefaultEfficiency returns the defaults, chosen as follows.
//
//   - GEMMMFU 0.6: large BF16 GEMMs reach 65-75% of peak on Hopper in
//     cuBLAS; a whole forward also runs norms, RoPE and activations that
//     the 2*params FLOP count ignores, so 0.6 of peak end to end.
//   - Attention 0.5: FlashAttention-3 reaches about 60-75% of H100 peak on
//     long non-causal sequences; causal masking, short and ragged
//     (variable-length) batches lose more.
//   - HBM 0.8: decode GEMV and paged-attention kernels stream at 80-90% of
//     peak bandwidth; 0.8 also covers the small kernels between them.
//   - AllReduce 0.7 and 10 µs per call: NCCL ring bus bandwidth on NVLink
//     is 70-80% of the link rate, and SGLang's custom all-reduce for small
//     messages takes 5-15 µs.
//   - PrefillOverheadUs 1000: prefill runs without CUDA graphs, so the CPU
//     launches about 10 kernels per layer (tens of µs per layer in
//     PyTorch), plus scheduling and metadata.
//   - DecodeOverheadUs 300: with CUDA graphs and the overlap scheduler the
//     GPU idles a few hundred µs per step (graph launch, sampling sync).
func DefaultEfficiency() Efficiency {
	return Efficiency{
		GEMMMFU: 0.6, Attention: 0.5, HBM: 0.8,
		AllReduce: 0.7, AllReduceLatencyUs: 10,
		PrefillOverheadUs: 1000, DecodeOverheadUs: 300,
	}
}

// Validate reports every invalid field at once, each a [fielderr.Error]
// at hw.roofline.<key>.
func (e Efficiency) Validate() error {
	var errs []error
	fraction := func(key string, v float64) {
		if !(v > 0 && v <= 1) {
			errs = append(errs, fielderr.New(fielderr.Key("hw", "roofline", key), "must be in (0, 1] (got %v)", v))
		}
	}
	fraction("gemm_mfu", e.GEMMMFU)
	fraction("attention_efficiency", e.Attention)
	fraction("hbm_efficiency", e.HBM)
	fraction("allreduce_efficiency", e.AllReduce)
	time := func(key string, v float64) {
		if !(v >= 0) || math.IsInf(v, 0) {
			errs = append(errs, fielderr.New(fielderr.Key("hw", "roofline", key), "must be >= 0 (got %v)", v))
		}
	}
	time("allreduce_latency_us", e.AllReduceLatencyUs)
	time("prefill_overhead_us", e.PrefillOverheadUs)
	time("decode_overhead_us", e.DecodeOverheadUs)
	return errors.Join(errs...)
}

// Roofline is the analytic cost model: each forward takes the larger of its
// compute time and its memory time, plus TP all-reduces and a fixed
// overhead. doc.go gives every term. It is immutable and its methods do not
// allocate.
type Roofline struct {
	// Costs in ns per unit, folded from the model, GPU and efficiencies.
	nsGEMMPerToken   float64 // body GEMMs, per token
	nsLMHeadPerSeq   float64 // LM head GEMM, per sequence
	nsPrefixPerToken float64 // MLA: decompress a cached latent token (kv_b_proj), per cached token
	nsAttnPerPair    float64 // prefill attention, per (query, key) pair
	nsAttnPerCtx     float64 // decode attention, per context token per step
	nsDenseWeights   float64 // reading the non-expert weights once
	nsExpertWeights  float64 // reading all routed experts once
	expertMiss       float64 // 1 - experts_per_token/experts: chance one token skips a given expert
	nsKVPerToken     float64 // reading or writing one token's KV on this rank
	nsARPerToken     float64 // all-reduce bytes of one token over all layers
	nsARFixed        float64 // all-reduce call latencies of one forward
	nsPrefill        float64 // fixed prefill overhead
	nsDecode         float64 // fixed decode overhead

	explain []string
	inputs  map[string]float64 // the efficiencies by key, for Check's messages
}

// NewRoofline folds the model, GPU, parallelism (tp_size, dcp_size) and
// efficiencies into per-unit costs. It validates its inputs and returns
// every problem at once.
func NewRoofline(m Model, g GPU, s Server, e Efficiency) (*Roofline, error) {
	err := errors.Join(m.Validate(), g.Validate(), s.Validate(), e.Validate())
	if err == nil {
		err = CheckParallel(m, s)
	}
	if err != nil {
		return nil, err
	}
	tp := float64(s.TPSize)
	nsGEMMFlop := 1e9 / (g.PeakTFLOPS * 1e12 * e.GEMMMFU)
	nsAttnFlop := 1e9 / (g.PeakTFLOPS * 1e12 * e.Attention)
	nsByte := 1e9 / (g.HBMGBps * 1e9 * e.HBM)
	layers, heads := float64(m.Layers), float64(m.Heads)

	r := &Roofline{
		nsPrefill: e.PrefillOverheadUs * 1e3,
		nsDecode:  e.DecodeOverheadUs * 1e3,
		inputs: map[string]float64{
			"gemm_mfu": e.GEMMMFU, "attention_efficiency": e.Attention, "hbm_efficiency": e.HBM,
			"allreduce_efficiency": e.AllReduce, "allreduce_latency_us": e.AllReduceLatencyUs,
			"prefill_overhead_us": e.PrefillOverheadUs, "decode_overhead_us": e.DecodeOverheadUs,
		},
	}
	// GEMMs: 2 FLOPs per parameter per token, split over tp.
	r.nsGEMMPerToken = 2 * float64(m.bodyActiveParams()) / tp * nsGEMMFlop
	r.nsLMHeadPerSeq = 2 * float64(m.lmHeadParams()) / tp * nsGEMMFlop

	// Attention FLOPs per (query, key) pair per layer per head: 2*d_qk for
	// the score and 2*d_v for the weighted sum; heads split over tp.
	var prefillPair, decodeCtx float64
	if m.Attention == MLA {
		// Prefill runs MLA as ordinary attention on decompressed keys
		// (qk_nope + qk_rope wide) and values (v_head_dim wide); the cached
		// prefix's latents are first decompressed through kv_b_proj.
		prefillPair = 2 * float64(m.QKNopeHeadDim+m.QKRopeHeadDim+m.VHeadDim)
		r.nsPrefixPerToken = layers * 2 * float64(m.KVLoraRank) * heads * float64(m.QKNopeHeadDim+m.VHeadDim) / tp * nsGEMMFlop
		// Decode absorbs kv_b_proj into the query and output, attending
		// over latents: score 2*(kv_lora_rank + qk_rope), sum 2*kv_lora_rank.
		decodeCtx = 2*float64(m.KVLoraRank+m.QKRopeHeadDim) + 2*float64(m.KVLoraRank)
	} else {
		prefillPair = 2 * float64(m.HeadDim+m.vHeadDim())
		decodeCtx = prefillPair
	}
	r.nsAttnPerPair = layers * heads * prefillPair / tp * nsAttnFlop
	r.nsAttnPerCtx = layers * heads * decodeCtx / tp * nsAttnFlop

	// Memory: weights once per forward (MoE: only the experts some token
	// routes to), and KV read and written. With dcp a rank holds 1/dcp of
	// each request's tokens.
	weights := float64(m.WeightBytes(s.TPSize))
	experts := float64(m.routedExpertParams()) * m.WeightBytesPerParam / tp
	r.nsDenseWeights = (weights - experts) * nsByte
	r.nsExpertWeights = experts * nsByte
	r.expertMiss = 1
	if m.Experts > 0 {
		r.expertMiss = 1 - float64(m.ExpertsPerToken)/float64(m.Experts)
	}
	r.nsKVPerToken = float64(m.CellBytes(s.TPSize)) / float64(s.DCPSize) * nsByte

	// TP: two all-reduces per layer (after attention and after the MLP) of
	// hidden*2 bytes (bf16) per token; a ring moves 2*(tp-1)/tp of the data
	// over each link direction.
	if s.TPSize > 1 {
		calls := 2 * layers
		ring := 2 * (tp - 1) / tp
		r.nsARPerToken = calls * ring * float64(m.Hidden) * 2 / (g.NVLinkGBps * 1e9 * e.AllReduce) * 1e9
		r.nsARFixed = calls * e.AllReduceLatencyUs * 1e3
	}

	r.explain = []string{
		fmt.Sprintf("roofline %s on %s, tp %d: time = max(compute, memory) + all-reduce + overhead", m.Name, g.Name, s.TPSize),
		fmt.Sprintf("gemm: %.1f ns/token (2*%d body params/tp at %.0f%% of %.0f TFLOP/s), lm head %.1f ns/sequence",
			r.nsGEMMPerToken, m.bodyActiveParams(), e.GEMMMFU*100, g.PeakTFLOPS, r.nsLMHeadPerSeq),
		fmt.Sprintf("attention: prefill %.4f ns per (query, key) pair, decode %.4f ns per context token (at %.0f%% of peak)",
			r.nsAttnPerPair, r.nsAttnPerCtx, e.Attention*100),
		fmt.Sprintf("memory: weights %.3f ms per forward (experts %.3f ms of it when all are touched), kv %.3f ns per token read or written (at %.0f%% of %.0f GB/s)",
			(r.nsDenseWeights+r.nsExpertWeights)/1e6, r.nsExpertWeights/1e6, r.nsKVPerToken, e.HBM*100, g.HBMGBps),
		fmt.Sprintf("all-reduce: %.1f ns/token + %.1f µs per forward; overhead: prefill %.0f µs, decode %.0f µs",
			r.nsARPerToken, r.nsARFixed/1e3, e.PrefillOverheadUs, e.DecodeOverheadUs),
	}
	if r.nsPrefixPerToken > 0 {
		r.explain = append(r.explain, fmt.Sprintf("mla prefix decompression: %.1f ns per cached token", r.nsPrefixPerToken))
	}
	return r, nil
}

// touchedExperts is the expected fraction of routed experts that n tokens
// route to, assuming uniform independent routing: 1 - (1 - k/E)^n.
func (r *Roofline) touchedExperts(n float64) float64 {
	if r.expertMiss >= 1 || n <= 0 {
		return 0
	}
	return 1 - math.Pow(r.expertMiss, n)
}

// PrefillTime returns the nanoseconds of one prefill (extend) forward of the
// batch. Entries with New == 0 take no part; an empty batch costs 0. It
// panics on negative counts (a caller bug).
func (r *Roofline) PrefillTime(batch []Extend) int64 {
	return int64(math.Round(r.prefill(batch).total()))
}

// prefill is PrefillTime's terms, in ns.
func (r *Roofline) prefill(batch []Extend) stepTerms {
	var tokens, pairs, cached, seqs float64
	for _, e := range batch {
		if e.New < 0 || e.Cached < 0 {
			panic(fmt.Sprintf("hw: negative extend %+v", e))
		}
		if e.New == 0 {
			continue
		}
		n, c := float64(e.New), float64(e.Cached)
		tokens += n
		// Causal attention: the i-th new token (1-based) sees c + i keys.
		pairs += n*c + n*(n+1)/2
		cached += c
		seqs++
	}
	return r.prefillSums(tokens, pairs, cached, seqs)
}

// prefillSums is prefill's terms from the batch's sums.
func (r *Roofline) prefillSums(tokens, pairs, cached, seqs float64) stepTerms {
	if seqs == 0 {
		return stepTerms{}
	}
	return stepTerms{
		gemm: r.nsGEMMPerToken*tokens + r.nsLMHeadPerSeq*seqs + r.nsPrefixPerToken*cached,
		attn: r.nsAttnPerPair * pairs,
		// KV: read the whole context (cached + new) once, write the new tokens.
		memory:   r.nsDenseWeights + r.nsExpertWeights*r.touchedExperts(tokens) + r.nsKVPerToken*(cached+2*tokens),
		arTokens: r.nsARPerToken * tokens, arFixed: r.nsARFixed, overhead: r.nsPrefill,
		prefill: true,
	}
}

// DecodeTime returns the nanoseconds of one decode step generating one
// token for each of batchSize requests whose KV lengths sum to
// contextTokens. batchSize 0 costs 0. It panics on negative arguments.
func (r *Roofline) DecodeTime(batchSize int, contextTokens int64) int64 {
	return int64(math.Round(r.decode(batchSize, contextTokens).total()))
}

// decode is DecodeTime's terms, in ns.
func (r *Roofline) decode(batchSize int, contextTokens int64) stepTerms {
	if batchSize < 0 || contextTokens < 0 {
		panic(fmt.Sprintf("hw: negative decode batch %d or context %d", batchSize, contextTokens))
	}
	if batchSize == 0 {
		return stepTerms{}
	}
	b, ctx := float64(batchSize), float64(contextTokens)
	return stepTerms{
		gemm:     (r.nsGEMMPerToken + r.nsLMHeadPerSeq) * b,
		attn:     r.nsAttnPerCtx * ctx,
		memory:   r.nsDenseWeights + r.nsExpertWeights*r.touchedExperts(b) + r.nsKVPerToken*(ctx+b),
		arTokens: r.nsARPerToken * b, arFixed: r.nsARFixed, overhead: r.nsDecode,
	}
}

// stepTerms are the parts of one roofline forward, in ns: the time is
// max(gemm + attn, memory) + arTokens + arFixed + overhead (the sum in
// this order, so that PrefillTime and DecodeTime round what they always
// have).
type stepTerms struct {
	gemm, attn, memory, arTokens, arFixed, overhead float64
	prefill                                         bool
}

func (t stepTerms) total() float64 {
	return max(t.gemm+t.attn, t.memory) + t.arTokens + t.arFixed + t.overhead
}

// Check evaluates the model at the largest forwards w of a server and
// returns an error, naming the efficiency (hw.roofline.<key>) behind the
// largest term, for each that would take longer than [MaxStep] (or not be
// a finite number). A cost model that passes cannot overflow Time.
func (r *Roofline) Check(w Worst) error {
	var errs []error
	for _, t := range []stepTerms{r.prefillSums(w.prefillSums()), r.decode(w.DecodeBatch, w.DecodeContext)} {
		total := t.total()
		if total <= float64(MaxStep) {
			continue
		}
		parts := []struct {
			key, what string
			ns        float64
		}{
			{"gemm_mfu", "the GEMMs, 2 FLOPs per active parameter per token at gemm_mfu of gpu.peak_tflops", t.gemm},
			{"attention_efficiency", "attention, at attention_efficiency of gpu.peak_tflops", t.attn},
			{"hbm_efficiency", "reading weights and KV at hbm_efficiency of gpu.hbm_gbps", t.memory},
			{"allreduce_efficiency", "all-reduces at allreduce_efficiency of gpu.nvlink_gbps", t.arTokens},
			{"allreduce_latency_us", "the all-reduce calls' latency", t.arFixed},
			{"decode_overhead_us", "the fixed overhead", t.overhead},
		}
		if t.prefill {
			parts[5].key = "prefill_overhead_us"
		}
		big := 0
		for i, p := range parts {
			if !(p.ns <= parts[big].ns) { // NaN or larger
				big = i
			}
		}
		p := parts[big]
		errs = append(errs, fielderr.New(fielderr.Key("hw", "roofline", p.key), "makes %s take %s, over the %s a step may take (%s of it in %s) (got %v)",
			w.describe(t.prefill), seconds(total), MaxStep, seconds(p.ns), p.what, r.efficiency(p.key)))
	}
	return errors.Join(errs...)
}

// efficiency is the input value of an efficiency key, for messages.
func (r *Roofline) efficiency(key string) float64 {
	return r.inputs[key]
}

// Explain describes the folded per-unit costs, one line each.
func (r *Roofline) Explain() []string { return append([]string(nil), r.explain...) }
