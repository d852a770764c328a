package testutil

import (
	"slices"
	"testing"

	"pgregory.net/rapid"
)

// A drawn trace has at most most requests, each a prefix of an earlier
// request, or nothing, followed by at most add keys of the alphabet, and
// its keys repeat.
func TestDrawPrefixTrace(t *testing.T) {
	repeats := 0
	rapid.Check(t, func(t *rapid.T) {
		reqs := DrawPrefixTrace(t, 12, 3, 4, 10)
		if len(reqs) > 12 {
			t.Fatalf("%d requests", len(reqs))
		}
		seen := map[uint64]bool{}
		for i, r := range reqs {
			keep := 0 // the longest prefix r shares with an earlier request
			for _, p := range reqs[:i] {
				k := 0
				for k < len(p) && k < len(r) && p[k] == r[k] {
					k++
				}
				keep = max(keep, k)
			}
			if len(r)-keep > 3 {
				t.Fatalf("request %d %v: %d keys past the longest earlier prefix", i, r, len(r)-keep)
			}
			for _, k := range r {
				if k < 11 || k > 14 {
					t.Fatalf("request %d %v: key %d outside 11..14", i, r, k)
				}
				if seen[k] {
					repeats++
				}
				seen[k] = true
			}
		}
	})
	if repeats == 0 {
		t.Error("no key repeated in any drawn trace")
	}
}

func TestChainKeys(t *testing.T) {
	got := ChainKeys([][]uint64{{1, 2}, {1, 3}, {2}, {1, 2, 2}})
	want := [][]uint64{{1, 2}, {1, 3}, {4}, {1, 2, 5}}
	if !slices.EqualFunc(got, want, slices.Equal) {
		t.Errorf("ChainKeys = %v, want %v", got, want)
	}
}

func TestRelabelFar(t *testing.T) {
	odd := func(h uint64) uint64 { return h*0x9e3779b97f4a7c15 | 1<<63 }
	near, far := RelabelFar([][]uint64{{1, 2}, {2}, {3}, {4}}, 9)
	wantNear := [][]uint64{{9, 1, 2}, {2}, {3}, {9, 4}}
	wantFar := [][]uint64{{0, odd(1), 2}, {2}, {odd(3)}, {0, 4}}
	if !slices.EqualFunc(near, wantNear, slices.Equal) || !slices.EqualFunc(far, wantFar, slices.Equal) {
		t.Errorf("RelabelFar = %v, %v; want %v, %v", near, far, wantNear, wantFar)
	}
}
