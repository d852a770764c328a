package policy

import (
	"errors"
	"strings"
	"testing"
)

// run replays reqs (already in order) with the invariant checks after every
// request, and returns the result.
func run(t *testing.T, cfg Config, reqs [][]uint64) (Result, error) {
	t.Helper()
	s, err := New(cfg)
	if err != nil {
		t.Fatalf("New(%+v) = %v", cfg, err)
	}
	for _, r := range reqs {
		if _, _, err := s.Process(r); err != nil {
			return s.Result(), err
		}
		s.CheckInvariants()
	}
	return s.Result(), nil
}

// counters is the part of Result a hand-worked case pins down.
type counters struct {
	requests, pages, l1Hit, l2Hit, miss int
	l1Ev, l2Ev, demote, failed          int
	dedup, deleted                      int
	d, h, dh                            int
}

func countersOf(r Result) counters {
	return counters{
		requests: r.Requests, pages: r.TotalInputPages, l1Hit: r.L1HitPages, l2Hit: r.L2HitPages, miss: r.MissPages,
		l1Ev: r.L1Evictions, l2Ev: r.L2Evictions, demote: r.DToHDemotions, failed: r.FailedHAllocations,
		dedup: r.DedupL2Evictions, deleted: r.DeletedL2Evictions,
		d: r.DPages, h: r.HPages, dh: r.DHPages,
	}
}

// TestHandWorked replays short request sequences whose counters were worked
// out by hand from the rules of SGLang's simulator (doc.go). Page keys are
// small integers; a request is the path of keys from the root. "DH" means
// on device and host, "H" host only, "D" device only.
func TestHandWorked(t *testing.T) {
	cases := []struct {
		name     string
		policy   Policy
		l1, l2   int
		thr      int
		reqs     [][]uint64
		want     counters
		wantRate [2]float64 // l1_hit_rate, l1_l2_hit_rate
		wantDup  float64
	}{
		{
			// R1 [1 2 3]: 3 misses; each page has count 1 and a parent on
			// host (or the root), so 1, 2, 3 get host copies in order
			// (h=3). L1 holds 2: the leaf 3 goes; it is backed up, so it
			// becomes host-only (an L1 eviction, not a demotion).
			// R2 [1 2 3]: 1, 2 on device (2 L1 hits), 3 on host (1 L2 hit).
			// All three on device again, 3 is again the leaf and goes.
			// R3 [4]: miss, 4 written (h=4). L1 leaves: 2 (clock 2) and 4;
			// 2 goes and becomes host-only (its child 3 is host-only).
			// R4 [5]: miss. Writing 5 needs a host page: the only
			// host-only leaf is 3, deleted (1 L2 eviction). L1 leaves: 1
			// (clock 2, its child 2 left the device), 4, 5: 1 goes.
			// End: D = {4, 5}, H = {1, 2, 4, 5}, DH = {4, 5}.
			name: "write_through_l1_eviction_keeps_host_copy", policy: MainWriteThrough,
			l1: 2, l2: 4, thr: 1,
			reqs: [][]uint64{{1, 2, 3}, {1, 2, 3}, {4}, {5}},
			want: counters{requests: 4, pages: 8, l1Hit: 2, l2Hit: 1, miss: 5,
				l1Ev: 4, l2Ev: 1, deleted: 1, d: 2, h: 4, dh: 2},
			wantRate: [2]float64{2.0 / 8, 3.0 / 8}, wantDup: 0.5,
		},
		{
			// Threshold 2, L2 of one page. R1 [1 2]: counts 1, nothing
			// written. R2 [1 2]: 1 reaches 2 and is written (h=1); 2
			// reaches 2 with its parent on host, but the one host page is
			// 1's, a device page that L2 eviction may not touch (only
			// host-only leaves): 1 failed allocation. R3 [1 2]: 2 tries
			// again and fails again.
			name: "write_through_full_host_fails_each_time", policy: MainWriteThrough,
			l1: 10, l2: 1, thr: 2,
			reqs:     [][]uint64{{1, 2}, {1, 2}, {1, 2}},
			want:     counters{requests: 3, pages: 6, l1Hit: 4, miss: 2, failed: 2, d: 2, h: 1, dh: 1},
			wantRate: [2]float64{4.0 / 6, 4.0 / 6}, wantDup: 1,
		},
		{
			// No host tier. In each non-empty request only page 1 (parent:
			// the root) may be written; it fails (1 page > 0 L2 pages).
			// Pages 2 and 3 are skipped because their parent is not on
			// host, which is not a failure. The empty request counts as a
			// request and nothing else.
			name: "write_through_parent_must_be_on_host", policy: MainWriteThrough,
			l1: 10, l2: 0, thr: 1,
			reqs:     [][]uint64{{1, 2, 3}, {1, 2, 3}, {}},
			want:     counters{requests: 3, pages: 6, l1Hit: 3, miss: 3, failed: 2, d: 3},
			wantRate: [2]float64{0.5, 0.5},
		},
		{
			// Threshold 2. R1 [1 2]: counts 1/1. R2 [1 3]: 1 reaches 2,
			// written; 3 at 1. R3 [1 2]: 2 reaches 2, parent 1 on host,
			// written. Host = {1, 2}; 3 never reaches the threshold.
			name: "write_through_threshold_two", policy: MainWriteThrough,
			l1: 10, l2: 10, thr: 2,
			reqs:     [][]uint64{{1, 2}, {1, 3}, {1, 2}},
			want:     counters{requests: 3, pages: 6, l1Hit: 3, miss: 3, d: 3, h: 2, dh: 2},
			wantRate: [2]float64{0.5, 0.5}, wantDup: 1,
		},
		{
			// R1 [1 2]: path reserved on host (h=2). R2 [3 4]: 2 host
			// pages needed, 1 free: L2 evicts a duplicate first, the
			// oldest device+host leaf with no host child: 2 (1 has the host
			// child 2). Then 3, 4 written (h=3).
			// R3 [1 2 5 6]: 2 L1 hits; 2, 5, 6 need host pages (3 <= 3,
			// h=3). Duplicate leaves: 1 is on the request path (protected);
			// 4 goes, which makes 3 a duplicate leaf, and 3 goes. Still 3
			// pages needed and 2 free, nothing left to evict: the
			// reservation fails as a whole (1 failed allocation) and the
			// two evictions stay done.
			name: "boundary_all_or_nothing_duplicates_first", policy: BoundaryL1L2,
			l1: 10, l2: 3, thr: 1,
			reqs:     [][]uint64{{1, 2}, {3, 4}, {1, 2, 5, 6}},
			want:     counters{requests: 3, pages: 8, l1Hit: 2, miss: 6, l2Ev: 3, dedup: 3, failed: 1, d: 6, h: 1, dh: 1},
			wantRate: [2]float64{0.25, 0.25}, wantDup: 1,
		},
		{
			// R1 [1 2 3]: the path needs 3 host pages > 2: 1 failed
			// allocation. L1 holds 2: leaf 3 (device only) is demoted; its
			// parent 2 is device-only, so 2 and 3 are reserved together
			// (parent first): h=2, 3 becomes host-only (1 demotion).
			// R2 [4]: 4 needs a host page: 2 is not a duplicate leaf (host
			// child 3), so the host-only leaf 3 is deleted. L1 leaves: 2
			// (clock 1) and 4: 2 has a host copy, and its parent 1 is
			// device-only, so 1 is reserved first, protecting 1 and 2: L2
			// drops the duplicate 4 (device+host, clock 2). 2 becomes
			// host-only. End: D = {1, 4}, H = {1, 2}, DH = {1}.
			name: "boundary_demotion_reserves_parent_first", policy: BoundaryL1L2,
			l1: 2, l2: 2, thr: 1,
			reqs: [][]uint64{{1, 2, 3}, {4}},
			want: counters{requests: 2, pages: 4, miss: 4, l1Ev: 2, l2Ev: 2, demote: 1, failed: 1,
				dedup: 1, deleted: 1, d: 2, h: 2, dh: 1},
			wantRate: [2]float64{0, 0}, wantDup: 0.5,
		},
		{
			// L1 = L2 = 1. R1 [1]: 1 is DH. R2 [1 2]: 1 L1 hit; 2 needs a
			// host page, only 1's copy exists and 1 is on the path: 1
			// failed allocation. L1 evicts 2 (device only, parent 1 is DH
			// so only 2 is reserved): L2 drops 1's duplicate copy, 2 is
			// demoted to host-only under the now device-only 1.
			// R3 [1 2]: 1 L1 hit, 2 L2 hit; the path needs a host page for
			// 1, the only host page is 2's (protected): failed. L1 evicts
			// 2 (DH); its parent 1 is device-only and cannot get a host
			// page (failed again), 2 has no host descendant, so 2 loses
			// both copies: 1 L1 and 1 L2 eviction.
			name: "boundary_device_host_victim_dropped", policy: BoundaryL1L2,
			l1: 1, l2: 1, thr: 1,
			reqs: [][]uint64{{1}, {1, 2}, {1, 2}},
			want: counters{requests: 3, pages: 5, l1Hit: 2, l2Hit: 1, miss: 2, l1Ev: 2, l2Ev: 2, demote: 1,
				failed: 3, dedup: 1, deleted: 1, d: 1},
			wantRate: [2]float64{0.4, 0.6},
		},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			cfg := Config{Policy: c.policy, L1Pages: c.l1, L2Pages: c.l2, WriteThroughThreshold: c.thr}
			r, err := run(t, cfg, c.reqs)
			if err != nil {
				t.Fatalf("Process: %v", err)
			}
			if got := countersOf(r); got != c.want {
				t.Errorf("counters\n got %+v\nwant %+v", got, c.want)
			}
			if r.L1HitRate != c.wantRate[0] || r.L1L2HitRate != c.wantRate[1] {
				t.Errorf("rates = %v, %v, want %v", r.L1HitRate, r.L1L2HitRate, c.wantRate)
			}
			if r.DuplicateRatio != c.wantDup {
				t.Errorf("duplicate_ratio = %v, want %v", r.DuplicateRatio, c.wantDup)
			}
			if r.UniqueCachedPages != r.DPages+r.HPages-r.DHPages {
				t.Errorf("unique_cached_pages = %d, want %d", r.UniqueCachedPages, r.DPages+r.HPages-r.DHPages)
			}
			if r.Policy != c.policy {
				t.Errorf("Policy = %v, want %v", r.Policy, c.policy)
			}
		})
	}
}

// TestBoundaryAbort reproduces an input on which SGLang's simulator raises
// an AssertionError. L1 = L2 = 1. R1 [1]: 1 is DH. R2 [1 2]: the path
// reservation fails; L1 demotes 2, and the L2 eviction for it drops the host
// copy of its DH parent 1, leaving host-only 2 below device-only 1.
// R3 [1 2 3]: the reservation fails (2 pages > 1); L1 demotes 3 by dropping
// 2's copy (2 is now a duplicate leaf), then must evict 2, whose parent 1
// and itself cannot both get host pages, and 2 has the host-only child 3:
// SGLang refuses to delete it.
func TestBoundaryAbort(t *testing.T) {
	cfg := Config{Policy: BoundaryL1L2, L1Pages: 1, L2Pages: 1, WriteThroughThreshold: 1}
	s, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	reqs := [][]uint64{{1}, {1, 2}, {1, 2, 3}}
	for i, r := range reqs[:2] {
		if _, _, err := s.Process(r); err != nil {
			t.Fatalf("request %d: %v", i+1, err)
		}
	}
	_, _, err = s.Process(reqs[2])
	var ae *AbortError
	if !errors.As(err, &ae) || !errors.Is(err, ErrAborted) {
		t.Fatalf("Process(R3) = %v, want an *AbortError", err)
	}
	if ae.Request != 3 || ae.Index != -1 || ae.Reason != "Refusing to delete a non-D-only leaf" {
		t.Errorf("abort = %+v, want request 3, index -1, Refusing to delete a non-D-only leaf", ae)
	}
	if _, _, err2 := s.Process([]uint64{9}); err2 != err {
		t.Errorf("Process after abort = %v, want the same error %v", err2, err)
	}

	// Run names the input index and timestamp; the order is by timestamp.
	in := []Request{{Timestamp: 30, Pages: []uint64{1, 2, 3}}, {Timestamp: 10, Pages: []uint64{1}}, {Timestamp: 20, Pages: []uint64{1, 2}}}
	_, err = Run(cfg, in)
	if !errors.As(err, &ae) || ae.Index != 0 || ae.Request != 3 {
		t.Fatalf("Run = %v, want an abort at input request 0, replayed third", err)
	}
	const want = "input request 0 (request 3 replayed): SGLang's policy simulator aborts on this input (AssertionError: Refusing to delete a non-D-only leaf)"
	if err.Error() != want {
		t.Errorf("Error() = %q\nwant %q", err, want)
	}
	// The same requests under MainWriteThrough never abort.
	if _, err := Run(Config{Policy: MainWriteThrough, L1Pages: 1, L2Pages: 1, WriteThroughThreshold: 1}, in); err != nil {
		t.Fatalf("Run(main_write_through) = %v", err)
	}
}

// TestRunSortsStably checks that Run replays by timestamp with ties in
// input order: the result equals processing the requests in that order.
func TestRunSortsStably(t *testing.T) {
	in := []Request{
		{Timestamp: 5, Pages: []uint64{1, 2}},
		{Timestamp: 1, Pages: []uint64{3}},
		{Timestamp: 5, Pages: []uint64{1, 4}},
		{Timestamp: 1, Pages: []uint64{3, 5}},
		{Timestamp: 0, Pages: []uint64{1}},
	}
	order := []int{4, 1, 3, 0, 2}
	for _, p := range Policies() {
		cfg := Config{Policy: p, L1Pages: 2, L2Pages: 3, WriteThroughThreshold: 1}
		got, err := Run(cfg, in)
		if err != nil {
			t.Fatal(err)
		}
		var reqs [][]uint64
		for _, i := range order {
			reqs = append(reqs, in[i].Pages)
		}
		want, err := run(t, cfg, reqs)
		if err != nil {
			t.Fatal(err)
		}
		if got != want {
			t.Errorf("%v: Run = %+v, want %+v", p, got, want)
		}
		if in[0].Timestamp != 5 || in[4].Timestamp != 0 {
			t.Fatal("Run reordered its input")
		}
	}
}

func TestConfigValidate(t *testing.T) {
	if err := Default().Validate(); err != nil {
		t.Fatalf("Default().Validate() = %v", err)
	}
	if d := Default(); d.WriteThroughThreshold != 1 || d.Policy != MainWriteThrough {
		t.Errorf("Default() = %+v", d)
	}
	err := Config{Policy: 7, L1Pages: -1, L2Pages: -2, WriteThroughThreshold: 0}.Validate()
	if err == nil {
		t.Fatal("Validate accepted a bad config")
	}
	for _, want := range []string{"policy: must be", "l1_pages: must be >= 0 (got -1)", "l2_pages: must be >= 0 (got -2)", "write_through_threshold: must be > 0 (got 0)"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("Validate() = %q, lacks %q", err, want)
		}
	}
	if _, err := New(Config{Policy: BoundaryL1L2}); err == nil {
		t.Error("New accepted write_through_threshold 0")
	}
}

func TestParsePolicy(t *testing.T) {
	for _, p := range Policies() {
		got, err := ParsePolicy(" " + p.String() + " ")
		if err != nil || got != p {
			t.Errorf("ParsePolicy(%q) = %v, %v", p.String(), got, err)
		}
	}
	for _, bad := range []string{"", "lru", "write_through", "Main_Write_Through", "boundary"} {
		if _, err := ParsePolicy(bad); !errors.Is(err, ErrUnknownPolicy) {
			t.Errorf("ParsePolicy(%q) = %v, want ErrUnknownPolicy", bad, err)
		}
	}
	if s := Policy(0).String(); s != "Policy(0)" {
		t.Errorf("Policy(0).String() = %q", s)
	}
}
