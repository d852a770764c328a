package fleet

import (
	"fmt"
	"slices"

	"github.com/kvsim/kvsim/fleet/router"
	"github.com/kvsim/kvsim/sim/engine"
)

// pdRun is the state of one disaggregated [Fleet.Run] beside the common
// [run]: the requests in flight, by id, and what the engines' callbacks
// report.
type pdRun struct {
	*run
	pd       *pdFleet
	reqs     map[string]*pdReq
	detail   []PDRequest       // per completed or failed request, as run.requests (none with drop)
	landed   []*xfer           // scratch
	orphans  map[string]*pdReq // ended on decode, an abort pending on prefill
	to       timeouts
	err      error // the first error of a callback
	xfers    int64
	bytes    float64
	pages    int64
	skipped  int64
	transfer []float64 // ms per completed request
	// parts sums the TTFT parts of the completed requests: transfer,
	// bootstrap, prefill queue, prefill compute, transfer tail, first step.
	parts struct {
		n   float64
		sum [6]engine.Time
	}
}

// A disaggregated fleet runs through the same [Online] loop as a regular
// one, with pdRun's steps at an instant: the routers' tree evictions, then
// every arrival routed to a (prefill, decode) pair and submitted to its
// decode replica (which preallocates, fleet-spec 2.1 step 3), then the
// links' transfers landing now (a request's last one makes its KV ready on
// the decode replica), then the timeouts due now (pdtimeout.go), then the
// replicas in index order. A decode
// replica's preallocation submits the request to its prefill replica at
// once; a prefill forward's end queues the chunk's pages on the prefill
// replica's link. A request ends with its decode replica's completion (or
// failure): both routers' in-flight counts drop then.

// instant runs a disaggregated fleet's steps at the instant p.now.
func (p *pdRun) instant() error {
	if err := p.routeArrivals(); err != nil {
		return err
	}
	if err := p.land(); err != nil {
		return err
	}
	if err := p.expire(); err != nil {
		return err
	}
	return p.runReplicas()
}

// routeArrivals routes every request arriving now to a pair and submits
// it to the decode replica.
func (p *pdRun) routeArrivals() error {
	pools := [2]*router.Router{p.pd.router.Prefill, p.pd.router.Decode}
	for p.pending.Len() > 0 && engine.Time(p.pending.Peek().Arrival) == p.now {
		rec, _ := p.pending.Next()
		if _, dup := p.reqs[rec.ID]; dup {
			return fmt.Errorf("fleet: request %q arrives while a request of the same id is in flight", rec.ID)
		}
		for k, kv := range p.pd.kv {
			if kv != nil {
				kv.advance(p.now) // kv_aware's view: the events kv_signal_delay old
			}
			p.pd.polls[k].maybe(p.now, pools[k], p.f.engines, p.pd.global[k])
		}
		req := routeReq(&rec)
		pair, err := p.pd.router.Route(&req)
		if err != nil {
			return fmt.Errorf("fleet: request %q: %w", rec.ID, err)
		}
		if p.start == engine.Never {
			p.start = p.now
		}
		q := &pdReq{rec: rec, pair: pair, p: p.pd.global[0][pair.Prefill.Replica], d: p.pd.global[1][pair.Decode.Replica]}
		p.reqs[rec.ID] = q
		p.startBootstrap(q)
		p.open[q.d]++
		if err := p.f.engines[q.d].Submit(rec); err != nil {
			return fmt.Errorf("fleet: replica %d: %w", q.d, err)
		}
		for _, i := range []int{q.p, q.d} {
			p.maxIn[i] = max(p.maxIn[i], p.pd.inFlight(i))
		}
	}
	return nil
}

// land takes the transfers landing now, link by link; a request's last
// one makes its KV ready on its decode replica.
func (p *pdRun) land() error {
	for _, l := range p.pd.links {
		if l == nil {
			continue
		}
		p.landed = l.advance(p.now, p.landed[:0])
		for _, x := range p.landed {
			if !x.last {
				continue
			}
			q := x.req
			q.landed, q.ready = x.lands, true
			if err := p.f.engines[q.d].(decodeServer).KVReady(q.rec.ID, p.now); err != nil {
				return fmt.Errorf("fleet: replica %d: %w", q.d, err)
			}
			if err := p.f.engines[q.p].(prefillServer).KVSent(q.rec.ID, p.now); err != nil {
				return fmt.Errorf("fleet: replica %d: %w", q.p, err)
			}
		}
	}
	return nil
}

// runReplicas runs the replicas with an event due now, in index order.
func (p *pdRun) runReplicas() error {
	for i, e := range p.f.engines {
		if at, has := e.Next(); !has || at > p.now {
			continue
		}
		evs, err := e.RunUntil(p.now)
		if err == nil {
			err = p.err
		}
		if err != nil {
			return fmt.Errorf("fleet: replica %d: %w", i, err)
		}
		for _, ev := range evs {
			var err error
			if ev.Done {
				p.open[i]--
			}
			if p.pd.roles[i] == Prefill {
				err = p.prefillEvent(ev)
			} else {
				err = p.decodeEvent(i, ev)
			}
			if err != nil {
				return err
			}
		}
	}
	return nil
}

// prefillEvent handles a prefill replica's report: its completion gives
// the prefill admission; its failure aborts the request on the decode
// replica. Its tokens are not the client's.
func (p *pdRun) prefillEvent(ev engine.Event) error {
	if !ev.Done {
		return nil
	}
	q := p.reqs[ev.ID]
	if q == nil {
		if q = p.orphans[ev.ID]; q == nil {
			panic(fmt.Sprintf("fleet: prefill completion of unknown request %q", ev.ID))
		}
		delete(p.orphans, ev.ID)
	}
	q.pOpen = false
	q.prefillRes = ev.Result
	q.pAdmit = ev.Result.Admitted
	if why := ev.Result.Failed; why != "" && !q.failing {
		q.failing = true
		if err := p.f.engines[q.d].(decodeServer).Abort(ev.ID, p.now, "prefill: "+why); err != nil {
			return fmt.Errorf("fleet: replica %d: %w", q.d, err)
		}
	}
	return nil
}

// decodeEvent handles a decode replica's tokens and the request's end.
func (p *pdRun) decodeEvent(i int, ev engine.Event) error {
	q := p.reqs[ev.ID]
	if q == nil {
		panic(fmt.Sprintf("fleet: decode event of unknown request %q", ev.ID))
	}
	if !ev.Done {
		if !q.gotFirst {
			q.gotFirst, q.first = true, ev.Time
		}
		p.token(i, ev)
		return nil
	}
	delete(p.reqs, ev.ID)
	q.ended = true
	if q.pOpen {
		p.orphans[ev.ID] = q // its prefill leg's abort reports later
	}
	res, d := ev.Result, PDRequest{Prefill: q.p, Decode: q.d}
	if res.Failed == "" {
		pr := q.prefillRes
		res.Admitted = q.pAdmit
		res.CachedTokens, res.CachedDevice, res.CachedHost = pr.CachedTokens, pr.CachedDevice, pr.CachedHost
		res.CachedStorage, res.StorageTokens = pr.CachedStorage, pr.StorageTokens
		d.Bootstrap, d.PrefillQueue = q.prealloc-engine.Time(q.rec.Arrival), q.pAdmit-q.prealloc
		d.PrefillCompute, d.TransferTail, d.FirstStep = q.pDone-q.pAdmit, q.landed-q.pDone, q.first-q.landed
		d.Transfer, d.TransferBytes, d.TransferPages = q.landed-q.firstSent, q.bytes, q.pages
		d.DecodeCached = q.skipped * int64(p.pd.pageSize[q.p])
		p.transfer = append(p.transfer, float64(d.Transfer)/1e6)
		p.parts.n++
		for k, v := range []engine.Time{d.Transfer, d.Bootstrap, d.PrefillQueue, d.PrefillCompute, d.TransferTail, d.FirstStep} {
			p.parts.sum[k] += v
		}
	} else {
		d.FailedAt = ev.Time
	}
	if !p.drop {
		p.detail = append(p.detail, d)
	}
	ev.Result = res
	p.finished(i, ev)
	if err := p.pd.router.Finish(q.pair); err != nil {
		return fmt.Errorf("fleet: request %q: %w", ev.ID, err)
	}
	return nil
}

// preallocated is a decode replica's report that request id has its KV
// allocated, at, with cached prompt tokens already there: the request
// goes to its prefill replica, which will send the pages after those
// (SGLang's start_send_idx = decode_prefix_len).
func (p *pdRun) preallocated(i int, id string, at engine.Time, cached int64) {
	q := p.reqs[id]
	if q == nil || q.d != i {
		panic(fmt.Sprintf("fleet: replica %d preallocated unknown request %q", i, id))
	}
	q.prealloc, q.preallocd, q.pOpen = at, true, true
	p.startWaiting(q)
	p.open[q.p]++
	q.skipped = cached / int64(p.pd.pageSize[q.p])
	q.sentPages = q.skipped
	p.skipped += q.skipped
	rec := q.rec
	rec.Arrival = int64(at)
	if err := p.f.engines[q.p].Submit(rec); err != nil && p.err == nil {
		p.err = fmt.Errorf("replica %d: %w", q.p, err)
	}
}

// chunk is a prefill replica's report that a forward of request id ended
// at, with computed prompt tokens' KV on its device: the pages completed
// since the last send (all the rest after the last forward, with the
// first token) go on the replica's link.
func (p *pdRun) chunk(i int, id string, at engine.Time, computed int64, last bool) {
	q := p.reqs[id]
	if q == nil || q.p != i {
		panic(fmt.Sprintf("fleet: replica %d prefilled unknown request %q", i, id))
	}
	ps := int64(p.pd.pageSize[i])
	upto := computed / ps
	if last {
		upto = (int64(q.rec.InputLen) + ps - 1) / ps
	}
	n := max(upto-q.sentPages, 0)
	if !q.sending {
		q.sending, q.firstSent = true, at
	}
	q.sentPages += n
	x := &xfer{req: q, pages: n, bytes: float64(n*ps) * p.pd.kvBytes[i], last: last}
	q.pages += n
	q.bytes += x.bytes
	p.xfers++
	p.pages += n
	p.bytes += x.bytes
	if last {
		q.pDone = at
	}
	p.pd.links[i].add(at, p.pd.pool[q.d]%p.pd.cfg.TransferQueues, x)
}

// result builds a disaggregated run's result.
func (p *pdRun) result() (*Result, error) {
	pd := p.pd
	cfg := pd.cfg
	res := &Result{
		Policy:   fmt.Sprintf("prefill %v, decode %v", cfg.Prefill.Policy, cfg.Decode.Policy),
		Requests: p.requests, Replica: p.replica, PDRequests: p.detail,
	}
	for i, e := range p.f.engines {
		er, err := e.Finish()
		if err != nil {
			return nil, fmt.Errorf("fleet: replica %d: %w", i, err)
		}
		rr := replicaResult(pd.pool[i], p.f.replicas[i].Group, pd.routerOf(i), er, p.area[i], p.maxIn[i], p.now-p.start)
		rr.Index, rr.Role = i, pd.roles[i].String()
		res.Replicas = append(res.Replicas, rr)
	}
	res.Summary = summarize(p.stats, res.Replicas)
	res.Imbalance = imbalance(res.Replicas)
	res.L3, res.SharedL3 = p.f.l3.l3Results(res.Replicas, p.f.replicas, p.l3Hit)
	res.Decisions = pdDecisions(pd.router)
	res.PD = p.summary()
	return res, nil
}

// summary is the transfer summary and the mean TTFT parts.
func (p *pdRun) summary() *PDResult {
	cfg := p.pd.cfg
	s := &PDResult{
		PrefillPolicy: cfg.Prefill.Policy.String(), DecodePolicy: cfg.Decode.Policy.String(),
		Transfers: p.xfers, TransferBytes: p.bytes, TransferPages: p.pages, SkippedPages: p.skipped,
		BootstrapTimeouts: p.to.bootN, WaitingTimeouts: p.to.waitN,
	}
	sorted := slices.Clone(p.transfer)
	slices.Sort(sorted)
	s.TransferP50Ms = engine.Percentile(sorted, 50)
	s.TransferP90Ms = engine.Percentile(sorted, 90)
	s.TransferP99Ms = engine.Percentile(sorted, 99)
	if n, sum := p.parts.n, p.parts.sum; n > 0 {
		ms := func(k int) float64 { return float64(sum[k]) / n / 1e6 }
		s.TransferMeanMs, s.BootstrapMs, s.PrefillQueueMs = ms(0), ms(1), ms(2)
		s.PrefillComputeMs, s.TransferTailMs, s.FirstStepMs = ms(3), ms(4), ms(5)
	}
	return s
}
