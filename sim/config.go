package sim

import (
	"errors"
	"fmt"
	"math"

	"github.com/kvsim/kvsim/internal/fielderr"
	"github.com/kvsim/kvsim/tree"
)

// Config configures a simulated server. Sizes are tokens, times nanoseconds,
// bandwidths bytes per second. The zero value of each field means its
// default; [Config.Validate] reports every problem at once.
type Config struct {
	Cache     CacheConfig     `toml:"cache"`
	Scheduler SchedulerConfig `toml:"scheduler"`
	Links     LinkConfig      `toml:"links"`
	Storage   StorageConfig   `toml:"storage"`
	// Seed seeds the scheduler's random queue policy. Default 1.
	Seed uint64 `toml:"seed"`
	// TimelineInterval is the simulated time between two samples of tier
	// occupancy. Default 1 s; 0 keeps the default, -1 turns sampling off.
	TimelineInterval int64 `toml:"timeline_interval_ns"`
}

// CacheConfig is the KV cache: SGLang's radix cache, HiCache's host tier and
// the owner lanes.
type CacheConfig struct {
	// Disable turns the prefix cache off (--disable-radix-cache): nothing is
	// matched or inserted.
	Disable bool `toml:"disable"`
	// PageSize is tokens per page (--page-size). Default 1.
	PageSize int `toml:"page_size"`
	// DeviceTokens is the device KV pool of each lane (rank), in tokens
	// (SGLang's max_total_num_tokens). Required (> 0).
	DeviceTokens int64 `toml:"device_tokens"`
	// HostTokens is the host pool of each lane in tokens; 0 means no host
	// tier (HiCache off). See hw.Sizing for hicache_ratio / hicache_size.
	HostTokens int64 `toml:"host_tokens"`
	// Eviction is the eviction order (--radix-eviction-policy): lru, lfu,
	// fifo, mru, filo, priority, slru, or slru-segmented; or belady, kvsim's
	// offline oracle (evict the node whose next use in the trace is
	// furthest; [Sim.Run] only, see docs/model.md). Default (0) lru.
	Eviction tree.Strategy `toml:"eviction"`
	// ProtectedShare is the protected segment's share of the device under
	// slru-segmented. Default 0.8.
	ProtectedShare float64 `toml:"protected_share"`
	// WritePolicy is --hicache-write-policy: write_through (default),
	// write_through_selective or write_back. 0 means the default.
	WritePolicy tree.WritePolicy `toml:"write_policy"`
	// LoadBackThreshold is the smallest host hit loaded back, in tokens.
	// Default 10.
	LoadBackThreshold int64 `toml:"load_back_threshold"`
	// CP is the number of owner lanes (context-parallel ranks). Default 1.
	CP int `toml:"cp"`
	// Lanes is tree.LanePages (page k on lane k mod cp, default) or
	// tree.LaneTokens; [tree.ParseLanes] reads "page" and "token".
	Lanes tree.LaneMode `toml:"lanes"`
	// Planner chooses device victims when memory is short: PlannerSGLang,
	// PlannerOwnerLane, or PlannerAuto (default): sglang for cp = 1,
	// owner-lane otherwise.
	Planner Planner `toml:"planner"`
}

// SchedulerConfig is SGLang's scheduler and admission control.
type SchedulerConfig struct {
	// Policy is --schedule-policy: FCFS (default), LPM, DFSWeight, LOF or
	// Random.
	Policy SchedulePolicy `toml:"policy"`
	// MaxRunningRequests caps the running batch (--max-running-requests).
	// Default 2048.
	MaxRunningRequests int `toml:"max_running_requests"`
	// MaxPrefillTokens is the per-batch extend budget (--max-prefill-tokens).
	// Default 16384.
	MaxPrefillTokens int64 `toml:"max_prefill_tokens"`
	// ChunkedPrefillSize is the per-iteration chunk budget
	// (--chunked-prefill-size); -1 disables chunking. Default 8192.
	ChunkedPrefillSize int64 `toml:"chunked_prefill_size"`
	// SchedulerTuning holds SGLang's scheduling constants, which a config
	// file sets in its [scheduler] table.
	SchedulerTuning `toml:",inline"`
	// ContextLen is the model's context length in tokens (SGLang's
	// context_len, hw.Model.ContextLen). SGLang's tokenizer manager
	// rejects a request whose prompt is at least this long, or whose
	// prompt and max_new_tokens together are; [Sim] fails such a request
	// on arrival (see admissionError). 0 (default) sets no limit but the
	// KV pool's; otherwise >= 2.
	ContextLen int64 `toml:"context_len"`
}

// SchedulerTuning is SGLang's scheduling constants: its
// --schedule-conservativeness and the SGLANG_* environment variables that
// shape the new-token ratio, retraction and lpm's fallback.
type SchedulerTuning struct {
	// ScheduleConservativeness scales the initial new-token ratio
	// (--schedule-conservativeness). Default 1.0.
	ScheduleConservativeness float64 `toml:"schedule_conservativeness"`
	// InitNewTokenRatio is SGLANG_INIT_NEW_TOKEN_RATIO. Default 0.7.
	InitNewTokenRatio float64 `toml:"init_new_token_ratio"`
	// MinNewTokenRatioFactor is SGLANG_MIN_NEW_TOKEN_RATIO_FACTOR. Default 0.14.
	MinNewTokenRatioFactor float64 `toml:"min_new_token_ratio_factor"`
	// NewTokenRatioDecaySteps is SGLANG_NEW_TOKEN_RATIO_DECAY_STEPS. Default 600.
	NewTokenRatioDecaySteps int `toml:"new_token_ratio_decay_steps"`
	// ClipMaxNewTokens caps the per-request decode reservation estimate
	// (SGLANG_CLIP_MAX_NEW_TOKENS_ESTIMATION). Default 4096.
	ClipMaxNewTokens int64 `toml:"clip_max_new_tokens"`
	// RetractDecodeSteps is the decode headroom kept per request after a
	// retraction (SGLANG_RETRACT_DECODE_STEPS). Default 20.
	RetractDecodeSteps int64 `toml:"retract_decode_steps"`
	// LPMFallbackQueue is the queue length above which lpm falls back to
	// fcfs. Default 128.
	LPMFallbackQueue int `toml:"lpm_fallback_queue"`
}

// LinkConfig describes the host links used by HiCache transfers.
type LinkConfig struct {
	// KVBytesPerToken is the KV size of one token on one rank, all layers
	// (hw.Sizing.KVBytesPerToken). Default 0 makes transfers free.
	KVBytesPerToken float64 `toml:"kv_bytes_per_token"`
	// Layers is the model's layer count, for the layer-wise overlap of
	// load-back with prefill. Default 1.
	Layers int `toml:"layers"`
	// H2DBandwidth and D2HBandwidth are host<->device bandwidths per rank,
	// bytes/s. Default 25e9 (PCIe Gen5 x16 at realistic efficiency).
	H2DBandwidth float64 `toml:"h2d_bandwidth"`
	D2HBandwidth float64 `toml:"d2h_bandwidth"`
	// H2DLatency and D2HLatency are fixed costs per transfer, ns. Default 10 µs.
	H2DLatency int64 `toml:"h2d_latency_ns"`
	D2HLatency int64 `toml:"d2h_latency_ns"`
}

// StorageConfig is HiCache's optional storage tier (L3,
// --hicache-storage-backend): pages backed up from the host tier and
// prefetched back into it. The zero value turns it off; the other zero
// fields mean their defaults.
type StorageConfig struct {
	// Enabled turns the storage tier on. It needs a host tier
	// (cache.host_tokens > 0). Default false.
	Enabled bool `toml:"enabled"`
	// CapacityTokens is the storage capacity in tokens; beyond it the least
	// recently written or read pages are dropped. 0 (default) is unlimited.
	CapacityTokens int64 `toml:"capacity_tokens"`
	// PrefetchPolicy is --hicache-storage-prefetch-policy: BestEffort
	// (default: admit with whatever has arrived), WaitComplete (hold the
	// request until the whole hit is fetched) or PrefetchTimeout (hold it
	// until fetched or the timeout passes).
	PrefetchPolicy PrefetchPolicy `toml:"prefetch_policy"`
	// PrefetchThreshold is the smallest storage hit worth prefetching, in
	// tokens (extra-config prefetch_threshold). Default 256; values below
	// the page size act as the page size, as SGLang's controller clamps.
	PrefetchThreshold int64 `toml:"prefetch_threshold"`
	// PrefetchTimeoutBase, PrefetchTimeoutPerKiToken and PrefetchTimeoutMax
	// give the timeout policy's limit for a hit of n tokens:
	// min(max, base + per_ki_token * n / 1024), in ns. Defaults 2 s, 0.1 s
	// and 30 s (SGLang's newer PrefetchTimeoutConfig).
	PrefetchTimeoutBase       int64 `toml:"prefetch_timeout_base_ns"`
	PrefetchTimeoutPerKiToken int64 `toml:"prefetch_timeout_per_ki_token_ns"`
	PrefetchTimeoutMax        int64 `toml:"prefetch_timeout_max_ns"`
	// PrefetchCapacityRatio caps the host tokens reserved by in-flight
	// prefetches at this share of the host pool (SGLang's
	// prefetch_capacity_limit = 0.5 * host pool): no prefetch starts while
	// the reservations reach it. Default 0.5; valid (0, 1].
	PrefetchCapacityRatio float64 `toml:"prefetch_capacity_ratio"`
	// ReadBandwidth and WriteBandwidth are the storage link per rank, bytes/s.
	// Defaults 5e9 and 3e9: the sequential rates of one PCIe Gen4 NVMe
	// drive, the file backend's usual home; measure your backend.
	ReadBandwidth  float64 `toml:"read_bandwidth"`
	WriteBandwidth float64 `toml:"write_bandwidth"`
	// ReadLatency and WriteLatency are the fixed cost of one storage call of
	// up to 128 pages (batch_exists / batch_get / batch_set), ns. Default
	// 100 µs.
	ReadLatency  int64 `toml:"read_latency_ns"`
	WriteLatency int64 `toml:"write_latency_ns"`
	// Eviction is how a limited store (CapacityTokens > 0) makes room:
	// StorageLRU (default) or StorageMooncake, whose rounds the next three
	// fields set.
	Eviction StorageEviction `toml:"eviction"`
	// HighWatermark is the share of the capacity at which a Mooncake store
	// runs an eviction round (eviction_high_watermark_ratio). Default 0.95;
	// valid (0, 1].
	HighWatermark float64 `toml:"high_watermark"`
	// EvictionRatio is the share of the stored pages one Mooncake round
	// evicts (eviction_ratio). Default 0.05; valid (0, 1].
	EvictionRatio float64 `toml:"eviction_ratio"`
	// LeaseTTL is how long a Mooncake lookup's lease protects the pages it
	// found from eviction, ns. Default 5 s.
	LeaseTTL int64 `toml:"lease_ttl_ns"`
	// DecodeOffload keeps the storage tier on for a disaggregated fleet's
	// decode server whose prefix cache is off (the chunk cache), which
	// writes each finished request's generated pages to it (SGLang's
	// --disaggregation-decode-enable-offload-kvcache; [Online.SetDecodeMode]).
	// Not a configuration key: the fleet sets it.
	DecodeOffload bool `toml:"-"`
	// AggregateBandwidth caps the store's total transfer rate, bytes/s,
	// over every read and write of every replica that uses it (and every
	// CP rank), first come first served (see l3Bandwidth). 0 (default):
	// no cap (a cap under 1 byte/s is 1 byte/s).
	AggregateBandwidth float64 `toml:"aggregate_bandwidth"`
}

// Default returns a configuration with every default filled in and a device
// pool of deviceTokens tokens per lane.
func Default(deviceTokens int64) Config {
	return Config{Cache: CacheConfig{DeviceTokens: deviceTokens}}.withDefaults()
}

// WithDefaults returns c with every unset field given its default, as New
// uses it (for reports of what was simulated).
func (c Config) WithDefaults() Config { return c.withDefaults() }

func (c Config) withDefaults() Config {
	setDefault(&c.Seed, 1)
	setDefault(&c.TimelineInterval, 1e9)
	k := &c.Cache
	setDefault(&k.PageSize, 1)
	setDefault(&k.Eviction, tree.LRU)
	setDefault(&k.ProtectedShare, 0.8)
	setDefault(&k.WritePolicy, tree.WriteThrough)
	setDefault(&k.LoadBackThreshold, 10)
	setDefault(&k.CP, 1)
	setDefault(&k.Lanes, tree.LanePages)
	setDefault(&k.Planner, PlannerAuto)
	s := &c.Scheduler
	setDefault(&s.Policy, FCFS)
	setDefault(&s.MaxRunningRequests, 2048)
	setDefault(&s.MaxPrefillTokens, 16384)
	setDefault(&s.ChunkedPrefillSize, 8192)
	setDefault(&s.ScheduleConservativeness, 1)
	setDefault(&s.InitNewTokenRatio, 0.7)
	setDefault(&s.MinNewTokenRatioFactor, 0.14)
	setDefault(&s.NewTokenRatioDecaySteps, 600)
	setDefault(&s.ClipMaxNewTokens, 4096)
	setDefault(&s.RetractDecodeSteps, 20)
	setDefault(&s.LPMFallbackQueue, 128)
	l := &c.Links
	setDefault(&l.Layers, 1)
	setDefault(&l.H2DBandwidth, 25e9)
	setDefault(&l.D2HBandwidth, 25e9)
	setDefault(&l.H2DLatency, 10_000)
	setDefault(&l.D2HLatency, 10_000)
	st := &c.Storage
	setDefault(&st.PrefetchPolicy, BestEffort)
	setDefault(&st.PrefetchThreshold, 256)
	setDefault(&st.PrefetchTimeoutBase, 2e9)
	setDefault(&st.PrefetchTimeoutPerKiToken, 1e8)
	setDefault(&st.PrefetchTimeoutMax, 30e9)
	setDefault(&st.PrefetchCapacityRatio, 0.5)
	setDefault(&st.ReadBandwidth, 5e9)
	setDefault(&st.WriteBandwidth, 3e9)
	setDefault(&st.ReadLatency, 100_000)
	setDefault(&st.WriteLatency, 100_000)
	setDefault(&st.Eviction, StorageLRU)
	setDefault(&st.HighWatermark, 0.95)
	setDefault(&st.EvictionRatio, 0.05)
	setDefault(&st.LeaseTTL, 5e9)
	return c
}

// Validate reports every problem with c (after defaults), each a
// [fielderr.Error] with its key path and the value found (a
// [fielderr.RangeError] for a value out of range). The storage tier's
// times, bandwidths and latencies are checked as given, 0 meaning the
// default.
func (c Config) Validate() error {
	c0 := c
	c = c.withDefaults()
	var errs []error
	bad := func(key, want string, got any) {
		errs = append(errs, fielderr.Range(fielderr.Dotted(key), want, got))
	}
	validateCache(c.Cache, bad)
	validateScheduler(c.Scheduler, c.Cache.PageSize, bad)
	validateLinks(c.Links, bad)
	validateStorage(c0.Storage, c.Storage, c.Cache.HostTokens, bad)
	if c.TimelineInterval < -1 {
		bad("timeline_interval_ns", "-1 (off) or > 0", c.TimelineInterval)
	}
	return errors.Join(errs...)
}

// badField records that the field at key is out of its range want; got is
// the value found.
type badField func(key, want string, got any)

// validateCache checks the [cache] table.
func validateCache(k CacheConfig, bad badField) {
	if _, err := tree.ParseStrategy(k.Eviction.String()); err != nil {
		bad("cache.eviction", "one of lru, lfu, fifo, mru, filo, priority, slru, slru-segmented, belady", k.Eviction)
	}
	if _, err := tree.ParseWritePolicy(k.WritePolicy.String()); err != nil {
		bad("cache.write_policy", "one of write_through, write_through_selective, write_back", k.WritePolicy)
	}
	if k.Lanes != tree.LanePages && k.Lanes != tree.LaneTokens {
		bad("cache.lanes", `"page" or "token"`, k.Lanes)
	}
	switch k.Planner {
	case PlannerOwnerLane:
		if k.Eviction == tree.Belady {
			bad("cache.planner", `"auto" or "sglang" under cache.eviction = "belady" (the owner-lane planner has its own eviction order)`, fmt.Sprintf("%q", k.Planner))
		}
	case PlannerAuto, PlannerSGLang:
	default:
		bad("cache.planner", `"auto", "sglang" or "owner-lane"`, k.Planner)
	}
	if k.PageSize < 1 {
		bad("cache.page_size", ">= 1", k.PageSize)
	}
	if k.DeviceTokens <= 0 {
		bad("cache.device_tokens", "> 0", k.DeviceTokens)
	}
	if k.HostTokens < 0 {
		bad("cache.host_tokens", ">= 0", k.HostTokens)
	}
	if k.CP < 1 || k.CP > 1024 {
		bad("cache.cp", "in [1, 1024]", k.CP)
	}
	if !(k.ProtectedShare > 0 && k.ProtectedShare <= 1) {
		bad("cache.protected_share", "in (0, 1]", k.ProtectedShare)
	}
	if k.LoadBackThreshold < 0 {
		bad("cache.load_back_threshold", ">= 0", k.LoadBackThreshold)
	}
}

// validateScheduler checks the [scheduler] table; pageSize is the cache's.
func validateScheduler(s SchedulerConfig, pageSize int, bad badField) {
	if s.Policy < FCFS || s.Policy > Random {
		bad("scheduler.policy", "one of fcfs, lpm, dfs-weight, lof, random", s.Policy)
	}
	if s.MaxRunningRequests < 1 {
		bad("scheduler.max_running_requests", ">= 1", s.MaxRunningRequests)
	}
	if s.MaxPrefillTokens < 1 {
		bad("scheduler.max_prefill_tokens", ">= 1", s.MaxPrefillTokens)
	}
	if s.ChunkedPrefillSize < -1 || s.ChunkedPrefillSize == 0 {
		bad("scheduler.chunked_prefill_size", "-1 (off) or >= 1", s.ChunkedPrefillSize)
	} else if s.ChunkedPrefillSize > 0 && s.ChunkedPrefillSize < int64(pageSize) {
		bad("scheduler.chunked_prefill_size", fmt.Sprintf(">= the page size %d", pageSize), s.ChunkedPrefillSize)
	}
	if !(s.ScheduleConservativeness > 0) || math.IsInf(s.ScheduleConservativeness, 0) {
		bad("scheduler.schedule_conservativeness", "> 0", s.ScheduleConservativeness)
	}
	if !(s.InitNewTokenRatio > 0 && s.InitNewTokenRatio <= 1) {
		bad("scheduler.init_new_token_ratio", "in (0, 1]", s.InitNewTokenRatio)
	}
	if !(s.MinNewTokenRatioFactor > 0 && s.MinNewTokenRatioFactor <= 1) {
		bad("scheduler.min_new_token_ratio_factor", "in (0, 1]", s.MinNewTokenRatioFactor)
	}
	// The step and token counts are bounded so that products with a
	// request's length (the retraction headroom, the decode reservation)
	// stay far inside int64.
	const maxTuning = 1 << 24
	if s.NewTokenRatioDecaySteps < 1 || s.NewTokenRatioDecaySteps > maxTuning {
		bad("scheduler.new_token_ratio_decay_steps", fmt.Sprintf("in [1, %d]", maxTuning), s.NewTokenRatioDecaySteps)
	}
	if s.ClipMaxNewTokens < 1 || s.ClipMaxNewTokens > maxTuning {
		bad("scheduler.clip_max_new_tokens", fmt.Sprintf("in [1, %d]", maxTuning), s.ClipMaxNewTokens)
	}
	if s.RetractDecodeSteps < 1 || s.RetractDecodeSteps > maxTuning {
		bad("scheduler.retract_decode_steps", fmt.Sprintf("in [1, %d]", maxTuning), s.RetractDecodeSteps)
	}
	if s.LPMFallbackQueue < 0 || s.LPMFallbackQueue > maxTuning {
		bad("scheduler.lpm_fallback_queue", fmt.Sprintf("in [0, %d]", maxTuning), s.LPMFallbackQueue)
	}
	if s.ContextLen != 0 && s.ContextLen < 2 {
		bad("scheduler.context_len", "0 (no limit) or >= 2", s.ContextLen)
	}
}

// validateLinks checks the [links] table.
func validateLinks(l LinkConfig, bad badField) {
	if !(l.KVBytesPerToken >= 0) || math.IsInf(l.KVBytesPerToken, 0) {
		bad("links.kv_bytes_per_token", ">= 0", l.KVBytesPerToken)
	}
	if l.Layers < 1 {
		bad("links.layers", ">= 1", l.Layers)
	}
	if !(l.H2DBandwidth > 0) || math.IsInf(l.H2DBandwidth, 0) {
		bad("links.h2d_bandwidth", "> 0", l.H2DBandwidth)
	}
	if !(l.D2HBandwidth > 0) || math.IsInf(l.D2HBandwidth, 0) {
		bad("links.d2h_bandwidth", "> 0", l.D2HBandwidth)
	}
	if l.H2DLatency < 0 {
		bad("links.h2d_latency_ns", ">= 0", l.H2DLatency)
	}
	if l.D2HLatency < 0 {
		bad("links.d2h_latency_ns", ">= 0", l.D2HLatency)
	}
}

// validateStorage checks the [storage] table: the ranges of raw as written
// (0 is the default), the rest of st with defaults filled in; hostTokens is
// the cache's host tier.
func validateStorage(raw, st StorageConfig, hostTokens int64, bad badField) {
	// The storage tier's ranges, in the order a file lists them.
	for _, f := range []struct {
		key string
		v   int64
	}{
		{"storage.prefetch_timeout_base_ns", raw.PrefetchTimeoutBase},
		{"storage.prefetch_timeout_per_ki_token_ns", raw.PrefetchTimeoutPerKiToken},
		{"storage.prefetch_timeout_max_ns", raw.PrefetchTimeoutMax},
	} {
		if f.v < 0 {
			bad(f.key, ">= 0", f.v)
		}
	}
	for _, f := range []struct {
		key string
		v   float64
	}{{"storage.read_bandwidth", raw.ReadBandwidth}, {"storage.write_bandwidth", raw.WriteBandwidth}} {
		if !(f.v >= 0) || math.IsInf(f.v, 0) {
			bad(f.key, ">= 0", f.v)
		}
	}
	for _, f := range []struct {
		key string
		v   int64
	}{{"storage.read_latency_ns", raw.ReadLatency}, {"storage.write_latency_ns", raw.WriteLatency}, {"storage.lease_ttl_ns", raw.LeaseTTL}} {
		if f.v < 0 {
			bad(f.key, ">= 0", f.v)
		}
	}
	if st.PrefetchPolicy < BestEffort || st.PrefetchPolicy > PrefetchTimeout {
		bad("storage.prefetch_policy", "one of best_effort, wait_complete, timeout", st.PrefetchPolicy)
	}
	if st.Enabled && hostTokens == 0 {
		bad("storage.enabled", "false without a host tier (HiCache off or host_tokens = 0)", st.Enabled)
	}
	if st.CapacityTokens < 0 {
		bad("storage.capacity_tokens", ">= 0 (0: unlimited)", st.CapacityTokens)
	}
	if st.PrefetchThreshold < 0 {
		bad("storage.prefetch_threshold", ">= 0", st.PrefetchThreshold)
	}
	if !(st.PrefetchCapacityRatio > 0 && st.PrefetchCapacityRatio <= 1) {
		bad("storage.prefetch_capacity_ratio", "in (0, 1]", st.PrefetchCapacityRatio)
	}
	if a := st.AggregateBandwidth; !(a >= 0) || math.IsInf(a, 0) {
		bad("storage.aggregate_bandwidth", ">= 0 (0: no cap)", a)
	}
	if st.Eviction < StorageLRU || st.Eviction > StorageMooncake {
		bad("storage.eviction", "one of lru, mooncake", st.Eviction)
	}
	for _, f := range []struct {
		key string
		v   float64
	}{{"storage.high_watermark", st.HighWatermark}, {"storage.eviction_ratio", st.EvictionRatio}} {
		if !(f.v > 0 && f.v <= 1) {
			bad(f.key, "in (0, 1]", f.v)
		}
	}
}

// treeConfig translates the cache section for package tree.
func (c Config) treeConfig() tree.Config {
	k := c.Cache
	return tree.Config{
		PageSize: k.PageSize, CP: k.CP, Lanes: k.Lanes,
		DeviceTokens: k.DeviceTokens, HostTokens: k.HostTokens,
		Eviction: k.Eviction, ProtectedShare: k.ProtectedShare,
		WritePolicy: k.WritePolicy, LoadBackThreshold: k.LoadBackThreshold,
		HoldWriteBacks: c.storageOn(),
	}
}

// storageOn reports whether the storage tier takes part in the run: it is
// enabled, and there is a host tier and a prefix cache to feed it (or a
// decode server's offload).
func (c Config) storageOn() bool {
	return c.Storage.Enabled && c.Cache.HostTokens > 0 && (!c.Cache.Disable || c.Storage.DecodeOffload)
}

// setDefault sets *p to def if it is the zero value.
func setDefault[T comparable](p *T, def T) {
	var zero T
	if *p == zero {
		*p = def
	}
}
