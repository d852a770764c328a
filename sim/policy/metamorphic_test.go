package policy

import (
	"slices"
	"testing"

	"pgregory.net/rapid"

	"github.com/kvsim/kvsim/internal/testutil"
)

// Scaling the trace's block size and every capacity together leaves the
// page-level results unchanged: under main_write_through, cutting every
// block in two (id h becomes the pages 2h, 2h+1, always touched together)
// and doubling both capacities doubles every page counter and leaves every
// rate as it was. (boundary_l1_l2 reserves "a page and its device-only
// parent" on demotion, a unit that does not scale with the block, so it is
// not scale-invariant by design.) failed_h_allocations counts failed
// attempts, not pages: when the first half of a block cannot be written, the
// second half is not tried (its parent is not on host), so it stays equal.
func TestPropScalingBlocksAndCapacities(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		cfg := genConfig(t)
		cfg.Policy = MainWriteThrough
		reqs := genTrace(t)
		var split [][]uint64
		for _, r := range reqs {
			var s []uint64
			for _, h := range r {
				s = append(s, 2*h, 2*h+1)
			}
			split = append(split, s)
		}
		scaled := cfg
		scaled.L1Pages *= 2
		scaled.L2Pages *= 2
		_, _, a, abortA := perRequest(t, cfg, reqs)
		_, _, b, abortB := perRequest(t, scaled, split)
		if abortA != abortB {
			t.Fatalf("aborts at %d and %d", abortA, abortB)
		}
		if abortA != 0 {
			return
		}
		pairs := []struct {
			name string
			x, y int
		}{
			{"total_input_pages", a.TotalInputPages, b.TotalInputPages},
			{"l1_hit_pages", a.L1HitPages, b.L1HitPages},
			{"l2_hit_pages", a.L2HitPages, b.L2HitPages},
			{"miss_pages", a.MissPages, b.MissPages},
			{"l1_evictions", a.L1Evictions, b.L1Evictions},
			{"l2_evictions", a.L2Evictions, b.L2Evictions},
			{"d_to_h_demotions", a.DToHDemotions, b.DToHDemotions},
			{"d_pages", a.DPages, b.DPages},
			{"h_pages", a.HPages, b.HPages},
		}
		for _, p := range pairs {
			if 2*p.x != p.y {
				t.Fatalf("%s: %d at block size 1, %d at block size 2 (want %d)", p.name, p.x, p.y, 2*p.x)
			}
		}
		if a.FailedHAllocations != b.FailedHAllocations {
			t.Fatalf("failed_h_allocations: %d and %d", a.FailedHAllocations, b.FailedHAllocations)
		}
		if a.Requests != b.Requests || a.L1HitRate != b.L1HitRate || a.L1L2HitRate != b.L1L2HitRate || a.DuplicateRatio != b.DuplicateRatio {
			t.Fatalf("rates differ: %+v vs %+v", a, b)
		}
	})
}

// Relabelling the page keys one to one leaves every counter and every
// request's hits unchanged, under both policies: page identity is the key
// sequence, and key values never matter. The relabelling sends odd keys far
// past the simulator's dense key table (to its edge map) and keeps even
// ones, and adds key 0, so both halves of the child index and their mix
// are exercised.
func TestPropKeyRelabelling(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		cfg := genConfig(t)
		reqs, far := testutil.RelabelFar(genTrace(t), 1) // 1 is not a key of genTrace
		l1a, l2a, a, abortA := perRequest(t, cfg, reqs)
		l1b, l2b, b, abortB := perRequest(t, cfg, far)
		if abortA != abortB {
			t.Fatalf("aborts at %d and %d", abortA, abortB)
		}
		if !slices.Equal(l1a, l1b) || !slices.Equal(l2a, l2b) {
			t.Fatalf("per-request hits differ: l1 %v vs %v, l2 %v vs %v", l1a, l1b, l2a, l2b)
		}
		if a != b {
			t.Fatalf("results differ: %+v vs %+v", a, b)
		}
	})
}
