package policy

// recencyList is an intrusive doubly linked list of nodes through
// node.prev and node.next, oldest first. It replaces a heap where the
// eviction order is plain recency (see doc.go, "Eviction order and
// tie-breaking"):
//
//   - The device list holds every device page in (last access, deeper
//     first) order. A request moves its pages to the young end deepest
//     first (the walk puts each just before its parent, which it has just
//     put there), all with the newest clock, so the order holds by
//     construction. Its head is the L1 victim: a page with a device child
//     comes after that child (the child's last access is no later, and on
//     a tie the child is deeper), so the head is a device leaf; and device
//     leaves never share a last access (two pages stamped by one request
//     lie on one path, and the shallower one has a device child), so the
//     head is also the first device leaf in SGLang's (last access,
//     shallower first) order.
//   - The host-only list holds every page on host and not on device, in
//     the order in which they became host-only. A page only ever becomes
//     host-only by L1 eviction (host copies are only made for device
//     pages), L1 victims leave in device-list order, and a host-only page
//     keeps its last access until a request brings it back to the device,
//     so this list too is in (last access, deeper first) order, and its
//     first unprotected leaf is the oldest host-only leaf (host-only
//     leaves never share a last access: see minHostOnly).
//
// Every operation is O(1) and touches only the node and its two
// neighbours. A node is in at most one list at a time (device, or
// host-only), so one pair of links serves both.
type recencyList struct {
	head, tail nodeID // oldest and youngest member, noNode when empty
}

// pushBack appends v, which must not be in a list, at the young end.
func (l *recencyList) pushBack(nodes []node, v nodeID) { l.insertBefore(nodes, noNode, v) }

// remove unlinks v, which must be in l.
func (l *recencyList) remove(nodes []node, v nodeID) {
	n := &nodes[v]
	if n.prev != noNode {
		nodes[n.prev].next = n.next
	} else {
		l.head = n.next
	}
	if n.next != noNode {
		nodes[n.next].prev = n.prev
	} else {
		l.tail = n.prev
	}
	n.prev, n.next = noNode, noNode
}

// insertBefore links v, which must not be in a list, just before at, a
// member, or at the young end when at is noNode.
func (l *recencyList) insertBefore(nodes []node, at, v nodeID) {
	prev := l.tail
	if at != noNode {
		prev = nodes[at].prev
		nodes[at].prev = v
	} else {
		l.tail = v
	}
	n := &nodes[v]
	n.prev, n.next = prev, at
	if prev != noNode {
		nodes[prev].next = v
	} else {
		l.head = v
	}
}

// moveBefore moves v, which must be in l, just before at, a member other
// than v, or to the young end when at is noNode.
func (l *recencyList) moveBefore(nodes []node, at, v nodeID) {
	if nodes[v].next == at {
		return // already there (at noNode: v is the tail)
	}
	l.remove(nodes, v)
	l.insertBefore(nodes, at, v)
}
