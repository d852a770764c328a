package planner_test

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/kvsim/kvsim/planner"
)

// n builds a device-resident, unlocked node.
func n(id, parent int64, counts ...int64) planner.Node {
	return planner.Node{ID: id, Parent: parent, Counts: counts, Device: true}
}

func locked(nd planner.Node) planner.Node { nd.Locked = true; return nd }
func host(nd planner.Node) planner.Node   { nd.Device = false; return nd }
func lastAccess(nd planner.Node, t int64) planner.Node {
	nd.SLRU.LastAccess = t
	return nd
}
func protected(nd planner.Node) planner.Node { nd.SLRU.Segment = 1; return nd }

func TestPlanNamedCases(t *testing.T) {
	tests := []struct {
		name     string
		nodes    []planner.Node
		deficits []int64
		want     planner.Plan
	}{
		{
			// L frees nothing the lanes need, but evicting it exposes its
			// parent P, which covers the deficit: child first, then parent.
			name:     "leaf-up with ancestor unlock",
			nodes:    []planner.Node{n(1, 0, 8, 0), n(2, 1, 0, 1)},
			deficits: []int64{8, 0},
			want:     planner.Plan{Victims: []int64{2, 1}, PlannedFreed: []int64{8, 1}, Remaining: []int64{0, 0}},
		},
		{
			// Contribution outranks unlock: M (3 pages) goes first, then L
			// for its unlock (now min(8, 5) = 5), then the exposed P.
			name:     "contribution before unlock",
			nodes:    []planner.Node{n(1, 0, 8, 0), n(2, 1, 0, 1), n(3, 0, 3, 0)},
			deficits: []int64{8, 0},
			want:     planner.Plan{Victims: []int64{3, 2, 1}, PlannedFreed: []int64{11, 1}, Remaining: []int64{0, 0}},
		},
		{
			// After B is chosen, A is the last child of P and its unlock
			// grows from 0 to 10, so A now beats C (same contribution,
			// older SLRU key). A heap that kept A's stale (1, 0) entry
			// would pick C here.
			name: "sibling unlock growth",
			nodes: []planner.Node{
				lastAccess(n(1, 0, 10), 9),
				lastAccess(n(2, 1, 1), 5), // A
				lastAccess(n(3, 1, 2), 5), // B
				lastAccess(n(4, 0, 1), 0), // C
			},
			deficits: []int64{12},
			want:     planner.Plan{Victims: []int64{3, 2, 1}, PlannedFreed: []int64{13}, Remaining: []int64{0}},
		},
		{
			name:     "nothing eligible",
			nodes:    []planner.Node{locked(n(1, 0, 4)), host(n(2, 0, 4)), host(n(3, 2, 1))},
			deficits: []int64{3},
			want:     planner.Plan{Victims: []int64{}, PlannedFreed: []int64{0}, Remaining: []int64{3}},
		},
		{
			// Everything evictable goes, leaves before parents: 2 first (it
			// unlocks 1), then 1, then 5. The locked leaf 4 pins its parent
			// 3. The remaining deficit is reported.
			name: "deficits larger than everything evictable",
			nodes: []planner.Node{
				n(1, 0, 2, 1), n(2, 1, 1, 1), n(3, 0, 5, 5), locked(n(4, 3, 1, 0)), n(5, 3, 0, 2),
			},
			deficits: []int64{100, 100},
			want:     planner.Plan{Victims: []int64{2, 1, 5}, PlannedFreed: []int64{3, 4}, Remaining: []int64{97, 96}},
		},
		{
			name:     "all-zero deficits",
			nodes:    []planner.Node{n(1, 0, 3, 3), n(2, 1, 1, 1)},
			deficits: []int64{0, 0},
			want:     planner.Plan{Victims: []int64{}, PlannedFreed: []int64{0, 0}, Remaining: []int64{0, 0}},
		},
		{
			// cp = 1: largest first; ties by SLRU segment, then last access,
			// then ID.
			name: "cp=1 ordering",
			nodes: []planner.Node{
				protected(n(1, 0, 2)), lastAccess(n(2, 0, 2), 7), lastAccess(n(3, 0, 2), 3), n(4, 0, 5), lastAccess(n(5, 0, 2), 3),
			},
			deficits: []int64{10},
			want:     planner.Plan{Victims: []int64{4, 3, 5, 2}, PlannedFreed: []int64{11}, Remaining: []int64{0}},
		},
		{
			// Once lane 0 is covered, the leaf with only lane-0 pages
			// contributes nothing and unlocks nothing: the planner stops
			// with lane 1 still short, rather than evict it for no gain.
			name:     "stop when nothing helps",
			nodes:    []planner.Node{n(1, 0, 4, 0), n(2, 0, 3, 0)},
			deficits: []int64{4, 2},
			want:     planner.Plan{Victims: []int64{1}, PlannedFreed: []int64{4, 0}, Remaining: []int64{0, 2}},
		},
		{
			// A locked parent is never exposed, so its child's unlock is 0;
			// the unlocked branch wins on unlock.
			name: "locked parent gives no unlock",
			nodes: []planner.Node{
				locked(n(1, 0, 9)), lastAccess(n(2, 1, 0), 0), n(3, 0, 9), lastAccess(n(4, 3, 0), 1),
			},
			deficits: []int64{5},
			want:     planner.Plan{Victims: []int64{4, 3}, PlannedFreed: []int64{9}, Remaining: []int64{0}},
		},
		{
			// Deficits are capped per lane: node 1 has more lane-0 pages
			// but node 2 covers both lanes.
			name:     "per-lane cap",
			nodes:    []planner.Node{n(1, 0, 9, 0), n(2, 0, 2, 2)},
			deficits: []int64{2, 2},
			want:     planner.Plan{Victims: []int64{2}, PlannedFreed: []int64{2, 2}, Remaining: []int64{0, 0}},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ref, err := planner.Reference(tc.nodes, tc.deficits)
			if err != nil {
				t.Fatalf("Reference: %v", err)
			}
			if !equalPlans(ref, tc.want) {
				t.Errorf("Reference = %+v, want %+v", ref, tc.want)
			}
			p, err := planner.New(planner.Config{Lanes: len(tc.deficits)})
			if err != nil {
				t.Fatal(err)
			}
			got, err := p.Plan(tc.nodes, tc.deficits)
			if err != nil {
				t.Fatalf("Plan: %v", err)
			}
			if !equalPlans(got, tc.want) {
				t.Errorf("Plan = %+v, want %+v", got, tc.want)
			}
			if err := checkAgainstOracle(snapshotCase{tc.nodes, tc.deficits}, got); err != nil {
				t.Error(err)
			}
		})
	}
}

func TestPlanInputErrors(t *testing.T) {
	tests := []struct {
		name     string
		nodes    []planner.Node
		deficits []int64
		want     string
	}{
		{"no lanes", nil, nil, "deficits: need at least one lane"},
		{"negative deficit", nil, []int64{1, -2}, "deficits[1]: must be >= 0 (got -2)"},
		{"deficit total overflows", nil, []int64{1 << 62, 1 << 62, 1 << 62}, "deficits: total overflows int64"},
		{"root listed", []planner.Node{n(0, 0, 1)}, []int64{1}, "nodes[0] (id 0): id: 0 is the root, which must not be listed"},
		{"duplicate id", []planner.Node{n(4, 0, 1), n(5, 0, 1), n(4, 0, 1)}, []int64{1}, "nodes[2] (id 4): id: duplicate of nodes[0]"},
		{"unknown parent", []planner.Node{n(1, 0, 1), n(2, 8, 1)}, []int64{1}, "nodes[1] (id 2): parent: unknown id 8"},
		{"parent after child", []planner.Node{n(1, 0, 1), n(2, 3, 1), n(3, 0, 1)}, []int64{1},
			"nodes[1] (id 2): parent: id 3 is listed after this node (nodes[2]); list parents first"},
		{"own parent", []planner.Node{n(1, 1, 1)}, []int64{1}, "nodes[0] (id 1): parent: a node cannot be its own parent"},
		{"counts length", []planner.Node{n(1, 0, 1), n(9, 1, 1, 2, 3)}, []int64{1, 1, 1, 1}, "nodes[0] (id 1): counts: want 4 lanes, got 1"},
		{"negative count", []planner.Node{n(1, 0, 1, -1)}, []int64{1, 1}, "nodes[0] (id 1): counts[1]: must be >= 0 (got -1)"},
		{"lane total overflows", []planner.Node{n(1, 0, 1<<62), n(2, 0, 1<<62)}, []int64{1}, "nodes[1] (id 2): counts[0]: lane total overflows int64"},
		{"device under host", []planner.Node{host(n(1, 0, 1)), n(2, 1, 1)}, []int64{1},
			"nodes[1] (id 2): device: true under non-device parent 1 (device residency is prefix-closed)"},
		{"sparse ids, unknown parent", []planner.Node{n(-5, 0, 1), n(1<<50, -6, 1)}, []int64{1},
			"nodes[1] (id 1125899906842624): parent: unknown id -6"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := planner.Reference(tc.nodes, tc.deficits)
			if err == nil || err.Error() != tc.want {
				t.Fatalf("Reference error = %v, want %q", err, tc.want)
			}
			if !errors.Is(err, planner.ErrInvalid) {
				t.Errorf("errors.Is(%v, ErrInvalid) = false", err)
			}
			if len(tc.deficits) == 0 {
				return
			}
			p, err := planner.New(planner.Config{Lanes: len(tc.deficits)})
			if err != nil {
				t.Fatal(err)
			}
			if _, err := p.Plan(tc.nodes, tc.deficits); err == nil || err.Error() != tc.want {
				t.Fatalf("Plan error = %v, want %q", err, tc.want)
			}
		})
	}
}

func TestPlanLaneMismatch(t *testing.T) {
	p, err := planner.New(planner.Config{Lanes: 4})
	if err != nil {
		t.Fatal(err)
	}
	_, err = p.Plan(nil, []int64{1, 2, 3})
	if want := "deficits: want 4 lanes, got 3"; err == nil || err.Error() != want {
		t.Fatalf("Plan error = %v, want %q", err, want)
	}
}

func TestNewRejectsBadConfig(t *testing.T) {
	if _, err := planner.New(planner.Config{Lanes: 0}); err == nil || !strings.Contains(err.Error(), "lanes") {
		t.Fatalf("New(Lanes: 0) error = %v, want a lanes error", err)
	}
	if err := planner.Default().Validate(); err != nil {
		t.Fatalf("Default().Validate() = %v", err)
	}
}

// TestPlanReusesScratch plans a large snapshot, then a small one, then the
// large one again with the same Planner, and checks that the results do not
// alias each other or leak state between calls.
func TestPlanReusesScratch(t *testing.T) {
	big := []planner.Node{n(1, 0, 5, 5), n(2, 1, 1, 1), n(3, 1, 2, 0), n(4, 0, 0, 3)}
	small := []planner.Node{n(7, 0, 1, 1)}
	p, err := planner.New(planner.Config{Lanes: 2})
	if err != nil {
		t.Fatal(err)
	}
	first, err := p.Plan(big, []int64{6, 6})
	if err != nil {
		t.Fatal(err)
	}
	keep := planner.Plan{Victims: slices.Clone(first.Victims), PlannedFreed: slices.Clone(first.PlannedFreed), Remaining: slices.Clone(first.Remaining)}
	if _, err := p.Plan(small, []int64{1, 0}); err != nil {
		t.Fatal(err)
	}
	again, err := p.Plan(big, []int64{6, 6})
	if err != nil {
		t.Fatal(err)
	}
	if !equalPlans(first, keep) || !equalPlans(again, keep) {
		t.Fatalf("plans changed across calls: first %+v, again %+v, want %+v", first, again, keep)
	}
}

// TestPlanAllocations checks that a reused Planner allocates only its result
// (three slices) per call.
func TestPlanAllocations(t *testing.T) {
	nodes := make([]planner.Node, 0, 200)
	for i := int64(1); i <= 200; i++ {
		nodes = append(nodes, n(i, (i-1)/3, i%5, i%3))
	}
	p, err := planner.New(planner.Config{Lanes: 2})
	if err != nil {
		t.Fatal(err)
	}
	deficits := []int64{80, 60}
	if _, err := p.Plan(nodes, deficits); err != nil {
		t.Fatal(err)
	}
	allocs := testing.AllocsPerRun(20, func() {
		if _, err := p.Plan(nodes, deficits); err != nil {
			panic(err)
		}
	})
	if allocs > 3 {
		t.Fatalf("Plan allocates %v times per call, want <= 3", allocs)
	}
}

func ExamplePlanner_Plan() {
	// A shared prefix (1) with two conversations (2, 3) under it, and an
	// unrelated leaf (4). Two owner lanes are short of 6 and 2 pages.
	nodes := []planner.Node{
		{ID: 1, Parent: 0, Counts: []int64{4, 4}, Device: true, SLRU: planner.Priority{Segment: 1, LastAccess: 10}},
		{ID: 2, Parent: 1, Counts: []int64{2, 0}, Device: true, SLRU: planner.Priority{Segment: 0, LastAccess: 30}},
		{ID: 3, Parent: 1, Counts: []int64{1, 1}, Device: true, Locked: true}, // a running request
		{ID: 4, Parent: 0, Counts: []int64{2, 0}, Device: true, SLRU: planner.Priority{Segment: 0, LastAccess: 20}},
	}
	p, err := planner.New(planner.Config{Lanes: 2})
	if err != nil {
		panic(err)
	}
	plan, err := p.Plan(nodes, []int64{6, 2})
	if err != nil {
		panic(err)
	}
	// 2 and 4 tie on contribution (2 pages) and unlock (0: the prefix is
	// held by request 3), so the older access (4) goes first. The prefix
	// stays: it has a locked child. Lane 1 cannot be helped.
	fmt.Println("victims:", plan.Victims)
	fmt.Println("planned freed:", plan.PlannedFreed)
	fmt.Println("remaining:", plan.Remaining)
	// Output:
	// victims: [4 2]
	// planned freed: [4 0]
	// remaining: [2 2]
}

func ExampleReference() {
	// A chain root -> 1 -> 2: leaf 2 frees nothing lane 0 needs, but
	// evicting it exposes 1, which frees 8 pages there (its unlock).
	nodes := []planner.Node{
		{ID: 1, Parent: 0, Counts: []int64{8, 0}, Device: true},
		{ID: 2, Parent: 1, Counts: []int64{0, 1}, Device: true},
	}
	plan, err := planner.Reference(nodes, []int64{8, 0})
	if err != nil {
		panic(err)
	}
	fmt.Printf("%v %v %v\n", plan.Victims, plan.PlannedFreed, plan.Remaining)
	// Output: [2 1] [8 1] [0 0]
}
