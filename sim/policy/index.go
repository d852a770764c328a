package policy

// childIndex maps a trie edge (parent, page key) to the child's slot. A
// node leaves the index when it is detached, so an entry always names a
// node that has that key now.
//
// Most block-hash traces (Mooncake's among them) number their blocks
// densely from 0, and a key names one prefix, so it always hangs below the
// same parent. The index therefore keeps, for every key below a bound, the
// first node created with that key in a flat array (byKey), and checks the
// parent on lookup: one array read per page, in key order, where a hash
// map costs a hash and a probe into a table as large as the trie. Edges
// that do not fit (keys past the bound, or a key seen below a second
// parent) go to a map, which is empty for such traces and then skipped.
type childIndex struct {
	byKey   []nodeID // byKey[k]: the first node with key k, 0 for none (the root is never a child)
	other   map[edge]nodeID
	created int // edges ever inserted: the distinct pages seen, about
}

// denseKeySlack is how far past the number of pages seen a key may lie and
// still get a slot in byKey (with the bound below, byKey stays within a
// small multiple of the distinct pages: 4 bytes each).
const denseKeySlack = 1 << 16

// lookup returns the child of parent with key p, or noNode.
func (x *childIndex) lookup(nodes []node, parent nodeID, p uint64) nodeID {
	if p < uint64(len(x.byKey)) {
		if id := x.byKey[p]; id != 0 && nodes[id].parent == parent {
			return id
		}
	}
	if len(x.other) == 0 {
		return noNode
	}
	if id, ok := x.other[edge{parent, p}]; ok {
		return id
	}
	return noNode
}

// insert records the new edge (parent, p) -> id; the edge must be absent.
func (x *childIndex) insert(parent nodeID, p uint64, id nodeID) {
	x.created++
	if p >= uint64(len(x.byKey)) && p < uint64(4*x.created+denseKeySlack) {
		n := max(int(p)+1, 2*len(x.byKey))
		x.byKey = append(x.byKey, make([]nodeID, n-len(x.byKey))...)
	}
	if p < uint64(len(x.byKey)) && x.byKey[p] == 0 {
		x.byKey[p] = id
		return
	}
	if x.other == nil {
		x.other = make(map[edge]nodeID)
	}
	x.other[edge{parent, p}] = id
}

// remove deletes the edge (parent, p) -> id, which must be present.
func (x *childIndex) remove(parent nodeID, p uint64, id nodeID) {
	if p < uint64(len(x.byKey)) && x.byKey[p] == id {
		x.byKey[p] = 0
		return
	}
	delete(x.other, edge{parent, p})
}
