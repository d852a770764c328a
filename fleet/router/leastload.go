package router

// LoadReport is a replica's load as SGLang's scheduler reports it to SMG's
// load monitor (/v1/loads, one DP rank), what least_load scores.
type LoadReport struct {
	// Usage is token_usage, the share of the KV pool in use, in [0, 1].
	Usage float64
	// QueuedTokens is num_waiting_uncached_tokens: the prompt tokens of
	// waiting requests (and the rest of a chunked prefill) not cached.
	QueuedTokens int64
	// GenThroughput is gen_throughput, output tokens per second; 0 when
	// the replica reports none (least_load then assumes
	// least_load_default_throughput).
	GenThroughput float64
}

// SetLoadReport hands least_load replica i's polled report. It stays until
// the next call, and resets the tokens routed to i since the previous one
// (the report already counts them), as SMG's update_loads.
func (r *Router) SetLoadReport(i int, rep LoadReport) {
	r.reports[i] = rep
	r.snapOK[i] = true
	r.sincePoll[i] = 0
}

// leastLoad is SMG's least_load (model_gateway policies/least_load.rs):
// the replica with the least expected wait,
//
//	(queued tokens + tokens routed there since its report) / throughput
//	  + least_load_kv_pressure_weight * k / (1 - k),
//
// k its KV usage clamped to [0, 0.999], throughput its generation rate or
// least_load_default_throughput. A replica without a report while others
// have one is scored by its requests in flight times
// least_load_mean_prefill_tokens over the mean reported throughput; with no
// report at all (before the first poll) the fewest in flight wins. Ties go
// to the lowest index. The chosen replica is credited with the request's
// prompt tokens until its next report.
func (r *Router) leastLoad(req *Request) Decision {
	c := r.cfg.LeastLoad
	nominal, n, reported := 0.0, 0, false
	for _, i := range r.cand {
		if r.snapOK[i] {
			reported = true
			if tp := r.reports[i].GenThroughput; tp > 0 {
				nominal += tp
				n++
			}
		}
	}
	if n > 0 {
		nominal /= float64(n)
	} else {
		nominal = c.DefaultThroughput
	}
	score := func(i int) float64 {
		switch {
		case r.snapOK[i]:
			rep := r.reports[i]
			tp := rep.GenThroughput
			if !(tp > 0) {
				tp = c.DefaultThroughput
			}
			k := min(max(rep.Usage, 0), 0.999)
			return float64(rep.QueuedTokens+r.sincePoll[i])/tp + c.KVPressureWeight*k/(1-k)
		case reported:
			return float64(r.inflight[i]) * float64(c.MeanPrefillTokens) / nominal
		}
		return float64(r.inflight[i])
	}
	best, bestScore := r.cand[0], score(r.cand[0])
	for _, i := range r.cand[1:] {
		if s := score(i); s < bestScore {
			best, bestScore = i, s
		}
	}
	tokens := int64(req.Len)
	if tokens <= 0 {
		tokens = int64(c.MeanPrefillTokens)
	}
	r.sincePoll[best] += tokens
	return Decision{Replica: best, Reason: LeastWait}
}
