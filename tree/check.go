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
	c := &checker{t: t}
	for _, p := range []*[]int64{&c.dev, &c.host, &c.ev, &c.pr, &c.lanes} {
		*p = make([]int64, t.cp)
	}
	c.visit(t.root)
	c.checkTotals()
	return errors.Join(c.errs...)
}

// checker holds what Check recomputes from the nodes: per-lane device,
// host, evictable and protected (locked) tokens, the protected segment's
// tokens and the node count.
type checker struct {
	t                        *Tree
	errs                     []error
	dev, host, ev, pr, lanes []int64
	protTok                  int64
	nodes                    int
}

// bad records a problem; Check reports the first 20.
func (c *checker) bad(format string, args ...any) {
	if len(c.errs) < 20 {
		c.errs = append(c.errs, fmt.Errorf(format, args...))
	}
}

// visit checks the edges below n and the subtree of each child, then n.
func (c *checker) visit(n *Node) {
	var childLocks int64
	devKids := 0
	for _, k := range n.kids {
		if !c.checkEdge(n, k) {
			continue
		}
		childLocks += k.lockRef
		if k.device {
			devKids++
		}
		c.visit(k)
	}
	if n.devKids != devKids {
		c.bad("node %d: devKids %d, want %d", n.id, n.devKids, devKids)
	}
	if n.parent == nil {
		return
	}
	c.nodes++
	if n.lockRef < childLocks {
		c.bad("node %d: lock count %d below its children's %d", n.id, n.lockRef, childLocks)
	}
	c.checkNode(n)
}

// checkEdge checks child k of n; it reports false for a child with an
// empty key, which is not descended into.
func (c *checker) checkEdge(n, k *Node) bool {
	if k.parent != n {
		c.bad("node %d: child %d has parent %v", n.id, k.id, k.parent)
	}
	if k.npages == 0 || k.key == nil && k.pages == nil {
		c.bad("node %d: empty key", k.id)
		return false
	}
	if n.child(k.first()) != k {
		c.bad("node %d: child %d not indexed by its first page", n.id, k.id)
	}
	if want := n.depth + n.npages; k.depth != want {
		c.bad("node %d: depth %d, want %d", k.id, k.depth, want)
	}
	if k.device && !n.device {
		c.bad("node %d is on the device under host-only node %d", k.id, n.id)
	}
	if c.t.cfg.WritePolicy != WriteBack && k.host && !n.host {
		c.bad("node %d has a host copy but its parent %d does not", k.id, n.id)
	}
	return true
}

// checkNode checks a non-root node's own fields and heap memberships and
// adds its tokens to the recomputed totals.
func (c *checker) checkNode(n *Node) {
	t := c.t
	if n.hostRef < 0 {
		c.bad("node %d: host protection count %d", n.id, n.hostRef)
	}
	if !n.device && !n.host {
		c.bad("node %d is on neither tier", n.id)
	}
	for _, x := range n.key {
		if x.N < 1 {
			c.bad("node %d: a run of %d pages in its key", n.id, x.N)
		}
	}
	if np := runsLen(n.key); n.key != nil && np != n.npages {
		c.bad("node %d: %d pages in its key's runs, %d counted", n.id, np, n.npages)
	}
	if n.pages != nil && int64(len(n.pages)) != n.npages {
		c.bad("node %d: %d pages in its key, %d counted", n.id, len(n.pages), n.npages)
	}
	if n.key != nil && n.pages != nil && !runsSpell(n.key, n.pages) {
		c.bad("node %d: its key's runs and pages differ", n.id)
	}
	if n.tokens != n.npages*int64(t.cfg.PageSize) {
		c.bad("node %d: %d tokens for %d pages", n.id, n.tokens, n.npages)
	}
	clear(c.lanes)
	ps := int64(t.cfg.PageSize)
	addLaneTokens(t.cfg.Lanes, ps, int64(t.cp), n.depth*ps, (n.depth+n.npages)*ps, c.lanes)
	for o := range c.lanes {
		if c.lanes[o] != n.lanes[o] {
			c.bad("node %d: lane %d holds %d tokens, want %d", n.id, o, n.lanes[o], c.lanes[o])
		}
	}
	if n.device {
		addLanes(c.dev, n.lanes, 1)
		if n.lockRef > 0 {
			addLanes(c.pr, n.lanes, 1)
		} else {
			addLanes(c.ev, n.lanes, 1)
		}
	}
	if n.host {
		addLanes(c.host, n.lanes, 1)
	}
	if n.protected {
		c.protTok += n.tokens
		if !n.device {
			c.bad("node %d is protected but not on the device", n.id)
		}
	}
	if want := n.device && n.lockRef == 0 && n.devKids == 0; want != (n.devIdx >= 0) {
		c.bad("node %d: in device heap %v, want %v", n.id, n.devIdx >= 0, want)
	}
	if want := !n.device && n.host && n.lockRef == 0 && n.hostRef == 0 && len(n.kids) == 0; want != (n.hostIdx >= 0) {
		c.bad("node %d: in host heap %v, want %v", n.id, n.hostIdx >= 0, want)
	}
	if n.protected != (n.protIdx >= 0) {
		c.bad("node %d: protected %v but in protected heap %v", n.id, n.protected, n.protIdx >= 0)
	}
}

// checkTotals compares the recomputed totals with the tree's counters and
// capacities, and checks the heaps' order.
func (c *checker) checkTotals() {
	t := c.t
	if c.nodes != t.nodes {
		c.bad("tree: %d nodes, counter says %d", c.nodes, t.nodes)
	}
	for o := 0; o < t.cp; o++ {
		if c.dev[o] != t.treeDev[o] || c.host[o] != t.hostUsed[o] || c.ev[o] != t.evict[o] || c.pr[o] != t.prot[o] {
			c.bad("lane %d: device %d/%d host %d/%d evictable %d/%d protected %d/%d (computed/recorded)",
				o, c.dev[o], t.treeDev[o], c.host[o], t.hostUsed[o], c.ev[o], t.evict[o], c.pr[o], t.prot[o])
		}
		if t.held[o] < 0 {
			c.bad("lane %d: %d held tokens", o, t.held[o])
		}
		if t.treeDev[o]+t.held[o] > t.cfg.DeviceTokens {
			c.bad("lane %d: device %d + held %d over capacity %d", o, t.treeDev[o], t.held[o], t.cfg.DeviceTokens)
		}
		if t.hostRes[o] < 0 {
			c.bad("lane %d: %d reserved host tokens", o, t.hostRes[o])
		}
		if t.hostUsed[o]+t.hostRes[o] > t.cfg.HostTokens {
			c.bad("lane %d: host %d + reserved %d over capacity %d", o, t.hostUsed[o], t.hostRes[o], t.cfg.HostTokens)
		}
	}
	if c.protTok != t.protTok {
		c.bad("protected segment holds %d tokens, counter says %d", c.protTok, t.protTok)
	}
	if t.cfg.Eviction == SegmentedLRU && t.protTok > t.protCap {
		c.bad("protected segment %d over its capacity %d", t.protTok, t.protCap)
	}
	for i, h := range []*nodeHeap{&t.devHeap, &t.hostHeap, &t.protHeap} {
		if !h.Valid() {
			c.bad("%s heap out of order", [...]string{"device", "host", "protected"}[i])
		}
	}
}
