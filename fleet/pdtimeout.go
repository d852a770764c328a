package fleet

import (
	"fmt"

	"github.com/kvsim/kvsim/sim/engine"
)

// Disaggregation's two timeouts (fleet-spec 2.3, 5.19), with SGLang's
// clocks: the bootstrap timeout runs from the request's arrival (the
// router dispatches to both replicas at once and the prefill replica's
// KV sender starts bootstrapping) until its decode replica preallocates
// it (the destination indices reach the sender); the waiting timeout
// runs from that preallocation (the decode side's receiver init) until
// its last page lands. A clock that reaches its timeout (elapsed >=
// timeout, as SGLang's poll tests it) aborts the request at that
// instant, after the transfers landing then and before the replicas
// run: a landing at the deadline stops the clock in time, a
// preallocation at the deadline does not. The abort frees both sides:
// the decode replica's preallocation, the prefill replica's queue slot
// or prefill in progress (its KV and tree lock), and the request's
// transfers still on the link; the request fails with the timeout as its
// reason, the routers' in-flight counts drop when its decode replica
// reports it, and the fleet counts it (PDResult).

// timeouts is a disaggregated run's two timeout clocks: the requests
// whose clock runs, in the order their clocks started (so of their
// deadlines); a request whose clock stopped stays until it reaches the
// head.
type timeouts struct {
	boot, wait []*pdReq
	// counts of requests aborted by each
	bootN, waitN int64
}

// bootstrapDeadline and waitingDeadline are when q's clocks run out.
func (p *pdRun) bootstrapDeadline(q *pdReq) engine.Time {
	return engine.Time(q.rec.Arrival) + engine.Time(p.pd.cfg.BootstrapTimeout)
}

func (p *pdRun) waitingDeadline(q *pdReq) engine.Time {
	return q.prealloc + engine.Time(p.pd.cfg.WaitingTimeout)
}

// startBootstrap and startWaiting start q's clocks (when the timeout is
// set).
func (p *pdRun) startBootstrap(q *pdReq) {
	if p.pd.cfg.BootstrapTimeout > 0 {
		p.to.boot = append(p.to.boot, q)
	}
}

func (p *pdRun) startWaiting(q *pdReq) {
	if p.pd.cfg.WaitingTimeout > 0 {
		p.to.wait = append(p.to.wait, q)
	}
}

// nextTimeout is the earliest deadline of a running clock, dropping the
// stopped clocks ahead of it.
func (p *pdRun) nextTimeout() (engine.Time, bool) {
	t, ok := engine.Never, false
	p.to.boot = dropStopped(p.to.boot, func(q *pdReq) bool { return q.preallocd })
	if len(p.to.boot) > 0 {
		t, ok = p.bootstrapDeadline(p.to.boot[0]), true
	}
	p.to.wait = dropStopped(p.to.wait, func(q *pdReq) bool { return q.ready })
	if len(p.to.wait) > 0 {
		t, ok = min(t, p.waitingDeadline(p.to.wait[0])), true
	}
	return t, ok
}

// dropStopped drops the head requests whose clock stopped (or that
// failed or ended).
func dropStopped(qs []*pdReq, stopped func(*pdReq) bool) []*pdReq {
	for len(qs) > 0 && (stopped(qs[0]) || qs[0].failing || qs[0].ended) {
		qs[0] = nil
		qs = qs[1:]
	}
	return qs
}

// expire aborts every request whose clock has run out at p.now.
func (p *pdRun) expire() error {
	for {
		at, ok := p.nextTimeout()
		if !ok || at > p.now {
			return nil
		}
		var q *pdReq
		var why string
		if len(p.to.boot) > 0 && p.bootstrapDeadline(p.to.boot[0]) <= p.now {
			q, p.to.boot = p.to.boot[0], p.to.boot[1:]
			p.to.bootN++
			why = fmt.Sprintf("disaggregation: bootstrap timeout: not preallocated on decode replica %d within %v", q.d, p.pd.cfg.BootstrapTimeout)
		} else {
			q, p.to.wait = p.to.wait[0], p.to.wait[1:]
			p.to.waitN++
			why = fmt.Sprintf("disaggregation: waiting timeout: KV not on decode replica %d within %v of its preallocation", q.d, p.pd.cfg.WaitingTimeout)
		}
		if err := p.abort(q, why); err != nil {
			return err
		}
	}
}

// abort fails q on both sides at p.now: on its decode replica, on its
// prefill replica if it is there, and its transfers on the link.
func (p *pdRun) abort(q *pdReq, why string) error {
	q.failing = true
	if err := p.f.engines[q.d].(decodeServer).Abort(q.rec.ID, p.now, why); err != nil {
		return fmt.Errorf("fleet: replica %d: %w", q.d, err)
	}
	if q.pOpen {
		if err := p.f.engines[q.p].(prefillServer).Abort(q.rec.ID, p.now, why); err != nil {
			return fmt.Errorf("fleet: replica %d: %w", q.p, err)
		}
	}
	if q.sending {
		p.pd.links[q.p].cancel(p.now, q)
	}
	return nil
}
