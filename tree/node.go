package tree

// PageID identifies the contents of one KV page. Two pages compare equal in
// the tree exactly when their PageIDs are equal, so PageIDs must be exact
// (see [Pager]): no two different page contents may share an ID.
type PageID uint64

// NodeID is a node's identity: assigned from a counter at creation (and at a
// split, to the new upper node), never reused. The root is 0.
type NodeID int64

// Node is one edge of the radix tree: a run of whole pages that every
// sequence through it shares. Nodes are owned by their Tree; read them
// through the accessors and mutate them only through Tree methods.
type Node struct {
	id     NodeID
	parent *Node
	kids   []*Node          // children in insertion order (deterministic iteration)
	index  map[PageID]*Node // first page -> child, built once kids grows past smallFanout
	key    []PageRun        // the node's key as runs of consecutive ids (nil: only pages)
	pages  []PageID         // the key one id a page: when its runs are short, or made by Pages
	npages int64            // pages in the key
	depth  int64            // pages between the root and this node's first page
	tokens int64            // npages * page size
	lanes  []int64          // tokens owned by each lane

	device  bool // KV on the device (SGLang: value is not None)
	host    bool // KV copy on the host (SGLang: backuped)
	lockRef int64
	hostRef int64

	accessSeq  int64 // tree-wide stamp of the last access: orders LRU exactly
	createdSeq int64 // stamp at creation: orders FIFO/FILO
	lastAccess int64 // simulated time of the last access (ns)
	created    int64 // simulated time of creation (ns)
	hitCount   int64
	priority   int64
	protected  bool // SegmentedLRU: in the protected segment

	devKids int // children that are device-resident

	devIdx, hostIdx, protIdx int // positions in the tree's heaps, -1 if absent

	// Belady only: the oracle's prefix ids of the first and last page
	// (-1: not in the trace), and the key from the last refresh.
	oFirst, oLast int32
	nextUse       int64
}

const smallFanout = 8

func (n *Node) child(p PageID) *Node {
	if n.index != nil {
		return n.index[p]
	}
	for _, c := range n.kids {
		if c.first() == p {
			return c
		}
	}
	return nil
}

func (n *Node) addChild(c *Node) {
	n.kids = append(n.kids, c)
	if n.index != nil {
		n.index[c.first()] = c
	} else if len(n.kids) > smallFanout {
		n.index = make(map[PageID]*Node, len(n.kids)*2)
		for _, k := range n.kids {
			n.index[k.first()] = k
		}
	}
	if c.device {
		n.devKids++
	}
}

func (n *Node) removeChild(c *Node) {
	for i, k := range n.kids {
		if k == c {
			copy(n.kids[i:], n.kids[i+1:])
			n.kids[len(n.kids)-1] = nil
			n.kids = n.kids[:len(n.kids)-1]
			if n.index != nil {
				delete(n.index, c.first())
			}
			if c.device {
				n.devKids--
			}
			return
		}
	}
	panic("tree: removeChild: not a child")
}

// replaceChild puts nw where old was, keeping the children's order.
func (n *Node) replaceChild(old, nw *Node) {
	for i, k := range n.kids {
		if k == old {
			n.kids[i] = nw
			if n.index != nil {
				n.index[nw.first()] = nw
			}
			if old.device != nw.device {
				panic("tree: replaceChild changes residency")
			}
			return
		}
	}
	panic("tree: replaceChild: not a child")
}

// ID returns the node's id (0 for the root).
func (n *Node) ID() NodeID { return n.id }

// Parent returns the node's parent, or nil for the root.
func (n *Node) Parent() *Node { return n.parent }

// IsRoot reports whether n is the root.
func (n *Node) IsRoot() bool { return n.parent == nil }

// Pages returns the node's key, one id a page. The slice is owned by the
// tree: do not modify it. A node whose key is held as runs builds it at the
// first call and keeps it. A split shortens the node's key by reslicing
// it, and the tree never writes into a key's backing array, so a slice kept
// across mutations still reads the pages the node held when it was taken.
func (n *Node) Pages() []PageID {
	if n.pages == nil && n.npages > 0 {
		n.pages = AppendRunPages(make([]PageID, 0, n.npages), n.key)
	}
	return n.pages
}

// Runs returns the node's key as runs of consecutive page ids, or nil if
// the node keeps it only one id a page (a key of short runs, such as token
// pages, costs less that way: see Pages). The slice is owned by the tree:
// do not modify it; the tree never writes into it.
func (n *Node) Runs() []PageRun { return n.key }

// NumPages returns the number of pages in the node's key.
func (n *Node) NumPages() int { return int(n.npages) }

// FirstPage returns the first page of the node's key (0 for the root).
func (n *Node) FirstPage() PageID {
	if n.npages == 0 {
		return 0
	}
	return n.first()
}

// first returns the first page of a non-root node's key.
func (n *Node) first() PageID {
	if n.key != nil {
		return n.key[0].First
	}
	return n.pages[0]
}

// Tokens returns the number of tokens the node holds.
func (n *Node) Tokens() int64 { return n.tokens }

// Lanes returns the tokens the node holds on each owner lane. The slice is
// owned by the tree: do not modify it.
func (n *Node) Lanes() []int64 { return n.lanes }

// Depth returns the number of tokens between the root and the node's first
// token.
func (n *Node) Depth(pageSize int) int64 { return n.depth * int64(pageSize) }

// OnDevice reports whether the node's KV is on the device.
func (n *Node) OnDevice() bool { return n.device }

// OnHost reports whether the node has a host copy.
func (n *Node) OnHost() bool { return n.host }

// LockRef returns the number of holders pinning the node (a lock on a node
// pins its whole path to the root).
func (n *Node) LockRef() int64 { return n.lockRef }

// HostRef returns the number of host protections of the node
// ([Tree.ProtectHost], held write-backs).
func (n *Node) HostRef() int64 { return n.hostRef }

// Locked reports whether the node is pinned.
func (n *Node) Locked() bool { return n.lockRef > 0 }

// HitCount returns the node's hit count (counted on non-chunked inserts).
func (n *Node) HitCount() int64 { return n.hitCount }

// LastAccess returns the simulated time of the node's last access.
func (n *Node) LastAccess() int64 { return n.lastAccess }

// AccessSeq returns the tree-wide sequence number of the node's last access;
// it orders accesses exactly even when they share a simulated time.
func (n *Node) AccessSeq() int64 { return n.accessSeq }

// Created returns the simulated time the node was created.
func (n *Node) Created() int64 { return n.created }

// RequestPriority returns the highest request priority that inserted through
// the node.
func (n *Node) RequestPriority() int64 { return n.priority }

// Children calls fn for each child in insertion order until fn returns
// false.
func (n *Node) Children(fn func(*Node) bool) {
	for _, c := range n.kids {
		if !fn(c) {
			return
		}
	}
}

// NumChildren returns the number of children.
func (n *Node) NumChildren() int { return len(n.kids) }

// DeviceChildren returns the number of device-resident children.
func (n *Node) DeviceChildren() int { return n.devKids }
