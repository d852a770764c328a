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
// SGLang's token_usage. Other policies read no snapshot and are not
// polled.
type loadPoll struct {
	every engine.Time // -1: no polling
	usage bool        // token usage, not requests
	next  engine.Time // the first instant of the next interval
}

// newLoadPoll returns the load poll of a router of cfg.
func newLoadPoll(cfg router.Config) loadPoll {
	p := loadPoll{every: -1}
	switch cfg.Policy {
	case router.PowerOfTwo:
		p.every = engine.Time(cfg.PowerOfTwo.LoadPollInterval)
	case router.CacheAware, router.CacheAwareOracle, router.KVAware:
		p.every, p.usage = engine.Time(cfg.PowerOfTwo.LoadPollInterval), true
	}
	return p
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
		if !p.usage {
			rt.SetLoad(j, float64(e.Active()))
		} else if u, ok := e.(tokenUsager); ok {
			rt.SetLoad(j, u.TokenUsage())
		}
	}
	if p.every > 0 {
		p.next = (now/p.every + 1) * p.every
	}
}
