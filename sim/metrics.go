package sim

import (
	"github.com/kvsim/kvsim/sim/engine"
)

func (s *Sim) sample() {
	var held int64
	for o := 0; o < s.lanes; o++ {
		held += s.tree.Held(o)
	}
	smp := engine.Sample{
		Time: s.now, Device: s.tree.DeviceTotal(), Held: held, Evictable: s.tree.EvictableTotal(),
		Host: s.tree.HostTotal(), Waiting: len(s.waiting), Running: len(s.running),
	}
	if s.st != nil {
		smp.HostReserved = s.tree.HostReservedTotal()
		smp.Storage = s.st.l3.pages * int64(s.cfg.Cache.PageSize)
	}
	if s.sink.Sample != nil {
		// Streaming: a sample is sent once no later look at the same
		// instant can replace it.
		if s.held != nil && s.held.Time != smp.Time {
			s.emitSample(*s.held)
		}
		s.held = &smp
		return
	}
	if n := len(s.timeline); n > 0 && s.timeline[n-1].Time == smp.Time {
		s.timeline[n-1] = smp // a later look at the same instant
		return
	}
	s.timeline = append(s.timeline, smp)
}

// Sink receives a run's per-request results and timeline samples as the
// run produces them, instead of the [engine.Result] keeping them: with a
// Result function set, Result.Requests is nil, and with a Sample function
// set, Result.Timeline is nil. Results come in completion order (the order
// of Result.Requests), samples in time order, one per instant (the last look
// at it), as Result.Timeline would hold them. The first error a function
// returns stops the run, and Run returns it. The summary is the same either
// way: the simulator keeps a few numbers per request for it (see
// [engine.Stats]).
type Sink struct {
	Result func(engine.RequestResult) error
	Sample func(engine.Sample) error
}

// Stream sends results and samples to sink's functions from now on (see
// [Sink]). Call it before Run.
func (s *Sim) Stream(sink Sink) { s.sink = sink }

func (s *Sim) emitResult(r engine.RequestResult) {
	if s.sink.Result == nil {
		s.results = append(s.results, r)
		return
	}
	if err := s.sink.Result(r); err != nil && s.sinkErr == nil {
		s.sinkErr = err
	}
}

func (s *Sim) emitSample(smp engine.Sample) {
	if err := s.sink.Sample(smp); err != nil && s.sinkErr == nil {
		s.sinkErr = err
	}
}

func (s *Sim) result() *engine.Result {
	st := s.tree.Stats()
	c := s.counters
	sum := s.stats.Summary()
	sum.DeviceEvictions = st.DeviceEvicted
	sum.Demoted = st.Demoted
	sum.HostEvictions = st.HostEvicted
	sum.WriteThroughTokens = c.WriteThroughTokens
	sum.WriteBackTokens = c.WriteBackTokens
	sum.LoadBackTokens = c.LoadBackTokens
	sum.H2DGB = c.H2DBytes / 1e9
	sum.D2HGB = c.D2HBytes / 1e9
	sum.Retractions = c.Retractions
	sum.StorageReadGB = c.StorageReadBytes / 1e9
	sum.StorageWriteGB = c.StorageWriteBytes / 1e9
	res := &engine.Result{Requests: s.results, Summary: sum, Counters: c, Timeline: s.timeline}
	if s.deps != nil {
		res.IgnoredDeps = s.deps.Ignored()
	}
	return res
}
