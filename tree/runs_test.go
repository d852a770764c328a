package tree

import (
	"slices"
	"testing"

	"pgregory.net/rapid"
)

// drawRunPages draws a key with long runs of consecutive ids: pieces that
// start anywhere in a small id space, so two keys often share runs, enter
// them midway or leave them early.
func drawRunPages(rt *rapid.T, label string) []PageID {
	var pages []PageID
	for range rapid.IntRange(0, 5).Draw(rt, label+"_pieces") {
		first := PageID(rapid.IntRange(1, 40).Draw(rt, label+"_first"))
		for k := range rapid.IntRange(1, 12).Draw(rt, label+"_len") {
			pages = append(pages, first+PageID(k))
		}
	}
	return pages
}

// commonRuns returns the number of leading pages a and b share.
func commonRuns(a, b []PageRun) int64 {
	k := keyCursor{runs: a}
	return k.match(b)
}

// commonPages is the page-level model of commonRuns.
func commonPages(a, b []PageID) int64 {
	n := 0
	for n < len(a) && n < len(b) && a[n] == b[n] {
		n++
	}
	return int64(n)
}

// TestPropRunHelpers checks the run helpers against the same operations on
// one id a page, on keys cut into runs anywhere.
func TestPropRunHelpers(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		a, b := drawRunPages(rt, "a"), drawRunPages(rt, "b")
		if rapid.Bool().Draw(rt, "share") {
			n := rapid.IntRange(0, len(a)).Draw(rt, "shared")
			b = append(a[:n:n], b...)
		}
		ra, rb := cutRuns(rt, a), cutRuns(rt, b)
		if got := AppendRunPages(nil, ra); !slices.Equal(got, a) {
			rt.Fatalf("runs %v spell %v, want %v", ra, got, a)
		}
		if got := AppendRuns(nil, a); !slices.Equal(AppendRunPages(nil, got), a) || len(got) > len(ra) {
			rt.Fatalf("AppendRuns(%v) = %v: not the longest runs", a, got)
		}
		if got, want := runsSpell(ra, b), slices.Equal(a, b); got != want || !runsSpell(ra, a) {
			rt.Fatalf("runsSpell(%v, %v) = %v, want %v (and true for %v)", ra, b, got, want, a)
		}
		if got, want := runsLen(ra), int64(len(a)); got != want {
			rt.Fatalf("runsLen(%v) = %d, want %d", ra, got, want)
		}
		if got, want := commonRuns(ra, rb), commonPages(a, b); got != want {
			rt.Fatalf("commonRuns(%v, %v) = %d, want %d", ra, rb, got, want)
		}
		lo := rapid.IntRange(0, len(a)).Draw(rt, "lo")
		hi := rapid.IntRange(lo, len(a)).Draw(rt, "hi")
		sub := AppendRunRange(nil, ra, int64(lo), int64(hi))
		if got := AppendRunPages(nil, sub); !slices.Equal(got, a[lo:hi]) {
			rt.Fatalf("AppendRunRange(%v, %d, %d) = %v, want %v", ra, lo, hi, got, a[lo:hi])
		}
		for _, x := range sub {
			if x.N < 1 {
				rt.Fatalf("AppendRunRange(%v, %d, %d) = %v: an empty run", ra, lo, hi, sub)
			}
		}
		// The cursor: skip lo pages, then match b from there.
		k := keyCursor{runs: ra}
		k.skip(int64(lo))
		if k.done() != (lo == len(a)) || !k.done() && k.first() != a[lo] {
			rt.Fatalf("cursor after %d pages of %v: done %v", lo, ra, k.done())
		}
		if got, want := k.match(rb), commonPages(a[lo:], b); got != want {
			rt.Fatalf("match of %v from page %d with %v = %d, want %d", ra, lo, rb, got, want)
		}
		if got, want := k.matchPages(b), commonPages(a[lo:], b); got != want {
			rt.Fatalf("matchPages of %v from page %d with %v = %d, want %d", ra, lo, b, got, want)
		}
		// A node's key, in whichever form compactKey picks, spells a.
		key, pages := compactKey(ra)
		if (key == nil) == (pages == nil) && len(a) > 0 {
			rt.Fatalf("compactKey(%v) = %v, %v: want exactly one form", ra, key, pages)
		}
		if got := append(AppendRunPages(nil, key), pages...); !slices.Equal(got, a) {
			rt.Fatalf("compactKey(%v) spells %v, want %v", ra, got, a)
		}
	})
}

// keyPages returns n's key one id a page without keeping it in the node
// (as Pages would), so that tests leave the run-only form alone.
func keyPages(n *Node) []PageID {
	if n.key != nil {
		return AppendRunPages(nil, n.key)
	}
	return n.pages
}
