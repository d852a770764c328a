package policy

import "fmt"

// checkInvariants walks the whole trie and panics on the first broken
// invariant. It is O(nodes); Process calls it after every request when
// built with -tags invariants, and the tests call it directly.
//
// Checked: the page and child counters, the child map and sibling lists,
// capacities, device residency closed under ancestors, the policy's host
// invariant (MainWriteThrough: host residency closed under ancestors;
// BoundaryL1L2 has none: see doc.go, "Aborts"), no empty node kept, and each heap holding exactly the valid candidates in heap
// order.
func (s *Simulator) checkInvariants() {
	fail := func(format string, args ...any) {
		panic("policy: invariant: " + fmt.Sprintf(format, args...))
	}
	var d, h, dh, live int
	stack := []nodeID{rootID}
	for len(stack) > 0 {
		id := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		n := &s.nodes[id]
		var nc, dc, hc int32
		for c := n.firstChild; c != noNode; c = s.nodes[c].nextSib {
			cn := &s.nodes[c]
			if cn.parent != id || cn.depth != n.depth+1 {
				fail("node %d: child %d has parent %d depth %d", id, c, cn.parent, cn.depth)
			}
			if got, ok := s.children[edge{id, cn.page}]; !ok || got != c {
				fail("node %d: child %d (page %d) missing from the child map", id, c, cn.page)
			}
			nc++
			if cn.hasD {
				dc++
			}
			if cn.hasH {
				hc++
			}
			stack = append(stack, c)
		}
		if nc != n.nChildren || dc != n.dChildren || hc != n.hChildren {
			fail("node %d: children %d/%d/%d, counted %d/%d/%d", id, n.nChildren, n.dChildren, n.hChildren, nc, dc, hc)
		}
		if id == rootID {
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
		if !n.hasD && !n.hasH && n.nChildren == 0 {
			fail("node %d holds nothing and has no children", id)
		}
		if s.cfg.Policy == MainWriteThrough && n.hasH && n.parent != rootID && !par.hasH {
			fail("write-through: node %d on host below parent %d that is not", id, n.parent)
		}
		valid := [numSlots]bool{
			slotL1:   n.hasD && n.dChildren == 0,
			slotHost: n.hasH && !n.hasD && n.hChildren == 0,
			slotDup:  n.hasD && n.hasH && n.hChildren == 0,
		}
		for slot, v := range valid {
			if in := s.heaps[slot].contains(id); in != v {
				fail("node %d: in heap %d = %v, candidate = %v", id, slot, in, v)
			}
		}
	}
	if live != len(s.children) || live+1 != len(s.nodes)-len(s.free) {
		fail("%d live nodes, %d map entries, %d arena slots, %d free", live, len(s.children), len(s.nodes), len(s.free))
	}
	if d != s.dPages || h != s.hPages || dh != s.dhPages {
		fail("counted d/h/dh %d/%d/%d, kept %d/%d/%d", d, h, dh, s.dPages, s.hPages, s.dhPages)
	}
	if s.dPages > s.cfg.L1Pages || s.hPages > s.cfg.L2Pages {
		fail("over capacity: d %d/%d h %d/%d", s.dPages, s.cfg.L1Pages, s.hPages, s.cfg.L2Pages)
	}
	for slot := range s.heaps {
		hp := &s.heaps[slot]
		if len(hp.pos) != len(s.nodes) {
			fail("heap %d: %d positions for %d arena slots", slot, len(hp.pos), len(s.nodes))
		}
		for i, e := range hp.entries {
			id := e.id
			if n := &s.nodes[id]; e.lastAccess != n.lastAccess || e.depth != n.depth {
				fail("heap %d: node %d has a stale key", slot, id)
			}
			if int(hp.pos[id]) != i {
				fail("heap %d: node %d at %d records index %d", slot, id, i, hp.pos[id])
			}
			if i > 0 && hp.less(i, (i-1)/2) {
				fail("heap %d: order broken at %d", slot, i)
			}
		}
	}
}
