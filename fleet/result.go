package fleet

import (
	"reflect"

	"github.com/kvsim/kvsim/sim"
	"github.com/kvsim/kvsim/sim/engine"
)

// Result is a fleet run's outcome.
type Result struct {
	// Policy is the router's policy.
	Policy string `json:"policy"`
	// Summary is the seed metric set over every request of the fleet
	// ([engine.Summarize]), with the cache activity summed over replicas.
	Summary engine.Summary `json:"summary"`
	// Replicas are the per-replica results, in replica order.
	Replicas []ReplicaResult `json:"replicas"`
	// Imbalance measures how evenly the router spread the load.
	Imbalance Imbalance `json:"imbalance"`
	// Decisions are the router's decision counts by reason, in the order
	// of router.Reasons, reasons never taken left out.
	Decisions []DecisionCount `json:"decisions"`
	// RouterEstimate compares the router's expected prefixes with the
	// hits (cache_aware, kv_aware, cache_aware_oracle; nil otherwise and in
	// a disaggregated fleet).
	RouterEstimate *RouterEstimate `json:"router_estimate,omitempty"`
	// L3 is the storage tier's activity summed over the replicas; nil when
	// no replica has one.
	L3 *L3Result `json:"l3,omitempty"`
	// SharedL3 are the fleet's shared L3 stores (storage.shared), one per
	// namespace and page size, in the order of their first replica.
	SharedL3 []SharedL3Result `json:"shared_l3,omitempty"`
	// Requests are every request's result, in completion order over the
	// fleet (ties: replica order).
	Requests []engine.RequestResult `json:"-"`
	// Replica is the replica of each of Requests (in a disaggregated
	// fleet, its decode replica).
	Replica []int `json:"-"`
	// PD is a disaggregated fleet's transfer summary (nil otherwise).
	PD *PDResult `json:"pd,omitempty"`
	// PDRequests are a disaggregated fleet's per-request details, as
	// Requests (nil otherwise).
	PDRequests []PDRequest `json:"-"`
	// IgnoredDeps counts, in a closed-loop run, the dependencies (parent,
	// wait_for) that named no earlier request, as engine.Result's.
	IgnoredDeps int `json:"-"`
}

// ReplicaResult is one replica's share of a fleet run.
type ReplicaResult struct {
	Index int    `json:"replica"`
	Group string `json:"group"`
	// Role is "prefill" or "decode" in a disaggregated fleet, else empty.
	Role string `json:"role,omitempty"`
	// Routed is the requests the router sent to the replica.
	Routed    int64 `json:"routed"`
	Completed int64 `json:"completed"`
	Failed    int64 `json:"failed"`
	// The replica's hit rates: cached tokens over prompt tokens, by tier.
	CacheHitRate   float64 `json:"cache_hit_rate"`
	DeviceHitRate  float64 `json:"device_hit_rate"`
	HostHitRate    float64 `json:"host_hit_rate"`
	StorageHitRate float64 `json:"storage_hit_rate"`
	// TTFT over the replica's completed requests, ms.
	MeanTTFT   float64 `json:"mean_ttft_ms"`
	MedianTTFT float64 `json:"median_ttft_ms"`
	P90TTFT    float64 `json:"p90_ttft_ms"`
	P99TTFT    float64 `json:"p99_ttft_ms"`
	// MeanInFlight is the router's in-flight count to the replica averaged
	// over virtual time, from the first arrival to the end of the run;
	// MaxInFlight its maximum.
	MeanInFlight float64 `json:"mean_in_flight"`
	MaxInFlight  int     `json:"max_in_flight"`
	// L3 is the replica's storage-tier activity; nil when no replica of the
	// fleet has a storage tier.
	L3 *L3Result `json:"l3,omitempty"`
	// Result is the replica engine's own result.
	Result *engine.Result `json:"-"`
}

// Imbalance is how unevenly a fleet's load fell on its replicas.
type Imbalance struct {
	// MaxOverMeanInFlight is the largest replica mean in-flight count over
	// the mean of them (1: even; N: everything on one of N replicas).
	MaxOverMeanInFlight float64 `json:"max_over_mean_in_flight"`
	// RequestsCV is the coefficient of variation (population standard
	// deviation over mean) of the requests routed per replica.
	RequestsCV float64 `json:"requests_cv"`
}

// DecisionCount is how many routing decisions a reason took.
type DecisionCount struct {
	Reason string `json:"reason"`
	Count  int64  `json:"count"`
}

// L3Result is the storage tier's (L3's) activity of a replica or a fleet.
// Pages are the replica's pages (server.page_size tokens).
type L3Result struct {
	// HitTokens are the prompt tokens served from L3: the cached tokens
	// the requests' own prefetches brought in (cached_storage_tokens).
	HitTokens int64 `json:"l3_hit_tokens"`
	// PagesRead are the pages read from L3 by prefetches, used or not.
	PagesRead int64 `json:"l3_pages_read"`
	// PagesWritten are the pages backed up to L3 over the replica's write
	// link: pages the store lacked and, when shared, no other replica was
	// writing.
	PagesWritten int64 `json:"l3_pages_written"`
	// CrossReplicaPagesRead are the pages read from a shared L3 that
	// another replica wrote (0 for a private store).
	CrossReplicaPagesRead int64 `json:"l3_cross_replica_pages_read"`
	// PagesEvicted are the pages L3 dropped for capacity; for a shared
	// store, those dropped when the replica's backups landed.
	PagesEvicted int64 `json:"l3_pages_evicted"`
	// EvictionRounds are the Mooncake eviction rounds (storage.eviction =
	// "mooncake") that dropped pages; for a shared store, those the
	// replica's landings ran.
	EvictionRounds int64 `json:"l3_eviction_rounds,omitempty"`
	// PagesRefused are the pages of the replica's backups a full Mooncake
	// store refused, every page being under lease.
	PagesRefused int64 `json:"l3_pages_refused,omitempty"`
	// L3BandwidthStats are the replica's storage calls a shared store's
	// aggregate bandwidth cap (storage.aggregate_gbps) slowed, and their
	// added time.
	sim.L3BandwidthStats
}

// SharedL3Result is one shared L3 store of a fleet.
type SharedL3Result struct {
	// Namespace is the replicas' model namespace (configs' L3Namespace).
	Namespace string `json:"namespace"`
	// PageSize is the store's page size, tokens.
	PageSize int `json:"page_size"`
	// Replicas are the indexes of the replicas that share it.
	Replicas []int `json:"replicas"`
	// StoredTokens is what the store holds at the end of the run.
	StoredTokens int64 `json:"stored_tokens"`
}

// EngineResult is the fleet's result as one engine's ([engine.Result]):
// every request in completion order, the fleet's summary, and the
// replicas' counters summed field by field (no timeline).
func (r *Result) EngineResult() *engine.Result {
	out := &engine.Result{Requests: r.Requests, Summary: r.Summary, IgnoredDeps: r.IgnoredDeps}
	sum := reflect.ValueOf(&out.Counters).Elem()
	for _, rep := range r.Replicas {
		if rep.Result == nil {
			continue
		}
		c := reflect.ValueOf(rep.Result.Counters)
		for i := range sum.NumField() {
			switch f := sum.Field(i); f.Kind() {
			case reflect.Int64:
				f.SetInt(f.Int() + c.Field(i).Int())
			case reflect.Float64:
				f.SetFloat(f.Float() + c.Field(i).Float())
			}
		}
	}
	return out
}
