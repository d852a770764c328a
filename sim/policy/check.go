package policy

import "fmt"

// checkInvariants walks the whole trie and panics on the first broken
// invariant. It is O(nodes); Process calls it after every request when
// built with -tags invariants, and the tests call it directly.
//
// Checked: the page and child counters, the child index,
// capacities, device residency closed under ancestors, the policy's host
// invariant (MainWriteThrough: host residency closed under ancestors;
// BoundaryL1L2 has none: see doc.go, "Aborts"), no empty node kept, the
// two recency lists holding exactly the device and the host-only pages in
// (last access, deeper first) order, and the duplicate heap holding
// exactly the valid candidates in heap order.
func (s *Simulator) checkInvariants() {
	fail := func(format string, args ...any) {
		panic("policy: invariant: " + fmt.Sprintf(format, args...))
	}
	boundary := s.cfg.Policy == BoundaryL1L2
	if len(s.pages) != len(s.nodes) {
		fail("%d keys for %d nodes", len(s.pages), len(s.nodes))
	}
	// Count every node's live children from the arena.
	nc := make([]int32, len(s.nodes))
	dc := make([]int32, len(s.nodes))
	hc := make([]int32, len(s.nodes))
	for id := nodeID(1); int(id) < len(s.nodes); id++ {
		n := &s.nodes[id]
		if n.parent < 0 || n.parent >= id || n.depth != s.nodes[n.parent].depth+1 {
			fail("node %d: parent %d, depth %d", id, n.parent, n.depth)
		}
		if got := s.index.lookup(s.nodes, n.parent, s.pages[id]); got != id {
			fail("node %d (page %d below %d) indexed as %d", id, s.pages[id], n.parent, got)
		}
		if !n.live {
			continue
		}
		if !s.nodes[n.parent].live {
			fail("live node %d below detached node %d", id, n.parent)
		}
		nc[n.parent]++
		if n.hasD {
			dc[n.parent]++
		}
		if n.hasH {
			hc[n.parent]++
		}
	}
	var d, h, dh, live, hostOnly int
	for id := range s.nodes {
		n := &s.nodes[id]
		if nc[id] != n.nChildren || dc[id] != n.dChildren || hc[id] != n.hChildren {
			fail("node %d: children %d/%d/%d, counted %d/%d/%d", id, n.nChildren, n.dChildren, n.hChildren, nc[id], dc[id], hc[id])
		}
		if id == int(rootID) {
			continue
		}
		if !n.live {
			if n.hasD || n.hasH || n.hitCount != 0 {
				fail("detached node %d holds d %v h %v, %d hits", id, n.hasD, n.hasH, n.hitCount)
			}
			continue
		}
		live++
		par := &s.nodes[n.parent]
		if n.hasD {
			d++
			if n.parent != rootID && !par.hasD {
				fail("node %d on device below parent %d that is not", id, n.parent)
			}
		}
		if n.hasH {
			h++
		}
		if n.hasD && n.hasH {
			dh++
		}
		if n.hasH && !n.hasD {
			hostOnly++
		}
		if !n.hasD && !n.hasH && n.nChildren == 0 {
			fail("node %d holds nothing and has no children", id)
		}
		if s.cfg.Policy == MainWriteThrough && n.hasH && n.parent != rootID && !par.hasH {
			fail("write-through: node %d on host below parent %d that is not", id, n.parent)
		}
		if boundary {
			valid := n.hasD && n.hasH && n.hChildren == 0
			if in := s.dup.contains(nodeID(id)); in != valid {
				fail("node %d: in the duplicate heap = %v, candidate = %v", id, in, valid)
			}
		}
	}
	if live != s.live {
		fail("%d live nodes, %d counted", s.live, live)
	}
	if d != s.dPages || h != s.hPages || dh != s.dhPages {
		fail("counted d/h/dh %d/%d/%d, kept %d/%d/%d", d, h, dh, s.dPages, s.hPages, s.dhPages)
	}
	if s.dPages > s.cfg.L1Pages || s.hPages > s.cfg.L2Pages {
		fail("over capacity: d %d/%d h %d/%d", s.dPages, s.cfg.L1Pages, s.hPages, s.cfg.L2Pages)
	}
	s.checkList("device", &s.device, d, func(n *node) bool { return n.hasD })
	s.checkList("host-only", &s.hostOnly, hostOnly, func(n *node) bool { return n.hasH && !n.hasD })
	if !boundary {
		if s.dup.len() != 0 {
			fail("duplicate heap has %d members under %v", s.dup.len(), s.cfg.Policy)
		}
		return
	}
	hp := &s.dup
	if len(hp.pos) != len(s.nodes) {
		fail("duplicate heap: %d positions for %d nodes", len(hp.pos), len(s.nodes))
	}
	for i, e := range hp.entries {
		id := e.id
		if n := &s.nodes[id]; e.lastAccess != n.lastAccess || e.depth != n.depth {
			fail("duplicate heap: node %d has a stale key", id)
		}
		if int(hp.pos[id]) != i {
			fail("duplicate heap: node %d at %d records index %d", id, i, hp.pos[id])
		}
		if i > 0 && hp.less(i, (i-1)/2) {
			fail("duplicate heap: order broken at %d", i)
		}
	}
}

// checkList checks that l links exactly want live nodes, each a member by
// member, in (last access, deeper first) order with consistent links.
func (s *Simulator) checkList(name string, l *recencyList, want int, member func(*node) bool) {
	fail := func(format string, args ...any) {
		panic("policy: invariant: " + name + " list: " + fmt.Sprintf(format, args...))
	}
	count := 0
	prev := noNode
	for v := l.head; v != noNode; v = s.nodes[v].next {
		n := &s.nodes[v]
		if count++; count > want {
			fail("more than the %d members", want)
		}
		if !n.live || !member(n) {
			fail("node %d is not a member", v)
		}
		if n.prev != prev {
			fail("node %d links back to %d, not %d", v, n.prev, prev)
		}
		if prev != noNode {
			p := &s.nodes[prev]
			if p.lastAccess > n.lastAccess || p.lastAccess == n.lastAccess && p.depth <= n.depth {
				fail("node %d (access %d, depth %d) after node %d (access %d, depth %d)", v, n.lastAccess, n.depth, prev, p.lastAccess, p.depth)
			}
		}
		prev = v
	}
	if count != want || l.tail != prev {
		fail("%d members, want %d; tail %d, last %d", count, want, l.tail, prev)
	}
}
