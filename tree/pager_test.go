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

// TestPropForgetKeepsHeldIdentities checks a forgetting pager against one
// that remembers every block: on any prompts of dense and scattered block
// hashes (so blocks kept in the dense table and in the map, and hashes
// the dense table grows over after the map took them), with any prompts
// still held and the rest let go, the ids of the held prompts and of each
// new one are equal exactly when the remembering pager's are (the two
// number the same pages, one-to-one), and a block is forgotten only when
// no held prompt has it.
func TestPropForgetKeepsHeldIdentities(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		per := rapid.IntRange(1, 3).Draw(t, "pages_per_block")
		all := NewPager(1)
		var held [][2][]PageID // per held prompt: the forgetting pager's ids, the remembering one's
		forget := NewPager(1)
		forget.Forget(func(m Marks) {
			for _, h := range held {
				m.Pages(h[0])
			}
		}, rapid.IntRange(1, 4).Draw(t, "every"))
		hash := rapid.OneOf(rapid.Uint64Range(0, 40), rapid.Uint64Range(0, 6000), rapid.Uint64Range(1<<40, 1<<40+20))
		for range rapid.IntRange(1, 60).Draw(t, "steps") {
			if len(held) > 0 && rapid.Bool().Draw(t, "let_go") {
				i := rapid.IntRange(0, len(held)-1).Draw(t, "which")
				held = append(held[:i], held[i+1:]...)
				continue
			}
			blocks := rapid.SliceOfN(hash, 1, 6).Draw(t, "blocks")
			got, _ := forget.BlockPages(blocks, per, len(blocks)*per, nil)
			want, _ := all.BlockPages(blocks, per, len(blocks)*per, nil)
			held = append(held, [2][]PageID{got, want})
			fw, wf := map[PageID]PageID{}, map[PageID]PageID{}
			for _, h := range held {
				for k := range h[0] {
					f, w := h[0][k], h[1][k]
					if x, ok := fw[f]; ok && x != w {
						t.Fatalf("forgetting id %d stands for %d and %d", f, x, w)
					}
					if x, ok := wf[w]; ok && x != f {
						t.Fatalf("page %d got ids %d and %d while held", w, x, f)
					}
					fw[f], wf[w] = w, f
				}
			}
			if !rapid.Bool().Draw(t, "keep") {
				held = held[:len(held)-1]
			}
		}
	})
}

// TestForgetRemembersHalfMoreThanHeld checks how many blocks a forgetting
// pager remembers between sweeps: with 1,000 blocks held for good and
// 20,000 fresh ones each let go at once, never more than 1.5 times the
// blocks held (and one call's blocks more), which is most of its memory;
// and once those are let go too, none of them.
func TestForgetRemembersHalfMoreThanHeld(t *testing.T) {
	p := NewPager(1)
	var held []PageID
	p.Forget(func(m Marks) { m.Pages(held) }, 1)
	const keep = 1000
	for h := range uint64(keep) {
		ids, err := p.BlockPages([]uint64{h}, 1, 1, nil)
		if err != nil {
			t.Fatal(err)
		}
		held = append(held, ids...)
	}
	most := 0
	for h := range uint64(20000) {
		if _, err := p.BlockPages([]uint64{keep + h}, 1, 1, nil); err != nil {
			t.Fatal(err)
		}
		most = max(most, p.forget.order.Len())
	}
	if most > keep*3/2+1 {
		t.Fatalf("the pager remembered up to %d blocks with %d held", most, keep)
	}
	if p.Forgotten() < 19000 {
		t.Fatalf("forgot %d blocks of 20,000 let go", p.Forgotten())
	}
	// Let go of the 1,000 too: a sweep marks anew, so they go as well.
	held = nil
	for h := range uint64(3000) {
		if _, err := p.BlockPages([]uint64{keep + 20000 + h}, 1, 1, nil); err != nil {
			t.Fatal(err)
		}
	}
	if n := p.forget.order.Len(); n > 1 {
		t.Fatalf("the pager remembers %d blocks with none held (one call's block at most)", n)
	}
}
