package configs

import (
	"bytes"
	"cmp"
	_ "embed"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"

	"github.com/pelletier/go-toml/v2"

	"github.com/kvsim/kvsim/internal/fielderr"
	"github.com/kvsim/kvsim/sim"
	"github.com/kvsim/kvsim/sim/engine"
	"github.com/kvsim/kvsim/sim/hw"
	"github.com/kvsim/kvsim/sim/llamacpp"
	"github.com/kvsim/kvsim/traces"
	"github.com/kvsim/kvsim/tree"
)

// DefaultTOML is the bundled default server: Qwen2.5-14B on a TP-4 group
// of H200s with HiCache write-through at host ratio 2, replaying the
// bundled Mooncake conversation trace (embedded too; see
// [File.OpenBundledTrace]).
//
//go:embed default.toml
var DefaultTOML []byte

// File is the schema of a kvsim TOML file.
type File struct {
	// Seed seeds every random choice of the run. Default 1.
	Seed uint64 `toml:"seed"`
	// Engine chooses the simulated server: SGLang (default) or llama.cpp's
	// llama-server.
	Engine EngineSection `toml:"engine"`
	// Llama is llama-server's arguments and CPU cost (engine
	// "llamacpp" only).
	Llama LlamaSection `toml:"llamacpp"`
	// Model is the model: a preset, with any field overridden.
	Model ModelSection `toml:"model"`
	// GPU is the accelerator: a preset, with any field overridden.
	GPU GPUSection `toml:"gpu"`
	// Server holds the SGLang server arguments that size memory.
	Server hw.Server `toml:"server"`
	// Cache is the prefix cache and HiCache.
	Cache CacheSection `toml:"cache"`
	// Scheduler is the scheduling policy and admission constants.
	Scheduler SchedulerSection `toml:"scheduler"`
	// Cost is the compute cost model.
	Cost CostSection `toml:"cost"`
	// Links are the host<->device links (defaults from the GPU).
	Links LinksSection `toml:"links"`
	// Storage is HiCache's storage tier (L3); off by default.
	Storage StorageSection `toml:"storage"`
	// Workload is the trace to replay.
	Workload WorkloadSection `toml:"workload"`
	// Fleet and Router describe a fleet of servers behind SGLang's router
	// (configs/fleet.go); without [fleet] the file is one server.
	Fleet  FleetSection  `toml:"fleet"`
	Router RouterSection `toml:"router"`
	// Disaggregation splits a fleet's groups into prefill and decode
	// (configs/fleetpd.go).
	Disaggregation DisaggregationSection `toml:"disaggregation"`

	path      string // where the file was read from, for relative paths
	bundled   bool   // the bundled default: its trace is embedded
	badPreset bool   // Parse reported an unknown model or GPU preset
	enums     enums  // the enum-like strings, parsed once by Parse
	data      []byte // the document, for a fleet group's overrides
}

// enums are a file's enum-like strings parsed into the simulator's types:
// 0 when unset (the simulator's default), -1 when the string names no
// value, which the simulator's Validate reports ([File.simErrors] words it
// with the string as written).
type enums struct {
	eviction    tree.Strategy
	writePolicy tree.WritePolicy
	lanes       tree.LaneMode
	planner     sim.Planner
	policy      sim.SchedulePolicy
	prefetch    sim.PrefetchPolicy
	l3Eviction  sim.StorageEviction
	cost        costKind // cost.kind; 0 when it does not parse
}

// costKind is cost.kind: which cost model a file's server uses.
type costKind int

// Cost kinds.
const (
	costRoofline costKind = 1 + iota // "roofline" (default): hw.Roofline
	costFitted                       // "fitted": hw.Fitted's coefficients
)

// parseEnums parses the file's enum-like strings once, where they are
// read.
func (f *File) parseEnums() {
	e := &f.enums
	e.eviction = parseEnum(f.Cache.Eviction, tree.ParseStrategy)
	e.writePolicy = parseEnum(f.Cache.WritePolicy, tree.ParseWritePolicy)
	e.lanes = parseEnum(f.Cache.Lanes, tree.ParseLanes)
	e.planner = parseEnum(f.Cache.Planner, sim.ParsePlanner)
	e.policy = parseEnum(f.Scheduler.Policy, sim.ParseSchedulePolicy)
	e.prefetch = parseEnum(f.Storage.PrefetchPolicy, sim.ParsePrefetchPolicy)
	e.l3Eviction = parseEnum(f.Storage.Eviction, sim.ParseStorageEviction)
	switch f.Cost.Kind {
	case "", "roofline":
		e.cost = costRoofline
	case "fitted":
		e.cost = costFitted
	}
}

// parseEnum is the value s names: 0 for "" (the default), -1 for a name
// parse does not know.
func parseEnum[T ~int](s string, parse func(string) (T, error)) T {
	if s == "" {
		return 0
	}
	v, err := parse(s)
	if err != nil {
		return -1
	}
	return v
}

// simKeys are the simulator's fields that a file writes otherwise: in
// other units (seconds, 10^9 bytes/s, µs) or as a name. A range error
// about one is reported at the file's key with the value as written.
var simKeys = []struct {
	sim, file fielderr.Path
	written   func(*File) any
}{
	{fielderr.Dotted("cache.eviction"), fielderr.Dotted("cache.eviction"), func(f *File) any { return fmt.Sprintf("%q", f.Cache.Eviction) }},
	{fielderr.Dotted("cache.write_policy"), fielderr.Dotted("cache.write_policy"), func(f *File) any { return fmt.Sprintf("%q", f.Cache.WritePolicy) }},
	{fielderr.Dotted("cache.lanes"), fielderr.Dotted("cache.lanes"), func(f *File) any { return fmt.Sprintf("%q", f.Cache.Lanes) }},
	{fielderr.Dotted("cache.planner"), fielderr.Dotted("cache.planner"), func(f *File) any { return fmt.Sprintf("%q", f.Cache.Planner) }},
	{fielderr.Dotted("scheduler.policy"), fielderr.Dotted("scheduler.policy"), func(f *File) any { return fmt.Sprintf("%q", f.Scheduler.Policy) }},
	{fielderr.Dotted("storage.prefetch_policy"), fielderr.Dotted("storage.prefetch_policy"), func(f *File) any { return fmt.Sprintf("%q", f.Storage.PrefetchPolicy) }},
	{fielderr.Dotted("storage.prefetch_timeout_base_ns"), fielderr.Dotted("storage.prefetch_timeout_base"), func(f *File) any { return f.Storage.PrefetchTimeoutBase }},
	{fielderr.Dotted("storage.prefetch_timeout_per_ki_token_ns"), fielderr.Dotted("storage.prefetch_timeout_per_ki_token"), func(f *File) any { return f.Storage.PrefetchTimeoutPerKiToken }},
	{fielderr.Dotted("storage.prefetch_timeout_max_ns"), fielderr.Dotted("storage.prefetch_timeout_max"), func(f *File) any { return f.Storage.PrefetchTimeoutMax }},
	{fielderr.Dotted("storage.read_bandwidth"), fielderr.Dotted("storage.read_gbps"), func(f *File) any { return f.Storage.ReadGBps }},
	{fielderr.Dotted("storage.write_bandwidth"), fielderr.Dotted("storage.write_gbps"), func(f *File) any { return f.Storage.WriteGBps }},
	{fielderr.Dotted("storage.read_latency_ns"), fielderr.Dotted("storage.read_latency_us"), func(f *File) any { return f.Storage.ReadLatencyUs }},
	{fielderr.Dotted("storage.write_latency_ns"), fielderr.Dotted("storage.write_latency_us"), func(f *File) any { return f.Storage.WriteLatencyUs }},
	{fielderr.Dotted("storage.eviction"), fielderr.Dotted("storage.eviction"), func(f *File) any { return fmt.Sprintf("%q", f.Storage.Eviction) }},
	{fielderr.Dotted("storage.lease_ttl_ns"), fielderr.Dotted("storage.lease_ttl"), func(f *File) any { return f.Storage.LeaseTTL }},
	{fielderr.Dotted("storage.aggregate_bandwidth"), fielderr.Dotted("storage.aggregate_gbps"), func(f *File) any { return f.Storage.AggregateGBps }},
}

// simErrors returns the simulator's validation error err with each range
// error about a field of [simKeys] at the file's key and with the value as
// written.
func (f *File) simErrors(err error) error {
	var out []error
	for _, e := range fielderr.Flatten(err) {
		if fe, ok := e.(*fielderr.Error); ok {
			var re *fielderr.RangeError
			for _, k := range simKeys {
				if slices.Equal(fe.Path, k.sim) && errors.As(fe.Err, &re) {
					e = fielderr.Range(k.file, re.Want, k.written(f))
				}
			}
		}
		out = append(out, e)
	}
	return errors.Join(out...)
}

// The engines a file can describe.
const (
	// EngineSGLang is SGLang with HiCache (package sim): every section but
	// [llamacpp].
	EngineSGLang = "sglang"
	// EngineLlamaCpp is llama.cpp's llama-server (package sim/llamacpp):
	// [llamacpp] and [workload] only.
	EngineLlamaCpp = "llamacpp"
)

// EngineSection chooses the simulated server.
type EngineSection struct {
	// Kind is "sglang" (default) or "llamacpp".
	Kind string `toml:"kind"`
}

// LlamaSection holds llama-server's arguments under their long option
// names (sim/llamacpp.Config: parallel, ctx_size, batch_size,
// slot_prompt_similarity, cache_ram, no_cache_idle_slots) and the CPU cost
// model's coefficients, which kvsim calibrate fits.
type LlamaSection struct {
	llamacpp.Config `toml:",inline"`
	// Cost holds llamacpp.CPUCost's coefficients. Required.
	Cost LlamaCost `toml:"cost"`
}

// LlamaCost is [llamacpp.cost]: hw.Fitted's layout, prefill [a0 per
// prompt call, a1 per new token, a2 per causal pair, a3 per prompt chunk]
// and decode [b0 per decode call, b1 per generating slot, b2 per context
// token] in ns, and the time per byte of slot state saved to and restored
// from the RAM cache. Keys marked omitempty are optional rules, left out
// of the configs kvsim calibrate marshals when they are off.
type LlamaCost struct {
	hw.Fitted `toml:",inline"`
	// StateCopy is llamacpp.CPUCost.StateCopy, ns per byte saved (>= 0; 0,
	// the default, leaves copies free).
	StateCopy float64 `toml:"state_copy_ns_per_byte"`
	// StateFresh is llamacpp.CPUCost.StateFresh, ns more per byte saved
	// beyond the RAM cache's high-water mark (>= 0; default 0).
	StateFresh float64 `toml:"state_fresh_ns_per_byte"`
	// StateRestore is llamacpp.CPUCost.StateRestore, ns per byte restored
	// (>= 0); unset, restores cost StateCopy per byte like saves (the
	// files written before kvsim told them apart).
	StateRestore *float64 `toml:"state_restore_ns_per_byte"`
	// SmallCall and SmallPair are llamacpp.CPUCost's: a call of at most
	// SmallCall tokens pays SmallPair ns per prompt (query, key) pair
	// (SmallCall 0, the default, turns the rule off; SmallPair > 0 then).
	SmallCall int     `toml:"small_call_tokens,omitempty"`
	SmallPair float64 `toml:"small_call_pair_ns,omitempty"`
	// MediumCall and MediumPair are llamacpp.CPUCost's second tier: a call
	// of more than SmallCall and at most MediumCall tokens pays MediumPair
	// ns per pair (MediumCall 0, the default, turns it off; > SmallCall
	// and MediumPair > 0 otherwise).
	MediumCall int     `toml:"medium_call_tokens,omitempty"`
	MediumPair float64 `toml:"medium_call_pair_ns,omitempty"`
	// Tile and ShortPair are llamacpp.CPUCost's: the tiled attention
	// kernel's tile in rows (0, the default, keeps the pair count and the
	// call-size tiers; > 0 excludes them) and ns per causal pair of fewer
	// rows (>= 0).
	Tile      int     `toml:"tile_size,omitempty"`
	ShortPair float64 `toml:"short_pair_ns,omitempty"`
	// Delay is llamacpp.CPUCost.Delay: ns from a request's arrival until
	// the server loop sees its task (>= 0; default 0).
	Delay int64 `toml:"request_delay_ns"`
	// AfterPrompt and AfterPromptDecay are one point of
	// llamacpp.CPUCost.AfterPromptCurve: the extra ns of the first
	// decode-only call after a call in which a prompt ended (>= 0; 0, the
	// default, turns it off) and the factor per call after that (in [0,
	// 1)), at every context.
	// They are one point of the curve, at every context; the curve
	// (AfterPromptCurve) replaces them.
	AfterPrompt      float64 `toml:"after_prompt_ns,omitempty"`
	AfterPromptDecay float64 `toml:"after_prompt_decay,omitempty"`
	// AfterPromptCurve is llamacpp.CPUCost.AfterPromptCurve, the term
	// against the decode call's context: [[llamacpp.cost.after_prompt]]
	// tables in ascending context_tokens, each with ns (>= 0) and decay
	// (in [0, 1)); linear between points, the end points' beyond them.
	AfterPromptCurve []AfterPromptPoint `toml:"after_prompt,omitempty"`
}

// AfterPromptPoint is one [[llamacpp.cost.after_prompt]] table.
type AfterPromptPoint struct {
	Context int64   `toml:"context_tokens"`
	Ns      float64 `toml:"ns"`
	Decay   float64 `toml:"decay"`
}

// sglangOnly are the top-level tables of the SGLang engine.
var sglangOnly = []string{"model", "gpu", "server", "cache", "scheduler", "cost", "links", "storage"}

// ModelSection names a model preset and overrides its fields.
type ModelSection struct {
	Preset   string `toml:"preset"`
	hw.Model `toml:",inline"`
}

// GPUSection names a GPU preset and overrides its fields.
type GPUSection struct {
	Preset string `toml:"preset"`
	hw.GPU `toml:",inline"`
}

// CacheSection configures the radix cache and HiCache. Capacities come from
// [server] (sizing) unless device_tokens or host_tokens are given.
type CacheSection struct {
	// Hierarchical turns HiCache's host tier on
	// (--enable-hierarchical-cache). Default true.
	Hierarchical *bool `toml:"hierarchical"`
	// Disable turns the radix cache off (--disable-radix-cache).
	Disable bool `toml:"disable"`
	// DeviceTokens overrides the device pool per rank from sizing.
	DeviceTokens int64 `toml:"device_tokens"`
	// HostTokens overrides the host pool per rank from sizing.
	HostTokens        int64   `toml:"host_tokens"`
	Eviction          string  `toml:"eviction"`
	ProtectedShare    float64 `toml:"protected_share"`
	WritePolicy       string  `toml:"write_policy"`
	LoadBackThreshold int64   `toml:"load_back_threshold"`
	// CP is the number of owner lanes; default server.dcp_size.
	CP      int    `toml:"cp"`
	Lanes   string `toml:"lanes"`
	Planner string `toml:"planner"`
}

// SchedulerSection configures the scheduler: its policy and SGLang's
// scheduling constants, the keys of [sim.SchedulerTuning]. Batch limits
// (max_running_requests, max_prefill_tokens, chunked_prefill_size) are
// server arguments and live in [server].
type SchedulerSection struct {
	Policy              string `toml:"policy"`
	sim.SchedulerTuning `toml:",inline"`
}

// CostSection chooses the cost model. Efficiency is omitted when zero, as
// in the [cost] snippets kvsim calibrate marshals (kind "fitted").
type CostSection struct {
	// Kind is "roofline" (default) or "fitted".
	Kind       string        `toml:"kind"`
	Efficiency hw.Efficiency `toml:"efficiency,omitzero"`
	Fitted     hw.Fitted     `toml:"fitted"`
}

// LinksSection sets the HiCache transfer links; zero values take the GPU's
// host link at hw.DefaultHostLinkEfficiency.
type LinksSection struct {
	// H2DGBps and D2HGBps are 10^9 bytes/s per rank.
	H2DGBps float64 `toml:"h2d_gbps"`
	D2HGBps float64 `toml:"d2h_gbps"`
	// LatencyUs is the fixed cost of one copy.
	LatencyUs float64 `toml:"latency_us"`
	// Efficiency is the share of the GPU's host link a copy reaches.
	// Default hw.DefaultHostLinkEfficiency (0.85).
	Efficiency float64 `toml:"efficiency"`
}

// StorageSection configures HiCache's storage tier (L3), with SGLang's
// extra-config names for the prefetch settings. Zero values take the
// simulator's defaults (sim.StorageConfig); times are seconds, bandwidths
// 10^9 bytes/s per rank, call latencies µs.
type StorageSection struct {
	Enabled bool `toml:"enabled"`
	// Shared makes every replica of a fleet whose storage is shared use one
	// L3 store (per model namespace, [File.L3Namespace]) instead of its
	// own. Default false; a single server behaves the same either way.
	Shared bool `toml:"shared"`
	// DecodeOffload is set on a disaggregated fleet's decode group by
	// disaggregation.decode_offload (not a key of [storage]): its storage
	// tier stays on with the chunk cache ([sim.StorageConfig]).
	DecodeOffload             bool    `toml:"-"`
	CapacityTokens            int64   `toml:"capacity_tokens"`
	PrefetchPolicy            string  `toml:"prefetch_policy"`
	PrefetchThreshold         int64   `toml:"prefetch_threshold"`
	PrefetchTimeoutBase       float64 `toml:"prefetch_timeout_base"`
	PrefetchTimeoutPerKiToken float64 `toml:"prefetch_timeout_per_ki_token"`
	PrefetchTimeoutMax        float64 `toml:"prefetch_timeout_max"`
	PrefetchCapacityRatio     float64 `toml:"prefetch_capacity_ratio"`
	ReadGBps                  float64 `toml:"read_gbps"`
	WriteGBps                 float64 `toml:"write_gbps"`
	ReadLatencyUs             float64 `toml:"read_latency_us"`
	WriteLatencyUs            float64 `toml:"write_latency_us"`
	// Eviction is "lru" (default) or "mooncake" (sim.StorageMooncake),
	// with HighWatermark, EvictionRatio and LeaseTTL (seconds).
	Eviction      string  `toml:"eviction"`
	HighWatermark float64 `toml:"high_watermark"`
	EvictionRatio float64 `toml:"eviction_ratio"`
	LeaseTTL      float64 `toml:"lease_ttl"`
	// AggregateGBps caps a shared store's total transfer rate over every
	// replica's reads and writes, 10^9 bytes/s (0: no cap; needs Shared).
	AggregateGBps float64 `toml:"aggregate_gbps"`
}

// WorkloadSection names the trace.
type WorkloadSection struct {
	// Trace is a trace file, relative to the TOML file's folder.
	Trace string `toml:"trace"`
	// Format is the trace format; empty detects it.
	Format string `toml:"format"`
	// IdleGapCap, in seconds, cuts every gap between consecutive request
	// starts of a session family longer than it to it, shifting later
	// times left (traces.CapIdleGaps); 0 (default) keeps the trace's times.
	// Valid: 0 to 9e9.
	IdleGapCap float64 `toml:"idle_gap_cap"`
	// OpenLoop releases every request at its trace arrival, ignoring its
	// dependencies (Parent, WaitFor, ThinkTime). Default false: kvsim sim
	// and studies run the trace closed-loop (sim.Sim.RunClosedLoop), as
	// kvsim replay --target sim does.
	OpenLoop bool `toml:"open_loop"`
	// RateScale replays the trace at this many times its rate: arrivals
	// and think times divided by it (traces.Reader.ScaleRate), before any
	// idle-gap cap. 0 (default) and 1 keep the trace's times. Valid: 0 to
	// 1e6.
	RateScale float64 `toml:"rate_scale"`
}

// OpenTrace applies the section's rate scale to a reader just opened
// (kvsim sim and studies call it; nothing when rate_scale is 0 or 1).
func (w WorkloadSection) OpenTrace(rd *traces.Reader) error {
	if w.RateScale == 0 {
		return nil
	}
	return rd.ScaleRate(w.RateScale)
}

// IdleGapCapNs returns workload.idle_gap_cap in nanoseconds (0: none).
func (w WorkloadSection) IdleGapCapNs() int64 { return int64(w.IdleGapCap*1e9 + 0.5) }

// Load reads and validates a TOML file.
func Load(path string) (*File, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	return Parse(data, path)
}

// Default returns the bundled default configuration.
func Default() *File {
	f, err := Parse(DefaultTOML, DefaultName)
	if err != nil {
		panic("configs: bundled default.toml is invalid: " + err.Error())
	}
	f.path, f.bundled = "", true
	return f
}

// Parse decodes and validates TOML data; name is used in error messages and
// to resolve relative paths.
func Parse(data []byte, name string) (*File, error) {
	data = StripBOM(data)
	// First pass: the presets, which the second pass overrides field by field.
	var presets struct {
		Model struct {
			Preset string `toml:"preset"`
		} `toml:"model"`
		GPU struct {
			Preset string `toml:"preset"`
		} `toml:"gpu"`
		Engine EngineSection `toml:"engine"`
	}
	if err := toml.Unmarshal(data, &presets); err != nil {
		return nil, TOMLError(name, data, &presets, err)
	}
	var raw map[string]any
	if err := toml.Unmarshal(data, &raw); err != nil {
		return nil, TOMLError(name, data, &raw, err)
	}
	// The document parses: where every key is written, read once.
	ps, err := KeyPositions(data)
	if err != nil {
		return nil, TOMLError(name, data, &raw, err)
	}
	f := &File{Server: hw.DefaultServer(), path: name}
	f.Cost.Efficiency = hw.DefaultEfficiency()
	f.Llama.Config = llamacpp.DefaultConfig()
	var errs []error
	switch presets.Engine.Kind {
	case "", EngineSGLang:
		if _, ok := raw["llamacpp"]; ok {
			errs = append(errs, ps.Place(name, fielderr.New(fielderr.Key("llamacpp"), `only for engine.kind = "llamacpp"`), nil))
		}
	case EngineLlamaCpp:
		for _, t := range sglangOnly {
			if _, ok := raw[t]; ok {
				errs = append(errs, ps.Place(name, fielderr.New(fielderr.Key(t), `only for engine.kind = "sglang" (this file describes a llama-server)`), nil))
			}
		}
		return decodeStrict(data, name, ps, f, errs...)
	default:
		return nil, ps.Place(name, fielderr.New(fielderr.Dotted("engine.kind"), `must be "sglang" or "llamacpp" (got %q)`, presets.Engine.Kind), nil)
	}
	if p := presets.Model.Preset; p != "" {
		m, err := hw.ModelPreset(p)
		if err != nil {
			errs = append(errs, ps.Place(name, fielderr.Wrap(fielderr.Key("model", "preset"), err), nil))
		}
		f.Model.Model = m
	}
	if p := presets.GPU.Preset; p != "" {
		g, err := hw.GPUPreset(p)
		if err != nil {
			errs = append(errs, ps.Place(name, fielderr.Wrap(fielderr.Key("gpu", "preset"), err), nil))
		}
		f.GPU.GPU = g
	}
	// An unknown preset leaves the model's or GPU's fields meaningless,
	// but the rest of the file is still checked (Validate skips what
	// depends on them).
	f.badPreset = len(errs) > 0
	return decodeStrict(data, name, ps, f, errs...)
}

// zeroTuning refuses a [scheduler] constant written as 0: the simulator
// takes 0 for the key's default (sim.SchedulerTuning), so the run would
// silently use the default where SGLang would use 0.
func zeroTuning(raw map[string]any) []error {
	sch, _ := raw["scheduler"].(map[string]any)
	d := reflect.ValueOf(sim.Default(1).Scheduler.SchedulerTuning) // the defaults
	var errs []error
	for i := range d.NumField() {
		key, _, _ := strings.Cut(d.Type().Field(i).Tag.Get("toml"), ",")
		if v := sch[key]; v == int64(0) || v == float64(0) {
			errs = append(errs, fielderr.New(fielderr.Key("scheduler", key), "0 is not supported: the simulator reads 0 as the default (%v); omit the key for the default", d.Field(i)))
		}
	}
	return errs
}

// decodeStrict decodes data into f over its defaults, refusing unknown
// keys, and validates it; errors name the file, line and key. It serves
// both engines: a llama-server file has [engine], [llamacpp] and
// [workload] only (checked by the caller, whose errors come first in errs).
func decodeStrict(data []byte, name string, ps Positions, f *File, errs ...error) (*File, error) {
	dec := toml.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(f); err != nil {
		// Unknown keys and tables do not stop the decoder: report each
		// one, then the known keys' own problems, so that one typo does
		// not hide the rest of the file's errors.
		var se *toml.StrictMissingError
		if !errors.As(err, &se) {
			return nil, TOMLError(name, data, f, err)
		}
		errs = append(errs, unknownKeys(name, data, se)...)
	}
	f.parseEnums()
	var raw map[string]any
	if err := toml.Unmarshal(data, &raw); err != nil {
		return nil, TOMLError(name, data, &raw, err)
	}
	f.data = data
	var invalid []error
	base := f.Validate()
	if err := errors.Join(base, f.validateFleet(name, ps, base)); err != nil {
		invalid = append(invalid, err)
	}
	invalid = append(append(coefficientErrors(raw, f), zeroTuning(raw)...), invalid...)
	if len(invalid) > 0 {
		errs = append(errs, ps.Place(name, errors.Join(invalid...), fileKey))
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	return f, nil
}

// IsLlamaCpp reports whether the file describes a llama-server
// (engine.kind = "llamacpp").
func (f *File) IsLlamaCpp() bool { return f.Engine.Kind == EngineLlamaCpp }

// Validate reports every problem in the file at once, with key paths.
func (f *File) Validate() error {
	if f.IsLlamaCpp() {
		return errors.Join(f.validateLlama(), f.validateWorkload())
	}
	var errs []error
	if err := f.validateWorkload(); err != nil {
		errs = append(errs, err)
	}
	// After an unknown preset (which Parse has reported) the model's and
	// GPU's fields, the sizing and the cost mean nothing.
	if !f.badPreset {
		if err := presetPart(f.Model.Name, "model", "set model.preset or the model's fields", f.Model.Validate); err != nil {
			errs = append(errs, err)
		}
		if err := presetPart(f.GPU.Name, "gpu", "set gpu.preset or the GPU's fields", f.GPU.Validate); err != nil {
			errs = append(errs, err)
		}
	}
	if err := f.Server.Validate(); err != nil {
		errs = append(errs, err)
	}
	switch f.enums.cost {
	case costRoofline:
		if err := f.Cost.Efficiency.Validate(); err != nil {
			errs = append(errs, err)
		}
	case costFitted:
		if err := f.Cost.Fitted.Validate(); err != nil {
			errs = append(errs, err)
		}
	default:
		errs = append(errs, fielderr.New(fielderr.Dotted("cost.kind"), `must be "roofline" or "fitted" (got %q)`, f.Cost.Kind))
	}
	for _, c := range []struct {
		key string
		v   int64
	}{{"cache.device_tokens", f.Cache.DeviceTokens}, {"cache.host_tokens", f.Cache.HostTokens}} {
		if c.v < 0 {
			errs = append(errs, fielderr.New(fielderr.Dotted(c.key), "must be 0 (the pool from sizing) or > 0 tokens (got %d)", c.v))
		}
	}
	l := f.Links
	for _, c := range []struct {
		key string
		v   float64
	}{{"links.h2d_gbps", l.H2DGBps}, {"links.d2h_gbps", l.D2HGBps}, {"links.latency_us", l.LatencyUs}} {
		if !(c.v >= 0) || math.IsInf(c.v, 0) {
			errs = append(errs, fielderr.New(fielderr.Dotted(c.key), "must be a finite number >= 0 (got %v)", c.v))
		}
	}
	if !(l.Efficiency >= 0 && l.Efficiency <= 1) {
		errs = append(errs, fielderr.New(fielderr.Dotted("links.efficiency"), "must be in (0, 1] (got %v)", l.Efficiency))
	}
	if f.Storage.Shared && !f.Storage.Enabled {
		errs = append(errs, fielderr.New(fielderr.Dotted("storage.shared"), "true needs storage.enabled = true: there is no store to share"))
	}
	if f.Storage.AggregateGBps != 0 && !f.Storage.Shared {
		errs = append(errs, fielderr.New(fielderr.Dotted("storage.aggregate_gbps"), "needs storage.shared = true: the cap is a shared store's"))
	}
	// The simulator's own checks of the cache, scheduler and storage
	// sections (the storage ranges are checked there only), with the sizes
	// sizing would give (checked above).
	probe := f.simConfig(hw.Sizing{DeviceTokens: 1, HostTokens: 1, MaxRunningRequests: 1, MaxPrefillTokens: 1, ChunkedPrefillSize: -1})
	probe.Cache.PageSize = 1
	probe.Scheduler.ContextLen = 0 // model.context_len, checked by the model
	if f.badPreset {
		probe.Links.H2DBandwidth, probe.Links.D2HBandwidth = 1, 1 // from the unknown GPU
	}
	if err := probe.Validate(); err != nil {
		errs = append(errs, f.simErrors(err))
	}
	if len(errs) == 0 && !f.badPreset {
		// Sizing: does the model fit the GPU? And is every step of the
		// cost model, and every transfer, within MaxStep?
		if _, _, err := f.build(true); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// presetPart checks a table that a preset or its own fields fill: unset
// when name is empty (the problem is unset), else the table's own
// validate.
func presetPart(name, key, unset string, validate func() error) error {
	if name == "" {
		return fielderr.New(fielderr.Key(key), "%s", unset)
	}
	return validate()
}

// validateWorkload checks the [workload] section: the format must be one
// the trace readers know, whether or not a command later reads the file's
// trace (kvsim sim --trace replaces the trace, not the check).
func (f *File) validateWorkload() error {
	var errs []error
	if _, err := traces.ParseFormat(f.Workload.Format); err != nil {
		errs = append(errs, fielderr.New(fielderr.Dotted("workload.format"), "must be one of %s, or empty to detect it (got %q)", strings.Join(traces.FormatNames(), ", "), f.Workload.Format))
	}
	if c := f.Workload.IdleGapCap; !(c == 0 || c >= 1e-9 && c <= 9e9) {
		errs = append(errs, fielderr.New(fielderr.Dotted("workload.idle_gap_cap"), "must be a number of seconds from 1e-9 to 9e9, or 0 for none (got %v)", c))
	}
	if k := f.Workload.RateScale; !(k >= 0 && k <= 1e6) {
		errs = append(errs, fielderr.New(fielderr.Dotted("workload.rate_scale"), "must be a rate multiplier from 0 (the trace's rate) to 1e6 (got %v)", k))
	}
	return errors.Join(errs...)
}

// validateLlama checks the [llamacpp] section: the server's arguments,
// the CPU cost model ([llamacpp.CPUCost.Validate]) and what only the file
// has (the one after-prompt point), and, when the arguments are valid, the
// largest calls' times; every problem at once.
func (f *File) validateLlama() error {
	var errs []error
	cfgErr := f.Llama.Config.Validate()
	if cfgErr != nil {
		errs = append(errs, cfgErr)
	}
	c := f.Llama.Cost
	cost := f.cpuCost()
	var points []error // the curve's, reported last
	for _, e := range fielderr.Flatten(cost.Validate()) {
		var fe *fielderr.Error
		if !errors.As(e, &fe) {
			errs = append(errs, e)
			continue
		}
		switch {
		case fe.Path.HasPrefix(llamaCostKey("state_restore_ns_per_byte")) && c.StateRestore == nil:
			// Not written: restores cost state_copy_ns_per_byte, checked.
		case fe.Path.HasPrefix(llamaCostKey("after_prompt")):
			if len(c.AfterPromptCurve) > 0 {
				points = append(points, e)
			} // else the one point of after_prompt_ns, checked below
		default:
			errs = append(errs, e)
		}
	}
	if !(c.AfterPrompt >= 0) || math.IsInf(c.AfterPrompt, 1) {
		errs = append(errs, fielderr.New(llamaCostKey("after_prompt_ns"), "must be a finite number >= 0 (got %v)", c.AfterPrompt))
	}
	if !(c.AfterPromptDecay >= 0 && c.AfterPromptDecay < 1) {
		errs = append(errs, fielderr.New(llamaCostKey("after_prompt_decay"), "must be a number in [0, 1) (got %v)", c.AfterPromptDecay))
	}
	if len(c.AfterPromptCurve) > 0 {
		for _, k := range []struct {
			key string
			v   float64
		}{{"after_prompt_ns", c.AfterPrompt}, {"after_prompt_decay", c.AfterPromptDecay}} {
			if k.v != 0 {
				errs = append(errs, fielderr.New(llamaCostKey(k.key), "excludes [[llamacpp.cost.after_prompt]] (got %v with %d points): the curve replaces the one point", k.v, len(c.AfterPromptCurve)))
			}
		}
	}
	if cfgErr == nil {
		errs = append(errs, f.checkLlamaSteps(errs)...)
	}
	return errors.Join(append(errs, points...)...)
}

// llamaCostKey is the path of [llamacpp.cost]'s key.
func llamaCostKey(key string) fielderr.Path { return fielderr.Key("llamacpp", "cost", key) }

// checkLlamaSteps bounds llama-server's call times as build bounds
// SGLang's forwards ([hw.MaxStep]): at the largest call (batch_size prompt
// tokens spread over the slots, each behind the rest of its slot's
// context; a decode call of every slot over ctx_size tokens), each term
// of the cost and the whole must take at most an hour, and so must a
// request's delay, an after-prompt extra and saving or restoring a whole
// context's state. A key among reported (the section's other errors) is
// not checked again. The server's arguments must be valid.
func (f *File) checkLlamaSteps(reported []error) []error {
	cfg, c := f.Llama.Config, f.Llama.Cost
	bad := map[string]bool{}
	for _, e := range reported {
		for _, e := range fielderr.Flatten(e) {
			if fe, ok := e.(*fielderr.Error); ok {
				bad[fe.Path.String()] = true
			}
		}
	}
	slots := int64(cfg.Slots)
	slotCtx := int64(cfg.SlotContext())
	n := max(1, min(int64(cfg.Batch)/slots, slotCtx))
	w := hw.Worst{
		PrefillRequests: slots, Prefill: hw.Extend{New: n, Cached: max(0, slotCtx-n)},
		DecodeBatch: cfg.Slots, DecodeContext: int64(cfg.Context),
	}
	coefsBad := false
	for k := range bad {
		coefsBad = coefsBad || strings.HasPrefix(k, "llamacpp.cost.prefill") || strings.HasPrefix(k, "llamacpp.cost.decode")
	}
	var errs []error
	if !coefsBad {
		errs = fielderr.Flatten(fielderr.Map(c.Fitted.Check(w), func(p fielderr.Path) fielderr.Path {
			return p.Replace(fielderr.Key("hw", "fitted"), fielderr.Key("llamacpp", "cost"))
		}))
	}
	pairs := float64(slots) * (float64(n)*float64(w.Prefill.Cached) + float64(n)*float64(n+1)/2)
	state := float64(cfg.StateBytesPerToken) * float64(cfg.Context)
	type term struct {
		key fielderr.Path
		v   float64
		ns  float64
	}
	terms := []term{
		{llamaCostKey("small_call_pair_ns"), c.SmallPair, c.SmallPair * pairs},
		{llamaCostKey("medium_call_pair_ns"), c.MediumPair, c.MediumPair * pairs},
		{llamaCostKey("short_pair_ns"), c.ShortPair, c.ShortPair * pairs},
		{llamaCostKey("state_copy_ns_per_byte"), c.StateCopy, c.StateCopy * state},
		{llamaCostKey("state_fresh_ns_per_byte"), c.StateFresh, c.StateFresh * state},
		{llamaCostKey("request_delay_ns"), float64(c.Delay), float64(c.Delay)},
		{llamaCostKey("after_prompt_ns"), c.AfterPrompt, c.AfterPrompt},
	}
	if c.StateRestore != nil {
		terms = append(terms, term{llamaCostKey("state_restore_ns_per_byte"), *c.StateRestore, *c.StateRestore * state})
	}
	for i, p := range c.AfterPromptCurve {
		terms = append(terms, term{llamaCostKey("after_prompt").At(i).Key("ns"), p.Ns, p.Ns})
	}
	for _, t := range terms {
		if !(t.ns <= float64(hw.MaxStep)) && !bad[t.key.String()] {
			errs = append(errs, fielderr.New(t.key, "makes one call or copy take %.2g s at the largest (%d slots of %d tokens, %d-token batches), over the %s a step may take (got %g)",
				t.ns/1e9, cfg.Slots, slotCtx, cfg.Batch, hw.MaxStep, t.v))
		}
	}
	return errs
}

// cpuCost is the file's CPU cost model: an unset state_restore_ns_per_byte
// is state_copy_ns_per_byte, and the one after-prompt point a curve.
func (f *File) cpuCost() *llamacpp.CPUCost {
	c := f.Llama.Cost
	restore := c.StateCopy
	if c.StateRestore != nil {
		restore = *c.StateRestore
	}
	return &llamacpp.CPUCost{Fitted: c.Fitted, StateCopy: c.StateCopy, StateFresh: c.StateFresh, StateRestore: restore, SmallCall: c.SmallCall, SmallPair: c.SmallPair, MediumCall: c.MediumCall, MediumPair: c.MediumPair, Tile: c.Tile, ShortPair: c.ShortPair, Delay: c.Delay, AfterPromptCurve: c.afterPromptCurve()}
}

// LlamaBuilt is a llama-server file turned into what sim/llamacpp runs.
type LlamaBuilt struct {
	Config llamacpp.Config
	Cost   *llamacpp.CPUCost
}

// BuildLlama composes sim/llamacpp's configuration and CPU cost model
// from a file with engine.kind = "llamacpp".
func (f *File) BuildLlama() (*LlamaBuilt, error) {
	if !f.IsLlamaCpp() {
		return nil, errors.New(`configs: not a llama-server file (engine.kind is not "llamacpp")`)
	}
	if err := f.validateLlama(); err != nil {
		return nil, err
	}
	return &LlamaBuilt{Config: f.Llama.Config, Cost: f.cpuCost()}, nil
}

// afterPromptCurve is the cost's after-prompt curve: its points, or the one
// point of after_prompt_ns and after_prompt_decay (none when that is 0).
func (c *LlamaCost) afterPromptCurve() []llamacpp.AfterPromptPoint {
	if len(c.AfterPromptCurve) == 0 {
		if c.AfterPrompt == 0 {
			return nil
		}
		return []llamacpp.AfterPromptPoint{{Ns: c.AfterPrompt, Decay: c.AfterPromptDecay}}
	}
	curve := make([]llamacpp.AfterPromptPoint, len(c.AfterPromptCurve))
	for i, p := range c.AfterPromptCurve {
		curve[i] = llamacpp.AfterPromptPoint(p)
	}
	return curve
}

// Built is a file turned into what the simulator runs.
type Built struct {
	Sim    sim.Config
	Cost   sim.CostModel
	Sizing hw.Sizing
	// Explain says where the numbers came from, one line each.
	Explain []string
	// Engine builds engines of Sim and Cost, open or closed loop as
	// workload.open_loop says. Set by Build.
	Engine engine.Factory
}

// Build composes the simulator's configuration and cost model. A
// llama-server file (engine.kind = "llamacpp") has no SGLang simulator:
// Build returns an error that says so; use BuildLlama.
func (f *File) Build() (*Built, error) {
	if err := f.SGLangOnly("this command simulates"); err != nil {
		return nil, fmt.Errorf("%s: %w", cmp.Or(f.path, "config"), err)
	}
	b, _, err := f.build(true)
	if err != nil {
		return nil, err
	}
	b.Engine = &sim.Factory{Config: b.Sim, Cost: b.Cost, OpenLoop: f.Workload.OpenLoop}
	return b, nil
}

func (f *File) build(withCost bool) (*Built, hw.Sizing, error) {
	z, err := hw.Size(f.Model.Model, f.GPU.GPU, f.Server)
	if err != nil {
		return nil, z, err
	}
	cfg := f.simConfig(z)
	if err := cfg.Validate(); err != nil {
		return nil, z, err
	}
	b := &Built{Sim: cfg, Sizing: z, Explain: z.Explain()}
	if !withCost {
		return b, z, nil
	}
	switch f.enums.cost {
	case costFitted:
		fit := f.Cost.Fitted
		b.Cost = &fit
		b.Explain = append(b.Explain, fmt.Sprintf("cost: fitted coefficients prefill %v decode %v (ns per feature)", fit.Prefill, fit.Decode))
	default:
		r, err := hw.NewRoofline(f.Model.Model, f.GPU.GPU, f.Server, f.Cost.Efficiency)
		if err != nil {
			return nil, z, err
		}
		b.Cost = r
		b.Explain = append(b.Explain, r.Explain()...)
	}
	if err := errors.Join(b.Cost.(interface{ Check(hw.Worst) error }).Check(f.worst(cfg)), f.checkTransfers(cfg)); err != nil {
		return nil, z, err
	}
	return b, z, nil
}

// worst is the largest prefill batch and decode step the server of cfg
// can run, at which build checks the cost model ([hw.MaxStep]). A request
// holds at most L = min(context_len, the logical device pool) tokens. A
// prefill batch extends at most B = max(max_prefill_tokens, the chunk
// size, or L without chunking: SGLang admits a first request past the
// budget) tokens, within the pool; it has the most attention pairs spread
// over the fewest requests whose context fills the pool. A
// decode step runs max_running_requests requests over at most
// min(the logical pool, max_running_requests * L) tokens.
func (f *File) worst(cfg sim.Config) hw.Worst {
	pool := cfg.Cache.DeviceTokens * int64(max(1, cfg.Cache.CP))
	l := max(1, min(f.Model.ContextLen, pool))
	sch := cfg.Scheduler
	mrr := int64(max(1, sch.MaxRunningRequests))
	b := sch.MaxPrefillTokens
	if sch.ChunkedPrefillSize > 0 {
		b = max(b, sch.ChunkedPrefillSize)
	} else {
		b = max(b, l)
	}
	b = max(1, min(b, l*mrr, pool))
	// The pairs n*c of k requests of n = B/k new and c cached tokens
	// each, all within the pool (k*(n+c) <= pool) and L, peak at the
	// fewest requests that fill the pool.
	k := min(max(1, (pool+l-1)/l), mrr, b)
	n := max(1, b/k)
	return hw.Worst{
		PrefillRequests: k, Prefill: hw.Extend{New: n, Cached: max(0, min(l, pool/k)-n)},
		DecodeBatch: int(mrr), DecodeContext: min(pool, mrr*l),
	}
}

// checkTransfers bounds the simulator's durations that come from the
// [links] and [storage] numbers as the cost model's are: every latency and
// timeout, and moving one request's whole KV (L tokens) over each link,
// must take at most hw.MaxStep.
func (f *File) checkTransfers(cfg sim.Config) error {
	var errs []error
	limit := float64(hw.MaxStep)
	kv := cfg.Links.KVBytesPerToken * float64(max(1, min(f.Model.ContextLen, cfg.Cache.DeviceTokens)))
	for _, c := range []struct {
		key     string
		written float64 // the value as written, for the message
		ns      float64
	}{
		{"links.latency_us", f.Links.LatencyUs, cmp.Or(f.Links.LatencyUs, f.GPU.HostLinkLatencyUs) * 1e3},
		{"links.h2d_gbps", f.Links.H2DGBps, kv / cfg.Links.H2DBandwidth * 1e9},
		{"links.d2h_gbps", f.Links.D2HGBps, kv / cfg.Links.D2HBandwidth * 1e9},
		{"storage.read_latency_us", f.Storage.ReadLatencyUs, f.Storage.ReadLatencyUs * 1e3},
		{"storage.write_latency_us", f.Storage.WriteLatencyUs, f.Storage.WriteLatencyUs * 1e3},
		{"storage.read_gbps", f.Storage.ReadGBps, nsPer(kv, f.Storage.ReadGBps)},
		{"storage.write_gbps", f.Storage.WriteGBps, nsPer(kv, f.Storage.WriteGBps)},
		{"storage.prefetch_timeout_base", f.Storage.PrefetchTimeoutBase, f.Storage.PrefetchTimeoutBase * 1e9},
		{"storage.prefetch_timeout_per_ki_token", f.Storage.PrefetchTimeoutPerKiToken, f.Storage.PrefetchTimeoutPerKiToken * 1e9 * float64(f.Model.ContextLen) / 1024},
		{"storage.prefetch_timeout_max", f.Storage.PrefetchTimeoutMax, f.Storage.PrefetchTimeoutMax * 1e9},
	} {
		if !(c.ns <= limit) {
			errs = append(errs, fielderr.New(fielderr.Dotted(c.key), "makes one transfer or wait take %.2g s, over the %s a step may take (got %v)", c.ns/1e9, hw.MaxStep, c.written))
		}
	}
	return errors.Join(errs...)
}

// nsPer is the ns to move bytes at gbps 10^9 bytes/s (0: the simulator's
// default, which is fast).
func nsPer(bytes, gbps float64) float64 {
	if gbps <= 0 {
		return 0
	}
	return bytes / (gbps * 1e9) * 1e9
}

// simConfig composes the simulator's configuration from the file and a
// sizing.
func (f *File) simConfig(z hw.Sizing) sim.Config {
	k := f.Cache
	hier := k.Hierarchical == nil || *k.Hierarchical
	cfg := sim.Config{Seed: f.Seed}
	cfg.Cache = sim.CacheConfig{
		Disable: k.Disable, PageSize: f.Server.PageSize,
		DeviceTokens: z.DeviceTokens, Eviction: f.enums.eviction, ProtectedShare: k.ProtectedShare,
		WritePolicy: f.enums.writePolicy, LoadBackThreshold: k.LoadBackThreshold,
		CP: k.CP, Lanes: f.enums.lanes, Planner: f.enums.planner,
	}
	if k.DeviceTokens > 0 {
		cfg.Cache.DeviceTokens = k.DeviceTokens
	}
	if hier {
		cfg.Cache.HostTokens = z.HostTokens
		if k.HostTokens > 0 {
			cfg.Cache.HostTokens = k.HostTokens
		}
	}
	if cfg.Cache.CP == 0 && f.Server.DCPSize > 1 {
		cfg.Cache.CP = f.Server.DCPSize
		if cfg.Cache.Lanes == 0 {
			cfg.Cache.Lanes = tree.LaneTokens
		}
	}
	s := f.Scheduler
	cfg.Scheduler = sim.SchedulerConfig{
		Policy: f.enums.policy, MaxRunningRequests: z.MaxRunningRequests,
		MaxPrefillTokens: z.MaxPrefillTokens, ChunkedPrefillSize: z.ChunkedPrefillSize,
		SchedulerTuning: s.SchedulerTuning,
		ContextLen:      f.Model.ContextLen,
	}
	bw := func(v float64) float64 {
		if v > 0 {
			return v * 1e9
		}
		return f.GPU.HostCopyBandwidth(f.Links.Efficiency)
	}
	lat := f.Links.LatencyUs
	if lat == 0 {
		lat = f.GPU.HostLinkLatencyUs
	}
	cfg.Links = sim.LinkConfig{
		KVBytesPerToken: float64(z.CellBytes), Layers: f.Model.Layers,
		H2DBandwidth: bw(f.Links.H2DGBps), D2HBandwidth: bw(f.Links.D2HGBps),
		H2DLatency: clampNs(lat * 1e3), D2HLatency: clampNs(lat * 1e3),
	}
	cfg.Storage = f.Storage.simConfig(f.enums.prefetch, f.enums.l3Eviction)
	return cfg
}

// simConfig converts the storage section to the simulator's units, which
// checks their ranges ([sim.Config.Validate]; [File.simErrors] reports
// them at the file's keys). Zero is the simulator's default too; a
// negative value stays negative, however small.
func (st StorageSection) simConfig(prefetch sim.PrefetchPolicy, eviction sim.StorageEviction) sim.StorageConfig {
	scale := func(v, unit float64) float64 { return v * unit }
	ns := func(v, unit float64) int64 {
		n := clampNs(math.Round(v * unit))
		if v < 0 && n == 0 {
			n = -1
		}
		return n
	}
	return sim.StorageConfig{
		Enabled:                   st.Enabled,
		CapacityTokens:            st.CapacityTokens,
		PrefetchPolicy:            prefetch,
		PrefetchThreshold:         st.PrefetchThreshold,
		PrefetchTimeoutBase:       ns(st.PrefetchTimeoutBase, 1e9),
		PrefetchTimeoutPerKiToken: ns(st.PrefetchTimeoutPerKiToken, 1e9),
		PrefetchTimeoutMax:        ns(st.PrefetchTimeoutMax, 1e9),
		PrefetchCapacityRatio:     st.PrefetchCapacityRatio,
		ReadBandwidth:             scale(st.ReadGBps, 1e9),
		WriteBandwidth:            scale(st.WriteGBps, 1e9),
		ReadLatency:               ns(st.ReadLatencyUs, 1e3),
		WriteLatency:              ns(st.WriteLatencyUs, 1e3),
		Eviction:                  eviction,
		HighWatermark:             st.HighWatermark,
		EvictionRatio:             st.EvictionRatio,
		LeaseTTL:                  ns(st.LeaseTTL, 1e9),
		DecodeOffload:             st.DecodeOffload,
		AggregateBandwidth:        scale(st.AggregateGBps, 1e9),
	}
}

// clampNs converts ns to an int64 without wrapping around: values past
// 2^62 ns (146 years; checkTransfers has reported them, far beyond
// hw.MaxStep) become 2^62, NaN becomes 0.
func clampNs(ns float64) int64 {
	const most = 1 << 62
	switch {
	case ns != ns:
		return 0
	case ns >= most:
		return most
	case ns <= -most:
		return -most
	}
	return int64(ns)
}

// TracePath returns the workload trace resolved against the file's folder
// ("" if none).
//
// The bundled default's trace is embedded: its path is as written, and
// [File.OpenBundledTrace] reads it.
func (f *File) TracePath() string {
	t := f.Workload.Trace
	if t == "" || f.path == "" || filepath.IsAbs(t) {
		return t
	}
	return filepath.Join(filepath.Dir(f.path), t)
}
