package sim

import (
	"errors"
	"fmt"

	"github.com/kvsim/kvsim/sim/engine"
	"github.com/kvsim/kvsim/tree"
)

// KVTier is the cache tier a [KVEvent] concerns.
type KVTier uint8

// The tiers of a KVEvent.
const (
	// KVDevice is the GPU memory (SGLang's device pool).
	KVDevice KVTier = 1 + iota
	// KVHost is the host memory (HiCache's L2).
	KVHost
)

// KVEvent is one change of what a replica holds, as SGLang's KV events
// (BlockStored, BlockRemoved) publish it to Dynamo's KV indexer or llm-d's
// precise-prefix scorer: at At, the pages of radix-tree node Node were
// stored on (Stored) or removed from (!Stored) the tier Tier. Node's
// ancestors give the pages' prefix ([KVEvent.AppendPath]). Node is the
// simulator's: read it only during the sink's call. Its [tree.Node.ID]
// and its last page's prefix stay the same for its whole life (a split
// gives the upper part a new node), so a consumer may remember it.
type KVEvent struct {
	At     engine.Time
	Tier   KVTier
	Stored bool
	Node   *tree.Node
}

// AppendPath appends the event's full prefix to dst, root first (its own
// pages last: the final ev.Node.NumPages()), and returns it.
func (ev KVEvent) AppendPath(dst []tree.PageID) []tree.PageID {
	var nodes []*tree.Node
	for a := ev.Node; !a.IsRoot(); a = a.Parent() {
		nodes = append(nodes, a)
	}
	for i := len(nodes) - 1; i >= 0; i-- {
		dst = append(dst, nodes[i].Pages()...)
	}
	return dst
}

// SetKVEventSink makes the simulation report every change of its device
// and host contents to f, in the order they happen (nil: none, the
// default, which costs one nil test per change). A node split reports
// nothing: the pages held do not change. f must not call back into the
// simulation.
func (o *Online) SetKVEventSink(f func(KVEvent)) {
	if f == nil {
		o.s.tree.ObserveResidency(nil)
		return
	}
	s := o.s
	o.s.tree.ObserveResidency(func(n *tree.Node, device, on bool) {
		tier := KVHost
		if device {
			tier = KVDevice
		}
		f(KVEvent{At: s.now, Tier: tier, Stored: on, Node: n})
	})
}

// SharePager makes p the simulation's page-id space, so that the pages of
// several replicas (and of a router's index over them) compare by id. It
// must be called before the first Submit, with a pager of the
// simulation's page size; a replica of a shared L3 store already uses the
// store's pager, which must then be p ([SharedL3.SharePager]).
func (o *Online) SharePager(p *tree.Pager) error {
	s := o.s
	switch {
	case s.nextIdx > 0 || s.pending != nil:
		return errors.New("sim: SharePager after the first Submit")
	case p.PageSize() != s.cfg.Cache.PageSize:
		return fmt.Errorf("sim: page size %d, the shared pager's is %d", s.cfg.Cache.PageSize, p.PageSize())
	case s.st != nil && s.st.shared != nil && s.pager != p:
		return errors.New("sim: a replica of a shared L3 store keeps the store's page ids; share the pager with the store first")
	}
	s.pager = p
	return nil
}

// SharePager makes p the store's page-id space (and its replicas', which
// take the store's pager when they attach). It must be called before any
// replica attaches, with a pager of the store's page size.
func (l *SharedL3) SharePager(p *tree.Pager) error {
	switch {
	case len(l.stats) > 0:
		return errors.New("sim: SharePager after a replica attached to the shared L3 store")
	case p.PageSize() != l.pageSize:
		return fmt.Errorf("sim: the shared L3 store's page size is %d, the pager's %d", l.pageSize, p.PageSize())
	}
	l.pager = p
	return nil
}

// Resident walks pages (the simulation's page ids, root first) down the
// radix tree without changing it (no split, no access) and returns the
// leading pages on the device, then the following ones on the host only:
// what [tree.Tree.Match] would find, in pages, for checks and indexes.
func (o *Online) Resident(pages []tree.PageID) (device, host int) {
	n, d := o.s.tree.Root(), 0
	for d < len(pages) {
		var next *tree.Node
		n.Children(func(c *tree.Node) bool {
			if c.FirstPage() == pages[d] {
				next = c
				return false
			}
			return true
		})
		if next == nil {
			break
		}
		np := next.NumPages()
		m := tree.CommonPrefix(next.Pages(), pages[d:])
		switch {
		case next.OnDevice() && host == 0:
			device += m
		case next.OnHost():
			host += m
		default:
			return device, host
		}
		d += m
		if m < np {
			break
		}
		n = next
	}
	return device, host
}

// StorageHit returns how many of pages (the simulation's page ids, root
// first) from page from on its storage tier (L3, its own or the shared
// store) holds, up to the first absent one, as a prefetch's lookup finds
// them but without touching the store's LRU order; 0 without a storage
// tier. A shared store answers with the backups landed so far.
func (o *Online) StorageHit(pages []tree.PageID, from int) int {
	st := o.s.st
	if st == nil || from >= len(pages) {
		return 0
	}
	return st.l3.hit(newPathKey(pages), from)
}
