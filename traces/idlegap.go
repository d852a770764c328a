package traces

import (
	"fmt"
	"io"
	"slices"
	"sort"
)

// GapCut reports what an idle-gap cap removed (see CapIdleGaps).
type GapCut struct {
	// Cap is the longest gap kept between two consecutive request starts
	// of one session family, in nanoseconds.
	Cap int64
	// Families is the number of session families.
	Families int
	// Gaps is the number of gaps that were longer than Cap.
	Gaps int
	// Cut is the time removed, summed over the families (ns).
	Cut int64
	// SpanBefore and SpanAfter are the trace's span (last arrival minus
	// first) before and after the cut (ns).
	SpanBefore, SpanAfter int64
}

// CapIdleGaps cuts idle time out of recs, in place: within each session
// family (a request, its Parent, its WaitFor gates and its Session's other
// requests, transitively: an agent with its sub-agents, a conversation),
// every gap between consecutive request starts longer than cap is cut to
// cap and the family's later requests shift left by the time cut. Every
// time inside a cut gap moves with it and is clamped to its end: a
// request's delay after its parent (ThinkTime) becomes the length of its
// delay window after the cut, so a replay with the recorded service times
// still sends it at its new arrival unless a service time spans a cut.
// Requests with no session and no dependency form one family. The
// families keep their first arrival; recs is re-sorted by the new
// arrivals (ties keep the previous order), which keeps every dependency
// before its dependents. cap must be > 0.
func CapIdleGaps(recs []Record, cap int64) (GapCut, error) {
	if cap <= 0 {
		return GapCut{}, fmt.Errorf("idle-gap cap: expected a duration > 0, found %d ns", cap)
	}
	out := GapCut{Cap: cap}
	if len(recs) == 0 {
		return out, nil
	}
	out.SpanBefore = recs[len(recs)-1].Arrival - recs[0].Arrival
	fam := families(recs)
	// Each family's old starts (in record order, non-decreasing) and new
	// starts.
	type warp struct{ old, new []int64 }
	byFam := map[int]*warp{}
	var order []int // family roots in first-appearance order
	for i := range recs {
		w, ok := byFam[fam[i]]
		if !ok {
			w = &warp{}
			byFam[fam[i]] = w
			order = append(order, fam[i])
		}
		t := recs[i].Arrival
		if n := len(w.old); n > 0 {
			if g := t - w.old[n-1]; g > cap {
				out.Gaps++
				out.Cut += g - cap
				w.new = append(w.new, w.new[n-1]+cap)
			} else {
				w.new = append(w.new, w.new[n-1]+g)
			}
		} else {
			w.new = append(w.new, t)
		}
		w.old = append(w.old, t)
	}
	out.Families = len(order)
	// at maps a time of a family's old clock to its new clock: times
	// between two starts move with the earlier one, clamped to the gap's
	// new end.
	at := func(w *warp, x int64) int64 {
		k := sort.Search(len(w.old), func(k int) bool { return w.old[k] > x }) - 1
		if k < 0 {
			return x - w.old[0] + w.new[0]
		}
		d := x - w.old[k]
		if k+1 < len(w.old) {
			d = min(d, w.new[k+1]-w.new[k])
		}
		return w.new[k] + d
	}
	pos := map[int]int{}
	type keyed struct {
		at  int64
		idx int
	}
	keys := make([]keyed, len(recs))
	for i := range recs {
		w := byFam[fam[i]]
		k := pos[fam[i]]
		pos[fam[i]]++
		r := &recs[i]
		if r.ThinkTime > 0 {
			r.ThinkTime = w.new[k] - at(w, r.Arrival-r.ThinkTime)
		}
		r.Arrival = w.new[k]
		keys[i] = keyed{r.Arrival, i}
	}
	slices.SortStableFunc(keys, func(a, b keyed) int {
		switch {
		case a.at < b.at:
			return -1
		case a.at > b.at:
			return 1
		}
		return a.idx - b.idx
	})
	sorted := make([]Record, len(recs))
	for j, k := range keys {
		sorted[j] = recs[k.idx]
	}
	copy(recs, sorted)
	out.SpanAfter = recs[len(recs)-1].Arrival - recs[0].Arrival
	return out, nil
}

// families labels every record with its session family's root (the index
// of the family's first record): union-find over Parent, WaitFor and
// Session links to earlier records.
func families(recs []Record) []int {
	parent := make([]int, len(recs))
	var find func(int) int
	find = func(i int) int {
		for parent[i] != i {
			parent[i] = parent[parent[i]]
			i = parent[i]
		}
		return i
	}
	union := func(a, b int) {
		ra, rb := find(a), find(b)
		if ra == rb {
			return
		}
		if ra > rb {
			ra, rb = rb, ra
		}
		parent[rb] = ra // the earlier record names the family
	}
	byID := make(map[string]int, len(recs))
	bySession := map[string]int{}
	loose := -1 // the family of records with no session and no dependency
	for i := range recs {
		parent[i] = i
		r := &recs[i]
		linked := false
		if j, ok := byID[r.Parent]; ok && r.Parent != "" {
			union(i, j)
			linked = true
		}
		for _, w := range r.WaitFor {
			if j, ok := byID[w]; ok {
				union(i, j)
				linked = true
			}
		}
		if r.Session != "" {
			if j, ok := bySession[r.Session]; ok {
				union(i, j)
			} else {
				bySession[r.Session] = i
			}
			linked = true
		}
		if !linked {
			if loose < 0 {
				loose = i
			} else {
				union(i, loose)
			}
		}
		byID[r.ID] = i
	}
	out := make([]int, len(recs))
	for i := range recs {
		out[i] = find(i)
	}
	return out
}

// CapIdleGaps reads the rest of the trace, cuts its idle gaps (see the
// function CapIdleGaps) and makes the reader yield the result. It holds
// every record in memory. It stops at the first bad record.
func (r *Reader) CapIdleGaps(cap int64) (GapCut, error) {
	var recs []Record
	for {
		rec, err := r.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			return GapCut{}, err
		}
		recs = append(recs, rec)
	}
	cut, err := CapIdleGaps(recs, cap)
	if err != nil {
		return GapCut{}, err
	}
	r.dec = &wekaDecoder{recs: recs} // any slice of records
	r.err = nil                      // the io.EOF just met
	note := fmt.Sprintf("idle gaps capped at %s s (%s s cut)", fmtSec(cap), fmtSec(cut.Cut))
	if r.hdr.Note != "" {
		note = r.hdr.Note + "; " + note
	}
	r.hdr.Note = note
	return cut, nil
}
