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
	"strings"

	"github.com/pelletier/go-toml/v2"

	"github.com/kvsim/kvsim/sim"
	"github.com/kvsim/kvsim/sim/engine"
	"github.com/kvsim/kvsim/sim/hw"
	"github.com/kvsim/kvsim/sim/llamacpp"
	"github.com/kvsim/kvsim/traces"
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

	path      string // where the file was read from, for relative paths
	bundled   bool   // the bundled default: its trace is embedded
	badPreset bool   // Parse reported an unknown model or GPU preset
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

// SchedulerSection configures the scheduler. Batch limits
// (max_running_requests, max_prefill_tokens, chunked_prefill_size) are
// server arguments and live in [server].
type SchedulerSection struct {
	Policy                   string  `toml:"policy"`
	ScheduleConservativeness float64 `toml:"schedule_conservativeness"`
	InitNewTokenRatio        float64 `toml:"init_new_token_ratio"`
	MinNewTokenRatioFactor   float64 `toml:"min_new_token_ratio_factor"`
	NewTokenRatioDecaySteps  int     `toml:"new_token_ratio_decay_steps"`
	ClipMaxNewTokens         int64   `toml:"clip_max_new_tokens"`
	RetractDecodeSteps       int64   `toml:"retract_decode_steps"`
	LPMFallbackQueue         int     `toml:"lpm_fallback_queue"`
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
// host link at LinkEfficiency.
type LinksSection struct {
	// H2DGBps and D2HGBps are 10^9 bytes/s per rank.
	H2DGBps float64 `toml:"h2d_gbps"`
	D2HGBps float64 `toml:"d2h_gbps"`
	// LatencyUs is the fixed cost of one copy.
	LatencyUs float64 `toml:"latency_us"`
	// Efficiency is the share of the GPU's host link a copy reaches.
	// Default 0.85.
	Efficiency float64 `toml:"efficiency"`
}

// StorageSection configures HiCache's storage tier (L3), with SGLang's
// extra-config names for the prefetch settings. Zero values take the
// simulator's defaults (sim.StorageConfig); times are seconds, bandwidths
// 10^9 bytes/s per rank, call latencies µs.
type StorageSection struct {
	Enabled                   bool    `toml:"enabled"`
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
	f := &File{Server: hw.DefaultServer(), path: name}
	f.Cost.Efficiency = hw.DefaultEfficiency()
	f.Llama.Config = llamacpp.DefaultConfig()
	var errs []error
	switch presets.Engine.Kind {
	case "", EngineSGLang:
		if _, ok := raw["llamacpp"]; ok {
			errs = append(errs, tableError(name, data, "llamacpp", `only for engine.kind = "llamacpp"`))
		}
	case EngineLlamaCpp:
		for _, t := range sglangOnly {
			if _, ok := raw[t]; ok {
				errs = append(errs, tableError(name, data, t, `only for engine.kind = "sglang" (this file describes a llama-server)`))
			}
		}
		return decodeStrict(data, name, f, errs...)
	default:
		return nil, positioned(name, data, fmt.Errorf(`engine.kind: must be "sglang" or "llamacpp" (got %q)`, presets.Engine.Kind))
	}
	if p := presets.Model.Preset; p != "" {
		m, err := hw.ModelPreset(p)
		if err != nil {
			errs = append(errs, positioned(name, data, fmt.Errorf("model.preset: %w", err)))
		}
		f.Model.Model = m
	}
	if p := presets.GPU.Preset; p != "" {
		g, err := hw.GPUPreset(p)
		if err != nil {
			errs = append(errs, positioned(name, data, fmt.Errorf("gpu.preset: %w", err)))
		}
		f.GPU.GPU = g
	}
	// An unknown preset leaves the model's or GPU's fields meaningless,
	// but the rest of the file is still checked (Validate skips what
	// depends on them).
	f.badPreset = len(errs) > 0
	return decodeStrict(data, name, f, errs...)
}

// decodeStrict decodes data into f over its defaults, refusing unknown
// keys, and validates it; errors name the file, line and key. It serves
// both engines: a llama-server file has [engine], [llamacpp] and
// [workload] only (checked by the caller, whose errors come first in errs).
func decodeStrict(data []byte, name string, f *File, errs ...error) (*File, error) {
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
	var raw map[string]any
	if err := toml.Unmarshal(data, &raw); err != nil {
		return nil, TOMLError(name, data, &raw, err)
	}
	var invalid []error
	if err := f.Validate(); err != nil {
		invalid = append(invalid, err)
	}
	invalid = append(coefficientErrors(raw, f), invalid...)
	if len(invalid) > 0 {
		errs = append(errs, positioned(name, data, errors.Join(invalid...)))
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	return f, nil
}

// tableError is an error about a whole [table], placed at its header.
func tableError(name string, data []byte, table, msg string) error {
	for n, l := range strings.Split(string(data), "\n") {
		t := strings.TrimSpace(l)
		if t == "["+table+"]" || strings.HasPrefix(t, "["+table+".") {
			return fmt.Errorf("%s:%d:%d: %s: %s", name, n+1, strings.Index(l, "[")+1, table, msg)
		}
	}
	return fmt.Errorf("%s: %s: %s", name, table, msg)
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
	switch {
	case f.badPreset:
		// Parse has reported the unknown preset; without it the model's
		// and GPU's fields, the sizing and the cost mean nothing.
	case f.Model.Name == "":
		errs = append(errs, errors.New("model: set model.preset or the model's fields"))
	default:
		if err := f.Model.Validate(); err != nil {
			errs = append(errs, err)
		}
	}
	switch {
	case f.badPreset:
	case f.GPU.Name == "":
		errs = append(errs, errors.New("gpu: set gpu.preset or the GPU's fields"))
	default:
		if err := f.GPU.Validate(); err != nil {
			errs = append(errs, err)
		}
	}
	if err := f.Server.Validate(); err != nil {
		errs = append(errs, err)
	}
	switch f.Cost.Kind {
	case "", "roofline":
		if err := f.Cost.Efficiency.Validate(); err != nil {
			errs = append(errs, err)
		}
	case "fitted":
		if err := f.Cost.Fitted.Validate(); err != nil {
			errs = append(errs, err)
		}
	default:
		errs = append(errs, fmt.Errorf(`cost.kind: must be "roofline" or "fitted" (got %q)`, f.Cost.Kind))
	}
	for _, c := range []struct {
		key string
		v   int64
	}{{"cache.device_tokens", f.Cache.DeviceTokens}, {"cache.host_tokens", f.Cache.HostTokens}} {
		if c.v < 0 {
			errs = append(errs, fmt.Errorf("%s: must be 0 (the pool from sizing) or > 0 tokens (got %d)", c.key, c.v))
		}
	}
	l := f.Links
	for _, c := range []struct {
		key string
		v   float64
	}{{"links.h2d_gbps", l.H2DGBps}, {"links.d2h_gbps", l.D2HGBps}, {"links.latency_us", l.LatencyUs}} {
		if !(c.v >= 0) || math.IsInf(c.v, 0) {
			errs = append(errs, fmt.Errorf("%s: must be a finite number >= 0 (got %v)", c.key, c.v))
		}
	}
	if !(l.Efficiency >= 0 && l.Efficiency <= 1) {
		errs = append(errs, fmt.Errorf("links.efficiency: must be in (0, 1] (got %v)", l.Efficiency))
	}
	st := f.Storage
	for _, c := range []struct {
		key string
		v   float64
	}{
		{"storage.prefetch_timeout_base", st.PrefetchTimeoutBase},
		{"storage.prefetch_timeout_per_ki_token", st.PrefetchTimeoutPerKiToken},
		{"storage.prefetch_timeout_max", st.PrefetchTimeoutMax},
		{"storage.read_gbps", st.ReadGBps},
		{"storage.write_gbps", st.WriteGBps},
		{"storage.read_latency_us", st.ReadLatencyUs},
		{"storage.write_latency_us", st.WriteLatencyUs},
	} {
		if c.v < 0 {
			errs = append(errs, fmt.Errorf("%s: must be >= 0 (got %v)", c.key, c.v))
		}
	}
	// The simulator's own checks of the cache and scheduler sections, with
	// the sizes sizing would give (checked above).
	probe := f.simConfig(hw.Sizing{DeviceTokens: 1, HostTokens: 1, MaxRunningRequests: 1, MaxPrefillTokens: 1, ChunkedPrefillSize: -1})
	probe.Cache.PageSize = 1
	probe.Scheduler.ContextLen = 0 // model.context_len, checked by the model
	if f.badPreset {
		probe.Links.H2DBandwidth, probe.Links.D2HBandwidth = 1, 1 // from the unknown GPU
	}
	if err := probe.Validate(); err != nil {
		errs = append(errs, err)
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

// validateWorkload checks the [workload] section: the format must be one
// the trace readers know, whether or not a command later reads the file's
// trace (kvsim sim --trace replaces the trace, not the check).
func (f *File) validateWorkload() error {
	var errs []error
	if _, err := traces.ParseFormat(f.Workload.Format); err != nil {
		errs = append(errs, fmt.Errorf("workload.format: must be one of %s, or empty to detect it (got %q)", strings.Join(traces.FormatNames(), ", "), f.Workload.Format))
	}
	if c := f.Workload.IdleGapCap; !(c >= 0 && c <= 9e9) {
		errs = append(errs, fmt.Errorf("workload.idle_gap_cap: must be a number of seconds from 0 (none) to 9e9 (got %v)", c))
	}
	return errors.Join(errs...)
}

// validateLlama checks the [llamacpp] section.
func (f *File) validateLlama() error {
	var errs []error
	if err := f.Llama.Config.Validate(); err != nil {
		errs = append(errs, err)
	}
	if err := f.Llama.Cost.Validate(); err != nil {
		for _, e := range unjoin(err) {
			errs = append(errs, errors.New(strings.Replace(e.Error(), "hw.fitted.", "llamacpp.cost.", 1)))
		}
	}
	if c := f.Llama.Cost.StateCopy; !(c >= 0) || math.IsInf(c, 1) {
		errs = append(errs, fmt.Errorf("llamacpp.cost.state_copy_ns_per_byte: must be a finite number >= 0 (got %v)", c))
	}
	if c := f.Llama.Cost.StateFresh; !(c >= 0) || math.IsInf(c, 1) {
		errs = append(errs, fmt.Errorf("llamacpp.cost.state_fresh_ns_per_byte: must be a finite number >= 0 (got %v)", c))
	}
	if c := f.Llama.Cost.StateRestore; c != nil && (!(*c >= 0) || math.IsInf(*c, 1)) {
		errs = append(errs, fmt.Errorf("llamacpp.cost.state_restore_ns_per_byte: must be a finite number >= 0 (got %v)", *c))
	}
	// A call-size tier: its bound in tokens (0: off) and its rate per
	// pair, which it needs and which needs it.
	tier := func(name string, tokens int, pair float64) {
		switch {
		case tokens < 0:
			errs = append(errs, fmt.Errorf("llamacpp.cost.%s_tokens: must be >= 0 (got %d)", name, tokens))
		case tokens > 0 && !(pair > 0 && !math.IsInf(pair, 1)):
			errs = append(errs, fmt.Errorf("llamacpp.cost.%s_pair_ns: must be a finite number > 0 with %s_tokens (got %v)", name, name, pair))
		case tokens == 0 && pair != 0:
			errs = append(errs, fmt.Errorf("llamacpp.cost.%s_pair_ns: needs %s_tokens > 0 (got %v)", name, name, pair))
		}
	}
	c := f.Llama.Cost
	tier("small_call", c.SmallCall, c.SmallPair)
	if c.MediumCall > 0 && c.MediumCall <= c.SmallCall {
		errs = append(errs, fmt.Errorf("llamacpp.cost.medium_call_tokens: must be above small_call_tokens (%d) (got %d)", c.SmallCall, c.MediumCall))
	} else {
		tier("medium_call", c.MediumCall, c.MediumPair)
	}
	switch {
	case c.Tile < 0:
		errs = append(errs, fmt.Errorf("llamacpp.cost.tile_size: must be >= 0 (got %d)", c.Tile))
	case c.Tile > 0 && (c.SmallCall != 0 || c.MediumCall != 0):
		errs = append(errs, fmt.Errorf("llamacpp.cost.tile_size: excludes small_call_tokens and medium_call_tokens (got %d and %d): the tiles replace the call-size tiers", c.SmallCall, c.MediumCall))
	case !(c.ShortPair >= 0) || math.IsInf(c.ShortPair, 1):
		errs = append(errs, fmt.Errorf("llamacpp.cost.short_pair_ns: must be a finite number >= 0 (got %v)", c.ShortPair))
	case c.Tile == 0 && c.ShortPair != 0:
		errs = append(errs, fmt.Errorf("llamacpp.cost.short_pair_ns: needs tile_size > 0 (got %v)", c.ShortPair))
	}
	if c.Delay < 0 {
		errs = append(errs, fmt.Errorf("llamacpp.cost.request_delay_ns: must be >= 0 (got %d)", c.Delay))
	}
	if !(c.AfterPrompt >= 0) || math.IsInf(c.AfterPrompt, 1) {
		errs = append(errs, fmt.Errorf("llamacpp.cost.after_prompt_ns: must be a finite number >= 0 (got %v)", c.AfterPrompt))
	}
	if !(c.AfterPromptDecay >= 0 && c.AfterPromptDecay < 1) {
		errs = append(errs, fmt.Errorf("llamacpp.cost.after_prompt_decay: must be a number in [0, 1) (got %v)", c.AfterPromptDecay))
	}
	if len(c.AfterPromptCurve) > 0 {
		for _, k := range []struct {
			key string
			v   float64
		}{{"after_prompt_ns", c.AfterPrompt}, {"after_prompt_decay", c.AfterPromptDecay}} {
			if k.v != 0 {
				errs = append(errs, fmt.Errorf("llamacpp.cost.%s: excludes [[llamacpp.cost.after_prompt]] (got %v with %d points): the curve replaces the one point", k.key, k.v, len(c.AfterPromptCurve)))
			}
		}
	}
	if len(errs) == 0 {
		errs = append(errs, f.checkLlamaSteps()...)
	}
	for i, p := range c.AfterPromptCurve {
		key := fmt.Sprintf("llamacpp.cost.after_prompt[%d]", i)
		switch {
		case p.Context < 0:
			errs = append(errs, fmt.Errorf("%s.context_tokens: must be >= 0 (got %d)", key, p.Context))
		case i > 0 && p.Context <= c.AfterPromptCurve[i-1].Context:
			errs = append(errs, fmt.Errorf("%s.context_tokens: must be above the previous point's %d (got %d)", key, c.AfterPromptCurve[i-1].Context, p.Context))
		}
		if !(p.Ns >= 0) || math.IsInf(p.Ns, 1) {
			errs = append(errs, fmt.Errorf("%s.ns: must be a finite number >= 0 (got %v)", key, p.Ns))
		}
		if !(p.Decay >= 0 && p.Decay < 1) {
			errs = append(errs, fmt.Errorf("%s.decay: must be a number in [0, 1) (got %v)", key, p.Decay))
		}
	}
	return errors.Join(errs...)
}

// checkLlamaSteps bounds llama-server's call times as build bounds
// SGLang's forwards ([hw.MaxStep]): at the largest call (batch_size prompt
// tokens spread over the slots, each behind the rest of its slot's
// context; a decode call of every slot over ctx_size tokens), each term
// of the cost and the whole must take at most an hour, and so must a
// request's delay, an after-prompt extra and saving or restoring a whole
// context's state.
func (f *File) checkLlamaSteps() []error {
	cfg, c := f.Llama.Config, f.Llama.Cost
	slots := int64(cfg.Slots)
	slotCtx := int64(cfg.SlotContext())
	n := max(1, min(int64(cfg.Batch)/slots, slotCtx))
	w := hw.Worst{
		PrefillRequests: slots, Prefill: hw.Extend{New: n, Cached: max(0, slotCtx-n)},
		DecodeBatch: cfg.Slots, DecodeContext: int64(cfg.Context),
	}
	var errs []error
	for _, e := range unjoin(c.Fitted.Check(w)) {
		if e != nil {
			errs = append(errs, errors.New(strings.Replace(e.Error(), "hw.fitted.", "llamacpp.cost.", 1)))
		}
	}
	pairs := float64(slots) * (float64(n)*float64(w.Prefill.Cached) + float64(n)*float64(n+1)/2)
	state := float64(cfg.StateBytesPerToken) * float64(cfg.Context)
	terms := []struct {
		key string
		v   float64
		ns  float64
	}{
		{"small_call_pair_ns", c.SmallPair, c.SmallPair * pairs},
		{"medium_call_pair_ns", c.MediumPair, c.MediumPair * pairs},
		{"short_pair_ns", c.ShortPair, c.ShortPair * pairs},
		{"state_copy_ns_per_byte", c.StateCopy, c.StateCopy * state},
		{"state_fresh_ns_per_byte", c.StateFresh, c.StateFresh * state},
		{"request_delay_ns", float64(c.Delay), float64(c.Delay)},
		{"after_prompt_ns", c.AfterPrompt, c.AfterPrompt},
	}
	if c.StateRestore != nil {
		terms = append(terms, struct {
			key string
			v   float64
			ns  float64
		}{"state_restore_ns_per_byte", *c.StateRestore, *c.StateRestore * state})
	}
	for i, p := range c.AfterPromptCurve {
		terms = append(terms, struct {
			key string
			v   float64
			ns  float64
		}{fmt.Sprintf("after_prompt[%d].ns", i), p.Ns, p.Ns})
	}
	for _, t := range terms {
		if !(t.ns <= float64(hw.MaxStep)) {
			errs = append(errs, fmt.Errorf("llamacpp.cost.%s: makes one call or copy take %.2g s at the largest (%d slots of %d tokens, %d-token batches), over the %s a step may take (got %g)",
				t.key, t.ns/1e9, cfg.Slots, slotCtx, cfg.Batch, hw.MaxStep, t.v))
		}
	}
	return errs
}

// unjoin returns the errors of a joined error, or err alone.
func unjoin(err error) []error {
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		return j.Unwrap()
	}
	return []error{err}
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
	c := f.Llama.Cost
	restore := c.StateCopy
	if c.StateRestore != nil {
		restore = *c.StateRestore
	}
	return &LlamaBuilt{Config: f.Llama.Config, Cost: &llamacpp.CPUCost{Fitted: c.Fitted, StateCopy: c.StateCopy, StateFresh: c.StateFresh, StateRestore: restore, SmallCall: c.SmallCall, SmallPair: c.SmallPair, MediumCall: c.MediumCall, MediumPair: c.MediumPair, Tile: c.Tile, ShortPair: c.ShortPair, Delay: c.Delay, AfterPromptCurve: c.afterPromptCurve()}}, nil
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
	switch f.Cost.Kind {
	case "fitted":
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
			errs = append(errs, fmt.Errorf("%s: makes one transfer or wait take %.2g s, over the %s a step may take (got %v)", c.key, c.ns/1e9, hw.MaxStep, c.written))
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
		DeviceTokens: z.DeviceTokens, Eviction: k.Eviction, ProtectedShare: k.ProtectedShare,
		WritePolicy: k.WritePolicy, LoadBackThreshold: k.LoadBackThreshold,
		CP: k.CP, Lanes: k.Lanes, Planner: k.Planner,
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
		if cfg.Cache.Lanes == "" {
			cfg.Cache.Lanes = "token"
		}
	}
	s := f.Scheduler
	cfg.Scheduler = sim.SchedulerConfig{
		Policy: s.Policy, MaxRunningRequests: z.MaxRunningRequests,
		MaxPrefillTokens: z.MaxPrefillTokens, ChunkedPrefillSize: z.ChunkedPrefillSize,
		ScheduleConservativeness: s.ScheduleConservativeness, InitNewTokenRatio: s.InitNewTokenRatio,
		MinNewTokenRatioFactor: s.MinNewTokenRatioFactor, NewTokenRatioDecaySteps: s.NewTokenRatioDecaySteps,
		ClipMaxNewTokens: s.ClipMaxNewTokens, RetractDecodeSteps: s.RetractDecodeSteps, LPMFallbackQueue: s.LPMFallbackQueue,
		ContextLen: f.Model.ContextLen,
	}
	eff := f.Links.Efficiency
	if eff == 0 {
		eff = 0.85
	}
	bw := func(v float64) float64 {
		if v > 0 {
			return v * 1e9
		}
		return f.GPU.HostLinkGBps * 1e9 * eff
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
	cfg.Storage = f.Storage.simConfig()
	return cfg
}

// simConfig converts the storage section to the simulator's units. Zero
// and negative values (the latter reported by Validate) are left zero, which
// the simulator reads as its default.
func (st StorageSection) simConfig() sim.StorageConfig {
	scale := func(v, unit float64) float64 {
		if v > 0 {
			return v * unit
		}
		return 0
	}
	ns := func(v, unit float64) int64 { return clampNs(math.Round(scale(v, unit))) }
	return sim.StorageConfig{
		Enabled:                   st.Enabled,
		CapacityTokens:            st.CapacityTokens,
		PrefetchPolicy:            st.PrefetchPolicy,
		PrefetchThreshold:         st.PrefetchThreshold,
		PrefetchTimeoutBase:       ns(st.PrefetchTimeoutBase, 1e9),
		PrefetchTimeoutPerKiToken: ns(st.PrefetchTimeoutPerKiToken, 1e9),
		PrefetchTimeoutMax:        ns(st.PrefetchTimeoutMax, 1e9),
		PrefetchCapacityRatio:     st.PrefetchCapacityRatio,
		ReadBandwidth:             scale(st.ReadGBps, 1e9),
		WriteBandwidth:            scale(st.WriteGBps, 1e9),
		ReadLatency:               ns(st.ReadLatencyUs, 1e3),
		WriteLatency:              ns(st.WriteLatencyUs, 1e3),
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
