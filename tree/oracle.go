package tree

import (
	"errors"
	"math"
)

// Oracle answers Belady's question for the [Belady] eviction strategy:
// when is a page run needed next? It knows the whole trace in advance, as
// a trie of its prompts' page sequences: a prefix is an int32 id (Root
// the empty prefix), -1 none (a prefix no request of the trace has). The
// simulator implements it (package sim); the tree declares what it calls.
//
// The tree asks [Oracle.NextUse] whenever it refreshes a node (on every
// access, lock, unlock and residency change) and keeps the answer as the
// node's eviction key until the next refresh, so the heaps stay ordered
// whatever the oracle learns in between.
type Oracle interface {
	// Root returns the id of the empty prefix.
	Root() int32
	// Child returns the id of prefix extended by page p, or -1 when no
	// request of the trace has that prefix. prefix is >= 0.
	Child(prefix int32, p PageID) int32
	// NextUse returns the trace position (smaller is sooner) of the next
	// request still to come that uses prefix, or math.MaxInt64 when none
	// does. prefix is >= 0.
	NextUse(prefix int32) int64
}

// ErrOracleSet is returned by [Tree.SetOracle] on a tree that already has
// nodes or an oracle.
var ErrOracleSet = errors.New("tree: the oracle must be set once, on an empty tree")

// SetOracle gives a [Belady] tree its oracle. It must be called once,
// before anything is inserted; a Belady tree without an oracle panics at
// its first eviction decision. Other strategies ignore the oracle.
func (t *Tree) SetOracle(o Oracle) error {
	if t.oracle != nil || t.nodes > 0 || o == nil {
		return ErrOracleSet
	}
	t.oracle = o
	t.root.oLast = o.Root()
	return nil
}

// oracleIDs sets n's oracle prefix ids from its parent's: oFirst is the
// prefix ending at n's first page, oLast the one ending at its last.
func (t *Tree) oracleIDs(n *Node) {
	if t.oracle == nil {
		return
	}
	id := n.parent.oLast
	n.oFirst = -1
	first := true
	step := func(p PageID) {
		if id >= 0 {
			id = t.oracle.Child(id, p)
			if first {
				n.oFirst, first = id, false
			}
		}
	}
	for _, p := range n.pages {
		step(p)
	}
	if n.pages == nil {
		for _, x := range n.key {
			for k := range x.N {
				step(x.First + PageID(k))
			}
		}
	}
	n.oLast = id
}

// nextUse is n's Belady key: when its first page's prefix is next used.
// A run whose first page is needed is needed (at least in part); a run
// whose first page is not is not needed at all.
func (t *Tree) nextUse(n *Node) int64 {
	if t.oracle == nil {
		panic("tree: belady eviction without an oracle (call SetOracle)")
	}
	if n.oFirst < 0 {
		return math.MaxInt64
	}
	return t.oracle.NextUse(n.oFirst)
}
