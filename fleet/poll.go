package fleet

import (
	"github.com/kvsim/kvsim/fleet/router"
	"github.com/kvsim/kvsim/sim/engine"
)

// loadPoll hands a router its replicas' load snapshots
// ([router.Router.SetLoad]) every router.load_poll_interval of virtual
// time, at the first routing decision of each interval (0: at every
// decision), as SMG's load monitor refreshes them; between polls a
// snapshot does not move. power_of_two's snapshot is the requests in a
// replica's server; cache_aware's (its KV-usage triggers), kv_aware's (its
// usage score) and cache_aware_oracle's is the replica's KV token usage,
// SGLang's token_usage; least_load's is a whole load report (usage, the
// uncached tokens waiting, and the generation rate since the previous
// poll). Other policies read no snapshot and are not polled.
type loadPoll struct {
	every  engine.Time // -1: no polling
	usage  bool        // token usage, not requests
	report bool        // least_load's load reports
	next   engine.Time // the first instant of the next interval
	last   engine.Time // the previous poll (report)
	gen    []int64     // each replica's output tokens at the previous poll (report)
	rate   []float64   // each replica's generation rate as last computed (report)
}

// newLoadPoll returns the load poll of a router of cfg.
func newLoadPoll(cfg router.Config) loadPoll {
	p := loadPoll{every: -1}
	switch cfg.Policy {
	case router.PowerOfTwo:
		p.every = engine.Time(cfg.PowerOfTwo.LoadPollInterval)
	case router.CacheAware, router.CacheAwareOracle, router.KVAware:
		p.every, p.usage = engine.Time(cfg.PowerOfTwo.LoadPollInterval), true
	case router.LeastLoad:
		p.every, p.report = engine.Time(cfg.PowerOfTwo.LoadPollInterval), true
	}
	return p
}

// loadReporter is a replica engine that reports what least_load reads
// (sim.Online): its token usage, the uncached prompt tokens waiting, and
// the output tokens generated so far (the poll turns them into a rate). A
// replica that cannot (llama-server) gets no report: least_load scores it
// by its requests in flight.
type loadReporter interface {
	LoadReport() (usage float64, queued, generated int64)
}

// tokenUsager is a replica engine that reports its KV token usage to a
// load poll, as SGLang's scheduler does (sim.Online). A replica that
// cannot (llama-server) gets no usage snapshot: cache_aware's usage
// triggers and kv_aware's usage score leave it out.
type tokenUsager interface{ TokenUsage() float64 }

// maybe polls, if one is due at now, the replicas behind rt: replica j of
// rt is engines[pool[j]], or engines[j] when pool is nil.
func (p *loadPoll) maybe(now engine.Time, rt *router.Router, engines []engine.Engine, pool []int) {
	if p.every < 0 || p.every > 0 && now < p.next {
		return
	}
	n := len(engines)
	if pool != nil {
		n = len(pool)
	}
	for j := range n {
		e := engines[j]
		if pool != nil {
			e = engines[pool[j]]
		}
		switch {
		case p.report:
			p.sendReport(now, rt, j, e)
		case !p.usage:
			rt.SetLoad(j, float64(e.Active()))
		default:
			if u, ok := e.(tokenUsager); ok {
				rt.SetLoad(j, u.TokenUsage())
			}
		}
	}
	p.last = now
	if p.every > 0 {
		p.next = (now/p.every + 1) * p.every
	}
}

// sendReport hands rt replica j's load report, its generation rate being
// the output tokens since the previous poll over the time since (0 at the
// first poll: least_load's default). A second poll at the same instant
// (load_poll_interval 0) keeps the rate the first one computed.
func (p *loadPoll) sendReport(now engine.Time, rt *router.Router, j int, e engine.Engine) {
	lr, ok := e.(loadReporter)
	if !ok {
		return
	}
	if p.gen == nil {
		p.gen, p.rate = make([]int64, rt.Replicas()), make([]float64, rt.Replicas())
	}
	usage, queued, gen := lr.LoadReport()
	if now > p.last {
		p.rate[j] = float64(gen-p.gen[j]) / (float64(now-p.last) / 1e9)
		p.gen[j] = gen
	}
	rt.SetLoadReport(j, router.LoadReport{Usage: usage, QueuedTokens: queued, GenThroughput: p.rate[j]})
}
