package sim

import (
	"cmp"
	"errors"
	"fmt"
	"slices"

	"github.com/kvsim/kvsim/sim/engine"
	"github.com/kvsim/kvsim/tree"
)

// SharedL3 is one HiCache storage tier (L3) shared by several simulated
// replicas of a fleet (storage.shared, fleet-spec 3 and 5.20-5.21): every
// replica attached to it reads and writes the same store, so a prefix one
// replica backed up is a storage hit for another.
//
// # Page keys
//
// SGLang keys a page by its chained hash (the hash of the previous page's
// key and the page's tokens): the key depends only on the token prefix.
// kvsim's store already identifies a page by its exact path (the pages
// before it and its own), so sharing needs only one page-id space: the
// replicas attached to a SharedL3 intern their pages with its one
// [tree.Pager] instead of one each. Ids depend on the order in which the
// replicas meet new pages, which the fleet's event loop fixes, and only
// their equality matters.
//
// # Visibility and concurrent writers
//
// A backup's pages are written to the store when its last batch lands
// (write time = host write + storage write at the writer's write
// bandwidth), and only then can any replica read them. Landings are
// played lazily, before any replica reads or refreshes the store at time
// t, every replica's backups landed by t are written, in (landing time,
// queue order). A replica queueing a backup skips the pages that are
// already stored and those another replica's backup in flight is writing
// (Mooncake's put of a key being written fails): a page is written once.
//
// # Capacity and eviction
//
// One capacity (storage.capacity_tokens) and eviction (storage.eviction
// and its Mooncake settings), which every attached replica must share,
// and one per-page LRU order over every replica's reads and writes, as
// the private store's. In Mooncake mode a replica's lookup leases the
// pages it finds, for every replica's writes. The evictions, rounds and
// refusals a landing causes count against its writer.
//
// A SharedL3 is single-threaded, like the replicas that use it.
type SharedL3 struct {
	l3        *l3Store
	pager     *tree.Pager
	pageSize  int
	capTokens int64
	eviction  StorageConfig // the eviction settings alone (evictionOf)
	pending   []*l3Landing  // backups in flight, any order
	minDone   engine.Time   // the earliest pending landing (engine.Never: none)
	seq       uint64
	stats     []L3Stats // per attached replica, in attach order
	observe   func(L3Event)
	landing   []*l3Landing // scratch
	bw        *l3Bandwidth // the aggregate bandwidth cap (nil: none)
}

// l3Landing is one queued backup's write to the shared store.
type l3Landing struct {
	done   engine.Time
	seq    uint64
	writer int
	path   pathKey
	spans  []span
}

// L3Stats is one replica's use of a shared L3, in pages.
type L3Stats struct {
	// CrossRead is the pages the replica read that another replica wrote.
	CrossRead int64 `json:"l3_cross_replica_pages_read"`
	// Evicted is the pages dropped for capacity when the replica's backups
	// landed.
	Evicted int64 `json:"l3_pages_evicted"`
	// Rounds is the Mooncake eviction rounds (storage.eviction =
	// "mooncake") the replica's landings ran that dropped pages.
	Rounds int64 `json:"l3_eviction_rounds,omitempty"`
	// Refused is the pages of the replica's backups the store refused:
	// full, with every page under lease (Mooncake mode).
	Refused int64 `json:"l3_pages_refused,omitempty"`
}

// L3EventKind says what an [L3Event] records.
type L3EventKind int

// Kinds of L3Event.
const (
	// L3Land is a backup's pages written to the store.
	L3Land L3EventKind = 1 + iota
	// L3Hit is a prefetch's lookup finding pages in the store.
	L3Hit
	// L3Evict is pages dropped from the store to make room, while replica
	// Replica's backup landed.
	L3Evict
)

// L3Event is one write, lookup hit or eviction of a shared store, for
// checks: at At, replica Replica wrote (L3Land), found stored (L3Hit) or
// caused the eviction of (L3Evict) pages Path[From:] of the path Path,
// root first.
type L3Event struct {
	Kind    L3EventKind
	At      engine.Time
	Replica int
	Path    []tree.PageID
	From    int
}

// NewSharedL3 returns an empty shared store of pageSize-token pages
// holding at most capTokens tokens (0: unlimited), with exact LRU
// eviction.
func NewSharedL3(pageSize int, capTokens int64) *SharedL3 {
	return newSharedL3(pageSize, StorageConfig{CapacityTokens: capTokens, Eviction: StorageLRU})
}

// newSharedL3 returns an empty shared store of pageSize-token pages with
// st's capacity and eviction (st with defaults).
func newSharedL3(pageSize int, st StorageConfig) *SharedL3 {
	return &SharedL3{
		l3: newL3StoreFor(st, pageSize), pager: tree.NewPager(pageSize),
		pageSize: pageSize, capTokens: st.CapacityTokens, eviction: evictionOf(st), minDone: engine.Never,
		bw: newL3Bandwidth(st),
	}
}

// evictionOf is st's eviction settings (st with defaults), to compare a
// replica's with its shared store's.
func evictionOf(st StorageConfig) StorageConfig {
	return StorageConfig{
		Eviction: st.Eviction, HighWatermark: st.HighWatermark, EvictionRatio: st.EvictionRatio, LeaseTTL: st.LeaseTTL,
		AggregateBandwidth: st.AggregateBandwidth,
	}
}

// Observe makes the store report every landing, lookup hit and eviction
// to f (nil: none). It costs a copy of each path, for tests.
func (l *SharedL3) Observe(f func(L3Event)) {
	l.observe = f
	l.l3.onDrop = nil
	if f != nil {
		l.l3.onDrop = func(path []tree.PageID, from int) {
			f(L3Event{Kind: L3Evict, At: l.l3.at, Replica: int(l.l3.writer), Path: path, From: from})
		}
	}
}

// Stats returns replica i's use of the store (i in attach order).
func (l *SharedL3) Stats(i int) L3Stats { return l.stats[i] }

// Bandwidth returns replica i's transfers slowed by the store's aggregate
// bandwidth cap (zero without a cap).
func (l *SharedL3) Bandwidth(i int) L3BandwidthStats {
	if l.bw == nil {
		return L3BandwidthStats{}
	}
	return l.bw.stats[i]
}

// Replicas returns the number of replicas attached.
func (l *SharedL3) Replicas() int { return len(l.stats) }

// StoredTokens returns the tokens the store holds.
func (l *SharedL3) StoredTokens() int64 { return l.l3.pages * int64(l.pageSize) }

// HasStorage reports whether f's servers have a storage tier (L3) that
// takes part in their runs.
func (f *Factory) HasStorage() bool { return f.Config.WithDefaults().storageOn() }

// NewSharedL3 returns an empty shared store for f's configuration: its
// page size and storage capacity.
func (f *Factory) NewSharedL3() *SharedL3 {
	c := f.Config.WithDefaults()
	return newSharedL3(c.Cache.PageSize, c.Storage)
}

// NewWithL3 implements the fleet's shared-storage hook: an [Online]
// simulation of f's configuration whose storage tier is l3, attached as
// its next replica. The configuration's storage tier must be on, with l3's
// page size and capacity.
func (f *Factory) NewWithL3(l3 *SharedL3) (engine.Engine, error) {
	o, err := NewOnline(f.Config, f.Cost)
	if err != nil {
		return nil, err
	}
	if err := o.s.attachL3(l3); err != nil {
		return nil, err
	}
	return o, nil
}

// attachL3 makes l3 the simulator's storage tier and page-id space, before
// it has seen any request.
func (s *Sim) attachL3(l3 *SharedL3) error {
	switch {
	case s.st == nil:
		return errors.New("sim: a shared storage tier needs storage.enabled and a host tier")
	case s.cfg.Cache.PageSize != l3.pageSize:
		return fmt.Errorf("sim: page size %d, the shared storage tier's is %d", s.cfg.Cache.PageSize, l3.pageSize)
	case s.cfg.Storage.CapacityTokens != l3.capTokens:
		return fmt.Errorf("sim: storage.capacity_tokens %d, the shared storage tier's is %d", s.cfg.Storage.CapacityTokens, l3.capTokens)
	case evictionOf(s.cfg.Storage) != l3.eviction:
		return fmt.Errorf("sim: storage eviction %+v, the shared storage tier's is %+v", evictionOf(s.cfg.Storage), l3.eviction)
	case s.nextIdx != 0 || s.pending != nil:
		panic("sim: attachL3 after the run started")
	}
	s.pager = l3.pager
	s.st.l3 = l3.l3
	s.st.shared = l3
	s.st.replica = len(l3.stats)
	l3.stats = append(l3.stats, L3Stats{})
	s.st.bw = l3.bw
	if l3.bw != nil {
		s.st.bwSlot = l3.bw.attach()
	}
	return nil
}

// skipPending removes from spans (positions of path, sorted, disjoint)
// the pages another replica's backup in flight is writing, and returns
// the rest.
func (l *SharedL3) skipPending(writer int, path pathKey, spans []span) []span {
	for _, p := range l.pending {
		if p.writer == writer || len(spans) == 0 {
			continue
		}
		// Equal pages at equal positions are the same page only under an
		// equal prefix: path and p.path agree on their first c pages.
		c := path.commonPrefix(p.path, min(path.len(), p.path.len()))
		spans = subtractSpans(spans, p.spans, c)
	}
	return spans
}

// commonPrefix returns how many leading pages k and o share, up to end.
func (k pathKey) commonPrefix(o pathKey, end int) int {
	d := 0
	for d < end {
		r := o.run(d, end)
		m := k.match(r, d, end)
		d += m
		if m < len(r) {
			break
		}
	}
	return d
}

// subtractSpans returns a without the positions of b below limit; both
// sorted and disjoint. It may reuse a's array.
func subtractSpans(a, b []span, limit int) []span {
	out := a[:0:0]
	for _, x := range a {
		lo := x.lo
		for _, y := range b {
			y.hi = min(y.hi, limit)
			if y.hi <= lo || y.lo >= x.hi {
				continue
			}
			if y.lo > lo {
				out = append(out, span{lo, y.lo})
			}
			lo = max(lo, y.hi)
		}
		if lo < x.hi {
			out = append(out, span{lo, x.hi})
		}
	}
	return out
}

// queue records writer's backup of spans of path, landing at done.
func (l *SharedL3) queue(writer int, done engine.Time, path pathKey, spans []span) {
	l.pending = append(l.pending, &l3Landing{done: done, seq: l.seq, writer: writer, path: path, spans: spans})
	l.seq++
	l.minDone = min(l.minDone, done)
}

// land writes every pending backup that has landed by now, in (landing
// time, queue order).
func (l *SharedL3) land(now engine.Time) {
	if now < l.minDone {
		return
	}
	due, rest := l.landing[:0], l.pending[:0]
	l.minDone = engine.Never
	for _, p := range l.pending {
		if p.done <= now {
			due = append(due, p)
		} else {
			rest = append(rest, p)
			l.minDone = min(l.minDone, p.done)
		}
	}
	clear(l.pending[len(rest):])
	l.pending = rest
	slices.SortFunc(due, func(a, b *l3Landing) int {
		return cmp.Or(cmp.Compare(a.done, b.done), cmp.Compare(a.seq, b.seq))
	})
	for _, p := range due {
		evicted, rounds, refused := l.l3.evicted, l.l3.rounds, l.l3.refused
		l.l3.writer = int32(p.writer)
		l.l3.write(p.path, p.spans, p.done)
		st := &l.stats[p.writer]
		st.Evicted += l.l3.evicted - evicted
		st.Rounds += l.l3.rounds - rounds
		st.Refused += l.l3.refused - refused
		if l.observe != nil {
			for _, sp := range p.spans {
				l.observe(L3Event{Kind: L3Land, At: p.done, Replica: p.writer, Path: p.path.pages(sp.hi), From: sp.lo})
			}
		}
	}
	clear(due)
	l.landing = due[:0]
}

// pages returns a copy of the key's first n pages.
func (k pathKey) pages(n int) []tree.PageID {
	out := make([]tree.PageID, 0, n)
	for d := 0; d < n; {
		r := k.run(d, n)
		out = append(out, r...)
		d += len(r)
	}
	return out
}

// hitFound reports a lookup hit of pages [from, from+n) of path to the
// observer.
func (l *SharedL3) hitFound(now engine.Time, reader int, path []tree.PageID, from, n int) {
	if l.observe != nil && n > 0 {
		l.observe(L3Event{Kind: L3Hit, At: now, Replica: reader, Path: slices.Clone(path[:from+n]), From: from})
	}
}
