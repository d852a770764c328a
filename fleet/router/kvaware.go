package router

// kvAware scores each available replica by what it really holds of the
// prompt against its load, in the style of llm-d's precise-prefix profile
// (fleet-spec 4.2): three scorers, each in [0, 1], weighted and summed, and
// the highest total wins (ties to the lowest index; llm-d's
// max-score-picker has no defined order).
//
//   - prefix: Device*kv_device_weight + Host*kv_host_weight +
//     Storage*kv_storage_weight from the [CacheOracle], min-max normalised
//     over the candidates (all equal: 1 for every one, as llm-d);
//   - load: the router's own in-flight count, min-max normalised and
//     inverted so the least loaded scores 1 (llm-d's queue scorer);
//   - usage: 1 - the KV usage of the last load snapshot, clamped to [0, 1]
//     (llm-d's kv-cache-utilization scorer); 0 for a replica without one.
func (r *Router) kvAware(req *Request) Decision {
	c := r.cfg.KVAware
	n := len(r.cand)
	if cap(r.scores) < 2*n {
		r.scores = make([]float64, 2*n)
	}
	prefix, total := r.scores[:n], r.scores[n:2*n]
	r.cached = r.cached[:0]
	var pLo, pHi float64
	lLo, lHi := r.Load(r.cand[0]), r.Load(r.cand[0])
	for k, i := range r.cand {
		h := r.oracle.CachedPrefix(i, req)
		r.cached = append(r.cached, h.Device+h.Host+h.Storage)
		prefix[k] = float64(h.Device)*c.DeviceWeight + float64(h.Host)*c.HostWeight + float64(h.Storage)*c.StorageWeight
		if k == 0 || prefix[k] < pLo {
			pLo = prefix[k]
		}
		if k == 0 || prefix[k] > pHi {
			pHi = prefix[k]
		}
		lLo, lHi = min(lLo, r.Load(i)), max(lHi, r.Load(i))
	}
	best := 0
	for k, i := range r.cand {
		p, l := 1.0, 1.0
		if pHi > pLo {
			p = (prefix[k] - pLo) / (pHi - pLo)
		}
		if lHi > lLo {
			l = float64(lHi-r.Load(i)) / float64(lHi-lLo)
		}
		u := 0.0
		if r.snapOK[i] {
			u = min(1, max(0, 1-r.snap[i]))
		}
		total[k] = c.PrefixWeight*p + c.LoadWeight*l + c.UsageWeight*u
		if total[k] > total[best] {
			best = k
		}
	}
	d := Decision{Replica: r.cand[best], Reason: KVMiss, Matched: r.cached[best]}
	if prefix[best] > 0 {
		d.Reason = KVHit
	}
	return d
}
