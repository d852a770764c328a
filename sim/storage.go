package sim

import (
	"fmt"
	"math"
	"slices"

	"github.com/kvsim/kvsim/sim/engine"
	"github.com/kvsim/kvsim/tree"
)

// storageBatchPages is the page count of one storage call (SGLang's
// batch_exists / batch_get / batch_set take 128 pages at a time).
const storageBatchPages = 128

// prefetchOp is one storage prefetch in flight (SGLang's PrefetchOperation):
// the request's storage hit, read batch by batch over the storage read link
// into host tokens reserved for it.
type prefetchOp struct {
	r        *request
	key      pathKey     // the sequence's pages up to the end of the hit
	from     int         // position in key of the first fetched page
	hitPages int         // hit pages: key positions [from, from+hitPages)
	hit      int64       // hit tokens
	lanes    []int64     // reserved host tokens per lane
	pinned   *tree.Node  // the node whose host copy is protected (nil: root)
	issued   engine.Time // operation start (the timeout counts from here)
	ready    engine.Time // reads may start: after the hit query
	batches  int
	done     int // batches read
	queued   bool
	capEnd   engine.Time // with an aggregate cap: batch done's reserved end (0: not reserved yet)
}

// backupOp is one L2 -> L3 backup (SGLang's write_backup_storage): the
// pages of one node that storage lacked when it was queued, written batch by
// batch; the node's host copy is protected until the ack.
type backupOp struct {
	node  *tree.Node
	path  pathKey // the pages of the node and its ancestors, root first, as queued
	spans []span  // the positions on the path to write
	done  engine.Time
}

// storageState is the simulator's storage tier: contents, links, and the
// operations in flight.
type storageState struct {
	l3        *l3Store
	threshold int64         // tokens
	limit     int64         // prefetch capacity limit, tokens
	occupied  int64         // tokens reserved by prefetches in flight
	reads     []*prefetchOp // FIFO on the read link
	readFree  engine.Time   // the read link is idle from here until the head's next batch
	writeFree engine.Time
	backups   []*backupOp  // FIFO; done times never decrease
	landed    int          // backups[:landed] are written to storage
	shared    *SharedL3    // non-nil: l3 is this fleet-wide store's
	replica   int          // the simulator's index among shared's replicas
	bw        *l3Bandwidth // the store's aggregate bandwidth cap (nil: none)
	bwSlot    int          // the simulator's slot in bw

	// Batches read one after another by the same prefetch are stamped in
	// storage's LRU order as one read: the same order, one walk.
	touchOp          *prefetchOp
	touchLo, touchHi int // pages [touchLo, touchHi) of touchOp.key
}

func newStorageState(cfg Config) *storageState {
	st := cfg.Storage
	s := &storageState{
		l3:        newL3StoreFor(st, cfg.Cache.PageSize),
		threshold: max(st.PrefetchThreshold, int64(cfg.Cache.PageSize)),
		limit:     int64(st.PrefetchCapacityRatio * float64(cfg.Cache.HostTokens*int64(cfg.Cache.CP))),
		bw:        newL3Bandwidth(st),
	}
	if s.bw != nil {
		s.bwSlot = s.bw.attach()
	}
	return s
}

// pathOf returns the path from the root to the end of n. Its runs are the
// tree's own keys, whose contents never change (see [tree.Node.Pages]), so
// the storage trie may keep them.
func pathOf(n *tree.Node) pathKey {
	var runs [][]tree.PageID
	for a := n; !a.IsRoot(); a = a.Parent() {
		runs = append(runs, a.Pages())
	}
	slices.Reverse(runs)
	return newPathKey(runs...)
}

// readPages records that pages [lo, hi) of op's sequence were just read;
// storage sees it at the next flushReads.
func (st *storageState) readPages(op *prefetchOp, lo, hi int) {
	if st.touchOp == op && st.touchHi == lo {
		st.touchHi = hi
		return
	}
	st.flushReads()
	st.touchOp, st.touchLo, st.touchHi = op, lo, hi
}

// flushReads stamps the pending read in storage's LRU order.
func (st *storageState) flushReads() {
	if st.touchOp != nil {
		if st.shared != nil {
			st.l3.reader, st.l3.crossRead = int32(st.replica), 0
		}
		st.l3.touch(st.touchOp.key, st.touchLo, st.touchHi)
		if st.shared != nil {
			st.shared.stats[st.replica].CrossRead += st.l3.crossRead
		}
		st.touchOp = nil
	}
}

// storageTime is the time to move tokens over a storage link at bw bytes/s:
// the CP ranks each move their share in parallel.
func (s *Sim) storageTime(tokens int64, bw float64) engine.Time {
	return engine.Time(math.Ceil(s.storageBytes(tokens) / bw * 1e9))
}

// storageBytes is the bytes each CP rank moves for tokens.
func (s *Sim) storageBytes(tokens int64) float64 {
	per := (tokens + int64(s.lanes) - 1) / int64(s.lanes)
	return float64(per) * s.cfg.Links.KVBytesPerToken
}

// storageEnd is when a move of tokens over a storage link of bw bytes/s
// per rank, starting at start, ends: start + storageTime, unless the
// store's aggregate cap slows it (the move is then reserved on the cap).
func (s *Sim) storageEnd(start engine.Time, tokens int64, bw float64) engine.Time {
	if s.st.bw == nil {
		return start + s.storageTime(tokens, bw)
	}
	return s.st.bw.reserveFor(s.st.bwSlot, start, s.storageBytes(tokens), bw, s.lanes)
}

// ---- Backup (L2 -> L3) ----

// backup queues n's pages that storage lacks on the storage write link and
// protects n's host copy until the write is acknowledged. protected says n
// already holds a protection for this backup (a held write-back).
func (s *Sim) backup(n *tree.Node, protected bool) {
	if !protected {
		s.tree.ProtectHost(n)
	}
	ps := int64(s.cfg.Cache.PageSize)
	lo := int(n.Depth(int(ps)) / ps)
	s.writeStorage(n, pathOf(n), lo, lo+len(n.Pages()))
}

// writeStorage queues pages [lo, hi) of path on the storage write link,
// but those storage has or another replica is writing, as one backup of
// node n (nil: none, no host copy to release at its ack).
func (s *Sim) writeStorage(n *tree.Node, path pathKey, lo, hi int) {
	st := s.st
	ps := int64(s.cfg.Cache.PageSize)
	// The backend skips the pages it has.
	spans := st.l3.absent(path, lo, hi, nil)
	if st.shared != nil {
		// ... and those another replica is writing.
		spans = st.shared.skipPending(st.replica, path, spans)
	}
	pages := 0
	for _, sp := range spans {
		pages += sp.hi - sp.lo
	}
	op := &backupOp{node: n, done: max(s.now, st.writeFree)}
	if pages > 0 {
		op.path, op.spans = path, spans
	}
	for k := 0; k < pages; k += storageBatchPages {
		tok := int64(min(storageBatchPages, pages-k)) * ps
		op.done = s.storageEnd(max(s.now, st.writeFree)+engine.Time(s.cfg.Storage.WriteLatency), tok, s.cfg.Storage.WriteBandwidth)
		st.writeFree = op.done
		s.counters.StorageWriteTokens += tok
		s.counters.StorageWriteBytes += s.bytes(tok)
	}
	st.backups = append(st.backups, op)
	if st.shared != nil && pages > 0 {
		st.shared.queue(st.replica, op.done, path, spans)
	}
}

// landBackups writes to storage every backup whose last batch has landed by
// now. Storage sees the pages from that moment; the scheduler learns of it
// at its next iteration (ackBackups).
func (s *Sim) landBackups(now engine.Time) {
	st := s.st
	if st.shared != nil {
		// Every replica's backups land in the shared store, in time order.
		st.shared.land(now)
		for st.landed < len(st.backups) && st.backups[st.landed].done <= now {
			st.landed++
		}
		l3 := st.shared.stats[st.replica]
		s.setEvictionCounters(l3.Evicted, l3.Rounds, l3.Refused)
		return
	}
	for st.landed < len(st.backups) && st.backups[st.landed].done <= now {
		if op := st.backups[st.landed]; len(op.spans) > 0 {
			st.l3.write(op.path, op.spans, op.done)
		}
		st.landed++
	}
	s.setEvictionCounters(st.l3.evicted, st.l3.rounds, st.l3.refused)
}

// setEvictionCounters sets the storage eviction counters from the store's
// (or, shared, this replica's) pages evicted, eviction rounds and pages
// refused.
func (s *Sim) setEvictionCounters(evicted, rounds, refused int64) {
	ps := int64(s.cfg.Cache.PageSize)
	s.counters.StorageEvictedTokens = evicted * ps
	s.counters.StorageEvictionRounds = rounds
	s.counters.StorageRefusedTokens = refused * ps
}

// ackBackups releases the host copies of landed backups, in FIFO order (the
// backup acks drained at the start of an iteration).
func (s *Sim) ackBackups() {
	st := s.st
	s.landBackups(s.now)
	for _, op := range st.backups[:st.landed] {
		if op.node != nil {
			s.tree.ReleaseHost(op.node)
		}
	}
	clear(st.backups[:st.landed])
	st.backups = st.backups[st.landed:]
	st.landed = 0
}

// drainWriteBacks queues a backup for every write-back copy the tree made
// since the last call. Each already holds its host protection.
func (s *Sim) drainWriteBacks() {
	for _, n := range s.tree.TakeWriteBacks() {
		if n.Parent() == nil {
			// Dropped with a parent whose own write-back found no room:
			// nothing left to back up.
			s.tree.ReleaseHost(n)
			continue
		}
		s.backup(n, true)
	}
}

// storageIdleWake says when an idle scheduler with a storage tier must run
// again: SGLang's scheduler keeps polling while idle, so a write-through
// that lands is acknowledged (and backed up to storage) at once, and a
// landed backup releases its host copy. Without storage an idle server
// acknowledges at its next event, which changes nothing it decides.
func (s *Sim) storageIdleWake() (engine.Time, bool) {
	if s.st == nil {
		return 0, false
	}
	best, ok := engine.Time(0), false
	if len(s.writeDone) > 0 {
		best, ok = s.writeDone[0], true
	}
	if len(s.st.backups) > 0 && (!ok || s.st.backups[0].done < best) {
		best, ok = s.st.backups[0].done, true
	}
	return max(best, s.now), ok
}

// ---- Prefetch (L3 -> L2) ----

// prefetch is SGLang's _prefetch_kvcache for a request entering the queue:
// match it; if the deepest matched node is backed up (or is the root), look
// up storage for the pages after the device + host hit, and if the hit is
// at least the threshold and prefetches are not rate limited, reserve host
// tokens for it (all or nothing) and start reading it batch by batch.
func (s *Sim) prefetch(r *request) {
	st := s.st
	m := s.match(r)
	if !m.Last.IsRoot() && !m.Last.OnHost() {
		return
	}
	ps := int64(s.cfg.Cache.PageSize)
	from := int((m.DeviceTokens + m.HostTokens) / ps)
	pages := s.pagesFor(r, r.input)
	cand := len(pages) - from
	if int64(cand)*ps < st.threshold {
		return
	}
	if st.occupied >= st.limit {
		s.counters.PrefetchesRateLimited++
		return
	}
	s.advanceReads(s.now)
	key := newPathKey(pages)
	hitPages := st.l3.hit(key, from)
	st.l3.lease(key, from, from+hitPages, s.now) // Mooncake mode: the existence query's lease
	if st.shared != nil {
		st.shared.hitFound(s.now, st.replica, pages, from, hitPages)
	}
	// The hit query asks storage batch by batch until the first miss.
	calls := hitPages/storageBatchPages + 1
	if hitPages == cand {
		calls = (cand + storageBatchPages - 1) / storageBatchPages
	}
	hit := int64(hitPages) * ps
	if hit < st.threshold {
		s.counters.PrefetchesRevoked++
		return
	}
	op := &prefetchOp{
		r: r, key: newPathKey(pages[:from+hitPages]), from: from, hitPages: hitPages, hit: hit, issued: s.now,
		ready:   s.now + engine.Time(int64(calls)*s.cfg.Storage.ReadLatency),
		batches: (hitPages + storageBatchPages - 1) / storageBatchPages,
		lanes:   s.tree.LaneTokens(int64(from)*ps, int64(from)*ps+hit, make([]int64, s.lanes)),
	}
	// Protect the prefix's host copy first, so that the reservation's host
	// eviction cannot take it.
	if !m.Last.IsRoot() {
		s.tree.ProtectHost(m.Last)
		op.pinned = m.Last
	}
	if !s.tree.ReserveHost(op.lanes) {
		if op.pinned != nil {
			s.tree.ReleaseHost(op.pinned)
		}
		s.counters.PrefetchesNoHost++
		return
	}
	st.occupied += hit
	op.queued = true
	st.reads = append(st.reads, op)
	r.prefetch = op
	s.counters.PrefetchesIssued++
}

func (s *Sim) batchTokens(op *prefetchOp, k int) int64 {
	return int64(min(storageBatchPages, op.hitPages-k*storageBatchPages)) * int64(s.cfg.Cache.PageSize)
}

func (s *Sim) readBatchTime(op *prefetchOp, k int) engine.Time {
	return engine.Time(s.cfg.Storage.ReadLatency) + s.storageTime(s.batchTokens(op, k), s.cfg.Storage.ReadBandwidth)
}

// batchEnd is when batch k of op, started at start, ends: with an
// aggregate cap, the reserved end of the batch being read, else (and as
// an estimate for a batch not reserved yet) start + readBatchTime.
func (s *Sim) batchEnd(op *prefetchOp, k int, start engine.Time) engine.Time {
	if k == op.done && op.capEnd != 0 {
		return op.capEnd
	}
	return start + s.readBatchTime(op, k)
}

// reserveBatch reserves op's next batch, started at start, on the store's
// aggregate cap once it has started before now (a started batch is read
// to its end: endPrefetch), and returns its end (batchEnd).
func (s *Sim) reserveBatch(op *prefetchOp, start, now engine.Time) engine.Time {
	if s.st.bw != nil && op.capEnd == 0 && start < now {
		lat := engine.Time(s.cfg.Storage.ReadLatency)
		op.capEnd = s.storageEnd(start+lat, s.batchTokens(op, op.done), s.cfg.Storage.ReadBandwidth)
	}
	return s.batchEnd(op, op.done, start)
}

// readBatch accounts for batch k of op having been read.
func (s *Sim) readBatch(op *prefetchOp, k int) {
	tok := s.batchTokens(op, k)
	s.counters.StorageReadTokens += tok
	s.counters.StorageReadBytes += s.bytes(tok)
	lo := op.from + k*storageBatchPages
	s.st.readPages(op, lo, lo+int(tok/int64(s.cfg.Cache.PageSize)))
}

// advanceReads plays the read link forward to now: batches are read one
// after another, in FIFO order of their operations, none before its
// operation's hit query is done.
//
// Backups that landed by now are written to storage first. Both are played
// lazily, at the same decision points whatever else happens (timeline
// samples change nothing), so runs stay deterministic.
func (s *Sim) advanceReads(now engine.Time) {
	s.landBackups(now)
	s.playReads(now)
	s.st.flushReads()
	s.setBandwidthFloor(now)
}

// setBandwidthFloor tells the aggregate cap (if any) the earliest start of
// any later reservation of this simulator at now: now (backups start at
// now or later; so do the reads of later prefetches) or the first batch
// of a queued prefetch, which starts at the read link's free time or
// after its hit query.
func (s *Sim) setBandwidthFloor(now engine.Time) {
	st := s.st
	if st.bw == nil {
		return
	}
	floor := now
	for _, op := range st.reads {
		floor = min(floor, max(st.readFree, op.ready))
	}
	st.bw.setFloor(st.bwSlot, floor)
}

func (s *Sim) playReads(now engine.Time) {
	st := s.st
	for len(st.reads) > 0 {
		op := st.reads[0]
		for op.done < op.batches {
			end := s.reserveBatch(op, max(st.readFree, op.ready), now)
			if end > now {
				return
			}
			s.readBatch(op, op.done)
			op.done++
			op.capEnd = 0
			st.readFree = end
		}
		op.queued = false
		st.reads[0] = nil
		st.reads = st.reads[1:]
	}
}

// projectedDone is when op's last batch will be read if nothing is
// cancelled before it.
func (s *Sim) projectedDone(op *prefetchOp) engine.Time {
	t := s.st.readFree
	for _, o := range s.st.reads {
		for k := o.done; k < o.batches; k++ {
			t = s.batchEnd(o, k, max(t, o.ready))
		}
		if o == op {
			return t
		}
	}
	return s.now
}

func (s *Sim) prefetchTimeout(hit int64) engine.Time {
	st := s.cfg.Storage
	return engine.Time(min(st.PrefetchTimeoutMax, st.PrefetchTimeoutBase+st.PrefetchTimeoutPerKiToken*hit/1024))
}

// prefetchTerminable is SGLang's check_prefetch_progress for a request the
// admission loop is about to consider: under the policy, either terminate
// its prefetch now (returning true; the completed part is in the tree as
// host-only nodes) or keep it running and skip the request (false).
func (s *Sim) prefetchTerminable(r *request) bool {
	op := r.prefetch
	s.advanceReads(s.now)
	complete := op.done == op.batches
	switch s.cfg.Storage.PrefetchPolicy {
	case WaitComplete:
		if !complete {
			return false
		}
	case PrefetchTimeout:
		if !complete && s.now-op.issued <= s.prefetchTimeout(op.hit) {
			return false
		}
	}
	if !complete {
		s.counters.PrefetchesTerminatedEarly++
	}
	s.endPrefetch(op, true)
	return true
}

// prefetchWake is the earliest time after now at which a request held back
// by its prefetch becomes admissible (its fetch completes or its timeout
// passes). Requests admissible already are not waiting for a wake.
func (s *Sim) prefetchWake() (engine.Time, bool) {
	if s.st == nil || s.cfg.Storage.PrefetchPolicy == BestEffort {
		return 0, false
	}
	s.advanceReads(s.now)
	best, ok := engine.Time(0), false
	for _, r := range s.waiting {
		op := r.prefetch
		if op == nil {
			continue
		}
		t := s.projectedDone(op)
		if s.cfg.Storage.PrefetchPolicy == PrefetchTimeout {
			t = min(t, op.issued+s.prefetchTimeout(op.hit)+1)
		}
		if t > s.now && (!ok || t < best) {
			best, ok = t, true
		}
	}
	return best, ok
}

// endPrefetch terminates op at s.now. A batch being read finishes (the link
// stays busy) but is not used. With insert, the completed pages go into the
// tree as host-only KV (InsertHost); the rest of the reservation is
// released, and so are the host protection and the rate-limit share.
func (s *Sim) endPrefetch(op *prefetchOp, insert bool) {
	st := s.st
	s.advanceReads(s.now)
	if op.queued {
		if st.reads[0] == op && op.done < op.batches {
			if start := max(st.readFree, op.ready); start < s.now {
				st.readFree = s.batchEnd(op, op.done, start)
				tok := s.batchTokens(op, op.done)
				s.counters.StorageReadTokens += tok
				s.counters.StorageReadBytes += s.bytes(tok)
			}
		}
		for i, o := range st.reads {
			if o == op {
				copy(st.reads[i:], st.reads[i+1:])
				st.reads[len(st.reads)-1] = nil
				st.reads = st.reads[:len(st.reads)-1]
				break
			}
		}
		op.queued = false
		s.setBandwidthFloor(s.now)
	}
	r := op.r
	release := op.lanes
	completed := min(op.done*storageBatchPages, op.hitPages)
	if insert && completed > 0 {
		ps := int64(s.cfg.Cache.PageSize)
		res := s.tree.InsertHost(r.pages[:op.from+completed], op.from, int64(s.now))
		for o := range release {
			release[o] -= res.Lanes[o]
		}
		r.l3From, r.l3To = res.Matched, res.Matched+res.Inserted
		r.res.StorageTokens = res.Inserted
		s.counters.StoragePrefetchedTokens += res.Inserted
		if res.Missing || res.Blocked {
			s.counters.StorageInsertDroppedTokens += int64(completed) * ps
		}
	}
	s.tree.ReleaseHostReservation(release)
	if op.pinned != nil {
		s.tree.ReleaseHost(op.pinned)
	}
	st.occupied -= op.hit
	r.prefetch = nil
}

// finishStorage ends a run: backups still in flight land (they complete
// after the last request), and every host protection is released.
func (s *Sim) finishStorage() {
	st := s.st
	if len(st.reads) > 0 || st.occupied != 0 {
		panic(fmt.Sprintf("sim: run ended with %d prefetches reading, %d tokens reserved", len(st.reads), st.occupied))
	}
	s.drainWriteBacks()
	s.landBackups(engine.Never)
	for _, op := range st.backups {
		s.tree.ReleaseHost(op.node)
	}
	st.backups, st.landed = nil, 0
}
