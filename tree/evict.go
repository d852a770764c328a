package tree

import "fmt"

// EvictResult says what a device eviction did.
type EvictResult struct {
	// Freed is the device tokens freed on each lane. The slice is reused by
	// the next call.
	Freed []int64
	// Tokens is the total freed.
	Tokens int64
	// WrittenBack is the tokens that write-back copied to the host
	// synchronously before freeing them: the simulator charges their D2H time
	// as a stall.
	WrittenBack int64
	// Nodes is the number of nodes evicted.
	Nodes int
}

// Evict frees at least numTokens device tokens, if that many are evictable,
// by evicting device leaves in the strategy's order (SGLang's evict): a leaf
// with a host copy is demoted to host-only; one without is, under
// write-back, copied to the host first, and otherwise deleted. A parent whose
// device children are all gone becomes a leaf candidate at once. Eviction is
// by whole nodes, so it may free more than asked.
func (t *Tree) Evict(numTokens int64) EvictResult {
	res := EvictResult{Freed: make([]int64, t.cp)}
	for res.Tokens < numTokens && t.devHeap.Len() > 0 {
		t.evictLeaf(t.devHeap.Min(), &res)
	}
	t.check()
	return res
}

// EvictNode evicts one device leaf chosen by the caller (for example by the
// owner-lane planner). n must be an evictable device leaf: on the device,
// unlocked, with no device children.
func (t *Tree) EvictNode(n *Node) (EvictResult, error) {
	res := EvictResult{Freed: make([]int64, t.cp)}
	if n.parent == nil || !n.device || n.lockRef > 0 || n.devKids > 0 {
		return res, fmt.Errorf("tree: node %d is not an evictable device leaf (device=%v locked=%v device children=%d)",
			n.id, n.device, n.lockRef > 0, n.devKids)
	}
	t.evictLeaf(n, &res)
	t.check()
	return res, nil
}

// IsEvictableLeaf reports whether n is a device leaf that eviction may take.
func (t *Tree) IsEvictableLeaf(n *Node) bool { return n.devIdx >= 0 }

func (t *Tree) evictLeaf(x *Node, res *EvictResult) {
	addLanes(res.Freed, x.lanes, 1)
	res.Tokens += x.tokens
	res.Nodes++
	t.stats.DeviceEvicted += x.tokens
	if !x.host && t.HasHost() && t.cfg.WritePolicy == WriteBack {
		if w := t.writeBackup(x, true); w > 0 {
			res.WrittenBack += w
		}
	}
	if x.host {
		t.stats.Demoted += x.tokens
		t.setDevice(x, false)
		return
	}
	t.stats.Deleted += x.tokens
	t.deleteSubtree(x)
}

// deleteSubtree removes n, which has no device copy left or is being
// dropped, and everything below it. Below a device leaf only host-only
// nodes can remain; that happens only under write-back when the host tier
// is full (SGLang would fail an assertion there), and their host copies are
// freed with it.
func (t *Tree) deleteSubtree(n *Node) {
	for len(n.kids) > 0 {
		c := n.kids[len(n.kids)-1]
		if c.device || c.lockRef > 0 {
			panic(fmt.Sprintf("tree: deleting node %d with a device-resident or locked child %d", n.id, c.id))
		}
		if t.cfg.WritePolicy != WriteBack {
			panic(fmt.Sprintf("tree: non-backed node %d has host-only child %d under %v", n.id, c.id, t.cfg.WritePolicy))
		}
		t.stats.HostEvicted += c.tokens
		t.deleteSubtree(c)
	}
	if n.device {
		t.setDevice(n, false)
	}
	if n.host {
		t.setHost(n, false)
	}
	t.devHeap.Set(n, false)
	t.hostHeap.Set(n, false)
	if n.protIdx >= 0 {
		t.unprotect(n)
	}
	p := n.parent
	p.removeChild(n)
	n.parent = nil
	t.nodes--
	t.refresh(p)
}

// EvictHost frees at least numTokens host tokens, if possible, by deleting
// host-only leaves in the strategy's order (SGLang's evict_host). Host copies
// of device-resident nodes are never reclaimed, and protected (ProtectHost)
// or locked nodes are skipped. It returns the tokens freed.
func (t *Tree) EvictHost(numTokens int64) int64 {
	var freed int64
	for freed < numTokens && t.hostHeap.Len() > 0 {
		x := t.hostHeap.Min()
		freed += x.tokens
		t.stats.HostEvicted += x.tokens
		t.deleteSubtree(x)
	}
	t.check()
	return freed
}

// ---- Load-back ----

// LoadResult is the outcome of a load-back.
type LoadResult struct {
	// Tokens is the number of host tokens queued for loading to the device
	// (0 if the load was skipped or failed).
	Tokens int64
	// Lanes is Tokens per lane (reused by the next call).
	Lanes []int64
	// Last is the deepest device-resident node after the call: the loaded
	// node, or the deepest device ancestor if nothing was loaded.
	Last *Node
	// Skipped is set when the host hit was below the load-back threshold.
	Skipped bool
	// Failed is set when no device space could be found.
	Failed bool
}

// LoadBack brings the host-only chain ending at n back to the device
// (SGLang's init_load_back/load_back): all or nothing, skipped below
// LoadBackThreshold tokens; if the device lacks space it evicts once (with
// the device prefix locked so it is not evicted itself) and gives up if
// still short. The loaded node stays locked until [Tree.AckLoads]. If n is
// on the device already nothing happens.
func (t *Tree) LoadBack(n *Node, now int64) LoadResult {
	t.advance(now)
	res := LoadResult{Last: n, Lanes: make([]int64, t.cp)}
	if n.device {
		return res
	}
	var chain []*Node
	anc := n
	for !anc.device {
		if !anc.host {
			panic(fmt.Sprintf("tree: node %d is on neither tier", anc.id))
		}
		chain = append(chain, anc)
		addLanes(res.Lanes, anc.lanes, 1)
		res.Tokens += anc.tokens
		anc = anc.parent
	}
	fallback := func() LoadResult {
		clear(res.Lanes)
		res.Tokens = 0
		res.Last = anc
		return res
	}
	if res.Tokens < t.cfg.LoadBackThreshold {
		t.stats.LoadSkipped += res.Tokens
		res.Skipped = true
		return fallback()
	}
	if !t.deviceFits(res.Lanes) {
		// Lock the device prefix so it is not evicted, and pin the host
		// chain so that a write-back eviction's host eviction cannot drop it.
		t.lock(anc)
		n.hostRef++
		t.refresh(n)
		t.Evict(res.Tokens)
		n.hostRef--
		t.refresh(n)
		t.unlock(anc)
		if !t.deviceFits(res.Lanes) {
			t.stats.LoadFailed += res.Tokens
			res.Failed = true
			return fallback()
		}
	}
	for i := len(chain) - 1; i >= 0; i-- {
		t.setDevice(chain[i], true)
	}
	t.stats.LoadedBack += res.Tokens
	t.lock(n)
	t.loads = append(t.loads, Transfer{Node: n, Tokens: res.Tokens, Lanes: append([]int64(nil), res.Lanes...)})
	t.check()
	return res
}

func (t *Tree) deviceFits(lanes []int64) bool {
	for o, v := range lanes {
		if t.DeviceFree(o) < v {
			return false
		}
	}
	return true
}

// Loads returns the in-flight load-backs, oldest first. The slice is owned
// by the tree and changes with the next mutation.
func (t *Tree) Loads() []Transfer { return t.loads }

// AckLoads acknowledges the k oldest load-backs as finished, unlocking their
// nodes (SGLang's loading_check).
func (t *Tree) AckLoads(k int) { t.ack(&t.loads, k, "AckLoads") }

// ack acknowledges the k oldest transfers of the queue q as finished,
// unlocking their nodes; name is the public method, for the panic of a
// caller's bug.
func (t *Tree) ack(q *[]Transfer, k int, name string) {
	if k < 0 || k > len(*q) {
		panic(fmt.Sprintf("tree: %s(%d) with %d in flight", name, k, len(*q)))
	}
	for _, x := range (*q)[:k] {
		t.unlock(x.Node)
	}
	*q = append((*q)[:0], (*q)[k:]...)
	t.check()
}
