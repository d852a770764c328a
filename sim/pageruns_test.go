package sim

import (
	"slices"
	"testing"

	"github.com/kvsim/kvsim/tree"
	"pgregory.net/rapid"
)

// TestPropKeepPagesRoundTrip checks that a request's pages, kept as runs
// or as a slice, come back unchanged with room for the output's pages, on
// keys made of block-like runs, scattered ids, or a mix.
func TestPropKeepPagesRoundTrip(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		var pages []tree.PageID
		for range rapid.IntRange(0, 30).Draw(t, "pieces") {
			first := tree.PageID(rapid.Uint64Range(1, 1<<40).Draw(t, "first"))
			for k := range rapid.IntRange(1, 600).Draw(t, "len") {
				pages = append(pages, first+tree.PageID(k))
			}
		}
		capacity := len(pages) + rapid.IntRange(0, 50).Draw(t, "room")
		var r request
		r.keepPages(pages, capacity)
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
