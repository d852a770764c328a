// Package hw is the hardware side of kvsim's simulator: model and GPU
// presets, SGLang's memory sizing (how many KV tokens fit on the device and
// host tiers), and the compute cost model that gives each simulated forward
// its duration.
//
// Everything here is a pure function of its inputs: no clock, no
// randomness, no global state. Times are int64 nanoseconds; bytes are exact
// integers; MiB and GiB are 2^20 and 2^30 bytes (SGLang's logs call them MB
// and GB); GB/s and TFLOP/s are decimal (10^9, 10^12), as in datasheets.
//
// The API:
//
//   - [Model] and [GPU] describe the hardware; [ModelPreset] and
//     [GPUPreset] return checked presets with their sources in comments.
//   - [Server] holds the SGLang server arguments; [Size] turns model, GPU
//     and server into a [Sizing], and [Sizing.Explain] prints the
//     derivation line by line.
//   - [Roofline] ([NewRoofline]) and [Fitted] are the two cost models, both
//     with PrefillTime([]Extend) and DecodeTime(batch, context). The
//     simulator declares the interface it calls; it should alias the
//     argument type (type Extend = hw.Extend) so both satisfy it.
//
// # Memory (spec sections 3.2, 5.7, 8.1, 8.2)
//
// SGLang sizes the device pool at startup, per rank:
//
//  1. gpu_mem is nvidia-smi's memory.total in MiB ([GPU.MemoryMiB]).
//  2. Unless set: chunked_prefill_size and cuda_graph_max_bs come from a
//     table by gpu_mem (< 20, 35, 60, 90, 160 GiB, larger; the graph size
//     also by tp < 4), and
//     reserved = 512 + max(chunked_prefill_size, 2048)*1.5 +
//     cuda_graph_max_bs*2 + tp*pp/8*1024 MiB, at least 10240 MiB above
//     60 GiB, and mem_fraction_static = round((gpu_mem - reserved) /
//     gpu_mem, 3). (With chunking off, max_prefill_tokens replaces the
//     chunk size.)
//  3. free = the free memory before loading weights: gpu_mem minus
//     [Server.RuntimeOverheadMiB] (CUDA context, PyTorch, NCCL).
//  4. weights = params * weight_bytes_per_param / tp.
//  5. cell = KV bytes per token per rank: MHA max(1, kv_heads/tp) *
//     (head_dim + v_head_dim) * layers * kv_dtype_bytes (heads replicated
//     when tp exceeds them); MLA (kv_lora_rank + qk_rope_head_dim) * layers *
//     kv_dtype_bytes on every rank.
//  6. rest = (free - weights) - free * (1 - mem_fraction_static);
//     max_total_num_tokens = rest // cell, then min(max_total_tokens), then
//     page-aligned down. Zero or less is an error ([ErrDoesNotFit]).
//  7. Request slots clamp(int(tokens / context_len * 512), 2048, 4096);
//     max_running_requests = min(slots, tokens // 2), or min(value / dp,
//     tokens // 2) when set (newer SGLang).
//  8. Host pool (HiCache L2) per rank: hicache_size GB * 1e9 // cell when
//     set, else int(tokens * hicache_ratio); then, as newer SGLang does,
//     (size // page + 1) * page (always one page more). Its pinned bytes
//     are tokens * cell. Host tokens are reported even when the study does
//     not turn HiCache on; the simulator decides whether to use them.
//
// Decode context parallelism (dcp, MLA only) stripes each request's KV over
// dcp ranks: the logical pool is dcp times a rank's. Attention context
// parallelism all-gathers KV and does not change capacity.
//
// Not modelled: pipeline parallelism, DP attention (its extra reserve and
// replicated attention weights), speculative decoding (draft weights and the
// 2-6 GiB extra reserve), piecewise CUDA graphs, multimodal adjustments,
// hybrid/SWA/Mamba pools, the request-to-token table's own memory, and the
// small replicated tensors and higher-precision embeddings of quantized
// checkpoints (weights per rank are slightly underestimated for FP8 models).
//
// # Time (spec section 9.2)
//
// [Roofline] costs one forward as
//
//	time = max(compute, memory) + allreduce + overhead
//
// with, per rank (tp ranks split GEMMs and attention heads):
//
//	prefill compute = (2*body_params*Σnew + 2*vocab*hidden*requests
//	                   [+ MLA: 2*kv_lora_rank*heads*(qk_nope+v)*layers*Σcached]) / tp / (peak*gemm_mfu)
//	                + layers*heads*2*(d_qk+d_v)*Σpairs / tp / (peak*attention_efficiency)
//	prefill memory  = (weights_read + cell*(Σcached + 2*Σnew)) / (hbm*hbm_efficiency)
//	decode compute  = (2*body_params + 2*vocab*hidden)*batch / tp / (peak*gemm_mfu)
//	                + layers*heads*a*context / tp / (peak*attention_efficiency)
//	decode memory   = (weights_read + cell*(context + batch)) / (hbm*hbm_efficiency)
//	allreduce       = 2*layers*(latency + 2*(tp-1)/tp * tokens*hidden*2 B / (nvlink*allreduce_efficiency)), tp > 1
//
// where body_params is active_params minus the embedding table and LM head
// (a lookup, and a GEMM only for each sequence's last token);
// Σpairs = Σ(new*cached + new*(new+1)/2) is the (query, key) pairs causal
// attention scores, about new*(cached + new/2); d_qk = d_v = head_dim for
// MHA, and for MLA prefill d_qk = qk_nope + qk_rope, d_v = v_head_dim on
// decompressed keys, while MLA decode attends over latents in absorbed form,
// a = 2*(kv_lora_rank + qk_rope) + 2*kv_lora_rank per key (MHA: a =
// 2*(head_dim + v_head_dim)). weights_read is the weights per rank once per
// forward; for MoE only the routed experts some token picks, expected
// fraction 1 - (1 - k/E)^tokens under uniform routing. KV is read once for
// the whole context and written once for the new tokens (one per request in
// decode); with dcp a rank reads 1/dcp of it. Defaults and their reasons
// are in [DefaultEfficiency].
//
// Consequences the properties check: prefill time never falls as new or
// cached tokens grow, decode time never falls as batch or context grow, and
// for a fixed prompt more cached tokens never cost more (a cache hit
// removes the GEMM work of a token and most of its attention pairs).
//
// What the roofline ignores: overlap scheduling (CPU work hidden behind the
// previous step, folded into the fixed overheads), CUDA-graph padding of
// decode batches to captured sizes, MoE routing imbalance and expert
// parallelism, FP8 tensor-core rates (FP8 models are costed at the BF16
// peak, so their GEMMs are up to 2x pessimistic; set peak_tflops to the
// FP8 peak to model FP8 GEMMs), kernel-count latency floors (deep MoE models at batch
// 1 are far slower in practice than their bandwidth roofline: fit them),
// activations' memory traffic, FlashAttention re-reading KV per query tile,
// mixed prefill+decode batches, and PCIe/host transfers (the simulator
// models HiCache copies with [GPU.HostLinkGBps] and
// [GPU.HostLinkLatencyUs]).
//
// [Fitted] is the measured alternative, linear in its coefficients so a
// replay can fit it by least squares over (features, measured ns):
//
//	prefill = a0 + a1*Σnew + a2*Σpairs + a3*requests
//	decode  = b0 + b1*batch + b2*context
//
// [PrefillFeatures] and [DecodeFeatures] define the features for both the
// fitter and the model. The attention feature is the exact causal pair
// count rather than new*(cached+new), so that a chunk's own triangle is not
// counted twice.
//
// # Field mapping
//
//	Model.Layers              num_hidden_layers
//	Model.Hidden              hidden_size
//	Model.Intermediate        intermediate_size
//	Model.Vocab               vocab_size
//	Model.TiedEmbeddings      tie_word_embeddings
//	Model.Heads               num_attention_heads
//	Model.KVHeads             num_key_value_heads
//	Model.HeadDim             head_dim (hidden_size / num_attention_heads when absent)
//	Model.VHeadDim            v_head_dim
//	Model.KVLoraRank          kv_lora_rank
//	Model.QKRopeHeadDim       qk_rope_head_dim
//	Model.QKNopeHeadDim       qk_nope_head_dim
//	Model.Experts             n_routed_experts
//	Model.ExpertsPerToken     num_experts_per_tok
//	Model.MoEIntermediate     moe_intermediate_size
//	Model.DenseLayers         first_k_dense_replace
//	Model.ContextLen          max_position_embeddings (SGLang's context_len)
//	Model.KVDtypeBytes        --kv-cache-dtype (auto: the model's dtype)
//	Model.WeightBytesPerParam torch_dtype / quantization_config
//	Server.TPSize             --tp-size
//	Server.DPSize             --dp-size
//	Server.DCPSize            --dcp-size
//	Server.PageSize           --page-size
//	Server.MemFractionStatic  --mem-fraction-static
//	Server.MaxTotalTokens     --max-total-tokens
//	Server.ChunkedPrefillSize --chunked-prefill-size
//	Server.MaxPrefillTokens   --max-prefill-tokens
//	Server.MaxRunningRequests --max-running-requests
//	Server.CUDAGraphMaxBS     --cuda-graph-max-bs
//	Server.HiCacheRatio       --hicache-ratio
//	Server.HiCacheSizeGB      --hicache-size
//
// TOML keys are the snake_case tags on each field (SGLang's argument names
// for [Server]); validation errors name them under hw.model, hw.gpu,
// hw.server, hw.roofline and hw.fitted.
package hw
