package tree

import (
	"fmt"

	"github.com/kvsim/kvsim/internal/invariants"
)

// InsertOptions are the per-call options of Insert.
type InsertOptions struct {
	// Priority raises the priority of every node on the path to at least
	// this value (used by the Priority strategy).
	Priority int64
	// Chunked marks an intermediate chunk of a chunked prefill: hits are not
	// counted, so it triggers no write-through (SGLang's chunked=True).
	Chunked bool
}

// InsertResult says what an insert did.
type InsertResult struct {
	// PrefixTokens is the number of tokens of key that were already on the
	// device in the tree (SGLang's return value of insert): the caller's own
	// copies of them are duplicates and are freed by the caller.
	PrefixTokens int64
	// Adopted is, per lane, the tokens of key that the tree took over from
	// the caller's request-held tokens (the new leaf, plus host-only nodes
	// the caller recomputed). They move from Held to the tree's device
	// usage. The slice is reused by the next call.
	Adopted []int64
	// Last is the node holding the last page of key (the root for an empty
	// key).
	Last *Node
}

// Insert adds key to the tree at simulated time now (SGLang's insert).
// Matched nodes are stamped and have their priority raised; a node matched
// only in part is split. Every page of key that is not on the device is
// adopted from the caller's request-held tokens (see [Tree.Reserve]): a
// host-only node becomes device+host again, and the unmatched rest becomes
// one new leaf. Unless opt.Chunked, every matched node and the new leaf count
// a hit, which may start a write-through to the host tier.
//
// The caller must hold (Reserve) at least the adopted tokens on each lane;
// a shortfall is a simulator bug and panics.
func (t *Tree) Insert(key []PageID, now int64, opt InsertOptions) InsertResult {
	return t.InsertRuns(t.pageKey(key), now, opt)
}

// InsertRuns is Insert for a key given as runs of consecutive page ids
// (each run at least one page). The tree keeps no reference to key.
func (t *Tree) InsertRuns(key []PageRun, now int64, opt InsertOptions) InsertResult {
	checkRuns(key)
	return t.insert(t.root, key, now, opt)
}

// InsertFrom is Insert(key, now, opt) for a key whose leading pages are the
// path from the root through from: from.Depth plus from's own pages are
// key's first pages. It gives the same result and has the same effects
// (stamps, hits, priorities, splits, adoption, write-through, in the same
// order), but it does not compare the pages of that path again, so an insert
// costs the pages below from instead of the whole key.
//
// from is meant to be the node a request locked after its previous insert
// (or its match) of a prefix of key: a locked node is on the device, its
// path cannot be evicted, and a split above or of it keeps its last page
// where it was. A from that is not on key's path is a caller bug: the
// -tags invariants build compares the path with key and panics.
func (t *Tree) InsertFrom(from *Node, key []PageID, now int64, opt InsertOptions) InsertResult {
	return t.InsertFromRuns(from, t.pageKey(key), now, opt)
}

// InsertFromRuns is InsertFrom for a key given as runs of consecutive page
// ids (each run at least one page).
func (t *Tree) InsertFromRuns(from *Node, key []PageRun, now int64, opt InsertOptions) InsertResult {
	checkRuns(key)
	if end, n := from.depth+from.npages, runsLen(key); end > n {
		panic(fmt.Sprintf("tree: InsertFrom node %d ends at page %d, past the key's %d pages", from.id, end, n))
	}
	if invariants.Enabled {
		for x := from; x.parent != nil; x = x.parent {
			k := keyCursor{runs: AppendRunRange(nil, key, x.depth, x.depth+x.npages)}
			if k.matchNode(x) != x.npages {
				panic(fmt.Sprintf("tree: InsertFrom node %d is not on the key's path", from.id))
			}
		}
	}
	return t.insert(from, key, now, opt)
}

func (t *Tree) insert(from *Node, key []PageRun, now int64, opt InsertOptions) InsertResult {
	t.advance(now)
	res := InsertResult{Adopted: t.scratch}
	clear(res.Adopted)
	path := t.hitBuf[:0]
	countHits := t.countsHits(opt.Chunked)
	matched := int64(0)
	last := t.walkFrom(from, key, func(n *Node) {
		if opt.Priority > n.priority {
			n.priority = opt.Priority
			t.refresh(n)
		}
		matched += n.npages
		if n.device {
			res.PrefixTokens += n.tokens
		} else {
			// A host-only node recomputed by the caller: adopt its pages.
			t.adopt(n.lanes, res.Adopted)
			t.stats.AdoptedFromHost += n.tokens
			t.setDevice(n, true)
		}
		if countHits {
			path = append(path, n)
		}
	})
	if total := runsLen(key); matched < total {
		lk, lp := t.leafKey(key, matched, total)
		leaf := t.newNode(last, lk, lp, last.depth+last.npages)
		leaf.priority = opt.Priority
		t.adopt(leaf.lanes, res.Adopted)
		leaf.device = true
		addLanes(t.treeDev, leaf.lanes, 1)
		addLanes(t.evict, leaf.lanes, 1)
		last.addChild(leaf)
		t.refresh(leaf)
		t.refresh(last)
		t.observe(leaf, true, true)
		last = leaf
		if countHits {
			path = append(path, leaf)
		}
	}
	for _, n := range path {
		t.hit(n)
	}
	clear(path)
	t.hitBuf = path[:0]
	res.Last = last
	t.check()
	return res
}

// adopt moves lanes from the request-held account to the caller's result;
// the tree's own account is updated by setDevice or by the caller.
func (t *Tree) adopt(lanes, adopted []int64) {
	for o, v := range lanes {
		if t.held[o] < v {
			panic(fmt.Sprintf("tree: insert adopts %d tokens on lane %d but requests hold only %d", v, o, t.held[o]))
		}
		t.held[o] -= v
		adopted[o] += v
	}
}

// countsHits says whether inserts count hits: never for chunks, and with a
// host tier not under write-back (SGLang's _inc_hit_count).
func (t *Tree) countsHits(chunked bool) bool {
	if chunked {
		return false
	}
	return !(t.HasHost() && t.cfg.WritePolicy == WriteBack)
}

// hit counts one hit on n: promotion under SegmentedLRU and write-through
// once the threshold is reached.
func (t *Tree) hit(n *Node) {
	n.hitCount++
	if t.cfg.Eviction == SegmentedLRU && !n.protected && n.device && n.hitCount >= t.cfg.ProtectedHits {
		t.protect(n)
	}
	t.refresh(n)
	if t.HasHost() && !n.host && n.device && n.hitCount >= t.cfg.WriteThroughThreshold {
		t.writeBackup(n, false)
	}
}

func (t *Tree) protect(n *Node) {
	n.protected = true
	t.protTok += n.tokens
	t.protHeap.Push(n)
	for t.protTok > t.protCap && t.protHeap.Len() > 0 {
		t.unprotect(t.protHeap.Min())
	}
}

// unprotect moves n back to probation (or out of the segment when it leaves
// the device).
func (t *Tree) unprotect(n *Node) {
	n.protected = false
	t.protTok -= n.tokens
	t.protHeap.Remove(n)
	t.refresh(n)
}

// writeBackup copies n to the host tier (SGLang's write_backup). For
// write-through the copy is asynchronous: n is locked (with its path) until
// [Tree.AckWrites] sees the copy finish. For write-back (called from
// eviction) the copy is synchronous and nothing is locked. It returns the
// tokens written, 0 if n was skipped or no host space could be found.
func (t *Tree) writeBackup(n *Node, writeBack bool) int64 {
	if !writeBack && n.parent.parent != nil && !n.parent.host {
		// The host tier stays prefix-closed: retried at the next hit.
		return 0
	}
	if !t.hostFits(n.lanes) {
		t.EvictHost(n.tokens)
		if !t.hostFits(n.lanes) {
			t.stats.WriteFailures++
			return 0
		}
	}
	t.setHost(n, true)
	if writeBack {
		t.stats.WrittenBack += n.tokens
		if t.cfg.HoldWriteBacks {
			n.hostRef++
			t.refresh(n)
			t.heldWB = append(t.heldWB, n)
		}
		return n.tokens
	}
	t.stats.WrittenThrough += n.tokens
	t.lock(n)
	t.writes = append(t.writes, Transfer{Node: n, Tokens: n.tokens, Lanes: append([]int64(nil), n.lanes...)})
	return n.tokens
}

func (t *Tree) hostFits(lanes []int64) bool {
	for o, v := range lanes {
		if t.hostUsed[o]+t.hostRes[o]+v > t.cfg.HostTokens {
			return false
		}
	}
	return true
}

// Writes returns the in-flight write-through copies, oldest first. The slice
// is owned by the tree and changes with the next mutation.
func (t *Tree) Writes() []Transfer { return t.writes }

// AckWrites acknowledges the k oldest write-through copies as finished,
// unlocking their nodes (SGLang's writing_check).
func (t *Tree) AckWrites(k int) { t.ack(&t.writes, k, "AckWrites") }

// ---- Locks and request holdings ----

// Lock pins n and its path to the root (SGLang's inc_lock_ref): locked
// device tokens move from evictable to protected.
func (t *Tree) Lock(n *Node) {
	t.lock(n)
	t.check()
}

// Unlock releases one Lock of n (SGLang's dec_lock_ref).
func (t *Tree) Unlock(n *Node) {
	t.unlock(n)
	t.check()
}

func (t *Tree) lock(n *Node) {
	for ; n.parent != nil; n = n.parent {
		if n.lockRef == 0 && n.device {
			addLanes(t.evict, n.lanes, -1)
			addLanes(t.prot, n.lanes, 1)
		}
		n.lockRef++
		t.refresh(n)
	}
}

func (t *Tree) unlock(n *Node) {
	for ; n.parent != nil; n = n.parent {
		if n.lockRef <= 0 {
			panic(fmt.Sprintf("tree: lock count underflow on node %d", n.id))
		}
		n.lockRef--
		if n.lockRef == 0 && n.device {
			addLanes(t.prot, n.lanes, -1)
			addLanes(t.evict, n.lanes, 1)
		}
		t.refresh(n)
	}
}

// ProtectHost pins n's host copy against host eviction (SGLang's
// protect_host, used while a storage operation reads it).
func (t *Tree) ProtectHost(n *Node) {
	n.hostRef++
	t.refresh(n)
}

// ReleaseHost undoes one ProtectHost.
func (t *Tree) ReleaseHost(n *Node) {
	if n.hostRef <= 0 {
		panic(fmt.Sprintf("tree: host ref underflow on node %d", n.id))
	}
	n.hostRef--
	t.refresh(n)
}

// Reserve takes device tokens per lane for a request's own KV (what SGLang's
// allocator hands a request for its extend tokens). It is all or nothing
// and evicts nothing: it returns false if some lane lacks free tokens.
func (t *Tree) Reserve(lanes []int64) bool {
	for o, v := range lanes {
		if v < 0 {
			panic("tree: Reserve of negative tokens")
		}
		if t.DeviceFree(o) < v {
			return false
		}
	}
	addLanes(t.held, lanes, 1)
	return true
}

// Release returns request-held device tokens to the free pool.
func (t *Tree) Release(lanes []int64) { takeLanes(t.held, lanes, "Release", "held") }
