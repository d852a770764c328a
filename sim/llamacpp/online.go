package llamacpp

import (
	"github.com/kvsim/kvsim/sim/engine"
	"github.com/kvsim/kvsim/traces"
)

// Online runs a simulation incrementally as an [engine.Engine]: requests
// are submitted while it runs, virtual time advances only when asked, and
// token and completion events are reported as [engine.Event]s.
type Online struct {
	s    *Sim
	base engine.OnlineState
}

// NewOnline returns an online simulation of a llama-server.
func NewOnline(cfg Config, cost CostModel) (*Online, error) {
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

var _ engine.Engine = (*Online)(nil)

// Submit queues a request that arrives at rec.Arrival, which must not be
// before Now() nor before an earlier submission's arrival.
func (o *Online) Submit(rec traces.Record) error {
	if err := o.base.Push(rec, o.s.now, o.s.lastArr); err != nil {
		return err
	}
	return o.base.Fail(o.s.pull())
}

// Next returns the time of the next pending event, if there is one.
func (o *Online) Next() (engine.Time, bool) { return o.s.nextTime() }

// RunUntil processes every event up to and including time t, advances the
// clock to t, and returns the events reported, in order. The slice is
// reused by the next call.
func (o *Online) RunUntil(t engine.Time) ([]engine.Event, error) {
	if err := o.base.StartRun(t, o.s.now); err != nil {
		return nil, err
	}
	for {
		ok, err := o.s.step(t)
		if err != nil {
			return nil, o.base.Fail(err)
		}
		if !ok {
			break
		}
	}
	o.s.now = t
	return o.base.Events(), nil
}

// RecordInterTokenStats makes the run record its inter-token latencies in
// st (nil: nowhere) instead of its own summary, whose ITL figures are then
// 0 (a fleet records its replicas' in its own summary; see
// sim.Online.RecordInterTokenStats). Call it before the first Submit.
func (o *Online) RecordInterTokenStats(st *engine.Stats) { o.s.itl = st }

// DropResults makes the run keep no per-request results: Finish's Result
// has none (its summary and counters are whole). See
// sim.Online.DropResults. Call it before the first Submit.
func (o *Online) DropResults() { o.s.Stream(func(engine.RequestResult) error { return nil }) }

// Active returns the number of requests arrived and not yet finished.
func (o *Online) Active() int { return o.s.active }

// Sim returns the simulator, for inspection (SlotTokens, SlotOf). Do not
// run it directly.
func (o *Online) Sim() *Sim { return o.s }

// Stats returns the cache decision counts so far.
func (o *Online) Stats() Stats { return o.s.stats }

// Finish runs every remaining event and returns the run's results. The
// Online cannot be used afterwards.
func (o *Online) Finish() (*engine.Result, error) {
	if err := o.base.Err(); err != nil {
		return nil, err
	}
	for {
		ok, err := o.s.step(engine.Never)
		if err != nil {
			return nil, err
		}
		if !ok {
			break
		}
	}
	o.base.Finished("llamacpp")
	return o.s.result(), nil
}
