package tree

import (
	"errors"
	"fmt"

	"github.com/kvsim/kvsim/internal/invariants"
)

// check runs Check after every mutation in -tags invariants builds.
func (t *Tree) check() {
	if invariants.Enabled {
		if err := t.Check(); err != nil {
			panic("tree: invariant broken: " + err.Error())
		}
	}
}

// Check verifies every structural invariant of the tree in O(nodes) and
// returns all violations found:
//
//   - per-lane accounts equal the sums over nodes (device, host,
//     evictable = unlocked device, protected = locked device);
//   - no lane is over its device or host capacity (host reservations of
//     in-flight prefetches count against the host capacity);
//   - device residency is prefix-closed; with a write-through policy host
//     residency is too; every node is on at least one tier;
//   - lock counts never go below the sum of the children's;
//   - keys are non-empty whole pages, children are indexed by their first
//     page, depths and lane counts are consistent;
//   - the eviction heaps hold exactly the eligible nodes, in heap order.
func (t *Tree) Check() error {
	var errs []error
	bad := func(format string, args ...any) {
		if len(errs) < 20 {
			errs = append(errs, fmt.Errorf(format, args...))
		}
	}
	dev := make([]int64, t.cp)
	host := make([]int64, t.cp)
	ev := make([]int64, t.cp)
	pr := make([]int64, t.cp)
	lanes := make([]int64, t.cp)
	var protTok int64
	nodes := 0
	var visit func(n *Node)
	visit = func(n *Node) {
		var childLocks int64
		devKids := 0
		for _, c := range n.kids {
			if c.parent != n {
				bad("node %d: child %d has parent %v", n.id, c.id, c.parent)
			}
			if len(c.pages) == 0 {
				bad("node %d: empty key", c.id)
				continue
			}
			if n.child(c.pages[0]) != c {
				bad("node %d: child %d not indexed by its first page", n.id, c.id)
			}
			if want := n.depth + int64(len(n.pages)); c.depth != want {
				bad("node %d: depth %d, want %d", c.id, c.depth, want)
			}
			childLocks += c.lockRef
			if c.device {
				devKids++
			}
			if c.device && !n.device {
				bad("node %d is on the device under host-only node %d", c.id, n.id)
			}
			if t.cfg.WritePolicy != WriteBack && c.host && !n.host {
				bad("node %d has a host copy but its parent %d does not", c.id, n.id)
			}
			visit(c)
		}
		if n.devKids != devKids {
			bad("node %d: devKids %d, want %d", n.id, n.devKids, devKids)
		}
		if n.parent == nil {
			return
		}
		nodes++
		if n.lockRef < childLocks {
			bad("node %d: lock count %d below its children's %d", n.id, n.lockRef, childLocks)
		}
		if n.hostRef < 0 {
			bad("node %d: host protection count %d", n.id, n.hostRef)
		}
		if !n.device && !n.host {
			bad("node %d is on neither tier", n.id)
		}
		if n.tokens != int64(len(n.pages))*int64(t.cfg.PageSize) {
			bad("node %d: %d tokens for %d pages", n.id, n.tokens, len(n.pages))
		}
		clear(lanes)
		ps := int64(t.cfg.PageSize)
		addLaneTokens(t.cfg.Lanes, ps, int64(t.cp), n.depth*ps, (n.depth+int64(len(n.pages)))*ps, lanes)
		for o := range lanes {
			if lanes[o] != n.lanes[o] {
				bad("node %d: lane %d holds %d tokens, want %d", n.id, o, n.lanes[o], lanes[o])
			}
		}
		if n.device {
			addLanes(dev, n.lanes, 1)
			if n.lockRef > 0 {
				addLanes(pr, n.lanes, 1)
			} else {
				addLanes(ev, n.lanes, 1)
			}
		}
		if n.host {
			addLanes(host, n.lanes, 1)
		}
		if n.protected {
			protTok += n.tokens
			if !n.device {
				bad("node %d is protected but not on the device", n.id)
			}
		}
		if want := n.device && n.lockRef == 0 && n.devKids == 0; want != (n.devIdx >= 0) {
			bad("node %d: in device heap %v, want %v", n.id, n.devIdx >= 0, want)
		}
		if want := !n.device && n.host && n.lockRef == 0 && n.hostRef == 0 && len(n.kids) == 0; want != (n.hostIdx >= 0) {
			bad("node %d: in host heap %v, want %v", n.id, n.hostIdx >= 0, want)
		}
		if n.protected != (n.protIdx >= 0) {
			bad("node %d: protected %v but in protected heap %v", n.id, n.protected, n.protIdx >= 0)
		}
	}
	visit(t.root)
	if nodes != t.nodes {
		bad("tree: %d nodes, counter says %d", nodes, t.nodes)
	}
	for o := 0; o < t.cp; o++ {
		if dev[o] != t.treeDev[o] || host[o] != t.hostUsed[o] || ev[o] != t.evict[o] || pr[o] != t.prot[o] {
			bad("lane %d: device %d/%d host %d/%d evictable %d/%d protected %d/%d (computed/recorded)",
				o, dev[o], t.treeDev[o], host[o], t.hostUsed[o], ev[o], t.evict[o], pr[o], t.prot[o])
		}
		if t.held[o] < 0 {
			bad("lane %d: %d held tokens", o, t.held[o])
		}
		if t.treeDev[o]+t.held[o] > t.cfg.DeviceTokens {
			bad("lane %d: device %d + held %d over capacity %d", o, t.treeDev[o], t.held[o], t.cfg.DeviceTokens)
		}
		if t.hostRes[o] < 0 {
			bad("lane %d: %d reserved host tokens", o, t.hostRes[o])
		}
		if t.hostUsed[o]+t.hostRes[o] > t.cfg.HostTokens {
			bad("lane %d: host %d + reserved %d over capacity %d", o, t.hostUsed[o], t.hostRes[o], t.cfg.HostTokens)
		}
	}
	if protTok != t.protTok {
		bad("protected segment holds %d tokens, counter says %d", protTok, t.protTok)
	}
	if t.cfg.Eviction == SegmentedLRU && t.protTok > t.protCap {
		bad("protected segment %d over its capacity %d", t.protTok, t.protCap)
	}
	for i, h := range []*nodeHeap{&t.devHeap, &t.hostHeap, &t.protHeap} {
		if !h.Valid() {
			bad("%s heap out of order", [...]string{"device", "host", "protected"}[i])
		}
	}
	return errors.Join(errs...)
}
