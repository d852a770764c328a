package sim

import (
	"fmt"

	"github.com/kvsim/kvsim/sim/engine"
)

// Factory builds SGLang engines of one configuration and cost model. It is
// the [engine.Factory] configs returns for engine.kind = "sglang".
type Factory struct {
	Config Config
	Cost   CostModel
	// OpenLoop makes Run release every record at its arrival ([Sim.Run]);
	// otherwise Run is closed loop ([Sim.RunClosedLoop]).
	OpenLoop bool
	// Sink, if its functions are set, receives Run's per-request results
	// and timeline samples as they are produced instead of the Result
	// (see [Sink]): memory then follows the requests in flight, not the
	// trace's length.
	Sink Sink
}

var _ engine.Factory = (*Factory)(nil)

// Info implements engine.Factory.
func (f *Factory) Info() engine.Info {
	return engine.Info{Kind: "sglang", Server: "kvsim-sim", PageSize: f.Config.Cache.PageSize}
}

// New implements engine.Factory: an [Online] simulation.
func (f *Factory) New() (engine.Engine, error) { return NewOnline(f.Config, f.Cost) }

// Run implements engine.Factory with [Sim.Run] or [Sim.RunClosedLoop].
func (f *Factory) Run(src engine.Source) (*engine.Result, error) {
	s, err := New(f.Config, f.Cost)
	if err != nil {
		return nil, err
	}
	s.Stream(f.Sink)
	if f.OpenLoop {
		return s.Run(src)
	}
	return s.RunClosedLoop(src)
}

// Refuse returns why the server refuses every request of a prompt of
// input tokens, as SGLang does at admission, or "" when it does not.
func (f *Factory) Refuse(input int) string {
	c := f.Config
	if l := c.Scheduler.ContextLen; l > 0 && int64(input) >= l {
		return fmt.Sprintf("prompt of %d tokens exceeds the model's context length of %d tokens", input, l)
	}
	if capTokens := c.Cache.DeviceTokens * int64(max(c.Cache.CP, 1)); capTokens > 0 && int64(input)+1 > capTokens {
		return fmt.Sprintf("prompt of %d tokens plus at least 1 output token exceeds the KV pool of %d tokens", input, capTokens)
	}
	return ""
}

// ServerInfo returns the fields of SGLang's /server_info that the
// configuration sets, under SGLang's names (kvsim serve reports them).
func (f *Factory) ServerInfo() map[string]any {
	c := f.Config
	return map[string]any{
		"page_size": c.Cache.PageSize, "max_total_num_tokens": c.Cache.DeviceTokens,
		"enable_hierarchical_cache": c.Cache.HostTokens > 0, "hicache_host_tokens": c.Cache.HostTokens,
		"max_running_requests": c.Scheduler.MaxRunningRequests, "chunked_prefill_size": c.Scheduler.ChunkedPrefillSize,
		"schedule_policy": c.Scheduler.Policy.String(), "radix_eviction_policy": c.Cache.Eviction.String(),
		"hicache_write_policy": c.Cache.WritePolicy.String(), "disable_radix_cache": c.Cache.Disable,
	}
}
