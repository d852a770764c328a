package sim

import (
	"math"
	"slices"
	"sort"

	"github.com/kvsim/kvsim/planner"
	"github.com/kvsim/kvsim/sim/engine"
	"github.com/kvsim/kvsim/sim/hw"
	"github.com/kvsim/kvsim/tree"
)

// addResult is PrefillAdder's AddReqResult.
type addResult int

const (
	addContinue addResult = iota
	addNoToken
	addOther
)

// adder is SGLang's PrefillAdder: the token budgets of one prefill batch.
type adder struct {
	s              *Sim
	remTotalOffset float64 // running reservations + what this batch admitted
	curRemOffset   float64 // what this batch admitted
	remInput       int64   // max_prefill_tokens left
	remChunk       int64   // chunked_prefill_size left (math.MaxInt64 when off)
	admitted       []*request
	loadTokens     int64
}

func (a *adder) avail() float64 {
	return float64(a.s.freeTotal() + a.s.tree.EvictableTotal())
}

func (a *adder) remTotal() float64 { return a.avail() - a.remTotalOffset }
func (a *adder) curRem() float64   { return a.avail() - a.curRemOffset }

func (a *adder) ceilPage(n int64) int64 {
	ps := int64(a.s.cfg.Cache.PageSize)
	return (n + ps - 1) / ps * ps
}

func (a *adder) update(extend, maxNew int64) {
	extend = a.ceilPage(extend)
	a.remTotalOffset += float64(extend + maxNew)
	a.curRemOffset += float64(extend)
	a.remInput -= extend
	a.remChunk -= extend
}

func (a *adder) state() addResult {
	if a.remTotal() <= 0 || a.curRem() <= 0 {
		return addNoToken
	}
	if a.remInput <= 0 || a.remChunk <= 0 {
		return addOther
	}
	return addContinue
}

func (s *Sim) clip(n int64) int64 { return min(max(n, 0), s.cfg.Scheduler.ClipMaxNewTokens) }

// match matches a request's fill against the tree, at most fill-1 tokens so
// that at least one token is computed (SGLang's max_prefix_len).
func (s *Sim) match(r *request) tree.MatchResult {
	if s.cfg.Cache.Disable {
		root := s.tree.Root()
		return tree.MatchResult{Last: root, LastDevice: root, LastHost: root}
	}
	return s.tree.MatchRuns(s.keyFor(r, r.fill()-1), int64(s.now))
}

// newPrefillBatch is SGLang's get_new_batch_prefill: it admits requests in
// queue-policy order within the token budgets and returns the batch (nil if
// none). Admitted requests have their prefix locked and their new tokens
// allocated.
func (s *Sim) newPrefillBatch() []*request {
	if (s.batchFull || len(s.waiting) == 0) && s.chunked == nil {
		return nil
	}
	allocatable := s.cfg.Scheduler.MaxRunningRequests - len(s.running)
	if allocatable <= 0 && s.chunked == nil {
		s.batchFull = true
		return nil
	}
	sc := s.cfg.Scheduler
	a := &adder{s: s, remInput: sc.MaxPrefillTokens, remChunk: math.MaxInt64}
	if sc.ChunkedPrefillSize > 0 {
		a.remChunk = sc.ChunkedPrefillSize
	}
	for _, r := range s.running {
		a.remTotalOffset += float64(s.clip(r.maxNew-r.out)) * s.ratio
	}
	if s.chunked != nil {
		s.addChunked(a, s.chunked)
	}
	s.orderQueue()
	res := addContinue
	taken := 0
	for _, r := range s.waiting {
		if len(a.admitted) >= allocatable {
			s.batchFull = true
			break
		}
		if r.prefetch != nil && !s.prefetchTerminable(r) {
			continue // held back by its storage prefetch; others may pass it
		}
		var ok bool
		res, ok = s.addOne(a, r)
		if ok {
			taken++
		}
		if res != addContinue {
			if res == addNoToken && s.tree.HasHost() && len(s.running)+len(a.admitted) > 0 {
				s.batchFull = true
			} else if res == addNoToken && !s.tree.HasHost() {
				s.batchFull = true
			}
			break
		}
	}
	// Admitted requests leave the queue; queue order is otherwise kept.
	if taken > 0 {
		keep := s.waiting[:0]
		for _, r := range s.waiting {
			if !r.inBatch() {
				keep = append(keep, r)
			}
		}
		clear(s.waiting[len(keep):])
		s.waiting = keep
	}
	// Allocate every admitted request's new tokens (SGLang's
	// prepare_for_extend); eviction happens here, after all matches.
	batch := a.admitted[:0]
	for _, r := range a.admitted {
		lanes := s.lanesOf(r.prefix, r.prefix+r.extend, s.lanesA)
		if s.alloc(r, lanes) {
			batch = append(batch, r)
			continue
		}
		// Per-lane imbalance the token budget cannot see: undo and requeue.
		s.counters.AllocFailures++
		s.unadmit(r)
	}
	s.counters.LoadBackTokens += a.loadTokens
	s.pendingLoad += a.loadTokens
	if len(batch) == 0 && s.pendingLoad > 0 {
		// Loads were queued but nothing runs: SGLang starts them anyway at
		// the next ready_to_load_host_cache; start them now.
		s.startLoads()
	}
	return batch
}

// startLoads moves all queued load-back tokens over the H2D link, merged into
// one copy, and returns when it completes.
func (s *Sim) startLoads() engine.Time {
	load := engine.Time(s.cfg.Links.H2DLatency) + s.bytesTime(s.pendingLoad, s.cfg.Links.H2DBandwidth)
	start := max(s.now+s.stall, s.h2dFree)
	done := start + load
	s.h2dFree = done
	s.counters.H2DBytes += s.bytes(s.pendingLoad)
	for i := range s.loadDone {
		if s.loadDone[i] == engine.Never {
			s.loadDone[i] = done
		}
	}
	s.pendingLoad = 0
	return done
}

// unadmit puts a request that was admitted but could not be allocated back
// at the head of the queue.
func (s *Sim) unadmit(r *request) {
	r.batchMark = false
	if r.chunkCont {
		r.chunkCont = false
		return // the chunked request keeps its state and tries next iteration
	}
	if r == s.chunked {
		s.chunked = nil
	}
	s.dropKV(r)
	if r.countedNow {
		r.admitted, r.countedNow = false, false // count its cached tokens when it is really admitted
	}
	s.waiting = slices.Insert(s.waiting, 0, r)
}

func (r *request) inBatch() bool { return r.batchMark }

// addChunked continues the chunked request first (SGLang's add_chunked_req).
func (s *Sim) addChunked(a *adder, r *request) {
	ps := int64(s.cfg.Cache.PageSize)
	rem := min(a.remChunk, int64(math.Max(a.remTotal(), 0)))
	rem = rem / ps * ps
	left := r.fill() - r.kv
	if rem <= 0 {
		return
	}
	r.prefix = r.kv
	r.extend = min(left, rem)
	r.batchMark = true
	r.chunkCont = true
	a.admitted = append(a.admitted, r)
	if r.extend == left {
		a.update(r.extend, s.clip(r.maxNew))
	} else {
		a.update(r.extend, 0)
	}
}

// addOne is SGLang's PrefillAdder.add_one_req for one queued request. It
// reports the budget state and whether the request was admitted.
func (s *Sim) addOne(a *adder, r *request) (addResult, bool) {
	m := s.match(r)
	fill := r.fill()
	prefix := m.DeviceTokens
	host := m.HostTokens
	if !s.tree.HasHost() {
		host = 0
	}
	extend := fill - prefix
	total := extend + s.clip(r.maxNew-r.out)
	realInput := a.ceilPage(extend - host)
	if float64(total) >= a.remTotal() {
		return addNoToken, false
	}
	if realInput >= a.remInput && len(a.admitted) > 0 {
		return addOther, false
	}
	// Lock the prefix while deciding, which takes it out of the evictable
	// budget.
	tmp := m.LastDevice
	if !tmp.IsRoot() {
		s.tree.Lock(tmp)
	}
	unlockTmp := func() {
		if !tmp.IsRoot() {
			s.tree.Unlock(tmp)
		}
	}
	if float64(total) >= a.remTotal() {
		unlockTmp()
		return addNoToken, false
	}
	last := m.LastDevice
	var loaded int64
	if host > 0 {
		lr := s.tree.LoadBack(m.LastHost, int64(s.now))
		s.trackWritesAfterEviction()
		switch {
		case lr.Tokens > 0:
			loaded = lr.Tokens
			prefix += loaded
			last = lr.Last
			s.loadDone = append(s.loadDone, engine.Never) // set when the batch launches
		case lr.Skipped:
			s.counters.LoadSkippedTokens += host
		case lr.Failed:
			s.counters.LoadFailedTokens += host
		}
		extend = fill - prefix
	}
	inputTokens := a.ceilPage(extend)
	if inputTokens >= a.remInput && len(a.admitted) > 0 {
		unlockTmp()
		if loaded > 0 {
			// The load stays queued and locked by the tree until its ack,
			// as in SGLang; the data is on the device for the next try.
			a.loadTokens += loaded
		}
		return addOther, false
	}
	a.loadTokens += loaded
	sc := s.cfg.Scheduler
	chunkOff := sc.ChunkedPrefillSize <= 0
	if chunkOff || inputTokens <= a.remChunk {
		r.extend = extend
		a.update(inputTokens, s.clip(r.maxNew))
	} else {
		ps := int64(s.cfg.Cache.PageSize)
		trunc := a.remChunk / ps * ps
		if trunc <= 0 || s.chunked != nil {
			unlockTmp()
			return addOther, false
		}
		r.extend = trunc
		s.chunked = r
		a.update(trunc, 0)
	}
	r.prefix = prefix
	r.protected = prefix
	if !last.IsRoot() {
		s.tree.Lock(last)
		r.last = last
	}
	unlockTmp()
	r.kv = prefix
	r.batchMark = true
	a.admitted = append(a.admitted, r)
	if !r.admitted {
		// SGLang's cached_tokens: counted once, at the first admission.
		r.admitted = true
		s.oracle.consume(r.idx) // its prefix is locked: no longer a use to come
		r.countedNow = true
		r.res.Admitted = s.now
		r.res.CachedTokens = prefix
		// Of the loaded host hit, the part this request's own prefetch
		// brought from storage counts as a storage hit.
		lo, hi := max(prefix-loaded, r.l3From), min(prefix, r.l3To)
		fromL3 := max(hi-lo, 0)
		r.res.CachedStorage = fromL3
		r.res.CachedHost = loaded - fromL3
		r.res.CachedDevice = prefix - loaded
	}
	return a.state(), true
}

// trackWritesAfterEviction accounts for write-backs done inside a
// load-back's eviction.
func (s *Sim) trackWritesAfterEviction() {
	st := s.tree.Stats()
	if d := st.WrittenBack - s.seenWrittenBack; d > 0 {
		s.applyEviction(tree.EvictResult{WrittenBack: d})
	}
	s.seenWrittenBack = st.WrittenBack
	if s.st != nil {
		s.drainWriteBacks()
	}
	s.trackWrites()
}

// orderQueue sorts the waiting queue by the scheduling policy (SGLang's
// calc_priority).
func (s *Sim) orderQueue() {
	q := s.waiting
	switch s.cfg.Scheduler.Policy {
	case LOF:
		sort.SliceStable(q, func(i, j int) bool { return q[i].maxNew > q[j].maxNew })
	case Random:
		s.rng.Shuffle(len(q), func(i, j int) { q[i], q[j] = q[j], q[i] })
	case LPM:
		if len(q) > s.cfg.Scheduler.LPMFallbackQueue || s.cfg.Cache.Disable {
			return
		}
		for _, r := range q {
			m := s.match(r)
			r.sortKey = m.DeviceTokens + m.HostTokens
		}
		sort.SliceStable(q, func(i, j int) bool { return q[i].sortKey > q[j].sortKey })
	case DFSWeight:
		if s.cfg.Cache.Disable {
			return
		}
		s.orderDFSWeight()
	}
}

// orderDFSWeight is SGLang's dfs-weight: weight(node) = waiting requests
// whose last node is in its subtree; a DFS from the root visits children by
// descending weight and emits each node's own requests after its subtree.
func (s *Sim) orderDFSWeight() {
	own := map[*tree.Node][]*request{}
	weight := map[*tree.Node]int{}
	for _, r := range s.waiting {
		n := s.match(r).Last
		own[n] = append(own[n], r)
		for x := n; x != nil; x = x.Parent() {
			weight[x]++
		}
	}
	out := s.waiting[:0:0]
	var dfs func(n *tree.Node)
	dfs = func(n *tree.Node) {
		var kids []*tree.Node
		n.Children(func(c *tree.Node) bool {
			if weight[c] > 0 {
				kids = append(kids, c)
			}
			return true
		})
		sort.SliceStable(kids, func(i, j int) bool { return weight[kids[i]] > weight[kids[j]] })
		for _, c := range kids {
			dfs(c)
		}
		out = append(out, own[n]...)
	}
	dfs(s.tree.Root())
	copy(s.waiting, out)
}

// launchPrefill starts the forward of a prefill batch.
func (s *Sim) launchPrefill(b []*request) {
	s.extends = s.extends[:0]
	for _, r := range b {
		s.extends = append(s.extends, hw.Extend{New: r.extend, Cached: r.prefix})
	}
	compute := s.cost.PrefillTime(s.extends)
	dur := compute
	if s.pendingLoad > 0 {
		// H2D load-back of all queued loads, merged into one copy and
		// overlapped layer by layer with the forward (SGLang's
		// LayerDoneCounter): the last layer waits for the whole copy.
		done := s.startLoads()
		dur = max(compute, int64(done-s.now-s.stall)+compute/int64(s.cfg.Links.Layers))
	}
	dur += int64(s.stall)
	s.counters.StallNs += int64(s.stall)
	s.stall = 0
	s.counters.PrefillBatches++
	s.counters.PrefillNs += dur
	s.batch = b
	s.decode = false
	s.busy = true
	s.schedule(s.now+engine.Time(max(dur, 1)), evForwardDone)
}

func (s *Sim) forwardDone() {
	b := s.batch
	s.batch = nil
	s.busy = false
	if s.decode {
		s.finishDecode(b)
	} else {
		s.finishPrefill(b)
	}
	s.iterate()
}

// finishPrefill processes a prefill forward's results: the first token of
// every request whose prompt is complete, and the inserts SGLang makes.
func (s *Sim) finishPrefill(b []*request) {
	for _, r := range b {
		r.batchMark = false
		r.chunkCont = false
		r.countedNow = false
		r.kv = r.prefix + r.extend
		if s.pdForwardAborted(r) {
			continue
		}
		if s.pd != nil && s.pd.onChunk != nil {
			s.pd.onChunk(r.id, s.now, r.kv, r.kv >= r.fill())
		}
		if r == s.chunked && r.kv < r.fill() {
			// An intermediate chunk: insert it (no hit counting) and keep
			// going next iteration.
			s.cacheUnfinished(r, true)
			continue
		}
		if r == s.chunked {
			s.chunked = nil
		}
		s.emitToken(r)
		if r.out >= r.maxNew {
			if !s.pdHold(r) {
				s.cacheFinished(r)
			}
			continue
		}
		s.cacheUnfinished(r, false)
		s.running = append(s.running, r)
	}
}

// emitToken records one output token at s.now.
func (s *Sim) emitToken(r *request) {
	r.out++
	s.counters.OutputTokens++
	if !r.gotFirst {
		r.gotFirst = true
		r.res.FirstToken = s.now
	} else if s.itl != nil {
		s.itl.AddITL(float64(s.now-r.lastToken) / 1e6)
	}
	r.lastToken = s.now
	if s.observe != nil && !s.noTokens {
		s.observe(engine.Event{ID: r.id, Time: s.now, Tokens: r.out, CachedTokens: r.res.CachedTokens})
	}
}

// cacheUnfinished is SGLang's cache_unfinished_req: insert the processed
// tokens (page-aligned), free duplicates, and move the lock to the new last
// node.
func (s *Sim) cacheUnfinished(r *request, chunked bool) {
	if s.cfg.Cache.Disable {
		return
	}
	ps := int64(s.cfg.Cache.PageSize)
	aligned := r.kv / ps * ps
	s.insert(r, aligned, chunked)
}

// insert puts the first aligned tokens of r into the tree and rebases r on
// it: tokens the tree adopted leave r's holdings, duplicates are freed, and
// r's lock moves to the node holding the last page.
func (s *Sim) insert(r *request, aligned int64, chunked bool) {
	if aligned <= r.protected {
		return
	}
	// r.last (when set) holds the pages up to r.protected, which this key
	// extends: the tree need not compare them again.
	var res tree.InsertResult
	if r.last != nil {
		res = s.tree.InsertFromRuns(r.last, s.keyFor(r, aligned), int64(s.now), tree.InsertOptions{Chunked: chunked})
	} else {
		res = s.tree.InsertRuns(s.keyFor(r, aligned), int64(s.now), tree.InsertOptions{Chunked: chunked})
	}
	dup := s.lanesOf(r.protected, aligned, s.lanesB)
	for o := range dup {
		r.held[o] -= res.Adopted[o]
		dup[o] -= res.Adopted[o]
	}
	s.release(r, dup)
	if r.last != nil {
		s.tree.Unlock(r.last)
		r.last = nil
	}
	if !res.Last.IsRoot() {
		s.tree.Lock(res.Last)
		r.last = res.Last
	}
	r.protected = aligned
	s.trackWrites()
}

// cacheFinished is SGLang's cache_finished_req: insert prompt + output - 1
// tokens (page-aligned), free everything else the request holds, unlock.
func (s *Sim) cacheFinished(r *request) {
	if !s.cfg.Cache.Disable {
		ps := int64(s.cfg.Cache.PageSize)
		s.insert(r, r.kv/ps*ps, false)
	} else if s.pd != nil && s.st != nil {
		s.offloadDecode(r)
	}
	s.dropKV(r)
	r.res.Finish = s.now
	r.res.OutputTokens = r.out
	s.finishBookkeeping(r)
}

// dropKV frees all KV a request holds and releases its lock, without
// inserting (retraction, failure).
func (s *Sim) dropKV(r *request) {
	copy(s.lanesB, r.held)
	s.release(r, s.lanesB)
	if r.last != nil {
		s.tree.Unlock(r.last)
		r.last = nil
	}
	r.protected = 0
	r.kv = 0
}

func (s *Sim) finishBookkeeping(r *request) {
	s.oracle.consume(r.idx) // a failed request never comes back either
	s.active--
	s.dropLive(r)
	r.pages, r.runs = nil, nil
	r.seqTokens = nil
	s.stats.Add(r.res)
	s.emitResult(r.res)
	if s.deps != nil {
		s.deps.Finish(r.id, s.now)
	}
	if s.observe != nil {
		s.observe(engine.Event{ID: r.id, Time: s.now, Tokens: r.out, CachedTokens: r.res.CachedTokens, Done: true, Result: r.res})
	}
}

// launchDecode runs one decode step for the running batch, retracting
// requests first if the memory check fails (SGLang's update_running_batch).
func (s *Sim) launchDecode() {
	ps := int64(s.cfg.Cache.PageSize)
	if !s.decodeMemOK(int64(len(s.running)) * ps) {
		s.retract()
	} else {
		s.ratio = math.Max(s.ratio-s.ratioDec, s.ratioMin)
	}
	var ctx int64
	kept := s.running[:0]
	for _, r := range s.running {
		if !s.alloc(r, s.lanesOf(r.kv, r.kv+1, s.lanesA)) {
			s.counters.Retractions++
			s.retractOne(r)
			continue
		}
		ctx += r.kv + 1
		kept = append(kept, r)
	}
	clear(s.running[len(kept):])
	s.running = kept
	if len(s.running) == 0 {
		s.iterate()
		return
	}
	dur := s.cost.DecodeTime(len(s.running), ctx) + int64(s.stall)
	s.counters.StallNs += int64(s.stall)
	s.stall = 0
	s.counters.DecodeSteps++
	s.counters.DecodeNs += dur
	s.batch = s.running
	s.decode = true
	s.busy = true
	s.schedule(s.now+engine.Time(max(dur, 1)), evForwardDone)
}

func (s *Sim) decodeMemOK(need int64) bool {
	return s.freeTotal()+s.tree.EvictableTotal() >= need
}

// retract is SGLang's retract_decode: take requests out of the running batch
// (fewest output tokens first, then longest prompt) until the rest have
// RetractDecodeSteps tokens of headroom each, then reset new_token_ratio.
func (s *Sim) retract() {
	ps := int64(s.cfg.Cache.PageSize)
	steps := s.cfg.Scheduler.RetractDecodeSteps
	order := slices.Clone(s.running)
	sort.SliceStable(order, func(i, j int) bool {
		if order[i].out != order[j].out {
			return order[i].out > order[j].out
		}
		return order[i].input < order[j].input
	})
	for first := true; len(order) > 1 && (first || !s.decodeMemOK(int64(len(order))*steps*ps)); first = false {
		r := order[len(order)-1]
		order = order[:len(order)-1]
		s.counters.Retractions++
		r.retractMark = true
		s.retractOne(r)
	}
	kept := s.running[:0]
	for _, r := range s.running {
		if !r.retractMark {
			kept = append(kept, r)
		}
		r.retractMark = false
	}
	clear(s.running[len(kept):])
	s.running = kept
	var decoded, maxNew int64
	for _, r := range s.running {
		decoded += r.out
		maxNew += r.maxNew
	}
	s.ratio = math.Min(1, float64(decoded+steps*int64(len(s.running)))/float64(maxNew+1))
	s.batchFull = false
}

// retractOne frees a running request's KV without caching it and puts it
// back in the queue; it will re-prefill its prompt and output so far.
func (s *Sim) retractOne(r *request) {
	s.dropKV(r)
	r.res.Retractions++
	s.waiting = append(s.waiting, r)
}

func (s *Sim) finishDecode(b []*request) {
	kept := s.running[:0]
	for _, r := range s.running {
		r.kv++
		s.emitToken(r)
		if r.out >= r.maxNew {
			s.cacheFinished(r)
			continue
		}
		kept = append(kept, r)
	}
	if len(kept) < len(s.running) {
		s.batchFull = false
	}
	clear(s.running[len(kept):])
	s.running = kept
}

// snapshotForPlanner lists the unlocked device nodes for the owner-lane
// planner, parents first. Locked nodes can never be victims and pin their
// ancestors, so a node whose parent is locked is given the root as parent:
// its unlock bonus is 0 either way.
func (s *Sim) snapshotForPlanner() []planner.Node {
	nodes := s.plannerNodes[:0]
	if s.nodeByID == nil {
		s.nodeByID = map[tree.NodeID]*tree.Node{}
	}
	clear(s.nodeByID)
	var visit func(n *tree.Node, parent int64)
	visit = func(n *tree.Node, parent int64) {
		n.Children(func(c *tree.Node) bool {
			if !c.OnDevice() {
				return true
			}
			p := parent
			if c.Locked() {
				p = -1 // not listed
			} else {
				seg, acc := s.tree.SLRUKey(c)
				nodes = append(nodes, planner.Node{
					ID: int64(c.ID()), Parent: max(parent, 0), Counts: c.Lanes(),
					Device: true, SLRU: planner.Priority{Segment: seg, LastAccess: acc},
				})
				s.nodeByID[c.ID()] = c
				p = int64(c.ID())
			}
			visit(c, p)
			return true
		})
	}
	visit(s.tree.Root(), 0)
	s.plannerNodes = nodes
	return nodes
}
