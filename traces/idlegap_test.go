package traces

import (
	"slices"
	"testing"

	"pgregory.net/rapid"

	"github.com/kvsim/kvsim/internal/testutil"
)

// checkCapped checks a capped trace against the uncapped one: the same
// records, no gap between a family's consecutive starts above cap, the
// order of each family's starts unchanged, and the cut accounted for.
func checkCapped(t fataler, before, after []Record, cut GapCut) {
	t.Helper()
	if len(after) != len(before) {
		t.Fatalf("%d records after the cut, want %d", len(after), len(before))
	}
	fam := families(before)
	famOf := map[string]int{}
	for i, r := range before {
		famOf[r.ID] = fam[i]
	}
	lastBefore := map[int]int64{}
	var want int64
	for _, r := range before {
		f := famOf[r.ID]
		if l, ok := lastBefore[f]; ok && r.Arrival-l > cut.Cap {
			want += r.Arrival - l - cut.Cap
		}
		lastBefore[f] = r.Arrival
	}
	if want != cut.Cut {
		t.Fatalf("cut %d ns, want %d ns", cut.Cut, want)
	}
	seen := map[string]bool{}
	last := map[int]int64{}
	lastID := map[int]string{}
	order := map[string]int{}
	for i, r := range before {
		order[r.ID] = i
	}
	for i, r := range after {
		if i > 0 && r.Arrival < after[i-1].Arrival {
			t.Fatalf("record %d (%s) arrives before record %d", i, r.ID, i-1)
		}
		for _, d := range append([]string{r.Parent}, r.WaitFor...) {
			if _, ok := order[d]; ok && !seen[d] {
				t.Fatalf("%s comes before its dependency %s", r.ID, d)
			}
		}
		seen[r.ID] = true
		f := famOf[r.ID]
		if l, ok := last[f]; ok {
			if r.Arrival-l > cut.Cap {
				t.Fatalf("%s starts %d ns after the previous start of its family, above the cap %d", r.ID, r.Arrival-l, cut.Cap)
			}
			if order[r.ID] < order[lastID[f]] {
				t.Fatalf("%s now starts after %s", r.ID, lastID[f])
			}
		}
		last[f], lastID[f] = r.Arrival, r.ID
	}
}

// lateAfterCap counts the requests that the recorded service times send
// more than 1 ms after their capped arrival (only a service time that
// spans a cut gap can do that).
func lateAfterCap(after []Record) int {
	late := 0
	for i, s := range recordedStarts(after) {
		if s-after[i].Arrival > 1e6 {
			late++
		}
	}
	return late
}

func TestCapIdleGapsProperty(t *testing.T) {
	dir := t.TempDir()
	rapid.Check(t, func(t *rapid.T) {
		_, before := drawWEKA(t, dir)
		after := append([]Record(nil), before...)
		capNs := int64(rapid.IntRange(1, 10).Draw(t, "cap")) * 1e9
		cut, err := CapIdleGaps(after, capNs)
		if err != nil {
			t.Fatal(err)
		}
		checkCapped(t, before, after, cut)
	})
}

// TestCapIdleGapsShared reports the time a 300 s cap cuts out of the
// shared sub-agent files, and checks that with the recorded service times
// the capped starts are reproduced.
func TestCapIdleGapsShared(t *testing.T) {
	for _, name := range []string{"trace_0003.json", "trace_0010.json"} {
		p := testutil.SharedTrace(t, "weka_kv_cache_tester_subagents/"+name)
		before := readWEKAFile(t, p)
		after := append([]Record(nil), before...)
		cut, err := CapIdleGaps(after, 300e9)
		if err != nil {
			t.Fatal(err)
		}
		checkCapped(t, before, after, cut)
		late := lateAfterCap(after)
		t.Logf("%s: %d gaps cut, %.1f s cut, span %.1f s -> %.1f s, %d requests late with recorded service times", name, cut.Gaps, float64(cut.Cut)/1e9, float64(cut.SpanBefore)/1e9, float64(cut.SpanAfter)/1e9, late)
		if late > 0 {
			t.Errorf("%s: %d requests start late after the cut", name, late)
		}
	}
}

func TestCapIdleGapsRejectsZero(t *testing.T) {
	if _, err := CapIdleGaps(nil, 0); err == nil {
		t.Fatal("CapIdleGaps(nil, 0) = nil error, want one")
	}
}

// TestReaderCapIdleGaps: the reader yields the capped records, then io.EOF.
func TestReaderCapIdleGaps(t *testing.T) {
	r, err := Open("testdata/wekadir", FormatAuto)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	cut, err := r.CapIdleGaps(1e9)
	if err != nil {
		t.Fatal(err)
	}
	var got []int64
	for _, rec := range testutil.ReadAll(t, r.Next) {
		got = append(got, rec.Arrival)
	}
	// a: 0, 5, 6.5 s -> 0, 1, 2 s (4.5 s cut); b: 1 s alone.
	want := []int64{0, 1e9, 1e9, 2e9}
	if !slices.Equal(got, want) || cut.Cut != 4500e6 || cut.Families != 2 {
		t.Fatalf("arrivals %v, cut %+v; want %v, 4.5 s cut in 2 families", got, cut, want)
	}
	if h := r.Header(); h.Note != "idle gaps capped at 1 s (4.5 s cut)" {
		t.Fatalf("header note %q", h.Note)
	}
}
