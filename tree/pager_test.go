package tree

import (
	"slices"
	"testing"

	"pgregory.net/rapid"
)

// refPager is BlockPages' model for a page size that divides the block
// size: one map from block hash to its run's first page, ids handed out in
// order of first sight.
type refPager struct {
	first map[uint64]PageID
	next  PageID
}

func (r *refPager) pages(blocks []uint64, per, n int) []PageID {
	var out []PageID
	for j := 0; j*per < n; j++ {
		base, ok := r.first[blocks[j]]
		if !ok {
			base = r.next
			r.next += PageID(per)
			r.first[blocks[j]] = base
		}
		for k := 0; k < per && j*per+k < n; k++ {
			out = append(out, base+PageID(k))
		}
	}
	return out
}

// TestPropBlockPagesIsModel checks BlockPages against the map model on
// hashes that are dense (Mooncake's 0, 1, 2, ...), scattered (real hashes)
// and mixed, so that blocks land in the dense table, the map, and the map
// below a table that grew past them later.
func TestPropBlockPagesIsModel(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		ps := rapid.SampledFrom([]int{1, 2, 4}).Draw(t, "page_size")
		bs := ps * rapid.IntRange(1, 4).Draw(t, "pages_per_block")
		p := NewPager(ps)
		ref := &refPager{first: map[uint64]PageID{}, next: 1}
		hash := rapid.OneOf(
			rapid.Uint64Range(0, 3000),
			rapid.Uint64(),
			rapid.Uint64Range(0, 20000),
		)
		for range rapid.IntRange(1, 40).Draw(t, "prompts") {
			blocks := rapid.SliceOfN(hash, 1, 30).Draw(t, "blocks")
			input := rapid.IntRange(0, len(blocks)*bs).Draw(t, "input")
			got, err := p.BlockPages(blocks, bs, input, nil)
			if err != nil {
				t.Fatal(err)
			}
			if want := ref.pages(blocks, bs/ps, min(input, len(blocks)*bs)/ps); !slices.Equal(got, want) {
				t.Fatalf("BlockPages(%v, %d, %d) = %v, want %v", blocks, bs, input, got, want)
			}
		}
		if f := p.Fresh(); f != ref.next {
			t.Fatalf("Fresh = %d after the blocks, want %d", f, ref.next)
		}
	})
}

// TestPropBlockRunsIsBlockPages checks that BlockRuns, on a pager of its
// own, hands out the ids BlockPages hands out, in runs.
func TestPropBlockRunsIsBlockPages(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		ps := rapid.SampledFrom([]int{1, 2, 4}).Draw(t, "page_size")
		bs := ps * rapid.IntRange(1, 4).Draw(t, "pages_per_block")
		a, b := NewPager(ps), NewPager(ps)
		for range rapid.IntRange(1, 30).Draw(t, "prompts") {
			blocks := rapid.SliceOfN(rapid.Uint64Range(0, 200), 1, 20).Draw(t, "blocks")
			input := rapid.IntRange(0, len(blocks)*bs).Draw(t, "input")
			want, err := a.BlockPages(blocks, bs, input, nil)
			if err != nil {
				t.Fatal(err)
			}
			runs, ok, err := b.BlockRuns(blocks, bs, input, nil)
			if err != nil || !ok {
				t.Fatalf("BlockRuns: %v, %v", ok, err)
			}
			var got []PageID
			for i, r := range runs {
				if r.N <= 0 || (i > 0 && runs[i-1].First+PageID(runs[i-1].N) == r.First) {
					t.Fatalf("runs %v: empty or unmerged", runs)
				}
				for k := range r.N {
					got = append(got, r.First+PageID(k))
				}
			}
			if !slices.Equal(got, want) {
				t.Fatalf("BlockRuns gives %v, BlockPages %v", got, want)
			}
		}
		if _, ok, _ := b.BlockRuns([]uint64{1}, ps*3+1, 10, nil); ok && (ps*3+1)%ps != 0 {
			t.Fatal("BlockRuns accepted a block size the page size does not divide")
		}
	})
}
