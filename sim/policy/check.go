package policy

import "fmt"

// checkInvariants walks the whole trie and panics on the first broken
// invariant. It is O(nodes); Process calls it after every request when
// built with -tags invariants, and the tests call it directly.
//
// Checked: the page and child counters, the child index, the free list,
// capacities, device residency closed under ancestors, the policy's host
// invariant (MainWriteThrough: host residency closed under ancestors;
// BoundaryL1L2 has none: see doc.go, "Aborts"), every node holding a
// copy, no host-only leaf sharing its predecessor's last access (see
// minHostOnly), the
// two recency lists holding exactly the device and the host-only pages in
// (last access, deeper first) order, and the duplicate heap holding
// exactly the valid candidates in heap order.
func (s *Simulator) checkInvariants() {
	fail := func(format string, args ...any) {
		panic("policy: invariant: " + fmt.Sprintf(format, args...))
	}
	boundary := s.cfg.Policy == BoundaryL1L2
	cold := 0
	if s.stamp {
		cold = len(s.nodes)
	}
	hits := 0
	if s.hits != nil {
		hits = len(s.nodes)
	}
	if s.keys != nil && len(s.keys) != len(s.nodes) || len(s.info) != cold || len(s.hits) != hits {
		fail("%d keys, %d infos, %d hit counts for %d nodes", len(s.keys), len(s.info), len(s.hits), len(s.nodes))
	}
	free := s.checkFree()
	// Count every node's live children from the arena.
	nc := make([]int32, len(s.nodes))
	dc := make([]int32, len(s.nodes))
	hc := make([]int32, len(s.nodes))
	for id := nodeID(1); int(id) < len(s.nodes); id++ {
		n := &s.nodes[id]
		if free[id] {
			continue
		}
		if n.parent < 0 || int(n.parent) >= len(s.nodes) || free[n.parent] {
			fail("node %d: parent %d", id, n.parent)
		}
		if s.stamp && s.info[id].depth != s.info[n.parent].depth+1 {
			// With depths, this also rules out cycles.
			fail("node %d: depth %d below parent %d", id, s.info[id].depth, n.parent)
		}
		key := s.pageKey(id)
		if n.key != key32(key) {
			fail("node %d: key %d, page %d", id, n.key, key)
		}
		if got := s.index.lookup(s.nodes, n.parent, key); got != id {
			fail("node %d (page %d below %d) indexed as %d", id, key, n.parent, got)
		}
		if !n.hasD && !n.hasH {
			fail("node %d holds no copy (see detach)", id)
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
		if id == int(rootID) || free[id] {
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
			if s.stamp && n.hChildren == 0 && n.prev != noNode && s.info[n.prev].at == s.info[id].at {
				fail("host-only leaf %d has the last access of %d before it in the host-only list (see minHostOnly)", id, n.prev)
			}
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
	s.checkDupHeap()
}

// checkDupHeap checks the duplicate heap's positions, keys and order, and
// that it is empty but under BoundaryL1L2 (checkInvariants checks its
// members).
func (s *Simulator) checkDupHeap() {
	fail := func(format string, args ...any) {
		panic("policy: invariant: duplicate heap: " + fmt.Sprintf(format, args...))
	}
	hp := &s.dup
	if s.cfg.Policy != BoundaryL1L2 {
		if hp.len() != 0 {
			fail("%d members under %v", hp.len(), s.cfg.Policy)
		}
		return
	}
	for i, e := range hp.entries {
		id := e.id
		if e.lastAccess != s.info[id].at || e.depth != s.info[id].depth {
			fail("node %d has a stale key", id)
		}
		if int(s.info[id].pos) != i {
			fail("node %d at %d records index %d", id, i, s.info[id].pos)
		}
		if i > 0 && hp.less(i, (i-1)/2) {
			fail("order broken at %d", i)
		}
	}
}

// checkList checks that l links exactly want live nodes, each a member by
// member, with consistent links, and, when the simulator keeps last
// accesses, in (last access, deeper first) order.
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
		if !n.live() || !member(n) {
			fail("node %d is not a member", v)
		}
		if n.prev != prev {
			fail("node %d links back to %d, not %d", v, n.prev, prev)
		}
		if prev != noNode && s.stamp {
			pa, pd, na, nd := s.info[prev].at, s.info[prev].depth, s.info[v].at, s.info[v].depth
			if pa > na || pa == na && pd <= nd {
				fail("node %d (access %d, depth %d) after node %d (access %d, depth %d)", v, na, nd, prev, pa, pd)
			}
		}
		prev = v
	}
	if count != want || l.tail != prev {
		fail("%d members, want %d; tail %d, last %d", count, want, l.tail, prev)
	}
}

// checkFree walks the free list and returns which slots are on it: exactly
// those with parent noNode but the root, each once, without a copy, and
// out of the duplicate heap.
func (s *Simulator) checkFree() []bool {
	free := make([]bool, len(s.nodes))
	n := 0
	for v := s.free; v != noNode; v = s.nodes[v].next {
		f := &s.nodes[v]
		if v <= rootID || int(v) >= len(s.nodes) || free[v] || f.parent != noNode || f.hasD || f.hasH ||
			s.cfg.Policy == BoundaryL1L2 && s.dup.contains(v) {
			panic(fmt.Sprintf("policy: invariant: free slot %d: bad, repeated or still in use", v))
		}
		free[v] = true
		n++
	}
	for id := 1; id < len(s.nodes); id++ {
		if s.nodes[id].parent == noNode && !free[id] {
			panic(fmt.Sprintf("policy: invariant: slot %d has no parent and is not free", id))
		}
	}
	if n+s.live+1 != len(s.nodes) {
		panic(fmt.Sprintf("policy: invariant: %d free slots and %d live nodes in an arena of %d", n, s.live, len(s.nodes)))
	}
	return free
}
