package tree

import "fmt"

// ---- Storage (L3) support: host reservations and host-only inserts ----

// ReserveHost takes host tokens per lane for an in-flight storage prefetch
// (SGLang allocating host slots in prefetch_from_storage). It is all or
// nothing: if some lane is short it evicts host-only leaves once, for the
// whole amount (SGLang's evict_host then retry), and returns false if a lane
// is still short. Reserved tokens count against the host capacity until
// [Tree.InsertHost] turns them into host copies or
// [Tree.ReleaseHostReservation] gives them back.
func (t *Tree) ReserveHost(lanes []int64) bool {
	var total int64
	for o, v := range lanes {
		if v < 0 {
			panic(fmt.Sprintf("tree: ReserveHost of %d tokens on lane %d", v, o))
		}
		total += v
	}
	if !t.hostFits(lanes) {
		t.EvictHost(total)
		if !t.hostFits(lanes) {
			t.check()
			return false
		}
	}
	addLanes(t.hostRes, lanes, 1)
	t.check()
	return true
}

// ReleaseHostReservation gives back reserved host tokens (the part of a
// prefetch that was not inserted).
func (t *Tree) ReleaseHostReservation(lanes []int64) {
	takeLanes(t.hostRes, lanes, "ReleaseHostReservation", "reserved")
	t.check()
}

// HostInsertResult says what [Tree.InsertHost] did.
type HostInsertResult struct {
	// Matched is the number of tokens of the key already in the tree, on
	// either tier, when the insert started (SGLang's matched_length): the
	// fetched copies of those tokens are duplicates.
	Matched int64
	// Inserted is the number of tokens added as a new host-only leaf; they
	// are positions [Matched, Matched+Inserted) of the key.
	Inserted int64
	// Lanes is Inserted per lane, taken from the host reservation. The slice
	// is reused by the next call.
	Lanes []int64
	// Last is the deepest node of the key after the call: the new leaf, or
	// the deepest matched node if nothing was inserted.
	Last *Node
	// Missing is set when the tree no longer holds the first from pages of
	// the key (the prefix the fetched pages hang under): nothing is inserted.
	Missing bool
	// Blocked is set when the deepest matched node has no host copy and is
	// not the root: a host-only leaf under it would break host
	// prefix-closure, so nothing is inserted.
	Blocked bool
}

// InsertHost adds fetched pages to the tree as host-only KV (SGLang's
// _insert_helper_host, run when a storage prefetch terminates). key is the
// whole path from the root; pages key[from:] are the fetched ones and
// key[:from] the prefix they hang under, which must still be in the tree.
// The walk stamps and, where it matches part of a node, splits it, as Match
// does; nodes that already hold pages of the key are left alone, whatever
// their tier, and the unmatched rest becomes one new host-only leaf under
// the deepest matched node, its host tokens taken from the caller's
// reservation ([Tree.ReserveHost]; a shortfall is a caller bug and panics).
// The caller releases whatever it reserved beyond Lanes.
//
// Nothing is inserted if the walk stops inside key[:from] (Missing), or if
// the deepest matched node is neither the root nor backed up (Blocked): the
// host tier stays prefix-closed. SGLang inserts under last_host_node, which
// its prefetch protected, so it meets neither case; here the tree may have
// changed while the fetch ran, and the caller learns what happened.
func (t *Tree) InsertHost(key []PageID, from int, now int64) HostInsertResult {
	if from < 0 || from > len(key) {
		panic(fmt.Sprintf("tree: InsertHost from page %d of a %d-page key", from, len(key)))
	}
	t.advance(now)
	res := HostInsertResult{Lanes: t.scratch}
	clear(res.Lanes)
	runs := t.pageKey(key)
	matched := int64(0)
	last := t.walk(runs, func(n *Node) { matched += n.npages })
	res.Matched = matched * int64(t.cfg.PageSize)
	res.Last = last
	switch {
	case matched < int64(from):
		res.Missing = true
	case matched == int64(len(key)):
	case last.parent != nil && !last.host:
		res.Blocked = true
	default:
		lk, lp := t.leafKey(runs, matched, int64(len(key)))
		leaf := t.newNode(last, lk, lp, last.depth+last.npages)
		for o, v := range leaf.lanes {
			if t.hostRes[o] < v {
				panic(fmt.Sprintf("tree: InsertHost takes %d host tokens on lane %d but only %d are reserved", v, o, t.hostRes[o]))
			}
			t.hostRes[o] -= v
			res.Lanes[o] = v
		}
		leaf.host = true
		addLanes(t.hostUsed, leaf.lanes, 1)
		last.addChild(leaf)
		t.refresh(leaf)
		t.refresh(last)
		t.observe(leaf, false, true)
		res.Inserted = leaf.tokens
		res.Last = leaf
		t.stats.InsertedFromStorage += leaf.tokens
	}
	t.check()
	return res
}

// TakeWriteBacks returns the nodes written back to the host since the last
// call and forgets them (only with Config.HoldWriteBacks; otherwise it
// returns nil). Each holds one host protection that the caller releases
// with [Tree.ReleaseHost] once it is done with the copy. A node that was
// since dropped from the tree (a write-back that found no host space drops
// the host-only nodes below it) has a nil Parent; releasing it is harmless.
func (t *Tree) TakeWriteBacks() []*Node {
	ns := t.heldWB
	t.heldWB = nil
	return ns
}
