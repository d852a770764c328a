package tree

import (
	"fmt"
	"slices"
	"testing"
)

// orderTree builds a small hand-made tree (page size 1, no host tier):
//
//	t=1 insert A = 1 2 3      (priority 0) -> node 1 [1 2 3]
//	t=2 insert B = 1 2 4 5    (priority 5) -> split: node 2 [1 2], node 1 [3], node 3 [4 5]
//	t=3 insert C = 6          (priority 1) -> node 4 [6]
//	t=4 insert A again        (priority 0) -> hits on nodes 2 and 1
//	t=5 match C                            -> touches node 4
//
// Hits: node 1: 2, node 2: 3, node 3: 1, node 4: 1. Last access: 3 (t2) <
// 2 < 1 (both t4, root-first) < 4 (t5). Creation: 1 < 2 < 3 < 4.
func orderTree(t *testing.T, cfg Config) *Tree {
	t.Helper()
	cfg.PageSize, cfg.DeviceTokens = 1, 100
	tr, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ins := func(now, prio int64, key ...PageID) {
		lanes := tr.LaneTokens(0, int64(len(key)), make([]int64, 1))
		if !tr.Reserve(lanes) {
			t.Fatal("Reserve failed")
		}
		res := tr.Insert(key, now, InsertOptions{Priority: prio})
		lanes[0] -= res.Adopted[0]
		tr.Release(lanes)
	}
	ins(1, 0, 1, 2, 3)
	ins(2, 5, 1, 2, 4, 5)
	ins(3, 1, 6)
	ins(4, 0, 1, 2, 3)
	tr.Match([]PageID{6}, 5)
	return tr
}

// victims evicts one token at a time (one node per call) until nothing is
// left and returns the evicted node ids in order.
func victims(tr *Tree) []NodeID {
	var out []NodeID
	for tr.devHeap.Len() > 0 {
		n := tr.devHeap.Min()
		out = append(out, n.id)
		if res := tr.Evict(1); res.Nodes != 1 {
			panic(fmt.Sprintf("Evict(1) evicted %d nodes", res.Nodes))
		}
	}
	return out
}

func TestEvictionOrderPerStrategy(t *testing.T) {
	for _, tc := range []struct {
		strategy Strategy
		want     []NodeID
	}{
		{LRU, []NodeID{3, 1, 2, 4}},          // oldest access first; 2 becomes a leaf after 1
		{LFU, []NodeID{3, 4, 1, 2}},          // hits 1 (older first), then 2, then 3
		{FIFO, []NodeID{1, 3, 2, 4}},         // creation order among leaves
		{MRU, []NodeID{4, 1, 3, 2}},          // newest access first
		{FILO, []NodeID{4, 3, 1, 2}},         // newest creation first
		{Priority, []NodeID{1, 4, 3, 2}},     // priority 0, 1, 5, then 2 (5, raised by B)
		{SLRU, []NodeID{3, 4, 1, 2}},         // probation (hits < 2) first, LRU inside
		{SegmentedLRU, []NodeID{3, 4, 1, 2}}, // 1 and 2 promoted at their second hit
	} {
		t.Run(tc.strategy.String(), func(t *testing.T) {
			tr := orderTree(t, Config{Eviction: tc.strategy})
			if got := victims(tr); !slices.Equal(got, tc.want) {
				t.Fatalf("eviction order = %v, want %v", got, tc.want)
			}
			if err := tr.Check(); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// With a protected segment of 2 tokens, promoting node 1 (1 token) at t=4
// overflows it (node 2 holds 2), so the segment's LRU node, 2, is demoted
// to probation.
func TestSegmentedLRUDemotesOnOverflow(t *testing.T) {
	tr := orderTree(t, Config{Eviction: SegmentedLRU, ProtectedShare: 0.02})
	seg := map[NodeID]int{}
	var visit func(n *Node)
	visit = func(n *Node) {
		for _, c := range n.kids {
			seg[c.id], _ = tr.SLRUKey(c)
			visit(c)
		}
	}
	visit(tr.Root())
	want := map[NodeID]int{1: 1, 2: 0, 3: 0, 4: 0}
	for id, s := range want {
		if seg[id] != s {
			t.Errorf("node %d in segment %d, want %d", id, seg[id], s)
		}
	}
	// Under SGLang's unbounded slru both 1 and 2 are protected.
	tr = orderTree(t, Config{Eviction: SLRU})
	visit(tr.Root())
	if seg[1] != 1 || seg[2] != 1 {
		t.Errorf("slru segments %v, want nodes 1 and 2 protected", seg)
	}
}

// A backed-up leaf is demoted to host-only; a leaf without a copy is deleted;
// write-back copies first and reports the tokens for the stall.
func TestEvictDemotesDeletesOrWritesBack(t *testing.T) {
	for _, tc := range []struct {
		policy                        WritePolicy
		wantHostOnly, wantWrittenBack int64
	}{
		{WriteThrough, 3, 0},          // written at the first insert, so demoted
		{WriteThroughSelective, 0, 0}, // one hit only: never written, deleted
		{WriteBack, 3, 3},             // written at eviction
	} {
		t.Run(tc.policy.String(), func(t *testing.T) {
			tr, err := New(Config{PageSize: 1, DeviceTokens: 10, HostTokens: 20, WritePolicy: tc.policy})
			if err != nil {
				t.Fatal(err)
			}
			lanes := []int64{3}
			tr.Reserve(lanes)
			tr.Insert([]PageID{7, 8, 9}, 1, InsertOptions{})
			tr.AckWrites(len(tr.Writes()))
			res := tr.Evict(3)
			if res.Tokens != 3 || res.WrittenBack != tc.wantWrittenBack {
				t.Fatalf("Evict = %+v", res)
			}
			if got := tr.HostTotal(); got != tc.wantHostOnly {
				t.Fatalf("host tokens after eviction = %d, want %d", got, tc.wantHostOnly)
			}
			m := tr.Match([]PageID{7, 8, 9}, 2)
			if m.DeviceTokens != 0 || m.HostTokens != tc.wantHostOnly {
				t.Fatalf("Match after eviction = %+v", m)
			}
		})
	}
}
