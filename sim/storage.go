package sim

import (
	"fmt"
	"math"

	"github.com/kvsim/kvsim/tree"
)

// storageBatchPages is the page count of one storage call (SGLang's
// batch_exists / batch_get / batch_set take 128 pages at a time).
const storageBatchPages = 128

// pageKey names a page by where it sits: the prefix id of the pages before
// it and its own contents. Two keys are equal exactly when the two pages
// end equal prefixes, so storage needs no hashing and has no collisions
// (SGLang chains SHA-256 over the same thing).
type pageKey struct {
	parent int32
	page   tree.PageID
}

// l3Entry is one interned prefix: its place in the LRU list and whether
// storage holds its last page.
type l3Entry struct {
	prev, next int32
	present    bool
}

// l3Store is the storage tier's contents: a set of page prefixes with an
// LRU order. Prefix ids are interned on write and stay fixed for the run,
// so a page dropped and written again is found again, as a hash would be.
// Memory grows with the distinct pages ever written (about 60 bytes each).
type l3Store struct {
	ids      map[pageKey]int32
	ents     []l3Entry // index = prefix id; 0 is the empty prefix and the LRU sentinel
	pages    int64     // pages present
	limited  bool
	capPages int64
	evicted  int64 // pages dropped for capacity
}

func newL3Store(capTokens int64, pageSize int) *l3Store {
	s := &l3Store{ids: map[pageKey]int32{}, ents: make([]l3Entry, 1, 1024)}
	if capTokens > 0 {
		s.limited = true
		s.capPages = capTokens / int64(pageSize)
	}
	return s
}

// intern returns the id of the prefix parent + page, creating it if new.
func (s *l3Store) intern(parent int32, page tree.PageID) int32 {
	k := pageKey{parent, page}
	if id, ok := s.ids[k]; ok {
		return id
	}
	if len(s.ents) >= math.MaxInt32 {
		panic("sim: storage tier holds more than 2^31 distinct pages")
	}
	id := int32(len(s.ents))
	s.ents = append(s.ents, l3Entry{})
	s.ids[k] = id
	return id
}

// lookup returns the id of parent + page if it was ever interned.
func (s *l3Store) lookup(parent int32, page tree.PageID) (int32, bool) {
	id, ok := s.ids[pageKey{parent, page}]
	return id, ok
}

func (s *l3Store) present(id int32) bool { return s.ents[id].present }

func (s *l3Store) unlink(id int32) {
	e := &s.ents[id]
	s.ents[e.prev].next = e.next
	s.ents[e.next].prev = e.prev
}

// pushBack makes id the most recently used.
func (s *l3Store) pushBack(id int32) {
	last := s.ents[0].prev
	s.ents[id].prev, s.ents[id].next = last, 0
	s.ents[last].next = id
	s.ents[0].prev = id
}

// write stores the page ending prefix id (or refreshes it) and drops the
// least recently used pages beyond the capacity.
func (s *l3Store) write(id int32) {
	if s.ents[id].present {
		s.unlink(id)
	} else {
		s.ents[id].present = true
		s.pages++
	}
	s.pushBack(id)
	for s.limited && s.pages > s.capPages {
		v := s.ents[0].next
		s.unlink(v)
		s.ents[v].present = false
		s.pages--
		s.evicted++
	}
}

// touch marks a present page as just used (read).
func (s *l3Store) touch(id int32) {
	if s.ents[id].present {
		s.unlink(id)
		s.pushBack(id)
	}
}

// prefetchOp is one storage prefetch in flight (SGLang's PrefetchOperation):
// the request's storage hit, read batch by batch over the storage read link
// into host tokens reserved for it.
type prefetchOp struct {
	r       *request
	from    int        // index in r.pages of the first fetched page
	ids     []int32    // prefix ids of the hit pages
	hit     int64      // hit tokens
	lanes   []int64    // reserved host tokens per lane
	pinned  *tree.Node // the node whose host copy is protected (nil: root)
	issued  Time       // operation start (the timeout counts from here)
	ready   Time       // reads may start: after the hit query
	batches int
	done    int // batches read
	queued  bool
}

// backupOp is one L2 -> L3 backup (SGLang's write_backup_storage): the
// pages of one node that storage lacks, written batch by batch; the node's
// host copy is protected until the ack.
type backupOp struct {
	node *tree.Node
	ids  []int32
	done Time
}

// storageState is the simulator's storage tier: contents, links, and the
// operations in flight.
type storageState struct {
	l3        *l3Store
	ends      map[tree.NodeID]int32 // prefix id at the end of a tree node (a node's path never changes)
	threshold int64                 // tokens
	limit     int64                 // prefetch capacity limit, tokens
	occupied  int64                 // tokens reserved by prefetches in flight
	reads     []*prefetchOp         // FIFO on the read link
	readFree  Time                  // the read link is idle from here until the head's next batch
	writeFree Time
	backups   []*backupOp // FIFO; done times never decrease
	landed    int         // backups[:landed] are written to storage
}

func newStorageState(cfg Config) *storageState {
	st := cfg.Storage
	return &storageState{
		l3:        newL3Store(st.CapacityTokens, cfg.Cache.PageSize),
		ends:      map[tree.NodeID]int32{},
		threshold: max(st.PrefetchThreshold, int64(cfg.Cache.PageSize)),
		limit:     int64(st.PrefetchCapacityRatio * float64(cfg.Cache.HostTokens*int64(cfg.Cache.CP))),
	}
}

// endID returns the prefix id of the path from the root to the end of n,
// interning what is new. n must be in the tree.
func (st *storageState) endID(n *tree.Node) int32 {
	if n.IsRoot() {
		return 0
	}
	if id, ok := st.ends[n.ID()]; ok {
		return id
	}
	id := st.endID(n.Parent())
	for _, p := range n.Pages() {
		id = st.l3.intern(id, p)
	}
	st.ends[n.ID()] = id
	return id
}

// storageTime is the time to move tokens over a storage link at bw bytes/s:
// the CP ranks each move their share in parallel.
func (s *Sim) storageTime(tokens int64, bw float64) Time {
	per := (tokens + int64(s.lanes) - 1) / int64(s.lanes)
	return Time(math.Ceil(float64(per) * s.cfg.Links.KVBytesPerToken / bw * 1e9))
}

// ---- Backup (L2 -> L3) ----

// backup queues n's pages that storage lacks on the storage write link and
// protects n's host copy until the write is acknowledged. protected says n
// already holds a protection for this backup (a held write-back).
func (s *Sim) backup(n *tree.Node, protected bool) {
	st := s.st
	if !protected {
		s.tree.ProtectHost(n)
	}
	id := st.endID(n.Parent())
	var ids []int32
	for _, p := range n.Pages() {
		id = st.l3.intern(id, p)
		if !st.l3.present(id) { // the backend skips pages it has
			ids = append(ids, id)
		}
	}
	st.ends[n.ID()] = id
	ps := int64(s.cfg.Cache.PageSize)
	op := &backupOp{node: n, ids: ids, done: max(s.now, st.writeFree)}
	for k := 0; k < len(ids); k += storageBatchPages {
		tok := int64(min(storageBatchPages, len(ids)-k)) * ps
		op.done = max(s.now, st.writeFree) + s.cfg.Storage.WriteLatency + s.storageTime(tok, s.cfg.Storage.WriteBandwidth)
		st.writeFree = op.done
		s.counters.StorageWriteTokens += tok
		s.counters.StorageWriteBytes += s.bytes(tok)
	}
	st.backups = append(st.backups, op)
}

// landBackups writes to storage every backup whose last batch has landed by
// now. Storage sees the pages from that moment; the scheduler learns of it
// at its next iteration (ackBackups).
func (s *Sim) landBackups(now Time) {
	st := s.st
	for st.landed < len(st.backups) && st.backups[st.landed].done <= now {
		for _, id := range st.backups[st.landed].ids {
			st.l3.write(id)
		}
		st.landed++
	}
	s.counters.StorageEvictedTokens = st.l3.evicted * int64(s.cfg.Cache.PageSize)
}

// ackBackups releases the host copies of landed backups, in FIFO order (the
// backup acks drained at the start of an iteration).
func (s *Sim) ackBackups() {
	st := s.st
	s.landBackups(s.now)
	for _, op := range st.backups[:st.landed] {
		s.tree.ReleaseHost(op.node)
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
func (s *Sim) storageIdleWake() (Time, bool) {
	if s.st == nil {
		return 0, false
	}
	best, ok := Time(0), false
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
	id := st.endID(m.Last)
	var ids []int32
	for _, p := range pages[from:] {
		next, ok := st.l3.lookup(id, p)
		if !ok || !st.l3.present(next) {
			break
		}
		ids = append(ids, next)
		id = next
	}
	// The hit query asks storage batch by batch until the first miss.
	calls := len(ids)/storageBatchPages + 1
	if len(ids) == cand {
		calls = (cand + storageBatchPages - 1) / storageBatchPages
	}
	hit := int64(len(ids)) * ps
	if hit < st.threshold {
		s.counters.PrefetchesRevoked++
		return
	}
	op := &prefetchOp{
		r: r, from: from, ids: ids, hit: hit, issued: s.now,
		ready:   s.now + int64(calls)*s.cfg.Storage.ReadLatency,
		batches: (len(ids) + storageBatchPages - 1) / storageBatchPages,
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
	return int64(min(storageBatchPages, len(op.ids)-k*storageBatchPages)) * int64(s.cfg.Cache.PageSize)
}

func (s *Sim) readBatchTime(op *prefetchOp, k int) Time {
	return s.cfg.Storage.ReadLatency + s.storageTime(s.batchTokens(op, k), s.cfg.Storage.ReadBandwidth)
}

// readBatch accounts for batch k of op having been read.
func (s *Sim) readBatch(op *prefetchOp, k int) {
	tok := s.batchTokens(op, k)
	s.counters.StorageReadTokens += tok
	s.counters.StorageReadBytes += s.bytes(tok)
	lo := k * storageBatchPages
	for _, id := range op.ids[lo : lo+int(tok/int64(s.cfg.Cache.PageSize))] {
		s.st.l3.touch(id)
	}
}

// advanceReads plays the read link forward to now: batches are read one
// after another, in FIFO order of their operations, none before its
// operation's hit query is done.
//
// Backups that landed by now are written to storage first. Both are played
// lazily, at the same decision points whatever else happens (timeline
// samples change nothing), so runs stay deterministic.
func (s *Sim) advanceReads(now Time) {
	st := s.st
	s.landBackups(now)
	for len(st.reads) > 0 {
		op := st.reads[0]
		for op.done < op.batches {
			end := max(st.readFree, op.ready) + s.readBatchTime(op, op.done)
			if end > now {
				return
			}
			s.readBatch(op, op.done)
			op.done++
			st.readFree = end
		}
		op.queued = false
		st.reads[0] = nil
		st.reads = st.reads[1:]
	}
}

// projectedDone is when op's last batch will be read if nothing is
// cancelled before it.
func (s *Sim) projectedDone(op *prefetchOp) Time {
	t := s.st.readFree
	for _, o := range s.st.reads {
		for k := o.done; k < o.batches; k++ {
			t = max(t, o.ready) + s.readBatchTime(o, k)
		}
		if o == op {
			return t
		}
	}
	return s.now
}

func (s *Sim) prefetchTimeout(hit int64) Time {
	st := s.cfg.Storage
	return min(st.PrefetchTimeoutMax, st.PrefetchTimeoutBase+st.PrefetchTimeoutPerKiToken*hit/1024)
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
	case "wait_complete":
		if !complete {
			return false
		}
	case "timeout":
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
func (s *Sim) prefetchWake() (Time, bool) {
	if s.st == nil || s.cfg.Storage.PrefetchPolicy == "best_effort" {
		return 0, false
	}
	s.advanceReads(s.now)
	best, ok := Time(0), false
	for _, r := range s.waiting {
		op := r.prefetch
		if op == nil {
			continue
		}
		t := s.projectedDone(op)
		if s.cfg.Storage.PrefetchPolicy == "timeout" {
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
				st.readFree = start + s.readBatchTime(op, op.done)
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
	}
	r := op.r
	release := op.lanes
	completed := min(op.done*storageBatchPages, len(op.ids))
	if insert && completed > 0 {
		ps := int64(s.cfg.Cache.PageSize)
		res := s.tree.InsertHost(r.pages[:op.from+completed], op.from, s.now)
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
	s.landBackups(math.MaxInt64)
	for _, op := range st.backups {
		s.tree.ReleaseHost(op.node)
	}
	st.backups, st.landed = nil, 0
}
