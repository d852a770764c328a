package fleet

import (
	"reflect"

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
	// Requests are every request's result, in completion order over the
	// fleet (ties: replica order).
	Requests []engine.RequestResult `json:"-"`
	// Replica is the replica of each of Requests.
	Replica []int `json:"-"`
}

// ReplicaResult is one replica's share of a fleet run.
type ReplicaResult struct {
	Index int    `json:"replica"`
	Group string `json:"group"`
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

// EngineResult is the fleet's result as one engine's ([engine.Result]):
// every request in completion order, the fleet's summary, and the
// replicas' counters summed field by field (no timeline).
func (r *Result) EngineResult() *engine.Result {
	out := &engine.Result{Requests: r.Requests, Summary: r.Summary}
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
