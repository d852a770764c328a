package tree

import (
	"errors"
	"strings"
	"testing"

	"pgregory.net/rapid"
)

func mustNew(t *testing.T, cfg Config) *Tree {
	t.Helper()
	tr, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return tr
}

// insertKey reserves, inserts and releases what the tree did not adopt.
func insertKey(t *testing.T, tr *Tree, now int64, opt InsertOptions, key ...PageID) InsertResult {
	t.Helper()
	lanes := tr.LaneTokens(0, int64(len(key)*tr.Config().PageSize), make([]int64, tr.Config().CP))
	if !tr.Reserve(lanes) {
		t.Fatalf("Reserve(%v) failed", lanes)
	}
	res := tr.Insert(key, now, opt)
	for o := range lanes {
		lanes[o] -= res.Adopted[o]
	}
	tr.Release(lanes)
	return res
}

func TestWriteThroughLocksUntilAck(t *testing.T) {
	tr := mustNew(t, Config{PageSize: 2, DeviceTokens: 8, HostTokens: 16})
	insertKey(t, tr, 1, InsertOptions{}, 1, 2)
	if len(tr.Writes()) != 1 || tr.Writes()[0].Tokens != 4 {
		t.Fatalf("Writes() = %+v, want one 4-token copy", tr.Writes())
	}
	if tr.EvictableTotal() != 0 || tr.Protected(0) != 4 {
		t.Fatalf("evictable %d protected %d while writing", tr.EvictableTotal(), tr.Protected(0))
	}
	if res := tr.Evict(4); res.Tokens != 0 {
		t.Fatalf("evicted %d tokens of a node being written", res.Tokens)
	}
	tr.AckWrites(1)
	if tr.EvictableTotal() != 4 {
		t.Fatalf("evictable %d after the ack", tr.EvictableTotal())
	}
	// A child is written only once its parent is backed up: with
	// write_through_selective neither is backed after one insert, and the
	// parent's second hit (the child's first) writes the parent only.
	tr = mustNew(t, Config{PageSize: 1, DeviceTokens: 8, HostTokens: 16, WritePolicy: WriteThroughSelective})
	insertKey(t, tr, 1, InsertOptions{}, 1, 2)
	insertKey(t, tr, 2, InsertOptions{}, 1, 2, 3)
	if got := len(tr.Writes()); got != 1 || tr.Writes()[0].Node.Tokens() != 2 {
		t.Fatalf("writes after the second insert = %+v, want the 2-token parent only", tr.Writes())
	}
	// Chunked inserts count no hits, so they write nothing.
	tr = mustNew(t, Config{PageSize: 1, DeviceTokens: 8, HostTokens: 16})
	insertKey(t, tr, 1, InsertOptions{Chunked: true}, 1, 2)
	if len(tr.Writes()) != 0 {
		t.Fatalf("a chunked insert wrote %+v", tr.Writes())
	}
}

func TestWriteFailsWhenHostIsFull(t *testing.T) {
	tr := mustNew(t, Config{PageSize: 1, DeviceTokens: 8, HostTokens: 2})
	insertKey(t, tr, 1, InsertOptions{}, 1, 2, 3)
	if len(tr.Writes()) != 0 || tr.Stats().WriteFailures != 1 {
		t.Fatalf("writes %+v failures %d, want none and 1", tr.Writes(), tr.Stats().WriteFailures)
	}
}

func TestLoadBack(t *testing.T) {
	setup := func(threshold int64, device int64) (*Tree, MatchResult) {
		tr := mustNew(t, Config{PageSize: 4, DeviceTokens: device, HostTokens: 64, LoadBackThreshold: threshold})
		insertKey(t, tr, 1, InsertOptions{}, 1, 2, 3) // 12 tokens, written through
		tr.AckWrites(len(tr.Writes()))
		tr.Evict(12)
		return tr, tr.Match([]PageID{1, 2, 3}, 2)
	}
	tr, m := setup(10, 16)
	if m.DeviceTokens != 0 || m.HostTokens != 12 || m.LastHost != m.Last || m.LastDevice != tr.Root() {
		t.Fatalf("Match after demotion = %+v", m)
	}
	lr := tr.LoadBack(m.LastHost, 3)
	if lr.Tokens != 12 || lr.Last != m.Last {
		t.Fatalf("LoadBack = %+v", lr)
	}
	if m2 := tr.Match([]PageID{1, 2, 3}, 4); m2.DeviceTokens != 12 {
		t.Fatalf("after LoadBack device hit %d", m2.DeviceTokens)
	}
	if res := tr.Evict(12); res.Tokens != 0 {
		t.Fatal("a loading node was evicted before its ack")
	}
	tr.AckLoads(1)
	if res := tr.Evict(12); res.Tokens != 12 {
		t.Fatalf("after the ack Evict freed %d", res.Tokens)
	}

	// Below the threshold the host hit is recomputed.
	tr, m = setup(13, 16)
	if lr := tr.LoadBack(m.Last, 3); !lr.Skipped || lr.Tokens != 0 || lr.Last != tr.Root() {
		t.Fatalf("LoadBack below threshold = %+v", lr)
	}
	// All or nothing: 12 tokens do not fit in a device of 8 even after
	// evicting.
	tr, m = setup(10, 12)
	tr.Reserve([]int64{8})
	if lr := tr.LoadBack(m.Last, 3); !lr.Failed || lr.Tokens != 0 {
		t.Fatalf("LoadBack without room = %+v", lr)
	}
}

// A recomputed host-only prefix is adopted at insert: it is not counted as
// a duplicate prefix, and the node is device+host again.
func TestInsertAdoptsHostOnlyNodes(t *testing.T) {
	tr := mustNew(t, Config{PageSize: 1, DeviceTokens: 8, HostTokens: 16})
	insertKey(t, tr, 1, InsertOptions{}, 1, 2)
	tr.AckWrites(len(tr.Writes()))
	tr.Evict(2)
	res := insertKey(t, tr, 2, InsertOptions{}, 1, 2, 3)
	if res.PrefixTokens != 0 || res.Adopted[0] != 3 {
		t.Fatalf("Insert over a host-only prefix = prefix %d adopted %v", res.PrefixTokens, res.Adopted)
	}
	if tr.Stats().AdoptedFromHost != 2 {
		t.Fatalf("AdoptedFromHost = %d", tr.Stats().AdoptedFromHost)
	}
	m := tr.Match([]PageID{1, 2, 3}, 3)
	if m.DeviceTokens != 3 {
		t.Fatalf("Match = %+v", m)
	}
}

func TestSplitKeepsLocksAndCounts(t *testing.T) {
	tr := mustNew(t, Config{PageSize: 1, CP: 2, DeviceTokens: 16})
	res := insertKey(t, tr, 1, InsertOptions{}, 1, 2, 3, 4)
	tr.Lock(res.Last)
	m := tr.Match([]PageID{1, 2, 9}, 2) // splits [1 2 3 4] into [1 2] + [3 4]
	if m.DeviceTokens != 2 || m.Last.Tokens() != 2 || m.Last.LockRef() != 1 {
		t.Fatalf("after split: %+v, last lock %d", m, m.Last.LockRef())
	}
	if got := m.Last.Lanes(); got[0] != 1 || got[1] != 1 {
		t.Fatalf("upper node lanes %v, want [1 1]", got)
	}
	tr.Unlock(res.Last)
	if tr.EvictableTotal() != 4 || tr.Protected(0)+tr.Protected(1) != 0 {
		t.Fatalf("after unlock evictable %d", tr.EvictableTotal())
	}
	if err := tr.Check(); err != nil {
		t.Fatal(err)
	}
}

func TestTimeNeverGoesBack(t *testing.T) {
	tr := mustNew(t, Config{DeviceTokens: 4})
	tr.Match(nil, 10)
	defer func() {
		if r := recover(); r == nil || !strings.HasPrefix(r.(string), "tree: ") {
			t.Fatalf("recover() = %v, want a tree: panic", r)
		}
	}()
	tr.Match(nil, 9)
}

func TestConfigValidateReportsEveryProblem(t *testing.T) {
	err := Config{PageSize: -1, CP: 2000, DeviceTokens: 0, HostTokens: -5, ProtectedShare: 2}.Validate()
	if err == nil {
		t.Fatal("Validate accepted a bad config")
	}
	for _, want := range []string{
		"tree.page_size: must be >= 1 (got -1)",
		"tree.cp: must be in [1, 1024] (got 2000)",
		"tree.device_tokens: must be > 0 (got 0)",
		"tree.host_tokens: must be >= 0 (got -5)",
		"tree.protected_share: must be in (0, 1] (got 2)",
	} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("Validate() lacks %q:\n%v", want, err)
		}
	}
	if _, err := New(Config{DeviceTokens: 1}); err != nil {
		t.Fatalf("New with defaults: %v", err)
	}
	for _, name := range []string{"lru", "lfu", "fifo", "mru", "filo", "priority", "slru", "slru-segmented"} {
		s, err := ParseStrategy(name)
		if err != nil || s.String() != name {
			t.Errorf("ParseStrategy(%q) = %v, %v", name, s, err)
		}
	}
	if _, err := ParseStrategy("arc"); err == nil {
		t.Error("ParseStrategy(arc) succeeded")
	}
	for _, name := range []string{"write_through", "write_through_selective", "write_back"} {
		if w, err := ParseWritePolicy(name); err != nil || w.String() != name {
			t.Errorf("ParseWritePolicy(%q) = %v, %v", name, w, err)
		}
	}
}

// LaneTokens' closed form agrees with counting token by token.
func TestPropLaneTokensMatchesBruteForce(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		ps := int64(rapid.IntRange(1, 8).Draw(rt, "page"))
		cp := int64(rapid.IntRange(1, 8).Draw(rt, "cp"))
		mode := rapid.SampledFrom([]LaneMode{LanePages, LaneTokens}).Draw(rt, "mode")
		from := int64(rapid.IntRange(0, 200).Draw(rt, "from"))
		to := from + int64(rapid.IntRange(0, 200).Draw(rt, "len"))
		got := make([]int64, cp)
		addLaneTokens(mode, ps, cp, from, to, got)
		want := make([]int64, cp)
		for p := from; p < to; p++ {
			unit := p / ps
			if mode == LaneTokens {
				unit = p
			}
			want[unit%cp]++
		}
		for o := range want {
			if got[o] != want[o] {
				rt.Fatalf("lanes(%v, page %d, cp %d, [%d,%d)) = %v, want %v", mode, ps, cp, from, to, got, want)
			}
		}
	})
}

func TestPagerIsExact(t *testing.T) {
	p := NewPager(2)
	a := p.TokenPages([]Token{1, 2, 3, 4, 5}, nil)
	b := p.TokenPages([]Token{1, 2, 3, 5}, nil)
	if len(a) != 2 || len(b) != 2 || a[0] != b[0] || a[1] == b[1] {
		t.Fatalf("pages %v and %v", a, b)
	}
	if p.Unique() != 3 {
		t.Fatalf("Unique() = %d, want 3", p.Unique())
	}
	// Block hashes: 4-token blocks, 2-token pages: each block gives 2 pages;
	// the partial last block gives only its whole pages.
	bp := NewPager(2)
	x, err := bp.BlockPages([]uint64{10, 11}, 4, 7, nil)
	if err != nil || len(x) != 3 {
		t.Fatalf("BlockPages = %v, %v", x, err)
	}
	y, _ := bp.BlockPages([]uint64{10, 12}, 4, 8, nil)
	if x[0] != y[0] || x[1] != y[1] || x[2] == y[2] {
		t.Fatalf("block pages %v vs %v", x, y)
	}
	// Pages that straddle blocks (3-token pages over 4-token blocks) are
	// identified by every block piece they cover: page 2 (tokens 6-8) covers
	// the third block's first token, so it differs with that block.
	sp := NewPager(3)
	u, _ := sp.BlockPages([]uint64{1, 2, 3}, 4, 12, nil)
	v, _ := sp.BlockPages([]uint64{1, 2, 4}, 4, 12, nil)
	if len(u) != 4 || u[0] != v[0] || u[1] != v[1] || u[2] == v[2] || u[3] == v[3] {
		t.Fatalf("straddling pages %v vs %v", u, v)
	}
	if _, err := sp.BlockPages([]uint64{1}, 0, 4, nil); err == nil {
		t.Fatal("block size 0 accepted")
	}
}

func TestEvictNodeRejectsNonLeaves(t *testing.T) {
	tr := mustNew(t, Config{PageSize: 1, DeviceTokens: 8})
	insertKey(t, tr, 1, InsertOptions{}, 1, 2)
	res := insertKey(t, tr, 2, InsertOptions{}, 1, 2, 3)
	parent := res.Last.Parent()
	_, err := tr.EvictNode(parent)
	if err == nil || !strings.Contains(err.Error(), "not an evictable device leaf") {
		t.Fatalf("EvictNode(parent) = %v", err)
	}
	tr.Lock(res.Last)
	if _, err := tr.EvictNode(res.Last); err == nil {
		t.Fatal("EvictNode evicted a locked node")
	}
	tr.Unlock(res.Last)
	if r, err := tr.EvictNode(res.Last); err != nil || r.Tokens != 1 {
		t.Fatalf("EvictNode(leaf) = %+v, %v", r, err)
	}
	var target error = err
	if errors.Unwrap(target) != nil {
		t.Fatal("unexpected wrapped error")
	}
}
