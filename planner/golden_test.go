package planner_test

import (
	"crypto/sha256"
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kvsim/kvsim/internal/golden"
	"github.com/kvsim/kvsim/planner"
	"github.com/kvsim/kvsim/planner/synth"
)

// TestPlanGolden pins the plan for the synthetic snapshots of `make run` and
// the benchmark sizes, so that any change in the planner's choices shows up
// as a reviewed golden diff (`make golden`). Both implementations must
// produce it.
func TestPlanGolden(t *testing.T) {
	for _, c := range []synth.Config{
		{Candidates: 2000, Deficit: 7877, Lanes: 8, Seed: 1},
		{Candidates: 300, Deficit: 1181, Lanes: 1, Seed: 2},
		{Candidates: 300, Deficit: 1181, Lanes: 3, Seed: 3},
	} {
		name := fmt.Sprintf("plan-c%d-d%d-cp%d-s%d", c.Candidates, c.Deficit, c.Lanes, c.Seed)
		t.Run(name, func(t *testing.T) {
			nodes, deficits, p := snapshotPlanner(t, c)
			got, err := p.Plan(nodes, deficits)
			if err != nil {
				t.Fatal(err)
			}
			ref, err := planner.Reference(nodes, deficits)
			if err != nil {
				t.Fatal(err)
			}
			if !equalPlans(got, ref) {
				t.Fatalf("heap and reference differ")
			}
			text := describePlan(deficits, got)
			golden.CheckString(t, filepath.Join("testdata", name+".golden"), text)
		})
	}
}

func describePlan(deficits []int64, p planner.Plan) string {
	var b strings.Builder
	fmt.Fprintf(&b, "deficits      %v\n", deficits)
	fmt.Fprintf(&b, "victims       %d\n", len(p.Victims))
	fmt.Fprintf(&b, "first victims %v\n", p.Victims[:min(12, len(p.Victims))])
	fmt.Fprintf(&b, "victims hash  %x\n", sha256.Sum256(fmt.Append(nil, p.Victims)))
	fmt.Fprintf(&b, "planned freed %v\n", p.PlannedFreed)
	fmt.Fprintf(&b, "remaining     %v\n", p.Remaining)
	return b.String()
}
