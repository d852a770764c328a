package engine

import (
	"math"
	"sort"

	"gonum.org/v1/gonum/stat"
)

// RequestResult is what happened to one request. Times are simulated ns.
type RequestResult struct {
	ID      string `json:"id"`
	Arrival Time   `json:"arrival_ns"` // the trace's arrival time
	// Release is when the request reached the server, set by closed-loop
	// runs (Sim.RunClosedLoop): its Arrival, or later when it waited for
	// its dependencies. 0 (omitted) in open-loop runs, where it is Arrival.
	Release Time `json:"release_ns,omitempty"`
	// DepWait is Release - Arrival: how long the request waited for its
	// dependencies (and its delay after its parent) past its arrival.
	DepWait      Time  `json:"dep_wait_ns,omitempty"`
	Admitted     Time  `json:"admitted_ns"`    // first admission into a prefill batch
	FirstToken   Time  `json:"first_token_ns"` // end of the forward that produced the first token
	Finish       Time  `json:"finish_ns"`
	PromptTokens int64 `json:"prompt_tokens"`
	OutputTokens int64 `json:"output_tokens"`
	// CachedTokens is SGLang's cached_tokens: device hit plus host hit loaded
	// back, counted at the first admission. It is CachedDevice + CachedHost
	// + CachedStorage (SGLang's newer cached_tokens_details).
	CachedTokens int64 `json:"cached_tokens"`
	CachedDevice int64 `json:"cached_device_tokens"`
	// CachedHost is the loaded-back host hit that was in the host tier
	// before the request arrived (or fetched by another request).
	CachedHost int64 `json:"cached_host_tokens"`
	// CachedStorage is the loaded-back host hit that the request's own
	// storage prefetch brought into the host tier.
	CachedStorage int64 `json:"cached_storage_tokens,omitempty"`
	// StorageTokens is what the request's prefetch inserted into the host
	// tier (whether or not it was then loaded back).
	StorageTokens int64  `json:"storage_fetched_tokens,omitempty"`
	Retractions   int    `json:"retractions,omitempty"`
	Failed        string `json:"failed,omitempty"`
}

// start is when the request reached the server (Release, or Arrival for a
// result that does not set it).
func (r RequestResult) start() Time { return max(r.Arrival, r.Release) }

// TTFT is the time to first token, from the release.
func (r RequestResult) TTFT() Time { return r.FirstToken - r.start() }

// E2E is the end-to-end latency, from the release.
func (r RequestResult) E2E() Time { return r.Finish - r.start() }

// Queueing is the time from the release to the first admission.
func (r RequestResult) Queueing() Time { return r.Admitted - r.start() }

// Counters are totals over a run.
type Counters struct {
	Requests           int64   `json:"requests"`
	Failed             int64   `json:"failed"`
	OutputTokens       int64   `json:"output_tokens"`
	PrefillBatches     int64   `json:"prefill_batches"`
	DecodeSteps        int64   `json:"decode_steps"`
	PrefillNs          int64   `json:"prefill_ns"`
	DecodeNs           int64   `json:"decode_ns"`
	StallNs            int64   `json:"write_back_stall_ns"`
	Retractions        int64   `json:"retractions"`
	AllocFailures      int64   `json:"alloc_failures"`
	WriteThroughTokens int64   `json:"write_through_tokens"`
	WriteBackTokens    int64   `json:"write_back_tokens"`
	LoadBackTokens     int64   `json:"load_back_tokens"`
	LoadSkippedTokens  int64   `json:"load_skipped_tokens"`
	LoadFailedTokens   int64   `json:"load_failed_tokens"`
	H2DBytes           float64 `json:"h2d_bytes"`
	D2HBytes           float64 `json:"d2h_bytes"`
	PlannerRuns        int64   `json:"planner_runs"`

	// Storage tier (all zero without one).
	StorageReadTokens  int64   `json:"storage_read_tokens,omitempty"`  // read from storage, used or not
	StorageReadBytes   float64 `json:"storage_read_bytes,omitempty"`   //
	StorageWriteTokens int64   `json:"storage_write_tokens,omitempty"` // backed up (pages storage lacked)
	StorageWriteBytes  float64 `json:"storage_write_bytes,omitempty"`  //
	// StorageEvictedTokens were dropped from storage for capacity.
	StorageEvictedTokens int64 `json:"storage_evicted_tokens,omitempty"`
	// StorageEvictionRounds are Mooncake-mode eviction rounds that dropped
	// pages (storage.eviction = "mooncake").
	StorageEvictionRounds int64 `json:"storage_eviction_rounds,omitempty"`
	// StorageRefusedTokens were backed up but refused by a full store whose
	// every page was under lease (Mooncake mode).
	StorageRefusedTokens int64 `json:"storage_refused_tokens,omitempty"`
	// StoragePrefetchedTokens were inserted into the host tier by prefetches.
	StoragePrefetchedTokens int64 `json:"storage_prefetched_tokens,omitempty"`
	// StorageInsertDroppedTokens were fetched but not inserted: the prefix
	// they hang under was gone, or had no host copy.
	StorageInsertDroppedTokens int64 `json:"storage_insert_dropped_tokens,omitempty"`
	PrefetchesIssued           int64 `json:"prefetches_issued,omitempty"`
	// PrefetchesRevoked found a storage hit below the threshold.
	PrefetchesRevoked int64 `json:"prefetches_revoked,omitempty"`
	// PrefetchesRateLimited were not started: in-flight prefetches held the
	// prefetch capacity limit.
	PrefetchesRateLimited int64 `json:"prefetches_rate_limited,omitempty"`
	// PrefetchesNoHost found no host room for the hit even after evicting.
	PrefetchesNoHost int64 `json:"prefetches_no_host,omitempty"`
	// PrefetchesTerminatedEarly were ended by the policy before every batch
	// was read (best_effort, timeout).
	PrefetchesTerminatedEarly int64 `json:"prefetches_terminated_early,omitempty"`
	// PrefetchesCancelled belonged to requests that failed while waiting.
	PrefetchesCancelled int64 `json:"prefetches_cancelled,omitempty"`
}

// Sample is the occupancy of the tiers at one instant (totals over lanes).
type Sample struct {
	Time      Time  `json:"t_ns"`
	Device    int64 `json:"device_tree_tokens"`
	Held      int64 `json:"device_request_tokens"`
	Evictable int64 `json:"device_evictable_tokens"`
	Host      int64 `json:"host_tokens"`
	// HostReserved is host tokens reserved by storage prefetches in flight.
	HostReserved int64 `json:"host_reserved_tokens,omitempty"`
	// Storage is the tokens the storage tier holds.
	Storage int64 `json:"storage_tokens,omitempty"`
	Waiting int   `json:"waiting"`
	Running int   `json:"running"`
}

// Result is the outcome of a run.
type Result struct {
	Requests []RequestResult // in completion order
	Summary  Summary
	Counters Counters
	Timeline []Sample
	// IgnoredDeps counts the dependencies (parent, wait_for) of a
	// closed-loop run that named no earlier request: those requests ran
	// without them.
	IgnoredDeps int
}

// Serving is the metric set of SGLang's serving benchmarks
// (bench_serving.py, bench_warm_cache.py), under their JSON field names and
// in their order, minus the *_retokenized fields (which need the model's
// tokenizer). Times are milliseconds, throughputs per second of the
// benchmark duration. The simulator and the replay of a real server both
// report it.
type Serving struct {
	Completed         int64   `json:"completed"`
	Duration          float64 `json:"benchmark_duration"`
	TotalInput        int64   `json:"total_input"`
	TotalOutput       int64   `json:"total_output"`
	RequestThroughput float64 `json:"request_throughput"`
	InputThroughput   float64 `json:"input_throughput"`
	OutputThroughput  float64 `json:"output_throughput"`
	TotalThroughput   float64 `json:"total_throughput"`

	MeanTTFT    float64 `json:"mean_ttft_ms"`
	MedianTTFT  float64 `json:"median_ttft_ms"`
	StdTTFT     float64 `json:"std_ttft_ms"`
	P90TTFT     float64 `json:"p90_ttft_ms"`
	P99TTFT     float64 `json:"p99_ttft_ms"`
	MeanTPOT    float64 `json:"mean_tpot_ms"`
	MedianTPOT  float64 `json:"median_tpot_ms"`
	StdTPOT     float64 `json:"std_tpot_ms"`
	P90TPOT     float64 `json:"p90_tpot_ms"`
	P99TPOT     float64 `json:"p99_tpot_ms"`
	MeanITL     float64 `json:"mean_itl_ms"`
	MedianITL   float64 `json:"median_itl_ms"`
	StdITL      float64 `json:"std_itl_ms"`
	P90ITL      float64 `json:"p90_itl_ms"`
	P99ITL      float64 `json:"p99_itl_ms"`
	MeanE2E     float64 `json:"mean_e2e_latency_ms"`
	MedianE2E   float64 `json:"median_e2e_latency_ms"`
	StdE2E      float64 `json:"std_e2e_latency_ms"`
	P90E2E      float64 `json:"p90_e2e_latency_ms"`
	P99E2E      float64 `json:"p99_e2e_latency_ms"`
	Concurrency float64 `json:"concurrency"`
}

// Summary is a simulation's metric set: the serving benchmark's, plus the
// cache's.
type Summary struct {
	Serving
	Failed int64 `json:"failed"`

	CacheHitRate   float64 `json:"cache_hit_rate"`
	DeviceHitRate  float64 `json:"device_hit_rate"`
	HostHitRate    float64 `json:"host_hit_rate"`
	StorageHitRate float64 `json:"storage_hit_rate"`
	SimulatedSec   float64 `json:"simulated_seconds"`

	DeviceEvictions    int64   `json:"device_evicted_tokens"`
	Demoted            int64   `json:"demoted_tokens"`
	HostEvictions      int64   `json:"host_evicted_tokens"`
	WriteThroughTokens int64   `json:"write_through_tokens"`
	WriteBackTokens    int64   `json:"write_back_tokens"`
	LoadBackTokens     int64   `json:"load_back_tokens"`
	H2DGB              float64 `json:"h2d_gb"`
	D2HGB              float64 `json:"d2h_gb"`
	Retractions        int64   `json:"retractions"`
	StorageReadGB      float64 `json:"storage_read_gb,omitempty"`
	StorageWriteGB     float64 `json:"storage_write_gb,omitempty"`
}

// Summarize computes the metric set over per-request results and all
// inter-token latencies (ms), the way SGLang's benchmarks do: TPOT =
// (latency - ttft) / (output - 1) for outputs longer than one token;
// duration from the first arrival to the last finish; concurrency = sum of
// latencies / duration. Percentiles interpolate linearly between order
// statistics (numpy's default), std is the population standard deviation.
func Summarize(rs []RequestResult, itls []float64) Summary {
	var st Stats
	for _, r := range rs {
		st.Add(r)
	}
	for _, x := range itls {
		st.AddITL(x)
	}
	return st.Summary()
}

// dist returns mean, median, population std, p90 and p99 of xs (zeros for
// an empty sample, as the benchmarks' `or 0` does).
func dist(xs []float64) (mean, median, std, p90, p99 float64) {
	if len(xs) == 0 {
		return 0, 0, 0, 0, 0
	}
	sorted := append([]float64(nil), xs...)
	sort.Float64s(sorted)
	mean, std = stat.PopMeanStdDev(sorted, nil)
	return mean, Percentile(sorted, 50), std, Percentile(sorted, 90), Percentile(sorted, 99)
}

// Percentile returns the p-th percentile (0..100) of sorted data with
// linear interpolation between closest ranks, numpy's default method
// (Hyndman and Fan type 7). gonum's stat.Quantile offers only the empirical
// and type-4 definitions, which differ from what the benchmarks print.
func Percentile(sorted []float64, p float64) float64 {
	n := len(sorted)
	if n == 0 {
		return 0
	}
	h := (float64(n) - 1) * p / 100
	lo := math.Floor(h)
	i := int(lo)
	if i >= n-1 {
		return sorted[n-1]
	}
	return sorted[i] + (h-lo)*(sorted[i+1]-sorted[i])
}
