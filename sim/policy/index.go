package policy

// childIndex maps a trie edge (parent, page key) to the child's slot.
//
// Most block-hash traces (Mooncake's among them) number their blocks
// densely from 0, and a key names one prefix, so it always hangs below the
// same parent. The index therefore keeps, for every key below a bound, a
// node created with that key in a flat array (byKey), and checks the
// node's parent and key on lookup: one array read per page, in key order,
// where a hash map costs a hash and a probe into a table as large as the
// trie. Edges that do not fit (keys past the bound, or a key seen below a
// second parent) go to a map, which is empty for such traces and then
// skipped.
//
// A detached node leaves the map, but not byKey: its entry there goes
// stale (its slot is free, or holds another page), which the check on
// lookup sees, and the next insert of the key overwrites it. Detaching a
// page then touches only its own node, where clearing the entry would cost
// a read of its key and a write into byKey, both out of cache.
type childIndex struct {
	byKey   []nodeID // byKey[k]: a node created with key k, 0 for none (the root is never a child)
	other   map[edge]nodeID
	created int // edges ever inserted: the distinct pages seen, about
}

// denseKeySlack is how far past the number of pages seen a key may lie and
// still get a slot in byKey (with the bound below, byKey stays within a
// small multiple of the distinct pages: 4 bytes each).
const denseKeySlack = 1 << 16

// reserve sizes byKey up front for a trace of pages pages whose largest key
// is maxKey, when every key will fit (growing it as keys come costs a copy
// and a clear of the table at each doubling).
func (x *childIndex) reserve(maxKey uint64, pages int) {
	if maxKey < uint64(len(x.byKey)) || maxKey >= uint64(4*pages+denseKeySlack) || maxKey >= noKey32 {
		return
	}
	x.byKey = append(x.byKey, make([]nodeID, int(maxKey)+1-len(x.byKey))...)
}

// lookup returns the child of parent with key p, or noNode.
func (x *childIndex) lookup(nodes []node, parent nodeID, p uint64) nodeID {
	if p < uint64(len(x.byKey)) {
		// p < 2^32-1 here, so key32(p) == p; a free slot's parent is noNode.
		if id := x.byKey[p]; id != 0 && nodes[id].parent == parent && nodes[id].key == uint32(p) {
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

// insert records the new edge (parent, p) -> id, which must be absent and
// whose node must already hold parent and key32(p), and reports whether
// it went to the map.
func (x *childIndex) insert(nodes []node, parent nodeID, p uint64, id nodeID) (inMap bool) {
	x.created++
	if p >= uint64(len(x.byKey)) && p < uint64(4*x.created+denseKeySlack) && p < noKey32 {
		n := max(int(p)+1, 2*len(x.byKey))
		x.byKey = append(x.byKey, make([]nodeID, n-len(x.byKey))...)
	}
	if p < uint64(len(x.byKey)) {
		// The entry is free when it is unset, or stale: its node is
		// free, or holds another key (a node with key p below another
		// parent is live, and keeps the entry).
		old := x.byKey[p]
		if old == 0 || old == id || nodes[old].parent == noNode || nodes[old].key != uint32(p) {
			x.byKey[p] = id
			return false
		}
	}
	if x.other == nil {
		x.other = make(map[edge]nodeID)
	}
	x.other[edge{parent, p}] = id
	return true
}

// remove deletes the edge (parent, p) from the map.
func (x *childIndex) remove(parent nodeID, p uint64) {
	delete(x.other, edge{parent, p})
}
