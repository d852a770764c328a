package fleet

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"time"

	"github.com/kvsim/kvsim/fleet/router"
	"github.com/kvsim/kvsim/sim/engine"
	"github.com/kvsim/kvsim/traces"
)

// Role is a replica's part in a prefill/decode disaggregated fleet.
type Role int

// The roles.
const (
	// Prefill replicas compute prompts and send their KV (SGLang's
	// --disaggregation-mode prefill).
	Prefill Role = 1 + iota
	// Decode replicas receive the KV and generate (--disaggregation-mode
	// decode).
	Decode
)

// String returns the role's name ("prefill", "decode").
func (r Role) String() string {
	switch r {
	case Prefill:
		return "prefill"
	case Decode:
		return "decode"
	}
	return fmt.Sprintf("Role(%d)", int(r))
}

// PDConfig configures prefill/decode disaggregation (fleet-spec 2; the
// [disaggregation] table).
type PDConfig struct {
	// Prefill and Decode are the two pools' routers (SGLang's
	// --prefill-policy and --decode-policy with the shared parameters).
	Prefill, Decode router.Config
	// TransferGbps is each prefill replica's KV link, Gbit/s, > 0.
	TransferGbps float64
	// TransferLatency is added to every transfer (one chunk's pages), >= 0.
	TransferLatency time.Duration
	// TransferQueues is SGLANG_DISAGGREGATION_QUEUE_SIZE, >= 1 (SGLang: 4).
	TransferQueues int
	// ReservedDecodeTokens is --num-reserved-decode-tokens, >= 0 (SGLang:
	// 512).
	ReservedDecodeTokens int64
	// BootstrapTimeout is SGLANG_DISAGGREGATION_BOOTSTRAP_TIMEOUT, >= 0
	// (SGLang: 300 s; 0: none): a request its decode replica has not
	// preallocated this long after its arrival (the prefill side's sender
	// still bootstrapping) is aborted.
	BootstrapTimeout time.Duration
	// WaitingTimeout is SGLANG_DISAGGREGATION_WAITING_TIMEOUT, >= 0
	// (SGLang: 300 s; 0: none): a request whose KV has not all landed
	// this long after its preallocation (the decode side's receiver
	// waiting) is aborted.
	WaitingTimeout time.Duration
	// DecodeOffload is --disaggregation-decode-enable-offload-kvcache: the
	// decode replicas write each finished request's generated pages to
	// their storage tier (shared with the prefill replicas' for a later
	// turn to hit them anywhere). Every decode replica's server must have
	// a storage tier (sim: Storage.DecodeOffload with the chunk cache).
	DecodeOffload bool
}

// DefaultPD returns SGLang's defaults: cache_aware on both pools, 4
// transfer queues, 512 reserved decode tokens, 300 s timeouts;
// TransferGbps must be set.
func DefaultPD() PDConfig {
	return PDConfig{
		Prefill: router.Default(), Decode: router.Default(), TransferQueues: 4, ReservedDecodeTokens: 512,
		BootstrapTimeout: 300 * time.Second, WaitingTimeout: 300 * time.Second,
	}
}

// PDReplica is one replica of a disaggregated fleet.
type PDReplica struct {
	Replica
	Role Role
	// KVBytesPerToken is one token's KV over all the replica's ranks: what a
	// prefill replica sends per token (a page is PageSize tokens of it).
	KVBytesPerToken float64
}

// prefillServer is what a prefill replica's engine must do besides
// [engine.Engine] (sim.Online does).
type prefillServer interface {
	engine.Engine
	SetPrefillMode(onChunk func(id string, at engine.Time, computed int64, last bool)) error
	HoldUntilSent() error
	KVSent(id string, at engine.Time) error
	Abort(id string, at engine.Time, why string) error
}

// decodeServer is what a decode replica's engine must do besides
// [engine.Engine] (sim.Online does: with its radix cache off, the chunk
// cache; on, the decode-side radix cache).
type decodeServer interface {
	engine.Engine
	SetDecodeMode(reserved int64, onPrealloc func(id string, at engine.Time, cached int64)) error
	KVReady(id string, at engine.Time) error
	Abort(id string, at engine.Time, why string) error
}

// pdFleet is a disaggregated fleet's own part of a [Fleet].
type pdFleet struct {
	cfg      PDConfig
	router   *router.PD
	roles    []Role
	pool     []int // each replica's index in its pool
	global   [2][]int
	pageSize []int
	kvBytes  []float64
	links    []*link     // per replica; nil for decode replicas
	kv       [2]*kvIndex // per pool: kv_aware's or cache_aware_oracle's index of its replicas' KV events; nil otherwise
	polls    [2]loadPoll // per pool: its router's load snapshots (poll.go)
	run      *pdRun      // the run in progress, for the engines' callbacks
}

// NewPD builds a prefill/decode disaggregated fleet: the prefill replicas
// behind cfg.Prefill's router, the decode replicas behind cfg.Decode's,
// KV moving over each prefill replica's link. Every replica's engine must
// support its role (SGLang's; a decode replica with its radix cache off).
// seed seeds both routers' random streams.
func NewPD(replicas []PDReplica, cfg PDConfig, seed uint64) (*Fleet, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	pd := &pdFleet{cfg: cfg}
	f := &Fleet{policy: cfg.Prefill.Policy, poll: loadPoll{every: -1}, pd: pd}
	pd.polls = [2]loadPoll{newLoadPoll(cfg.Prefill), newLoadPoll(cfg.Decode)}
	for i, r := range replicas {
		k := 0
		switch r.Role {
		case Prefill:
		case Decode:
			k = 1
		default:
			return nil, fmt.Errorf("fleet: replica %d (%s): no role", i, r.Group)
		}
		if st, ok := r.Factory.(storageTier); cfg.DecodeOffload && r.Role == Decode && (!ok || !st.HasStorage()) {
			return nil, fmt.Errorf("fleet: replica %d (%s): decode offload needs a storage tier on every decode replica", i, r.Group)
		}
		if !(r.KVBytesPerToken >= 0) || math.IsInf(r.KVBytesPerToken, 0) {
			return nil, fmt.Errorf("fleet: replica %d (%s): KV bytes per token must be >= 0 (got %g)", i, r.Group, r.KVBytesPerToken)
		}
		pd.roles = append(pd.roles, r.Role)
		pd.pool = append(pd.pool, len(pd.global[k]))
		pd.global[k] = append(pd.global[k], i)
		pd.pageSize = append(pd.pageSize, max(r.Factory.Info().PageSize, 1))
		pd.kvBytes = append(pd.kvBytes, r.KVBytesPerToken)
		f.replicas = append(f.replicas, r.Replica)
	}
	if len(pd.global[0]) == 0 || len(pd.global[1]) == 0 {
		return nil, errors.New("fleet: disaggregation needs at least one prefill and one decode replica")
	}
	deps := [2]router.Deps{
		{Rand: rand.New(rand.NewPCG(seed, 0x70726566696c6c))}, // "prefill"
		{Rand: rand.New(rand.NewPCG(seed, 0x6465636f6465))},   // "decode"
	}
	if err := pd.kvIndexes(f, &deps); err != nil {
		return nil, err
	}
	rt, err := router.NewPD(cfg.Prefill, cfg.Decode, len(pd.global[0]), len(pd.global[1]), deps[0], deps[1])
	if err != nil {
		return nil, err
	}
	pd.router = rt
	for i, r := range replicas {
		var itl *engine.Stats // a prefill replica's tokens are not the client's
		if r.Role == Decode {
			itl = &f.stats
		}
		e, err := f.newReplica(i, r.Replica, itl)
		if err == nil {
			err = pd.setMode(i, e)
		}
		if kv := pd.kv[r.Role-1]; err == nil && kv != nil {
			err = kv.attach(pd.pool[i], e)
		}
		if err != nil {
			return nil, fmt.Errorf("fleet: replica %d (%s): %w", i, r.Group, err)
		}
		f.engines = append(f.engines, e)
		var l *link
		if r.Role == Prefill {
			l = newLink(cfg.TransferGbps, engine.Time(cfg.TransferLatency), cfg.TransferQueues)
		}
		pd.links = append(pd.links, l)
	}
	return f, nil
}

// kvIndexes builds the index of each pool whose policy is kv_aware or
// cache_aware_oracle (the latter's with no delay) over the pool's
// replicas, and makes it the pool's cache oracle in deps. Both pools'
// indexes and the fleet's shared L3 stores page with one pager, so that a
// page id means the same tokens everywhere: the fleet then needs one page
// size.
func (pd *pdFleet) kvIndexes(f *Fleet, deps *[2]router.Deps) error {
	for k, cfg := range [2]router.Config{pd.cfg.Prefill, pd.cfg.Decode} {
		if cfg.Policy != router.KVAware && cfg.Policy != router.CacheAwareOracle {
			continue
		}
		role := Role(k + 1)
		kv, err := newKVIndex(cfg, f.replicas, pd.global[k], fmt.Sprintf("router.%v.policy", role), role.String()+" replica")
		if err != nil {
			return err
		}
		if f.l3.pager != nil {
			if p := f.l3.pager.PageSize(); kv.ps != p {
				return fmt.Errorf("fleet: router.prefill.policy and router.decode.policy read the replicas' KV events with one page size: the prefill replicas have %d, the decode replicas %d", p, kv.ps)
			}
			kv.pager = f.l3.pager
		}
		f.l3.pager = kv.pager
		pd.kv[k] = kv
		deps[k].Oracle = kv
	}
	return nil
}

func (c *PDConfig) validate() error {
	var errs []error
	if !(c.TransferGbps > 0) || math.IsInf(c.TransferGbps, 0) {
		errs = append(errs, fmt.Errorf("fleet: disaggregation.transfer_gbps must be > 0 (got %g)", c.TransferGbps))
	}
	if c.TransferLatency < 0 {
		errs = append(errs, fmt.Errorf("fleet: disaggregation.transfer_latency must be >= 0 (got %v)", c.TransferLatency))
	}
	if c.TransferQueues < 1 {
		errs = append(errs, fmt.Errorf("fleet: disaggregation.transfer_queues must be >= 1 (got %d)", c.TransferQueues))
	}
	if c.ReservedDecodeTokens < 0 {
		errs = append(errs, fmt.Errorf("fleet: disaggregation.num_reserved_decode_tokens must be >= 0 (got %d)", c.ReservedDecodeTokens))
	}
	if c.BootstrapTimeout < 0 || c.WaitingTimeout < 0 {
		errs = append(errs, fmt.Errorf("fleet: disaggregation timeouts must be >= 0 (got %v and %v)", c.BootstrapTimeout, c.WaitingTimeout))
	}
	return errors.Join(errs...)
}

// setMode puts replica i's engine in its role, with the callbacks that
// reach the run in progress.
func (pd *pdFleet) setMode(i int, e engine.Engine) error {
	if pd.roles[i] == Prefill {
		ps, ok := e.(prefillServer)
		if !ok {
			return errors.New("its server model cannot serve prefill in a disaggregated fleet (SGLang's can)")
		}
		err := ps.SetPrefillMode(func(id string, at engine.Time, computed int64, last bool) {
			pd.run.chunk(i, id, at, computed, last)
		})
		if err != nil {
			return err
		}
		return ps.HoldUntilSent() // its tree locks until the last chunk lands
	}
	ds, ok := e.(decodeServer)
	if !ok {
		return errors.New("its server model cannot serve decode in a disaggregated fleet (SGLang's can)")
	}
	return ds.SetDecodeMode(pd.cfg.ReservedDecodeTokens, func(id string, at engine.Time, cached int64) {
		pd.run.preallocated(i, id, at, cached)
	})
}

// inFlight is the router's in-flight count to replica i (its pool's).
func (pd *pdFleet) inFlight(i int) int { return pd.routerOf(i).InFlight(pd.pool[i]) }

// routerOf is the router of replica i's pool.
func (pd *pdFleet) routerOf(i int) *router.Router {
	if pd.roles[i] == Prefill {
		return pd.router.Prefill
	}
	return pd.router.Decode
}

// pdReq is one request's way through a disaggregated fleet.
type pdReq struct {
	rec        traces.Record
	pair       router.Pair
	p, d       int // replicas
	prealloc   engine.Time
	pAdmit     engine.Time
	pDone      engine.Time
	firstSent  engine.Time
	landed     engine.Time
	first      engine.Time
	sentPages  int64
	skipped    int64 // pages the decode replica had (decode_prefix_len)
	bytes      float64
	pages      int64
	prefillRes engine.RequestResult
	gotFirst   bool
	sending    bool // a chunk was sent
	preallocd  bool // the decode replica preallocated it (the bootstrap clock stopped)
	ready      bool // its KV landed on the decode replica (the waiting clock stopped)
	pOpen      bool // submitted to its prefill replica and not finished there
	failing    bool // aborted on its decode replica by the fleet (a timeout or a prefill failure)
	ended      bool // finished on its decode replica
}

// PDRequest is a request's disaggregation detail. Its TTFT is Bootstrap +
// PrefillQueue + PrefillCompute + TransferTail + FirstStep exactly
// (fleet-spec 2.1); all are 0 for a request that failed.
type PDRequest struct {
	Prefill int `json:"prefill_replica"`
	Decode  int `json:"decode_replica"`
	// Bootstrap is from the arrival to the decode replica's preallocation
	// (the prefill replica's bootstrap wait).
	Bootstrap engine.Time `json:"bootstrap_ns"`
	// PrefillQueue is from the preallocation to the prefill admission.
	PrefillQueue engine.Time `json:"prefill_queue_ns"`
	// PrefillCompute is from the prefill admission to the end of the last
	// prefill forward.
	PrefillCompute engine.Time `json:"prefill_compute_ns"`
	// TransferTail is from the end of the last prefill forward to the
	// last page landing on the decode replica.
	TransferTail engine.Time `json:"transfer_tail_ns"`
	// FirstStep is from the landing to the first token (the prebuilt step,
	// after the decode replica's forward in progress).
	FirstStep engine.Time `json:"first_step_ns"`
	// Transfer is from the first chunk's send to the last page landing.
	Transfer      engine.Time `json:"transfer_ns"`
	TransferBytes float64     `json:"transfer_bytes"`
	TransferPages int64       `json:"transfer_pages"`
	// DecodeCached is the prompt's hit on the decode replica's radix cache
	// at preallocation (decode_prefix_len; 0 with the chunk cache): its
	// pages are not sent.
	DecodeCached int64 `json:"decode_cached_tokens,omitempty"`
	// FailedAt is when a request that failed failed on its decode replica
	// (a timeout's deadline for a request a timeout aborted).
	FailedAt engine.Time `json:"failed_ns,omitempty"`
}

// PDResult is a disaggregated fleet's transfer summary.
type PDResult struct {
	PrefillPolicy string `json:"prefill_policy"`
	DecodePolicy  string `json:"decode_policy"`
	// Transfers counts chunk transfers; bytes and pages are their sums.
	Transfers     int64   `json:"transfers"`
	TransferBytes float64 `json:"transfer_bytes"`
	TransferPages int64   `json:"transfer_pages"`
	// SkippedPages are the pages not sent thanks to decode-side hits.
	SkippedPages int64 `json:"skipped_pages,omitempty"`
	// Per completed request, first chunk sent to last page landed, ms.
	TransferMeanMs float64 `json:"transfer_mean_ms"`
	TransferP50Ms  float64 `json:"transfer_p50_ms"`
	TransferP90Ms  float64 `json:"transfer_p90_ms"`
	TransferP99Ms  float64 `json:"transfer_p99_ms"`
	// BootstrapTimeouts and WaitingTimeouts count the requests aborted by
	// each timeout (PDConfig).
	BootstrapTimeouts int64 `json:"bootstrap_timeouts,omitempty"`
	WaitingTimeouts   int64 `json:"waiting_timeouts,omitempty"`
	// Mean TTFT parts over completed requests, ms (PDRequest).
	BootstrapMs      float64 `json:"mean_bootstrap_ms"`
	PrefillQueueMs   float64 `json:"mean_prefill_queue_ms"`
	PrefillComputeMs float64 `json:"mean_prefill_compute_ms"`
	TransferTailMs   float64 `json:"mean_transfer_tail_ms"`
	FirstStepMs      float64 `json:"mean_first_step_ms"`
}
