package sim

import (
	"github.com/kvsim/kvsim/sim/engine"
	"github.com/kvsim/kvsim/traces"
	"github.com/kvsim/kvsim/tree"
)

// Online runs a simulation incrementally as an [engine.Engine]: requests are submitted while it
// runs and virtual time advances only when asked. Replays whose next
// request depends on an earlier one finishing (multi-turn sessions, a
// concurrency limit) and kvsim serve drive the simulator this way. It is as
// deterministic as [Sim.Run]: the same submissions at the same virtual times
// give the same events.
type Online struct {
	s    *Sim
	base engine.OnlineState
}

var _ engine.Engine = (*Online)(nil)

// NewOnline returns an online simulation of cfg with the given cost model.
func NewOnline(cfg Config, cost CostModel) (*Online, error) {
	if cfg.Cache.Eviction == tree.Belady {
		return nil, ErrOracleOnline
	}
	s, err := New(cfg, cost)
	if err != nil {
		return nil, err
	}
	o := &Online{s: s}
	s.src = &o.base.Q
	s.observe = o.base.Observe
	return o, nil
}

// Now returns the virtual time the simulation has reached.
func (o *Online) Now() engine.Time { return o.s.now }

// Submit queues a request that arrives at rec.Arrival, which must not be
// before Now() nor before an earlier submission's arrival.
func (o *Online) Submit(rec traces.Record) error {
	if err := o.base.Push(rec, o.s.now, o.s.lastArr); err != nil {
		return err
	}
	if o.s.pending == nil {
		return o.base.Fail(o.s.scheduleNextArrival())
	}
	return nil
}

// Next returns the time of the next pending event, if there is one.
func (o *Online) Next() (engine.Time, bool) {
	if len(o.s.events) == 0 {
		return 0, false
	}
	return o.s.events[0].at, true
}

// RunUntil processes every event up to and including time t, advances the
// clock to t, and returns the events reported, in order. The slice is
// reused by the next call.
func (o *Online) RunUntil(t engine.Time) ([]engine.Event, error) {
	if err := o.base.StartRun(t, o.s.now); err != nil {
		return nil, err
	}
	for len(o.s.events) > 0 && o.s.events[0].at <= t {
		if err := o.s.processNext(); err != nil {
			return nil, o.base.Fail(err)
		}
	}
	o.s.now = t
	return o.base.Events(), nil
}

// TokenUsage returns SGLang's token_usage, what its scheduler reports to
// a router's load poll (get_load, /metrics): the share of the device KV
// pool in use and not freeable by evicting the tree, (pool - free -
// evictable) / pool, over every lane.
func (o *Online) TokenUsage() float64 {
	t := o.s.tree
	used := t.DeviceTotal() - t.EvictableTotal()
	for l := 0; l < o.s.lanes; l++ {
		used += t.Held(l)
	}
	return float64(used) / float64(o.s.cfg.Cache.DeviceTokens*int64(o.s.lanes))
}

// LoadReport returns what SGLang's scheduler reports to SMG's least_load
// (/v1/loads): token_usage (TokenUsage), num_waiting_uncached_tokens (the
// waiting requests' prompt tokens beyond the prefix found cached when they
// were last matched, all of them for one never matched, and the rest of a
// chunked prefill), and the output tokens generated so far.
func (o *Online) LoadReport() (usage float64, queued, generated int64) {
	s := o.s
	for _, r := range s.waiting {
		queued += max(0, r.input-r.prefix)
	}
	if r := s.chunked; r != nil {
		queued += max(0, r.input-r.kv)
	}
	return o.TokenUsage(), queued, s.counters.OutputTokens
}

// Counters returns the run's counters so far.
func (o *Online) Counters() engine.Counters { return o.s.counters }

// Queue returns the number of waiting and running requests.
func (o *Online) Queue() (waiting, running int) { return len(o.s.waiting), len(o.s.running) }

// Evictions returns the device tokens evicted without a host copy
// (deleted), the device tokens demoted to host, and the host tokens evicted,
// so far.
func (o *Online) Evictions() (deviceDeleted, demoted, hostEvicted int64) {
	st := o.s.tree.Stats()
	return st.DeviceEvicted - st.Demoted, st.Demoted, st.HostEvicted
}

// RecordInterTokenStats makes the run record its inter-token latencies in
// st (nil: nowhere) instead of its own summary, whose ITL figures are then
// 0. A fleet, which summarises its requests' inter-token latencies over
// all its replicas and reports no replica's, has every replica record
// them in the fleet's summary, as they happen: each latency is computed,
// recorded and sorted once. Call it before the first Submit.
func (o *Online) RecordInterTokenStats(st *engine.Stats) { o.s.itl = st }

// OmitTokenEvents makes RunUntil report completions only, no token events:
// a fleet's batch loop, whose replicas record their inter-token latencies
// themselves ([Online.RecordInterTokenStats]), reads nothing else and
// would otherwise receive (and step over) an event for every token. Call
// it before the first Submit.
func (o *Online) OmitTokenEvents() { o.s.noTokens = true }

// DropResults makes the run keep no per-request results and no timeline:
// Finish's Result has neither (its summary and counters are whole). A
// driver that reads each request's outcome from its events (a replay's
// in-process target, kvsim serve) calls it before the first Submit so that
// memory follows the requests in flight, not the requests served.
func (o *Online) DropResults() {
	o.s.Stream(Sink{
		Result: func(engine.RequestResult) error { return nil },
		Sample: func(engine.Sample) error { return nil },
	})
}

// Active returns the number of requests submitted and arrived but not yet
// finished.
func (o *Online) Active() int { return o.s.active }

// Finish runs every remaining event and returns the run's results. The
// Online cannot be used afterwards.
func (o *Online) Finish() (*engine.Result, error) {
	if err := o.base.Err(); err != nil {
		return nil, err
	}
	for len(o.s.events) > 0 {
		if err := o.s.processNext(); err != nil {
			return nil, err
		}
	}
	o.base.Finished("sim")
	return o.s.finish(), nil
}
