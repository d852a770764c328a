package tree

import (
	"fmt"
	"math"
	"slices"
	"testing"
)

// pathOracle is a test Oracle: prefixes are interned on demand by their
// page path, and next uses come from a table keyed by path (absent: never)
// or, when vary is set, from a pseudo-random function of the id and *vary
// that changes as the caller's clock moves, to check that the tree's heaps
// stay ordered whatever the oracle answers between refreshes.
type pathOracle struct {
	ids   map[string]int32
	paths []string
	next  map[string]int64
	vary  *int64
}

func newPathOracle(next map[string]int64) *pathOracle {
	return &pathOracle{ids: map[string]int32{"": 0}, paths: []string{""}, next: next}
}

func (o *pathOracle) Root() int32 { return 0 }

func (o *pathOracle) Child(prefix int32, p PageID) int32 {
	path := o.paths[prefix] + fmt.Sprintf("%d/", p)
	id, ok := o.ids[path]
	if !ok {
		id = int32(len(o.paths))
		o.ids[path] = id
		o.paths = append(o.paths, path)
	}
	return id
}

func (o *pathOracle) NextUse(prefix int32) int64 {
	if o.vary != nil {
		h := (int64(prefix)*2654435761 + *o.vary*7919) % 101
		if h%7 == 0 {
			return math.MaxInt64
		}
		return h
	}
	if v, ok := o.next[o.paths[prefix]]; ok {
		return v
	}
	return math.MaxInt64
}

// TestEvictionOrderBelady: on orderTree's nodes (1 [3] under 2 [1 2], 3
// [4 5] under 2, 4 [6]), with next uses 1/ at 10, 1/2/3/ at 50, 6/ at 20
// and 1/2/4/ never: 3 (never) first, then 1 (50); then 2 is a leaf (its
// first page's prefix 1/ is next used at 10) and goes after 4 (20).
func TestEvictionOrderBelady(t *testing.T) {
	tr, err := New(Config{PageSize: 1, DeviceTokens: 100, Eviction: Belady})
	if err != nil {
		t.Fatal(err)
	}
	o := newPathOracle(map[string]int64{"1/": 10, "1/2/3/": 50, "6/": 20})
	if err := tr.SetOracle(o); err != nil {
		t.Fatal(err)
	}
	if err := tr.SetOracle(o); err != ErrOracleSet {
		t.Fatalf("second SetOracle = %v, want ErrOracleSet", err)
	}
	ins := func(now int64, key ...PageID) {
		lanes := tr.LaneTokens(0, int64(len(key)), make([]int64, 1))
		if !tr.Reserve(lanes) {
			t.Fatal("Reserve failed")
		}
		res := tr.Insert(key, now, InsertOptions{})
		lanes[0] -= res.Adopted[0]
		tr.Release(lanes)
	}
	ins(1, 1, 2, 3)
	ins(2, 1, 2, 4, 5)
	ins(3, 6)
	ins(4, 1, 2, 3)
	tr.Match([]PageID{6}, 5)
	if got, want := victims(tr), []NodeID{3, 1, 4, 2}; !slices.Equal(got, want) {
		t.Fatalf("eviction order = %v, want %v", got, want)
	}
	if err := tr.Check(); err != nil {
		t.Fatal(err)
	}
}

// TestBeladyWithoutOracle: a Belady tree refuses to decide without one.
func TestBeladyWithoutOracle(t *testing.T) {
	tr, err := New(Config{PageSize: 1, DeviceTokens: 100, Eviction: Belady})
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if r := recover(); r == nil {
			t.Fatal("no panic")
		}
	}()
	tr.Match([]PageID{1}, 0)
	lanes := tr.LaneTokens(0, 1, make([]int64, 1))
	tr.Reserve(lanes)
	tr.Insert([]PageID{1}, 0, InsertOptions{})
}
