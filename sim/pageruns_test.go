package sim

import (
	"slices"
	"testing"

	"github.com/kvsim/kvsim/tree"
	"pgregory.net/rapid"
)

// TestPropKeepRunsRoundTrip checks that a request's pages, kept as runs or
// as a slice, come back unchanged with room for the output's pages, on keys
// made of long block-like runs, short ones, or a mix.
func TestPropKeepRunsRoundTrip(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		var pages []tree.PageID
		var runs []tree.PageRun
		for range rapid.IntRange(0, 30).Draw(t, "pieces") {
			first := tree.PageID(rapid.Uint64Range(1, 1<<40).Draw(t, "first"))
			n := rapid.IntRange(1, 600).Draw(t, "len")
			runs = append(runs, tree.PageRun{First: first, N: int64(n)})
			for k := range n {
				pages = append(pages, first+tree.PageID(k))
			}
		}
		capacity := len(pages) + rapid.IntRange(0, 50).Draw(t, "room")
		var r request
		r.keepRuns(runs, len(pages), capacity)
		if r.runs != nil && r.pages != nil {
			t.Fatal("kept both runs and pages")
		}
		if r.runs != nil {
			if len(r.runs)*16 > len(pages)*2 {
				t.Fatalf("%d runs kept for %d pages", len(r.runs), len(pages))
			}
			r.expandPages()
		}
		if !slices.Equal(r.pages, pages) {
			t.Fatalf("pages came back as %v, want %v", r.pages, pages)
		}
		if len(pages) > 0 && cap(r.pages) < capacity {
			t.Fatalf("capacity %d, want at least %d", cap(r.pages), capacity)
		}
	})
}
