package hw

import (
	"errors"
	"fmt"
	"math"
	"strconv"

	"github.com/kvsim/kvsim/internal/fielderr"
)

// Server holds the SGLang server arguments that decide memory, under their
// SGLang names (--tp-size is tp_size). Zero means "unset" (SGLang's None)
// where the comment says so; [DefaultServer] has SGLang's defaults.
type Server struct {
	// TPSize is --tp-size: GPUs per model replica, splitting weights and
	// attention heads. Default 1, >= 1.
	TPSize int `toml:"tp_size"`
	// DPSize is --dp-size: independent replicas, each with its own tree and
	// pools (DP attention is not modelled). It only divides a user-set
	// max_running_requests. Default 1, >= 1.
	DPSize int `toml:"dp_size"`
	// DCPSize is --dcp-size, decode context parallelism (MLA only): KV is
	// striped by token over dcp ranks of the TP group, so the logical
	// capacity is dcp times a rank's pool. Default 1, >= 1, divides tp_size.
	DCPSize int `toml:"dcp_size"`
	// PageSize is --page-size in tokens. Default 1, >= 1.
	PageSize int `toml:"page_size"`
	// MemFractionStatic is --mem-fraction-static, the fraction of free GPU
	// memory for weights plus KV pool. 0 means auto (SGLang's reserved
	// memory formula). Otherwise in (0, 1).
	MemFractionStatic float64 `toml:"mem_fraction_static"`
	// MaxTotalTokens is --max-total-tokens, a cap on the device pool per
	// rank. 0 means unset; otherwise > 0.
	MaxTotalTokens int64 `toml:"max_total_tokens"`
	// ChunkedPrefillSize is --chunked-prefill-size in tokens. 0 means auto
	// (by GPU memory), -1 disables chunking; otherwise > 0.
	ChunkedPrefillSize int64 `toml:"chunked_prefill_size"`
	// MaxPrefillTokens is --max-prefill-tokens, the extend-token budget of
	// one prefill batch. Default 16384, > 0.
	MaxPrefillTokens int64 `toml:"max_prefill_tokens"`
	// MaxRunningRequests is --max-running-requests. 0 means auto; otherwise
	// > 0 (divided by dp_size).
	MaxRunningRequests int `toml:"max_running_requests"`
	// CUDAGraphMaxBS is --cuda-graph-max-bs, which enters the reserved
	// memory. 0 means auto (by GPU memory and tp_size); otherwise > 0.
	CUDAGraphMaxBS int `toml:"cuda_graph_max_bs"`
	// HiCacheRatio is --hicache-ratio: host pool tokens = ratio * device
	// pool tokens, unless hicache_size is set. Default 2.0; >= 0 (0 with
	// hicache_size 0 means no host pool).
	HiCacheRatio float64 `toml:"hicache_ratio"`
	// HiCacheSizeGB is --hicache-size: the host pool per rank in GB (10^9
	// bytes); overrides hicache_ratio when > 0. Default 0, >= 0.
	HiCacheSizeGB float64 `toml:"hicache_size"`
	// RuntimeOverheadMiB is not an SGLang argument: the device memory
	// already taken (CUDA context, PyTorch, NCCL) when SGLang measures the
	// free memory before loading weights ("Load weight begin. avail mem=").
	// On an H100 (79.65 GiB) SGLang logs show 78.43 to 78.81 GiB free at that
	// point with tp 1, i.e. 0.84 to 1.22 GiB taken; NCCL buffers add more
	// with tp > 1. Default 1024, >= 0.
	RuntimeOverheadMiB int64 `toml:"runtime_overhead_mib"`
}

// DefaultServer returns SGLang's defaults: tp 1, dp 1, dcp 1, page 1,
// max_prefill_tokens 16384, hicache_ratio 2, everything else auto, and a
// 1 GiB runtime overhead.
func DefaultServer() Server {
	return Server{
		TPSize: 1, DPSize: 1, DCPSize: 1, PageSize: 1,
		MaxPrefillTokens: 16384, HiCacheRatio: 2, RuntimeOverheadMiB: 1024,
	}
}

// Validate reports every invalid field at once, each a [fielderr.Error]
// at hw.server.<key>. It does
// not know the model; [Size] also checks dcp_size against the attention.
func (s Server) Validate() error {
	var errs []error
	bad := func(key, rule string, got any) {
		errs = append(errs, fielderr.New(fielderr.Key("hw", "server", key), "%s (got %v)", rule, got))
	}
	if s.TPSize < 1 {
		bad("tp_size", "must be >= 1", s.TPSize)
	}
	if s.DPSize < 1 {
		bad("dp_size", "must be >= 1", s.DPSize)
	}
	if s.DCPSize < 1 || (s.TPSize >= 1 && s.TPSize%s.DCPSize != 0) {
		bad("dcp_size", "must be >= 1 and divide tp_size", s.DCPSize)
	}
	if s.PageSize < 1 {
		bad("page_size", "must be >= 1", s.PageSize)
	}
	if s.MemFractionStatic != 0 && !(s.MemFractionStatic > 0 && s.MemFractionStatic < 1) {
		bad("mem_fraction_static", "must be 0 (auto) or in (0, 1)", s.MemFractionStatic)
	}
	if s.MaxTotalTokens < 0 {
		bad("max_total_tokens", "must be 0 (unset) or > 0", s.MaxTotalTokens)
	}
	if s.ChunkedPrefillSize < -1 {
		bad("chunked_prefill_size", "must be 0 (auto), -1 (off) or > 0", s.ChunkedPrefillSize)
	}
	if s.MaxPrefillTokens <= 0 {
		bad("max_prefill_tokens", "must be > 0", s.MaxPrefillTokens)
	}
	if s.MaxRunningRequests < 0 {
		bad("max_running_requests", "must be 0 (auto) or > 0", s.MaxRunningRequests)
	}
	if s.CUDAGraphMaxBS < 0 {
		bad("cuda_graph_max_bs", "must be 0 (auto) or > 0", s.CUDAGraphMaxBS)
	}
	if !(s.HiCacheRatio >= 0) || math.IsInf(s.HiCacheRatio, 0) {
		bad("hicache_ratio", "must be >= 0", s.HiCacheRatio)
	}
	if !(s.HiCacheSizeGB >= 0) || math.IsInf(s.HiCacheSizeGB, 0) {
		bad("hicache_size", "must be >= 0", s.HiCacheSizeGB)
	}
	if s.RuntimeOverheadMiB < 0 {
		bad("runtime_overhead_mib", "must be >= 0", s.RuntimeOverheadMiB)
	}
	// Upper bounds far past any real server, so that the sizing's
	// products stay inside int64.
	for _, c := range []struct {
		key string
		v   float64
		max float64
	}{
		{"tp_size", float64(s.TPSize), 1 << 16}, {"dp_size", float64(s.DPSize), 1 << 16}, {"page_size", float64(s.PageSize), 1 << 20},
		{"max_total_tokens", float64(s.MaxTotalTokens), 1 << 40}, {"chunked_prefill_size", float64(s.ChunkedPrefillSize), 1 << 30},
		{"max_prefill_tokens", float64(s.MaxPrefillTokens), 1 << 30}, {"max_running_requests", float64(s.MaxRunningRequests), 1 << 24},
		{"cuda_graph_max_bs", float64(s.CUDAGraphMaxBS), 1 << 20}, {"hicache_ratio", s.HiCacheRatio, 1e4},
		{"hicache_size", s.HiCacheSizeGB, 1e9}, {"runtime_overhead_mib", float64(s.RuntimeOverheadMiB), 1 << 30},
	} {
		if c.v > c.max && !math.IsInf(c.v, 1) { // +Inf is refused above
			bad(c.key, "must be at most "+plainNum(c.max), plainNum(c.v))
		}
	}
	return errors.Join(errs...)
}

// CheckParallel reports every way the parallel layout of s cannot run m,
// as SGLang refuses it at start-up. Each model's attention layer (e.g.
// python/sglang/srt/models/llama.py and qwen2.py, LlamaAttention and
// Qwen2Attention.__init__; deepseek_v2.py for MLA) asserts
//
//	total_num_heads % tp_size == 0
//	total_num_kv_heads % tp_size == 0   if total_num_kv_heads >= tp_size
//	tp_size % total_num_kv_heads == 0   otherwise (KV heads replicated)
//
// (the KV-head rules for MHA/GQA only: MLA has one latent per token), and
// --dcp-size needs MLA. m and s must each be valid.
func CheckParallel(m Model, s Server) error {
	var errs []error
	tp := s.TPSize
	if s.DCPSize > 1 && m.Attention != MLA {
		errs = append(errs, fielderr.New(fielderr.Key("hw", "server", "dcp_size"), "decode context parallelism needs an mla model (got %d with %v)", s.DCPSize, m.Attention))
	}
	if m.Heads%tp != 0 {
		errs = append(errs, fielderr.New(fielderr.Key("hw", "server", "tp_size"), "must divide the model's %d attention heads (SGLang asserts num_attention_heads %% tp_size == 0) (got %d)", m.Heads, tp))
	}
	if m.Attention == MHA {
		switch {
		case m.KVHeads >= tp && m.KVHeads%tp != 0:
			errs = append(errs, fielderr.New(fielderr.Key("hw", "server", "tp_size"), "must divide the model's %d KV heads (SGLang asserts num_key_value_heads %% tp_size == 0) (got %d)", m.KVHeads, tp))
		case m.KVHeads < tp && tp%m.KVHeads != 0:
			errs = append(errs, fielderr.New(fielderr.Key("hw", "server", "tp_size"), "must be a multiple of the model's %d KV heads, which it replicates (SGLang asserts tp_size %% num_key_value_heads == 0) (got %d)", m.KVHeads, tp))
		}
	}
	return errors.Join(errs...)
}

// ErrDoesNotFit is matched (errors.Is) by the error of [Size] when the
// weights leave no room for a KV pool.
var ErrDoesNotFit = errors.New("model does not fit")

// Sizing is every number SGLang derives from the model, the GPU and the
// server arguments, per rank. Byte counts are exact integers; MiB is 2^20
// bytes and GiB 2^30, as in SGLang's logs (which call them MB and GB).
type Sizing struct {
	Model, GPU string
	// TPSize, DPSize, DCPSize and PageSize echo the server arguments.
	TPSize, DPSize, DCPSize, PageSize int
	// GPUMemoryMiB is the nvidia-smi total that SGLang's heuristics read.
	GPUMemoryMiB int64
	// ChunkedPrefillSize is the effective --chunked-prefill-size (-1: off);
	// ChunkedPrefillAuto says it came from the GPU-memory table.
	ChunkedPrefillSize int64
	ChunkedPrefillAuto bool
	// MaxPrefillTokens is --max-prefill-tokens.
	MaxPrefillTokens int64
	// CUDAGraphMaxBS is the effective --cuda-graph-max-bs; CUDAGraphAuto
	// says it came from the table.
	CUDAGraphMaxBS int
	CUDAGraphAuto  bool
	// ReservedMiB is the activation and CUDA-graph reserve of the automatic
	// mem_fraction_static (0 when the user set it).
	ReservedMiB float64
	// MemFractionStatic is the effective --mem-fraction-static;
	// MemFractionAuto says it was derived from ReservedMiB.
	MemFractionStatic float64
	MemFractionAuto   bool
	// FreeBeforeWeightsBytes is the free memory when SGLang starts loading
	// weights (its total_gpu_memory / pre_model_load_memory): the GPU total
	// minus the runtime overhead.
	FreeBeforeWeightsBytes int64
	// WeightBytes is the weight memory per rank.
	WeightBytes int64
	// CellBytes is the KV bytes per token per rank ([Model.CellBytes]).
	CellBytes int64
	// KVBudgetBytes is SGLang's rest_memory: free after weights minus
	// free-before-weights * (1 - mem_fraction_static).
	KVBudgetBytes int64
	// ProfiledTokens is KVBudgetBytes // CellBytes, before the
	// --max-total-tokens cap and page alignment.
	ProfiledTokens int64
	// DeviceTokens is max_total_num_tokens: the device KV pool per rank in
	// tokens, capped and page-aligned down.
	DeviceTokens int64
	// LogicalDeviceTokens is DeviceTokens * DCPSize: the tokens of KV the
	// replica holds, in the radix tree's units.
	LogicalDeviceTokens int64
	// ReqPoolSize is SGLang's request-slot estimate clamp(int(DeviceTokens /
	// context_len * 512), 2048, 4096).
	ReqPoolSize int
	// MaxRunningRequests is the effective concurrent-request limit.
	MaxRunningRequests int
	// HostTokens is the HiCache host (L2) pool per rank in tokens (0: no
	// host tier), and HostBytes its pinned memory.
	HostTokens int64
	HostBytes  int64
	// Warnings are conditions SGLang warns about (or older versions reject).
	Warnings []string

	// explain-only inputs
	params        int64
	weightBPP     float64
	runtimeMiB    int64
	contextLen    int64
	maxTotalCap   int64
	userMRR       int
	hicacheRatio  float64
	hicacheSizeGB float64
	cellFormula   string
}

// Size derives the memory layout of one rank the way SGLang does at
// startup: server_args._handle_gpu_memory_settings (chunked prefill size,
// CUDA-graph batch size, mem_fraction_static), model_runner's
// profile_max_num_token and init_memory_pool (device pool, request slots),
// and the HiCache host pool. It validates all three inputs first and returns
// every problem at once; it returns an error wrapping [ErrDoesNotFit] when
// no KV token fits.
func Size(m Model, g GPU, s Server) (Sizing, error) {
	err := errors.Join(m.Validate(), g.Validate(), s.Validate())
	if err == nil {
		err = CheckParallel(m, s)
	}
	if err != nil {
		return Sizing{}, err
	}
	z := Sizing{
		Model: m.Name, GPU: g.Name,
		TPSize: s.TPSize, DPSize: s.DPSize, DCPSize: s.DCPSize, PageSize: s.PageSize,
		GPUMemoryMiB:     g.MemoryMiB,
		MaxPrefillTokens: s.MaxPrefillTokens,
		params:           m.Params, weightBPP: m.WeightBytesPerParam,
		runtimeMiB: s.RuntimeOverheadMiB, contextLen: m.ContextLen,
		maxTotalCap: s.MaxTotalTokens, userMRR: s.MaxRunningRequests,
		hicacheRatio: s.HiCacheRatio, hicacheSizeGB: s.HiCacheSizeGB,
	}
	for _, step := range []func(Model, GPU, Server) error{z.memorySettings, z.profile, z.requestPool} {
		if err := step(m, g, s); err != nil {
			return z, err
		}
	}
	z.hostPool(m, s)
	return z, nil
}

// memorySettings is SGLang's _handle_gpu_memory_settings: chunked prefill
// size, CUDA graph batch size and mem_fraction_static from the table by
// nvidia-smi MiB, unless the server sets them.
func (z *Sizing) memorySettings(m Model, g GPU, s Server) error {
	chunk, graphBS := memoryTable(g.MemoryMiB, s.TPSize)
	z.ChunkedPrefillSize, z.ChunkedPrefillAuto = s.ChunkedPrefillSize, s.ChunkedPrefillSize == 0
	if z.ChunkedPrefillAuto {
		z.ChunkedPrefillSize = chunk
	}
	z.CUDAGraphMaxBS, z.CUDAGraphAuto = s.CUDAGraphMaxBS, s.CUDAGraphMaxBS == 0
	if z.CUDAGraphAuto {
		z.CUDAGraphMaxBS = graphBS
	}
	z.MemFractionStatic, z.MemFractionAuto = s.MemFractionStatic, s.MemFractionStatic == 0
	if z.MemFractionAuto {
		gpuMem := float64(g.MemoryMiB)
		reserved := 512.0 // constant metadata (attention backends)
		if z.ChunkedPrefillSize > 0 {
			reserved += float64(max(z.ChunkedPrefillSize, 2048)) * 1.5 // prefill activations
		} else {
			reserved += float64(max(s.MaxPrefillTokens, 2048)) * 1.5
		}
		reserved += float64(z.CUDAGraphMaxBS) * 2    // CUDA graphs
		reserved += float64(s.TPSize) * 1 / 8 * 1024 // tp*pp/8 GiB, pp = 1
		if gpuMem > 60*1024 {
			reserved = max(reserved, 10*1024)
		}
		z.ReservedMiB = reserved
		z.MemFractionStatic = roundPy((gpuMem-reserved)/gpuMem, 3)
		if !(z.MemFractionStatic > 0) {
			return fmt.Errorf("hw: %s on %s: %w: the automatic reserve of %.0f MiB leaves no static memory of %d MiB (set server.mem_fraction_static)",
				m.Name, g.Name, ErrDoesNotFit, reserved, g.MemoryMiB)
		}
	}
	return nil
}

// profile is SGLang's profile_max_num_token: the device pool's tokens.
func (z *Sizing) profile(m Model, g GPU, s Server) error {
	z.FreeBeforeWeightsBytes = (g.MemoryMiB - s.RuntimeOverheadMiB) << 20
	z.WeightBytes = m.WeightBytes(s.TPSize)
	z.CellBytes = m.CellBytes(s.TPSize)
	z.cellFormula = cellFormula(m, s.TPSize)
	free := float64(z.FreeBeforeWeightsBytes)
	rest := (free - float64(z.WeightBytes)) - free*(1-z.MemFractionStatic)
	z.KVBudgetBytes = int64(rest)
	if rest > 0 {
		z.ProfiledTokens = int64(math.Floor(rest / float64(z.CellBytes)))
	}
	tokens := z.ProfiledTokens
	if s.MaxTotalTokens > 0 && s.MaxTotalTokens < tokens {
		tokens = s.MaxTotalTokens
	}
	tokens = tokens / int64(s.PageSize) * int64(s.PageSize)
	if tokens <= 0 {
		return fmt.Errorf("hw: %s on %s with tp %d: %w: weights take %s per rank but mem_fraction_static %.3f of %s free leaves %s (SGLang: not enough memory, increase --mem-fraction-static)",
			m.Name, g.Name, s.TPSize, ErrDoesNotFit, gib(z.WeightBytes), z.MemFractionStatic, gib(z.FreeBeforeWeightsBytes), gib(int64(free*z.MemFractionStatic)))
	}
	z.DeviceTokens = tokens
	z.LogicalDeviceTokens = tokens * int64(s.DCPSize)
	return nil
}

// requestPool is SGLang's init_memory_pool / _resolve_max_num_reqs (newer
// SGLang): the request slots and max_running_requests.
func (z *Sizing) requestPool(m Model, g GPU, s Server) error {
	tokens := z.DeviceTokens
	est := int(float64(tokens) / float64(m.ContextLen) * 512)
	z.ReqPoolSize = min(max(est, 2048), 4096)
	capacityCap := tokens / 2
	if s.MaxRunningRequests > 0 {
		z.MaxRunningRequests = int(min(int64(s.MaxRunningRequests/s.DPSize), capacityCap))
	} else {
		z.MaxRunningRequests = int(min(int64(z.ReqPoolSize), capacityCap))
	}
	if z.MaxRunningRequests <= 0 {
		return fmt.Errorf("hw: %s on %s: %w: max_running_requests is 0 (device pool %d tokens, max_running_requests %d over dp_size %d)",
			m.Name, g.Name, ErrDoesNotFit, tokens, s.MaxRunningRequests, s.DPSize)
	}
	return nil
}

// hostPool sizes the HiCache host pool (pool_host/base.py, newer
// alignment) and warns of pools SGLang would refuse or cap.
func (z *Sizing) hostPool(m Model, s Server) {
	tokens := z.DeviceTokens
	switch {
	case s.HiCacheSizeGB > 0:
		z.HostTokens = int64(math.Floor(s.HiCacheSizeGB * 1e9 / float64(z.CellBytes)))
	case s.HiCacheRatio > 0:
		z.HostTokens = int64(float64(tokens) * s.HiCacheRatio)
	}
	if s.HiCacheSizeGB > 0 || s.HiCacheRatio > 0 {
		z.HostTokens = (z.HostTokens/int64(s.PageSize) + 1) * int64(s.PageSize)
	}
	z.HostBytes = z.HostTokens * z.CellBytes
	if z.HostTokens > 0 && z.HostTokens <= tokens {
		z.Warnings = append(z.Warnings, fmt.Sprintf("host pool %d tokens is not larger than the device pool %d (classic SGLang refuses to start; use hicache_ratio >= 2)", z.HostTokens, tokens))
	}
	if tokens < m.ContextLen {
		z.Warnings = append(z.Warnings, fmt.Sprintf("device pool %d tokens is below context_len %d: SGLang caps a request at %d tokens", tokens, m.ContextLen, tokens-1))
	}
}

// memoryTable is _handle_gpu_memory_settings' table: default
// chunked_prefill_size and cuda_graph_max_bs by nvidia-smi MiB.
func memoryTable(mib int64, tp int) (chunk int64, graphBS int) {
	big := tp >= 4
	pick := func(small, large int) int {
		if big {
			return large
		}
		return small
	}
	switch {
	case mib < 20*1024: // T4, 4080
		return 2048, 8
	case mib < 35*1024: // A10, 4090, 5090
		return 2048, pick(24, 80)
	case mib < 60*1024: // A100 40GB, L40(S)
		return 4096, pick(32, 160)
	case mib < 90*1024: // H100, A100 80GB
		return 8192, pick(256, 512)
	case mib < 160*1024: // H20, H200
		return 8192, pick(256, 512)
	default: // B200, MI300
		return 16384, 512
	}
}

// roundPy is Python's round(x, digits): the correctly rounded decimal of x's
// exact binary value, ties to even (strconv does the same).
func roundPy(x float64, digits int) float64 {
	r, err := strconv.ParseFloat(strconv.FormatFloat(x, 'f', digits, 64), 64)
	if err != nil {
		panic("hw: " + err.Error())
	}
	return r
}

func cellFormula(m Model, tp int) string {
	if m.Attention == MLA {
		return fmt.Sprintf("(kv_lora_rank %d + qk_rope_head_dim %d) * %d layers * %d B, the same on every rank",
			m.KVLoraRank, m.QKRopeHeadDim, m.Layers, m.KVDtypeBytes)
	}
	rep := ""
	if m.KVHeads < tp {
		rep = ", replicated"
	}
	return fmt.Sprintf("max(1, %d kv heads / tp %d) = %d heads%s * (head_dim %d + v_head_dim %d) * %d layers * %d B",
		m.KVHeads, tp, m.kvHeadsPerRank(tp), rep, m.HeadDim, m.vHeadDim(), m.Layers, m.KVDtypeBytes)
}

// gib formats bytes as GiB with two decimals.
func gib(b int64) string { return fmt.Sprintf("%.2f GiB", float64(b)/(1<<30)) }

// Explain returns the derivation of every number, one line each, for
// `kvsim sim` to print.
func (z Sizing) Explain() []string {
	var l []string
	add := func(format string, a ...any) { l = append(l, fmt.Sprintf(format, a...)) }
	add("%s on %s, tp %d, dp %d, dcp %d, page %d (per rank unless said)", z.Model, z.GPU, z.TPSize, z.DPSize, z.DCPSize, z.PageSize)
	add("gpu memory: %d MiB (%.2f GiB), nvidia-smi memory.total as SGLang reads it", z.GPUMemoryMiB, float64(z.GPUMemoryMiB)/1024)
	how := "set"
	if z.ChunkedPrefillAuto {
		how = "auto from the GPU-memory table"
	}
	if z.ChunkedPrefillSize < 0 {
		add("chunked_prefill_size: off; max_prefill_tokens %d", z.MaxPrefillTokens)
	} else {
		add("chunked_prefill_size: %d (%s); max_prefill_tokens %d", z.ChunkedPrefillSize, how, z.MaxPrefillTokens)
	}
	how = "set"
	if z.CUDAGraphAuto {
		how = "auto from the GPU-memory table and tp"
	}
	add("cuda_graph_max_bs: %d (%s)", z.CUDAGraphMaxBS, how)
	if z.MemFractionAuto {
		act := max(z.ChunkedPrefillSize, 2048)
		if z.ChunkedPrefillSize < 0 {
			act = max(z.MaxPrefillTokens, 2048)
		}
		raw := 512 + float64(act)*1.5 + float64(z.CUDAGraphMaxBS)*2 + float64(z.TPSize)/8*1024
		floor := ""
		if raw != z.ReservedMiB {
			floor = ", raised to the 10240 MiB floor for GPUs above 60 GiB"
		}
		add("reserved: %.0f MiB = 512 + %d*1.5 (activations) + %d*2 (cuda graphs) + tp %d/8*1024%s",
			z.ReservedMiB, act, z.CUDAGraphMaxBS, z.TPSize, floor)
		add("mem_fraction_static: %.3f = round((%d - %.0f) / %d, 3)", z.MemFractionStatic, z.GPUMemoryMiB, z.ReservedMiB, z.GPUMemoryMiB)
	} else {
		add("mem_fraction_static: %.3f (set)", z.MemFractionStatic)
	}
	add("free before weights: %s = %.2f GiB - %d MiB runtime overhead (CUDA context, NCCL)",
		gib(z.FreeBeforeWeightsBytes), float64(z.GPUMemoryMiB)/1024, z.runtimeMiB)
	add("weights: %s = %d params * %g B / tp %d", gib(z.WeightBytes), z.params, z.weightBPP, z.TPSize)
	add("kv cell: %d B/token = %s", z.CellBytes, z.cellFormula)
	add("kv budget: %s = (%s - %s) - %s * (1 - %.3f)",
		gib(z.KVBudgetBytes), gib(z.FreeBeforeWeightsBytes), gib(z.WeightBytes), gib(z.FreeBeforeWeightsBytes), z.MemFractionStatic)
	cap := ""
	if z.maxTotalCap > 0 && z.maxTotalCap < z.ProfiledTokens {
		cap = fmt.Sprintf(", capped by max_total_tokens %d", z.maxTotalCap)
	}
	add("device pool: %d tokens = %d B // %d B/token = %d%s, rounded down to whole pages of %d",
		z.DeviceTokens, z.KVBudgetBytes, z.CellBytes, z.ProfiledTokens, cap, z.PageSize)
	if z.DCPSize > 1 {
		add("logical device pool: %d tokens = %d * dcp %d (KV striped by token)", z.LogicalDeviceTokens, z.DeviceTokens, z.DCPSize)
	}
	add("request slots: %d = clamp(int(%d / context_len %d * 512), 2048, 4096)", z.ReqPoolSize, z.DeviceTokens, z.contextLen)
	if z.userMRR > 0 {
		add("max_running_requests: %d = min(%d / dp %d, %d // 2)", z.MaxRunningRequests, z.userMRR, z.DPSize, z.DeviceTokens)
	} else {
		add("max_running_requests: %d = min(%d request slots, %d // 2)", z.MaxRunningRequests, z.ReqPoolSize, z.DeviceTokens)
	}
	switch {
	case z.HostTokens == 0:
		add("host pool: none (hicache_ratio 0 and hicache_size 0)")
	case z.hicacheSizeGB > 0:
		add("host pool: %d tokens = (int(%g GB * 1e9 // %d B) // %d + 1) * %d, %s pinned",
			z.HostTokens, z.hicacheSizeGB, z.CellBytes, z.PageSize, z.PageSize, gib(z.HostBytes))
	default:
		add("host pool: %d tokens = (int(%d * %g) // %d + 1) * %d, %s pinned",
			z.HostTokens, z.DeviceTokens, z.hicacheRatio, z.PageSize, z.PageSize, gib(z.HostBytes))
	}
	for _, w := range z.Warnings {
		add("warning: %s", w)
	}
	return l
}
