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
	if n := len(s.timeline); n > 0 && s.timeline[n-1].Time == smp.Time {
		s.timeline[n-1] = smp // a later look at the same instant
		return
	}
	s.timeline = append(s.timeline, smp)
}

func (s *Sim) result() *engine.Result {
	st := s.tree.Stats()
	c := s.counters
	sum := engine.Summarize(s.results, s.itls)
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
		res.IgnoredDeps = s.deps.ignored
	}
	return res
}
