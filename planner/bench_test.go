package planner_test

import (
	"fmt"
	"testing"

	"github.com/kvsim/kvsim/planner"
	"github.com/kvsim/kvsim/planner/synth"
)

// benchDeficit scales the seed's case (2000 candidates, 7877 pages of
// deficit) to other sizes.
func benchDeficit(candidates int) int64 { return int64(candidates) * 7877 / 2000 }

// snapshotPlanner returns the synthetic snapshot of cfg and a planner for
// its lanes.
func snapshotPlanner(tb testing.TB, cfg synth.Config) ([]planner.Node, []int64, *planner.Planner) {
	tb.Helper()
	nodes, deficits, err := synth.Snapshot(cfg)
	if err != nil {
		tb.Fatal(err)
	}
	p, err := planner.New(planner.Config{Lanes: cfg.Lanes})
	if err != nil {
		tb.Fatal(err)
	}
	return nodes, deficits, p
}

// BenchmarkPlan times one plan on the synthetic snapshots of `kvsim
// plan-bench` with cp = 8 and seed 1: the heap at 2k, 20k and 200k
// candidates, the reference at 2k and 20k (at 200k one reference plan takes
// minutes).
func BenchmarkPlan(b *testing.B) {
	for _, algo := range []string{"heap", "reference"} {
		sizes := []int{2000, 20000, 200000}
		if algo == "reference" {
			sizes = sizes[:2]
		}
		for _, size := range sizes {
			b.Run(fmt.Sprintf("%s/candidates=%d", algo, size), func(b *testing.B) {
				cfg := synth.Config{Candidates: size, Deficit: benchDeficit(size), Lanes: 8, Seed: 1}
				nodes, deficits, p := snapshotPlanner(b, cfg)
				plan := func() (planner.Plan, error) { return p.Plan(nodes, deficits) }
				if algo == "reference" {
					plan = func() (planner.Plan, error) { return planner.Reference(nodes, deficits) }
				}
				var victims int
				b.ReportAllocs()
				for b.Loop() {
					got, err := plan()
					if err != nil {
						b.Fatal(err)
					}
					victims = len(got.Victims)
				}
				b.ReportMetric(float64(victims), "victims")
				b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N), "ns/plan")
				if algo == "heap" {
					st := p.Stats()
					b.ReportMetric(float64(st.Evaluations), "evals/plan")
				}
			})
		}
	}
}
