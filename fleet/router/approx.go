package router

import (
	"cmp"

	"github.com/kvsim/kvsim/internal/invariants"
	"github.com/kvsim/kvsim/tree"

	"github.com/emirpasic/gods/queues/priorityqueue"
)

// symbol is one unit of the approximate tree's keys: a Unicode character of
// the routing text, a token id or a block hash. It is tree.PageID so that
// keys compare with tree.CommonPrefix (the runtime's vectorised memory
// comparison for long keys).
type symbol = tree.PageID

// approxTree is SGLang's approximate radix tree (sgl-router src/tree.rs,
// SMG crates/kv_index string_tree.rs): one tree over every replica's routed
// prompts, each node mapping tenant (replica) to the stamp of the last
// insert that passed it, with a symbol count per tenant. It holds no KV; it
// is the router's guess of what each replica has cached.
//
// Invariants (checked by check): a node's tenants are a superset of each
// child's; every non-root node has at least one tenant; size[r] is the sum
// of the edge lengths of the nodes r is attached to; along any path a
// tenant's stamps do not increase going down.
type approxTree struct {
	root   *anode
	size   []int  // symbols per tenant
	clock  uint64 // insert counter: the access stamps
	nextID uint64 // node ids, for a total eviction order
}

type anode struct {
	id       uint64
	edge     []symbol
	parent   *anode
	children map[symbol]*anode // keyed by the child's first symbol; nil for a new leaf
	tenants  []tenantStamp     // sorted by replica
	creator  int               // the replica whose insert created it (splits copy it)
}

type tenantStamp struct {
	r     int
	stamp uint64
}

func newApproxTree(replicas int) *approxTree {
	return &approxTree{root: &anode{children: map[symbol]*anode{}, creator: -1}, size: make([]int, replicas), nextID: 1}
}

func (n *anode) find(r int) (int, bool) {
	lo, hi := 0, len(n.tenants)
	for lo < hi {
		m := int(uint(lo+hi) >> 1)
		if n.tenants[m].r < r {
			lo = m + 1
		} else {
			hi = m
		}
	}
	return lo, lo < len(n.tenants) && n.tenants[lo].r == r
}

func (n *anode) has(r int) bool {
	_, ok := n.find(r)
	return ok
}

// attach stamps r on n, attaching it if needed; it reports whether r is new.
func (n *anode) attach(r int, stamp uint64) bool {
	i, ok := n.find(r)
	if ok {
		n.tenants[i].stamp = stamp
		return false
	}
	n.tenants = append(n.tenants, tenantStamp{})
	copy(n.tenants[i+1:], n.tenants[i:])
	n.tenants[i] = tenantStamp{r: r, stamp: stamp}
	return true
}

func (n *anode) detach(r int) {
	if i, ok := n.find(r); ok {
		n.tenants = append(n.tenants[:i], n.tenants[i+1:]...)
	}
}

// leafFor reports whether n carries r and none of its children does.
func (n *anode) leafFor(r int) bool {
	if !n.has(r) {
		return false
	}
	for _, c := range n.children {
		if c.has(r) {
			return false
		}
	}
	return true
}

// insert attaches replica r along the whole of key, splitting an edge where
// key leaves it and adding a leaf for the rest, and stamps every node on the
// path with a new stamp (classic tree.rs stamps every node an insert
// passes). key is copied; the caller may reuse it.
func (t *approxTree) insert(key []symbol, r int) {
	if invariants.Enabled {
		defer t.check()
	}
	t.clock++
	stamp := t.clock
	n := t.root
	for i := 0; i < len(key); {
		c := n.children[key[i]]
		if c == nil {
			leaf := &anode{id: t.nextID, edge: append([]symbol(nil), key[i:]...), parent: n, creator: r,
				tenants: []tenantStamp{{r: r, stamp: stamp}}}
			t.nextID++
			if n.children == nil {
				n.children = map[symbol]*anode{}
			}
			n.children[key[i]] = leaf
			t.size[r] += len(leaf.edge)
			return
		}
		if k := tree.CommonPrefix(c.edge, key[i:]); k < len(c.edge) {
			c = t.split(c, k)
		}
		if c.attach(r, stamp) {
			t.size[r] += len(c.edge)
		}
		i += len(c.edge)
		n = c
	}
}

// split cuts c's edge after k symbols (0 < k < len(c.edge)) and returns the
// new upper node, which copies c's tenants, stamps and creator.
func (t *approxTree) split(c *anode, k int) *anode {
	up := &anode{id: t.nextID, edge: c.edge[:k:k], parent: c.parent, children: map[symbol]*anode{},
		tenants: append([]tenantStamp(nil), c.tenants...), creator: c.creator}
	t.nextID++
	c.parent.children[up.edge[0]] = up
	c.edge = c.edge[k:]
	c.parent = up
	up.children[c.edge[0]] = c
	return up
}

// match returns how many leading symbols of key the tree holds for any
// tenant and the tenant it would route to: the node where the walk stopped
// keeps its creator while the creator is still attached (SMG's last_tenant);
// otherwise the lowest replica index attached (kvsim's choice where SGLang
// takes a hash map's first key). tenant is -1 when nothing matched.
func (t *approxTree) match(key []symbol) (matched, tenant int) {
	n, last := t.root, t.root
	for matched < len(key) {
		c := n.children[key[matched]]
		if c == nil {
			break
		}
		k := tree.CommonPrefix(c.edge, key[matched:])
		matched += k
		last = c
		if k < len(c.edge) {
			break
		}
		n = c
	}
	if last == t.root {
		return 0, -1
	}
	if last.has(last.creator) {
		return matched, last.creator
	}
	return matched, last.tenants[0].r
}

// evictItem is one (stamp, tenant, node) of the eviction queue, ordered by
// stamp, then tenant, then node id: a total order, so the eviction does not
// depend on the order nodes were visited in.
type evictItem struct {
	stamp uint64
	r     int
	n     *anode
}

// evictQueue is a typed wrapper over gods' binary-heap priority queue.
type evictQueue struct{ q *priorityqueue.Queue }

func newEvictQueue() evictQueue {
	return evictQueue{priorityqueue.NewWith(func(a, b any) int {
		x, y := a.(evictItem), b.(evictItem)
		if c := cmp.Compare(x.stamp, y.stamp); c != 0 {
			return c
		}
		if c := cmp.Compare(x.r, y.r); c != 0 {
			return c
		}
		return cmp.Compare(x.n.id, y.n.id)
	})}
}

func (e evictQueue) push(it evictItem) { e.q.Enqueue(it) }

func (e evictQueue) pop() (evictItem, bool) {
	v, ok := e.q.Dequeue()
	if !ok {
		return evictItem{}, false
	}
	return v.(evictItem), true
}

// evict cuts every tenant down to at most budget symbols, oldest leaf
// first, as SGLang's evict_tenant_by_size: every (stamp, tenant, node) with
// the node a leaf for the tenant goes into one min-queue; a popped entry
// whose tenant is within budget is skipped; otherwise the tenant is
// detached, a node left with no tenant is deleted, and the parent is queued
// if it became the tenant's leaf. Because a tenant's stamps do not increase
// going down a path, each detached node is one of its tenant's oldest.
func (t *approxTree) evict(budget int) {
	if invariants.Enabled {
		defer t.check()
	}
	over := false
	for _, s := range t.size {
		over = over || s > budget
	}
	if !over {
		return
	}
	q := newEvictQueue()
	var walk func(n *anode)
	walk = func(n *anode) {
		for _, c := range n.children {
			walk(c)
		}
		if n == t.root {
			return
		}
		for _, ts := range n.tenants {
			if t.size[ts.r] > budget && n.leafFor(ts.r) {
				q.push(evictItem{stamp: ts.stamp, r: ts.r, n: n})
			}
		}
	}
	walk(t.root)
	for {
		it, ok := q.pop()
		if !ok {
			return
		}
		if t.size[it.r] <= budget || !it.n.has(it.r) {
			continue
		}
		n, p := it.n, it.n.parent
		n.detach(it.r)
		t.size[it.r] -= len(n.edge)
		if len(n.tenants) == 0 {
			delete(p.children, n.edge[0])
		}
		if p != t.root && p.leafFor(it.r) {
			i, _ := p.find(it.r)
			q.push(evictItem{stamp: p.tenants[i].stamp, r: it.r, n: p})
		}
	}
}

// removeTenant detaches r from every node at once (the classic router's
// remove_tenant when a worker leaves) and deletes the nodes left empty.
func (t *approxTree) removeTenant(r int) {
	if invariants.Enabled {
		defer t.check()
	}
	var walk func(n *anode)
	walk = func(n *anode) {
		for k, c := range n.children {
			if !c.has(r) {
				continue
			}
			walk(c)
			c.detach(r)
			if len(c.tenants) == 0 {
				delete(n.children, k)
			}
		}
	}
	walk(t.root)
	t.size[r] = 0
}

// check panics if an invariant of the tree does not hold. It is O(n) and
// runs after every mutation under -tags invariants, and in the tests.
func (t *approxTree) check() {
	size := make([]int, len(t.size))
	var walk func(n *anode)
	walk = func(n *anode) {
		for k, c := range n.children {
			switch {
			case len(c.edge) == 0 || c.edge[0] != k:
				panic("router: approximate tree child keyed by the wrong symbol")
			case c.parent != n:
				panic("router: approximate tree parent link broken")
			case len(c.tenants) == 0:
				panic("router: approximate tree node without a tenant")
			}
			for i, ts := range c.tenants {
				if i > 0 && c.tenants[i-1].r >= ts.r {
					panic("router: approximate tree tenants out of order")
				}
				size[ts.r] += len(c.edge)
				if n != t.root {
					j, ok := n.find(ts.r)
					if !ok {
						panic("router: approximate tree tenant missing from the parent")
					}
					if n.tenants[j].stamp < ts.stamp {
						panic("router: approximate tree stamp newer than the parent's")
					}
				}
			}
			walk(c)
		}
	}
	walk(t.root)
	for r := range size {
		if size[r] != t.size[r] {
			panic("router: approximate tree tenant size out of step")
		}
	}
}
