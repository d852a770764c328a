package planner_test

import (
	"cmp"
	"errors"
	"fmt"
	"slices"
	"testing"

	"github.com/kvsim/kvsim/planner"
	"pgregory.net/rapid"
)

// snapshotCase is one generated planner input.
type snapshotCase struct {
	Nodes    []planner.Node
	Deficits []int64
}

// genSnapshot draws a random tree snapshot: one of several shapes (deep
// chains, wide parents, random, bushy), locked nodes, non-device subtrees,
// 1..8 lanes with non-uniform small counts, dense or sparse IDs, SLRU keys
// with many ties, and single-lane, multi-lane, fractional, zero or oversized
// deficits.
func genSnapshot(t *rapid.T) snapshotCase {
	cp := rapid.IntRange(1, 8).Draw(t, "cp")
	maxN := rapid.SampledFrom([]int{1, 8, 40, 40, 120}).Draw(t, "maxN")
	n := rapid.IntRange(maxN/4, maxN).Draw(t, "n")
	shape := rapid.SampledFrom([]string{"chain", "wide", "random", "bushy"}).Draw(t, "shape")
	ids := rapid.SampledFrom([]string{"sequential", "shuffled", "sparse"}).Draw(t, "ids")
	maxCount := rapid.IntRange(1, 6).Draw(t, "maxCount")
	uniform := rapid.Bool().Draw(t, "uniformLanes")
	lockPct := rapid.SampledFrom([]int{0, 10, 30}).Draw(t, "lockPct")
	hostPct := rapid.SampledFrom([]int{0, 10, 30}).Draw(t, "hostPct")

	idOf := make([]int64, n)
	for k := range idOf {
		idOf[k] = int64(k + 1)
	}
	switch ids {
	case "shuffled":
		perm := rapid.Permutation(idOf).Draw(t, "perm")
		copy(idOf, perm)
	case "sparse":
		for k := range idOf {
			idOf[k] = (int64(k)+1)*1_000_003 + 1<<40
			if k%2 == 1 {
				idOf[k] = -idOf[k]
			}
		}
	}

	nodes := make([]planner.Node, n)
	for k := 0; k < n; k++ {
		var p int // 0 = root, else 1-based position of an earlier node
		switch shape {
		case "chain":
			if k > 0 && rapid.IntRange(0, 9).Draw(t, "extend") < 8 {
				p = k
			} else {
				p = rapid.IntRange(0, k).Draw(t, "parent")
			}
		case "wide":
			p = rapid.IntRange(0, min(k, 2)).Draw(t, "parent")
		case "random":
			p = k - rapid.IntRange(0, k).Draw(t, "back")
		case "bushy":
			p = rapid.IntRange(max(0, k-3), k).Draw(t, "parent")
		}
		nd := planner.Node{ID: idOf[k], Counts: make([]int64, cp)}
		parentDevice := true
		if p > 0 {
			nd.Parent = idOf[p-1]
			parentDevice = nodes[p-1].Device
		}
		// rapid favours small draws, so rare flags test for large ones.
		nd.Device = parentDevice && rapid.IntRange(0, 99).Draw(t, "host") < 100-hostPct
		nd.Locked = rapid.IntRange(0, 99).Draw(t, "lock") >= 100-lockPct
		if uniform {
			c := int64(maxCount - rapid.IntRange(0, maxCount).Draw(t, "count"))
			for o := range nd.Counts {
				nd.Counts[o] = c
			}
		} else {
			for o := range nd.Counts {
				nd.Counts[o] = int64(maxCount - rapid.IntRange(0, maxCount).Draw(t, "count"))
			}
		}
		nd.SLRU = planner.Priority{
			Segment:    rapid.IntRange(0, 1).Draw(t, "segment"),
			LastAccess: int64(rapid.IntRange(0, 3).Draw(t, "lastAccess")),
		}
		nodes[k] = nd
	}

	lane := make([]int64, cp) // device pages per lane
	for _, nd := range nodes {
		if nd.Device {
			for o, c := range nd.Counts {
				lane[o] += c
			}
		}
	}
	deficits := make([]int64, cp)
	switch rapid.SampledFrom([]string{"zero", "single", "multi", "fraction", "fraction", "fraction", "oversized"}).Draw(t, "deficits") {
	case "single":
		o := rapid.IntRange(0, cp-1).Draw(t, "lane")
		deficits[o] = int64(rapid.IntRange(1, int(lane[o])+2).Draw(t, "deficit"))
	case "multi":
		for o := range deficits {
			deficits[o] = int64(rapid.IntRange(0, int(lane[o])+2).Draw(t, "deficit"))
		}
	case "fraction":
		// Each lane short of 10% to 90% of its device pages: plans with
		// many victims that cross the per-lane saturation boundaries.
		for o := range deficits {
			deficits[o] = lane[o] * int64(100-rapid.IntRange(10, 90).Draw(t, "percent")) / 100
		}
	case "oversized":
		for o := range deficits {
			deficits[o] = lane[o] + int64(rapid.IntRange(1, 5).Draw(t, "excess"))
		}
	}
	return snapshotCase{Nodes: nodes, Deficits: deficits}
}

// planners caches one reusable Planner per lane count across rapid cases, so
// the properties also exercise scratch reuse between differently shaped
// snapshots.
type planners map[int]*planner.Planner

func (ps planners) get(t *rapid.T, cp int) *planner.Planner {
	if p, ok := ps[cp]; ok {
		return p
	}
	p, err := planner.New(planner.Config{Lanes: cp})
	if err != nil {
		t.Fatalf("New(%d): %v", cp, err)
	}
	ps[cp] = p
	return p
}

// TestPropHeapMatchesReference: the lazy heap's plan is identical to the
// full-rescan reference's on every snapshot.
// It also counts how often the interesting paths were taken, and fails if
// the generator stopped reaching them: cases with several victims, with
// stale entries re-keyed (the lazy re-evaluation boundary), and with
// multi-lane deficits.
func TestPropHeapMatchesReference(t *testing.T) {
	ps := planners{}
	var cases, multiVictim, stale, multiLane int
	rapid.Check(t, func(t *rapid.T) {
		c := genSnapshot(t)
		want, err := planner.Reference(c.Nodes, c.Deficits)
		if err != nil {
			t.Fatalf("Reference: %v", err)
		}
		p := ps.get(t, len(c.Deficits))
		got, err := p.Plan(c.Nodes, c.Deficits)
		if err != nil {
			t.Fatalf("Plan: %v", err)
		}
		if !equalPlans(got, want) {
			t.Fatalf("heap plan differs from reference\n heap: %+v\n  ref: %+v", got, want)
		}
		cases++
		if len(got.Victims) > 2 {
			multiVictim++
		}
		if p.Stats().Stale > 0 {
			stale++
		}
		positive := 0
		for _, d := range c.Deficits {
			if d > 0 {
				positive++
			}
		}
		if positive > 1 {
			multiLane++
		}
	})
	t.Logf("%d cases: %d with > 2 victims, %d with stale re-keys, %d with several positive lanes", cases, multiVictim, stale, multiLane)
	if cases >= 100 && (multiVictim < cases/4 || stale < cases/10 || multiLane < cases/5) {
		t.Errorf("generator coverage too low: %d cases, %d with > 2 victims, %d with stale re-keys, %d multi-lane", cases, multiVictim, stale, multiLane)
	}
}

// TestPropPlanMatchesOracle checks the heap's plan step by step against a
// brute-force oracle that works on the input slice directly: each victim was
// eligible when chosen and had the smallest score of all eligible nodes
// (found by sorting them), the loop stopped exactly when no deficit was left,
// nothing was eligible, or every eligible node scored (0, 0), and
// PlannedFreed and Remaining add up.
func TestPropPlanMatchesOracle(t *testing.T) {
	ps := planners{}
	rapid.Check(t, func(t *rapid.T) {
		c := genSnapshot(t)
		got, err := ps.get(t, len(c.Deficits)).Plan(c.Nodes, c.Deficits)
		if err != nil {
			t.Fatalf("Plan: %v", err)
		}
		if err := checkAgainstOracle(c, got); err != nil {
			t.Fatal(err)
		}
	})
}

// oracle replays a plan on the raw snapshot with O(n) definitions.
type oracle struct {
	nodes    []planner.Node
	chosen   map[int64]bool
	deficits []int64
}

func (or *oracle) onDevice(i int) bool { return or.nodes[i].Device && !or.chosen[or.nodes[i].ID] }

// liveChildren returns the positions of i's device-resident children not yet
// chosen; i == -1 means the root.
func (or *oracle) liveChildren(parent int64) []int {
	var kids []int
	for j := range or.nodes {
		if or.nodes[j].Parent == parent && or.onDevice(j) {
			kids = append(kids, j)
		}
	}
	return kids
}

func (or *oracle) eligible(i int) bool {
	return or.onDevice(i) && !or.nodes[i].Locked && len(or.liveChildren(or.nodes[i].ID)) == 0
}

func (or *oracle) contribution(i int) int64 {
	var c int64
	for o, d := range or.deficits {
		c += min(or.nodes[i].Counts[o], d)
	}
	return c
}

func (or *oracle) unlock(i int) int64 {
	pid := or.nodes[i].Parent
	if pid == 0 {
		return 0
	}
	p := slices.IndexFunc(or.nodes, func(n planner.Node) bool { return n.ID == pid })
	if !or.onDevice(p) || or.nodes[p].Locked {
		return 0
	}
	if kids := or.liveChildren(pid); len(kids) != 1 || kids[0] != i {
		return 0
	}
	return or.contribution(p)
}

type scored struct {
	i       int
	id      int64
	contrib int64
	unlock  int64
	slru    planner.Priority
}

// ranked returns every eligible node sorted by score, smallest first.
func (or *oracle) ranked() []scored {
	var all []scored
	for i, nd := range or.nodes {
		if or.eligible(i) {
			all = append(all, scored{i, nd.ID, or.contribution(i), or.unlock(i), nd.SLRU})
		}
	}
	slices.SortFunc(all, func(a, b scored) int {
		return cmp.Or(
			cmp.Compare(b.contrib, a.contrib),
			cmp.Compare(b.unlock, a.unlock),
			a.slru.Compare(b.slru),
			cmp.Compare(a.id, b.id))
	})
	return all
}

func (or *oracle) anyDeficit() bool {
	return slices.ContainsFunc(or.deficits, func(d int64) bool { return d > 0 })
}

func checkAgainstOracle(c snapshotCase, got planner.Plan) error {
	or := &oracle{nodes: c.Nodes, chosen: map[int64]bool{}, deficits: slices.Clone(c.Deficits)}
	freed := make([]int64, len(c.Deficits))
	for step, v := range got.Victims {
		if !or.anyDeficit() {
			return fmt.Errorf("step %d: victim %d chosen with no deficit left", step, v)
		}
		r := or.ranked()
		if len(r) == 0 {
			return fmt.Errorf("step %d: victim %d chosen with nothing eligible", step, v)
		}
		if r[0].id != v {
			i := slices.IndexFunc(c.Nodes, func(n planner.Node) bool { return n.ID == v })
			if i < 0 || !or.eligible(i) {
				return fmt.Errorf("step %d: victim %d was not eligible", step, v)
			}
			return fmt.Errorf("step %d: victim %d, but the smallest score is %+v (victim scores %d, %d)",
				step, v, r[0], or.contribution(i), or.unlock(i))
		}
		if r[0].contrib == 0 && r[0].unlock == 0 {
			return fmt.Errorf("step %d: victim %d helps nothing (contribution and unlock 0)", step, v)
		}
		nd := c.Nodes[r[0].i]
		or.chosen[v] = true
		for o, cnt := range nd.Counts {
			freed[o] += cnt
			or.deficits[o] -= min(cnt, or.deficits[o])
		}
	}
	if or.anyDeficit() {
		if r := or.ranked(); len(r) > 0 && (r[0].contrib > 0 || r[0].unlock > 0) {
			return fmt.Errorf("stopped after %d victims although %+v still helps", len(got.Victims), r[0])
		}
	}
	if !slices.Equal(got.PlannedFreed, freed) {
		return fmt.Errorf("PlannedFreed = %v, victims free %v", got.PlannedFreed, freed)
	}
	for o, d := range c.Deficits {
		if want := max(0, d-freed[o]); got.Remaining[o] != want {
			return fmt.Errorf("Remaining[%d] = %d, want max(0, %d - %d) = %d", o, got.Remaining[o], d, freed[o], want)
		}
	}
	if !slices.Equal(got.Remaining, or.deficits) {
		return fmt.Errorf("Remaining = %v, oracle deficits %v", got.Remaining, or.deficits)
	}
	return nil
}

func equalPlans(a, b planner.Plan) bool {
	return slices.Equal(a.Victims, b.Victims) && slices.Equal(a.PlannedFreed, b.PlannedFreed) &&
		slices.Equal(a.Remaining, b.Remaining)
}

// corruptions break a valid snapshot in one way each; want is the field the
// error must name.
var corruptions = []struct {
	name  string
	want  string
	apply func(t *rapid.T, c *snapshotCase) bool // false if not applicable
}{
	{"id 0 listed", "id", func(t *rapid.T, c *snapshotCase) bool {
		if len(c.Nodes) == 0 {
			return false
		}
		k := rapid.IntRange(0, len(c.Nodes)-1).Draw(t, "k")
		for j := range c.Nodes {
			if c.Nodes[j].Parent == c.Nodes[k].ID {
				c.Nodes[j].Parent = 0
			}
		}
		c.Nodes[k].ID = 0
		return true
	}},
	{"duplicate id", "id", func(t *rapid.T, c *snapshotCase) bool {
		if len(c.Nodes) < 2 {
			return false
		}
		c.Nodes[len(c.Nodes)-1].ID = c.Nodes[0].ID
		c.Nodes[len(c.Nodes)-1].Parent = 0
		return true
	}},
	{"unknown parent", "parent", func(t *rapid.T, c *snapshotCase) bool {
		if len(c.Nodes) == 0 {
			return false
		}
		c.Nodes[rapid.IntRange(0, len(c.Nodes)-1).Draw(t, "k")].Parent = 7_777_777_777
		return true
	}},
	{"parent listed after child", "parent", func(t *rapid.T, c *snapshotCase) bool {
		if len(c.Nodes) < 2 {
			return false
		}
		c.Nodes[0].Parent = c.Nodes[len(c.Nodes)-1].ID
		return true
	}},
	{"counts length", "counts", func(t *rapid.T, c *snapshotCase) bool {
		if len(c.Nodes) == 0 {
			return false
		}
		k := rapid.IntRange(0, len(c.Nodes)-1).Draw(t, "k")
		c.Nodes[k].Counts = append(c.Nodes[k].Counts, 1)
		return true
	}},
	{"negative count", "counts[", func(t *rapid.T, c *snapshotCase) bool {
		if len(c.Nodes) == 0 {
			return false
		}
		k := rapid.IntRange(0, len(c.Nodes)-1).Draw(t, "k")
		c.Nodes[k].Counts = slices.Clone(c.Nodes[k].Counts)
		c.Nodes[k].Counts[rapid.IntRange(0, len(c.Deficits)-1).Draw(t, "o")] = -1
		return true
	}},
	{"negative deficit", "deficits[", func(t *rapid.T, c *snapshotCase) bool {
		c.Deficits[rapid.IntRange(0, len(c.Deficits)-1).Draw(t, "o")] = -3
		return true
	}},
	{"device under host", "device", func(t *rapid.T, c *snapshotCase) bool {
		for j := range c.Nodes {
			if c.Nodes[j].Device {
				continue
			}
			c.Nodes = append(c.Nodes, planner.Node{ID: 9_999_999_999, Parent: c.Nodes[j].ID,
				Counts: make([]int64, len(c.Deficits)), Device: true})
			return true
		}
		return false
	}},
}

// TestPropInvalidInputRejected: every single corruption of a valid snapshot
// is rejected by both implementations with the same InputError naming the
// expected field, and nothing panics.
func TestPropInvalidInputRejected(t *testing.T) {
	ps := planners{}
	rapid.Check(t, func(t *rapid.T) {
		c := genSnapshot(t)
		c.Nodes = slices.Clone(c.Nodes)
		c.Deficits = slices.Clone(c.Deficits)
		k := rapid.IntRange(0, len(corruptions)-1).Draw(t, "corruption")
		if !corruptions[k].apply(t, &c) {
			t.Skip("corruption not applicable")
		}
		_, refErr := planner.Reference(c.Nodes, c.Deficits)
		_, heapErr := ps.get(t, len(c.Deficits)).Plan(c.Nodes, c.Deficits)
		if refErr == nil || heapErr == nil {
			t.Fatalf("%s: Reference err = %v, Plan err = %v; want errors", corruptions[k].name, refErr, heapErr)
		}
		if refErr.Error() != heapErr.Error() {
			t.Fatalf("%s: Reference says %q, Plan says %q", corruptions[k].name, refErr, heapErr)
		}
		var ie *planner.InputError
		if !errors.As(heapErr, &ie) || !errors.Is(heapErr, planner.ErrInvalid) {
			t.Fatalf("%s: %v is not an InputError", corruptions[k].name, heapErr)
		}
		if len(ie.Field) < len(corruptions[k].want) || ie.Field[:len(corruptions[k].want)] != corruptions[k].want {
			t.Fatalf("%s: error %q names field %q, want %q", corruptions[k].name, heapErr, ie.Field, corruptions[k].want)
		}
	})
}

// TestPropHeapMatchesReferenceCoarseBuckets repeats the comparison with the
// queue limited to a few buckets, so that its coarse layouts are exercised
// on small snapshots: unlock columns that hold several unlocks, rows that
// hold several contributions, and contributions clamped into the last
// bucket.
func TestPropHeapMatchesReferenceCoarseBuckets(t *testing.T) {
	ps := planners{}
	rapid.Check(t, func(t *rapid.T) {
		defer planner.SetMaxBuckets(rapid.SampledFrom([]int{1, 2, 3, 8, 40, 200}).Draw(t, "maxBuckets"))()
		c := genSnapshot(t)
		want, err := planner.Reference(c.Nodes, c.Deficits)
		if err != nil {
			t.Fatalf("Reference: %v", err)
		}
		got, err := ps.get(t, len(c.Deficits)).Plan(c.Nodes, c.Deficits)
		if err != nil {
			t.Fatalf("Plan: %v", err)
		}
		if !equalPlans(got, want) {
			t.Fatalf("heap plan differs from reference\n heap: %+v\n  ref: %+v", got, want)
		}
	})
}
