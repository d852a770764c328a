package tree_test

import (
	"fmt"

	"github.com/kvsim/kvsim/tree"
)

// A prompt is inserted after its prefill; a second prompt that shares its
// first page hits that page on the device.
func ExampleTree_Match() {
	t, _ := tree.New(tree.Config{PageSize: 4, DeviceTokens: 1024})
	pager := tree.NewPager(4)

	first := pager.TokenPages([]tree.Token{1, 2, 3, 4, 5, 6, 7, 8, 9}, nil) // 2 whole pages; token 9 is the unaligned tail
	held := []int64{8}
	t.Reserve(held) // the request's own KV for its 8 page-aligned tokens
	res := t.Insert(first, 1, tree.InsertOptions{})
	fmt.Println("adopted", res.Adopted[0], "prefix", res.PrefixTokens)

	second := pager.TokenPages([]tree.Token{1, 2, 3, 4, 0, 0, 0, 0}, nil)
	m := t.Match(second, 2)
	fmt.Println("device hit", m.DeviceTokens, "host hit", m.HostTokens)
	// Output:
	// adopted 8 prefix 0
	// device hit 4 host hit 0
}

// With a host tier and write-through, eviction demotes a page to the host;
// a later request finds it there and loads it back.
func ExampleTree_LoadBack() {
	t, _ := tree.New(tree.Config{PageSize: 16, DeviceTokens: 64, HostTokens: 128, WritePolicy: tree.WriteThrough})
	key := []tree.PageID{1, 2}
	t.Reserve([]int64{32})
	t.Insert(key, 1, tree.InsertOptions{})
	t.AckWrites(len(t.Writes())) // the D2H copy finished
	t.Evict(32)

	m := t.Match(key, 2)
	fmt.Println("device", m.DeviceTokens, "host", m.HostTokens)
	lr := t.LoadBack(m.LastHost, 2)
	fmt.Println("loading", lr.Tokens)
	// Output:
	// device 0 host 32
	// loading 32
}
