package router

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/kvsim/kvsim/internal/enum"
)

// Policy is a router policy: how a request's replica is chosen.
type Policy int

// The policies. Names are SGLang's (router_args.py, `--policy`) except
// consistent_hash (SMG's consistent_hashing on a session key), kv_aware
// (a Dynamo / llm-d style scorer over the replicas' real cache state) and
// nginx's two upstream balancers, nginx_round_robin and nginx_hash.
const (
	CacheAware Policy = 1 + iota
	RoundRobin
	Random
	PowerOfTwo
	ConsistentHash
	KVAware
	// NginxRoundRobin is nginx's default upstream balancer, smooth
	// weighted round robin, with every server of weight 1.
	NginxRoundRobin
	// NginxHash is nginx's `hash $http_x_session_id consistent`: a ketama
	// ring over the servers' names (router.upstreams) keyed by the
	// request's session.
	NginxHash
	// CacheAwareOracle is cache_aware's rules (imbalance test, strict
	// cache_threshold, miss rule) matched against each replica's real
	// cache, device and host (and L3 with router.oracle_storage), through
	// the [CacheOracle], instead of the approximate tree: fleet-spec 5.11,
	// to measure the approximation's cost.
	CacheAwareOracle
	// PrefixHash is SMG's prefix_hash: a hash ring on the prompt's first
	// router.prefix_token_count tokens, bounded by a load factor.
	PrefixHash
	// Manual is SMG's manual: a sticky map from the session key (SMG's
	// X-SMG-Routing-Key) to up to two replicas.
	Manual
	// LeastLoad is SMG's least_load: the least expected wait from polled
	// load reports ([Router.SetLoadReport]).
	LeastLoad
)

// countsLoad says whether SGLang's router counts requests in flight under
// policy p outside PD mode: cache_aware and manual in HTTP mode (SMG),
// kvsim's cache-state policies, and prefix_hash, whose load test needs the
// count (SMG serves it over gRPC; kvsim counts as HTTP mode does for
// manual).
func (p Policy) countsLoad() bool {
	switch p {
	case CacheAware, KVAware, CacheAwareOracle, PrefixHash, Manual, LeastLoad:
		return true
	}
	return false
}

var policyNames = enum.New[Policy]("Policy", "policy",
	"cache_aware", "round_robin", "random", "power_of_two", "consistent_hash", "kv_aware",
	"nginx_round_robin", "nginx_hash",
	"cache_aware_oracle", "prefix_hash", "manual", "least_load")

// String returns the policy's configuration name, e.g. "cache_aware".
func (p Policy) String() string { return policyNames.String(p) }

// UnmarshalText parses a policy name ("cache_aware", "round_robin", ...).
func (p *Policy) UnmarshalText(b []byte) error {
	v, ok := policyNames.Lookup(string(b))
	if !ok {
		return fmt.Errorf("unknown policy %q (want one of %s)", b, strings.Join(policyNames.Strings(), ", "))
	}
	*p = v
	return nil
}

// MarshalText returns the policy's name.
func (p Policy) MarshalText() ([]byte, error) { return []byte(p.String()), nil }

// MissRule is what cache_aware does on a balanced miss (match rate at or
// below cache_threshold).
type MissRule int

const (
	// MinLoad sends a miss to the replica with the fewest requests in flight
	// from this router, ties by (requests routed so far, replica index):
	// SGLang after PR #14650 (smg 6fe82758a, 2025-12-08) and SMG. The default.
	MinLoad MissRule = 1 + iota
	// SmallestTree sends a miss to the replica with the fewest characters
	// (symbols) in the approximate tree, ties by replica index: the classic
	// sgl-router's get_smallest_tenant.
	SmallestTree
)

var missRuleNames = enum.New[MissRule]("MissRule", "miss rule", "min_load", "smallest_tree")

// String returns the rule's configuration name.
func (m MissRule) String() string { return missRuleNames.String(m) }

// ParseAssignmentMode reads router.assignment_mode, how manual maps a new
// routing key (SMG's --assignment-mode): "random" (false) or "min_load"
// (true, [ManualConfig].MinLoad). SMG's third mode, min_group (fewest
// routing keys with requests in flight), is refused with that
// explanation: a [Router.Finish] does not say which key ended.
func ParseAssignmentMode(name string) (minLoad bool, err error) {
	switch name {
	case "random", "min_load":
		return name == "min_load", nil
	case "min_group":
		return false, errors.New(`"min_group" is not modelled (kvsim does not track which routing keys are in flight); use "random" or "min_load"`)
	}
	return false, fmt.Errorf(`unknown assignment mode %q (want random or min_load)`, name)
}

// UnmarshalText parses "min_load" or "smallest_tree".
func (m *MissRule) UnmarshalText(b []byte) error {
	v, err := missRuleNames.Parse(string(b))
	if err == nil {
		*m = v
	}
	return err
}

// MarshalText returns the rule's name.
func (m MissRule) MarshalText() ([]byte, error) { return []byte(m.String()), nil }

// Config is the `[router]` table. Each policy reads its own part; the
// other parts are validated but unused. Keys are flat under `router.`, with
// SGLang's names where SGLang has the parameter.
type Config struct {
	// Policy is router.policy. Default cache_aware (SGLang's default).
	Policy Policy
	// CacheAware configures cache_aware.
	CacheAware CacheAwareConfig
	// PowerOfTwo configures power_of_two.
	PowerOfTwo PowerOfTwoConfig
	// ConsistentHash configures consistent_hash.
	ConsistentHash ConsistentHashConfig
	// KVAware configures kv_aware.
	KVAware KVAwareConfig
	// Nginx configures nginx_hash.
	Nginx NginxConfig
	// PrefixHash configures prefix_hash (its ring has
	// ConsistentHash.VirtualNodes points per replica, as SMG's shared ring).
	PrefixHash PrefixHashConfig
	// Manual configures manual (its idle keys are dropped at
	// CacheAware.EvictionInterval ticks, SMG's shared --eviction-interval).
	Manual ManualConfig
	// LeastLoad configures least_load (polled every
	// PowerOfTwo.LoadPollInterval, SMG's load monitor).
	LeastLoad LeastLoadConfig
}

// LeastLoadConfig holds least_load's parameters (SMG's defaults).
type LeastLoadConfig struct {
	// KVPressureWeight is router.least_load_kv_pressure_weight, seconds:
	// the weight of the k / (1 - k) KV barrier. Range >= 0, finite;
	// default 0.15.
	KVPressureWeight float64
	// DefaultThroughput is router.least_load_default_throughput, tokens/s:
	// a replica reporting no generation rate is assumed to drain at this.
	// Range > 0, finite; default 2000.
	DefaultThroughput float64
	// MeanPrefillTokens is router.least_load_mean_prefill_tokens: a
	// request of unknown length counts this many tokens, and a replica
	// without a report this many per request in flight. Range [1, 2^24];
	// default 1024.
	MeanPrefillTokens int
}

// PrefixHashConfig holds prefix_hash's parameters (SMG's defaults).
type PrefixHashConfig struct {
	// TokenCount is router.prefix_token_count: how many leading prompt
	// tokens are hashed (or the blocks that hold them, or as many
	// characters of the routing text). Range [1, 2^24]; default 256.
	TokenCount int
	// LoadFactor is router.prefix_hash_load_factor: the ring's replica
	// keeps a request while its in-flight count is at most this times the
	// mean with the request counted. Range > 0, finite; default 1.25.
	LoadFactor float64
}

// ManualConfig holds manual's parameters (SMG's defaults).
type ManualConfig struct {
	// MinLoad is router.assignment_mode = "min_load": a new key draws
	// among the replicas with the fewest requests in flight. Default false,
	// "random": a uniform draw from the router's seeded stream (SMG's
	// default).
	MinLoad bool
	// MaxIdle is router.max_idle, in virtual time: a routing key unused
	// for longer is forgotten at the next eviction tick. Range > 0;
	// default 4 h (SMG's --max-idle-secs 14400).
	MaxIdle time.Duration
}

// CacheAwareConfig holds cache_aware's parameters. Defaults are the
// deployed CLI's (classic router_args.py and SMG main.rs agree), not the
// Rust library's CacheAwareConfig::default().
type CacheAwareConfig struct {
	// CacheThreshold is router.cache_threshold: a request goes to the
	// replica with the longest approximate match only if matched/length
	// is strictly greater than this. Range [0, 1]; default 0.3.
	CacheThreshold float64
	// BalanceAbsThreshold is router.balance_abs_threshold, in requests in
	// flight: the load is imbalanced when max-min exceeds it (and the
	// relative test holds). Range >= 0; default 64.
	BalanceAbsThreshold int
	// BalanceRelThreshold is router.balance_rel_threshold: the load is
	// imbalanced when max > min * this (and the absolute test holds).
	// Range >= 0, +Inf allowed (never imbalanced); default 1.5.
	BalanceRelThreshold float64
	// EvictionInterval is router.eviction_interval, in virtual time: the
	// approximate tree is cut to MaxTreeSize at every multiple of it.
	// Range > 0; default 120 s.
	EvictionInterval time.Duration
	// MaxTreeSize is router.max_tree_size: the eviction budget per
	// replica, in symbols (characters of text or tokens), not nodes
	// despite SGLang's help text. Range >= 0; default 2^26 = 67,108,864.
	MaxTreeSize int
	// MissRule is router.miss_rule, the balanced-miss fallback. Default
	// min_load (current SGLang); smallest_tree is the classic router's.
	MissRule MissRule
	// BalanceTokenUsageThreshold and OverloadTokenUsageThreshold are
	// router.balance_token_usage_threshold and
	// router.overload_token_usage_threshold, SMG's KV-usage triggers of the
	// imbalance test (smg edcbb353e): the load also counts as imbalanced
	// when the hottest minus the coldest KV usage, or the hottest usage, of
	// the available replicas' load snapshots ([Router.SetLoad], usage in
	// [0, 1]) exceeds them. Range [0, 1]; default 1 (never: usage is at
	// most 1).
	BalanceTokenUsageThreshold, OverloadTokenUsageThreshold float64
	// TreePageSize is router.tree_page_size, in tokens: for requests keyed
	// by token ids, the tree holds and matches whole pages only, as SMG's
	// gRPC token tree (PAGE_SIZE = 16); the match rate stays over every
	// token. Text keys ignore it. Range [1, 4096]; default 1 (a symbol per
	// token).
	TreePageSize int
	// OracleStorage is router.oracle_storage: cache_aware_oracle counts the
	// pages a replica's L3 store holds after its device and host match as
	// matched. Default false: device and host only (the radix tree).
	OracleStorage bool
}

// PowerOfTwoConfig holds power_of_two's parameters. The router does not
// poll: its caller hands it a load snapshot every LoadPollInterval of
// virtual time ([Router.SetLoad]), which is how staleness is modelled.
type PowerOfTwoConfig struct {
	// LoadPollInterval is router.load_poll_interval, in virtual time: how
	// often the caller refreshes the load snapshot. 0 means every decision
	// (an oracle). Range >= 0; default 10 s (SMG's load_monitor_interval;
	// the classic router polled every 30 s).
	LoadPollInterval time.Duration
}

// ConsistentHashConfig holds consistent_hash's parameters.
type ConsistentHashConfig struct {
	// VirtualNodes is router.virtual_nodes: points per replica on the hash
	// ring. Range [1, 65536]; default 150 (SMG's hash_ring.rs).
	VirtualNodes int
}

// NginxConfig holds the nginx policies' parameters.
type NginxConfig struct {
	// Upstreams is router.upstreams: replica i's server name exactly as
	// nginx's upstream block writes it in its i-th `server` line
	// ("127.0.0.1:8081"), one per replica in replica order. nginx_hash
	// places each server's ring points by hashing this name, so the names
	// decide which replica a session lands on; nginx_round_robin ignores
	// them (it cycles in upstream order). Names must be distinct and not
	// empty. Default nil: [DefaultUpstreams].
	Upstreams []string
}

// KVAwareConfig holds kv_aware's parameters: llm-d's weighted scorers
// (precise prefix 3, queue 2, KV utilisation 2, from the precise-prefix
// guide's values.yaml) over the replicas' real cache state.
type KVAwareConfig struct {
	// PrefixWeight is router.kv_prefix_weight: the weight of the cached
	// prefix score. Range >= 0, finite; default 3.
	PrefixWeight float64
	// LoadWeight is router.kv_load_weight: the weight of the in-flight
	// (queue) score. Range >= 0, finite; default 2.
	LoadWeight float64
	// UsageWeight is router.kv_usage_weight: the weight of the KV
	// utilisation score (1 - usage from the load snapshot). Range >= 0,
	// finite; default 2.
	UsageWeight float64
	// DeviceWeight, HostWeight and StorageWeight are router.kv_device_weight,
	// router.kv_host_weight and router.kv_storage_weight: what one cached
	// token is worth by tier. Range >= 0, finite; defaults 1, 0.5 (llm-d's
	// gpu and cpu tier weights) and 0.5 (kvsim's choice: llm-d has no
	// storage tier; an L3 hit is priced as a host hit).
	DeviceWeight, HostWeight, StorageWeight float64
	// SignalDelay is router.kv_signal_delay, in virtual time: how old the
	// cache state the caller's [CacheOracle] answers from may be. The
	// router does not use it; the caller does. Range >= 0; default 50 ms
	// (BLIS's --cache-signal-delay).
	SignalDelay time.Duration
}

// Default returns SGLang's deployed defaults: cache_aware with threshold
// 0.3, balance thresholds 64 and 1.5, eviction every 120 s to 2^26
// symbols per replica, the min_load miss rule.
func Default() Config {
	return Config{
		Policy: CacheAware,
		CacheAware: CacheAwareConfig{
			CacheThreshold:      0.3,
			BalanceAbsThreshold: 64,
			BalanceRelThreshold: 1.5,
			EvictionInterval:    120 * time.Second,
			MaxTreeSize:         1 << 26,
			MissRule:            MinLoad,
			TreePageSize:        1,

			BalanceTokenUsageThreshold:  1,
			OverloadTokenUsageThreshold: 1,
		},
		PowerOfTwo:     PowerOfTwoConfig{LoadPollInterval: 10 * time.Second},
		PrefixHash:     PrefixHashConfig{TokenCount: 256, LoadFactor: 1.25},
		Manual:         ManualConfig{MaxIdle: 4 * time.Hour},
		LeastLoad:      LeastLoadConfig{KVPressureWeight: 0.15, DefaultThroughput: 2000, MeanPrefillTokens: 1024},
		ConsistentHash: ConsistentHashConfig{VirtualNodes: 150},
		KVAware: KVAwareConfig{
			PrefixWeight:  3,
			LoadWeight:    2,
			UsageWeight:   2,
			DeviceWeight:  1,
			HostWeight:    0.5,
			StorageWeight: 0.5,
			SignalDelay:   50 * time.Millisecond,
		},
	}
}

// Validate reports every invalid field at once, each error naming its key
// as `router.KEY` with the value found.
func (c Config) Validate() error { return c.validate("router") }

func (c Config) validate(prefix string) error {
	var errs []error
	if !policyNames.Valid(c.Policy) {
		errs = append(errs, fmt.Errorf("%s.policy: unknown policy %d", prefix, int(c.Policy)))
	}
	errs = append(errs,
		c.CacheAware.validate(prefix),
		c.PowerOfTwo.validate(prefix),
		c.ConsistentHash.validate(prefix),
		c.KVAware.validate(prefix),
		c.Nginx.validate(prefix),
		c.PrefixHash.validate(prefix),
		c.Manual.validate(prefix),
		c.LeastLoad.validate(prefix))
	return errors.Join(errs...)
}

// Validate reports every invalid nginx field, keys under router.
func (c NginxConfig) Validate() error { return c.validate("router") }

func (c NginxConfig) validate(p string) error {
	var errs []error
	for i, n := range c.Upstreams {
		if n == "" {
			errs = append(errs, fmt.Errorf("%s.upstreams: entry %d is empty", p, i))
		} else if j := slices.Index(c.Upstreams[:i], n); j >= 0 {
			errs = append(errs, fmt.Errorf("%s.upstreams: %q is entries %d and %d; names must be distinct", p, n, j, i))
		}
	}
	return errors.Join(errs...)
}

// maxTreePageSize bounds router.tree_page_size: SGLang's page sizes are at
// most a few hundred tokens.
const maxTreePageSize = 4096

// Validate reports every invalid cache_aware field, keys under router.
func (c CacheAwareConfig) Validate() error { return c.validate("router") }

func (c CacheAwareConfig) validate(p string) error {
	var errs []error
	if !(c.CacheThreshold >= 0 && c.CacheThreshold <= 1) {
		errs = append(errs, fmt.Errorf("%s.cache_threshold: must be in [0, 1] (got %v)", p, c.CacheThreshold))
	}
	if c.BalanceAbsThreshold < 0 {
		errs = append(errs, fmt.Errorf("%s.balance_abs_threshold: must be >= 0 (got %d)", p, c.BalanceAbsThreshold))
	}
	if !(c.BalanceRelThreshold >= 0) {
		errs = append(errs, fmt.Errorf("%s.balance_rel_threshold: must be >= 0 (got %v)", p, c.BalanceRelThreshold))
	}
	if c.EvictionInterval <= 0 {
		errs = append(errs, fmt.Errorf("%s.eviction_interval: must be > 0 (got %v)", p, c.EvictionInterval))
	}
	if c.MaxTreeSize < 0 {
		errs = append(errs, fmt.Errorf("%s.max_tree_size: must be >= 0 (got %d)", p, c.MaxTreeSize))
	}
	for _, u := range []struct {
		key string
		v   float64
	}{
		{"balance_token_usage_threshold", c.BalanceTokenUsageThreshold},
		{"overload_token_usage_threshold", c.OverloadTokenUsageThreshold},
	} {
		if !(u.v >= 0 && u.v <= 1) {
			errs = append(errs, fmt.Errorf("%s.%s: must be in [0, 1] (got %v)", p, u.key, u.v))
		}
	}
	if c.TreePageSize < 1 || c.TreePageSize > maxTreePageSize {
		errs = append(errs, fmt.Errorf("%s.tree_page_size: must be in [1, %d] (got %d)", p, maxTreePageSize, c.TreePageSize))
	}
	if c.MissRule != MinLoad && c.MissRule != SmallestTree {
		errs = append(errs, fmt.Errorf("%s.miss_rule: must be min_load or smallest_tree (got %v)", p, c.MissRule))
	}
	return errors.Join(errs...)
}

// Validate reports every invalid power_of_two field, keys under router.
func (c PowerOfTwoConfig) Validate() error { return c.validate("router") }

func (c PowerOfTwoConfig) validate(p string) error {
	if c.LoadPollInterval < 0 {
		return fmt.Errorf("%s.load_poll_interval: must be >= 0 (got %v)", p, c.LoadPollInterval)
	}
	return nil
}

// maxVirtualNodes bounds router.virtual_nodes so that a ring of 64
// replicas stays a few megabytes.
const maxVirtualNodes = 1 << 16

// Validate reports every invalid consistent_hash field, keys under router.
func (c ConsistentHashConfig) Validate() error { return c.validate("router") }

func (c ConsistentHashConfig) validate(p string) error {
	if c.VirtualNodes < 1 || c.VirtualNodes > maxVirtualNodes {
		return fmt.Errorf("%s.virtual_nodes: must be in [1, %d] (got %d)", p, maxVirtualNodes, c.VirtualNodes)
	}
	return nil
}

// Validate reports every invalid kv_aware field, keys under router.
func (c KVAwareConfig) Validate() error { return c.validate("router") }

func (c KVAwareConfig) validate(p string) error {
	var errs []error
	for _, w := range []struct {
		key string
		v   float64
	}{
		{"kv_prefix_weight", c.PrefixWeight},
		{"kv_load_weight", c.LoadWeight},
		{"kv_usage_weight", c.UsageWeight},
		{"kv_device_weight", c.DeviceWeight},
		{"kv_host_weight", c.HostWeight},
		{"kv_storage_weight", c.StorageWeight},
	} {
		if !(w.v >= 0) || math.IsInf(w.v, 1) {
			errs = append(errs, fmt.Errorf("%s.%s: must be finite and >= 0 (got %v)", p, w.key, w.v))
		}
	}
	if c.SignalDelay < 0 {
		errs = append(errs, fmt.Errorf("%s.kv_signal_delay: must be >= 0 (got %v)", p, c.SignalDelay))
	}
	return errors.Join(errs...)
}

// maxPrefixTokens bounds router.prefix_token_count, as the trace
// generators bound a length.
const maxPrefixTokens = 1 << 24

func (c PrefixHashConfig) validate(p string) error {
	var errs []error
	if c.TokenCount < 1 || c.TokenCount > maxPrefixTokens {
		errs = append(errs, fmt.Errorf("%s.prefix_token_count: must be in [1, %d] (got %d)", p, maxPrefixTokens, c.TokenCount))
	}
	if !(c.LoadFactor > 0) || math.IsInf(c.LoadFactor, 1) {
		errs = append(errs, fmt.Errorf("%s.prefix_hash_load_factor: must be finite and > 0 (got %v)", p, c.LoadFactor))
	}
	return errors.Join(errs...)
}

func (c ManualConfig) validate(p string) error {
	if c.MaxIdle <= 0 {
		return fmt.Errorf("%s.max_idle: must be > 0 (got %v)", p, c.MaxIdle)
	}
	return nil
}

func (c LeastLoadConfig) validate(p string) error {
	var errs []error
	if !(c.KVPressureWeight >= 0) || math.IsInf(c.KVPressureWeight, 1) {
		errs = append(errs, fmt.Errorf("%s.least_load_kv_pressure_weight: must be finite and >= 0 (got %v)", p, c.KVPressureWeight))
	}
	if !(c.DefaultThroughput > 0) || math.IsInf(c.DefaultThroughput, 1) {
		errs = append(errs, fmt.Errorf("%s.least_load_default_throughput: must be finite and > 0 (got %v)", p, c.DefaultThroughput))
	}
	if c.MeanPrefillTokens < 1 || c.MeanPrefillTokens > maxPrefixTokens {
		errs = append(errs, fmt.Errorf("%s.least_load_mean_prefill_tokens: must be in [1, %d] (got %d)", p, maxPrefixTokens, c.MeanPrefillTokens))
	}
	return errors.Join(errs...)
}
