package main

import (
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/kvsim/kvsim/planner"
	"github.com/kvsim/kvsim/planner/synth"
	"github.com/kvsim/kvsim/sim/engine"
)

func init() {
	register(&command{
		name:    "plan-bench",
		summary: "time the owner-lane planner: full-rescan reference against the lazy heap",
		run:     runPlanBench,
	})
}

const planBenchUsage = `usage: kvsim plan-bench [--candidates N] [--deficit D] [--cp C] [--seed S] [--json]

Builds a reproducible synthetic radix-tree snapshot (shared system prompts,
forked conversations, locked request paths, host-only leaves; see package
planner/synth) with N initially eligible leaves and a total page deficit D
spread unevenly over C owner lanes, runs the reference planner (full rescan
per step) and the lazy re-evaluation heap on it, checks that their plans are
identical, and reports the wall time per plan of each. The two are timed in
interleaved rounds for about 1.5 s (at least one round): in each round the
reference runs for at least 25 ms (at least once), then the heap for as
long. The times shown are the medians over rounds and the speed-up is the
median of the per-round ratios, so that noise from other work on the
machine hits both planners alike.

Exit status: 0 if the plans are identical, 1 if they differ, 2 for bad flags.

flags:
`

// planBenchMinTime is how long the interleaved rounds go on, and
// planBenchRound how long each planner runs in one round (see
// planBenchMeasure). Tests shorten both.
var (
	planBenchMinTime = 1500 * time.Millisecond
	planBenchRound   = 25 * time.Millisecond
)

// planBenchResult is the --json output.
type planBenchResult struct {
	ReferenceMS   float64 `json:"reference_ms"`
	HeapMS        float64 `json:"heap_ms"`
	Speedup       float64 `json:"speedup"`
	Identical     bool    `json:"identical"`
	Victims       int     `json:"victims"`
	Candidates    int     `json:"candidates"`
	Deficit       int64   `json:"deficit"`
	CP            int     `json:"cp"`
	Seed          uint64  `json:"seed"`
	Nodes         int     `json:"nodes"`
	ReferenceRuns int     `json:"reference_runs"`
	HeapRuns      int     `json:"heap_runs"`
	Rounds        int     `json:"rounds"`
	Evaluations   int     `json:"heap_evaluations"`
	Version       string  `json:"version"`
}

func runPlanBench(args []string, stdout, stderr io.Writer) int {
	fs := newHintCommand("kvsim plan-bench", planBenchUsage, stdout, stderr)
	var cfg synth.Config
	fs.IntVar(&cfg.Candidates, "candidates", 2000, "initially eligible leaves (>= 1)")
	fs.Int64Var(&cfg.Deficit, "deficit", 7877, "total page deficit over all lanes (>= 0)")
	fs.IntVar(&cfg.Lanes, "cp", 8, "owner lanes, in [1, 1024]")
	fs.Uint64Var(&cfg.Seed, "seed", 1, "seed of the snapshot generator")
	asJSON := fs.Bool("json", false, "print one JSON object instead of a table")
	if code, ok := fs.parse(args); !ok {
		return code
	}
	if err := cfg.Validate(); err != nil {
		fmt.Fprintf(stderr, "kvsim plan-bench: --%v\n", err)
		return exitUsage
	}
	nodes, deficits, err := synth.Snapshot(cfg)
	if err != nil {
		fmt.Fprintf(stderr, "kvsim plan-bench: %v\n", err)
		return exitUsage
	}
	p, err := planner.New(planner.Config{Lanes: cfg.Lanes})
	if err != nil {
		fmt.Fprintf(stderr, "kvsim plan-bench: %v\n", err)
		return exitUsage
	}

	var ref, heap planner.Plan
	m, err := planBenchMeasure(func() (err error) {
		ref, err = planner.Reference(nodes, deficits)
		return err
	}, func() (err error) {
		heap, err = p.Plan(nodes, deficits)
		return err
	})
	if err != nil {
		fmt.Fprintf(stderr, "kvsim plan-bench: %v\n", err)
		return exitFail
	}
	diff := planBenchDiff(ref, heap)
	res := planBenchResult{
		ReferenceMS: ms(m.ref), HeapMS: ms(m.heap), Speedup: m.speedup, Rounds: m.rounds,
		Identical: diff == "", Victims: len(heap.Victims),
		Candidates: cfg.Candidates, Deficit: cfg.Deficit, CP: cfg.Lanes, Seed: cfg.Seed,
		Nodes: len(nodes), ReferenceRuns: m.refRuns, HeapRuns: m.heapRuns,
		Evaluations: p.Stats().Evaluations, Version: version,
	}
	if *asJSON {
		out, err := json.Marshal(res)
		if err != nil {
			fmt.Fprintf(stderr, "kvsim plan-bench: %v\n", err)
			return exitFail
		}
		fmt.Fprintf(stdout, "%s\n", out)
	} else {
		planBenchTable(stdout, res, deficits, p.Stats())
	}
	if diff != "" {
		fmt.Fprintf(stderr, "kvsim plan-bench: the plans differ: %s\n", diff)
		return exitFail
	}
	return exitOK
}

// planBenchMeasurement is what planBenchMeasure found: the median time per
// plan of each planner over the rounds, the median of the per-round
// speed-ups, and the run counts.
type planBenchMeasurement struct {
	ref, heap         time.Duration
	speedup           float64
	rounds            int
	refRuns, heapRuns int
}

// planBenchMeasure times the reference and the heap in interleaved rounds:
// each round runs the reference for at least planBenchRound (at least once)
// and then the heap for as long, and rounds go on until planBenchMinTime has
// passed (at least one round). Medians over rounds, and a speed-up taken
// within each round, keep a noisy neighbour on a shared machine from
// landing on one planner's runs only, as it does when each is timed in one
// block. The heap runs once untimed first, so that its scratch space is
// allocated; the reference has no scratch space to warm up, and a warm-up
// run would double the time of large cases.
func planBenchMeasure(reference, heap func() error) (planBenchMeasurement, error) {
	var m planBenchMeasurement
	if err := heap(); err != nil {
		return m, fmt.Errorf("heap: %w", err)
	}
	var refs, heaps, ratios []float64
	start := time.Now()
	for m.rounds == 0 || time.Since(start) < planBenchMinTime {
		r, n, err := planBenchTime(reference)
		if err != nil {
			return m, fmt.Errorf("reference: %w", err)
		}
		m.refRuns += n
		h, n, err := planBenchTime(heap)
		if err != nil {
			return m, fmt.Errorf("heap: %w", err)
		}
		m.heapRuns += n
		m.rounds++
		refs, heaps = append(refs, float64(r)), append(heaps, float64(h))
		ratios = append(ratios, float64(r)/float64(max(h, 1)))
	}
	median := func(v []float64) float64 { slices.Sort(v); return engine.Percentile(v, 50) }
	m.ref, m.heap = time.Duration(median(refs)), time.Duration(median(heaps))
	m.speedup = median(ratios)
	return m, nil
}

// planBenchTime runs f until planBenchRound has passed (at least once) and
// returns the mean wall time per run and the number of runs.
func planBenchTime(f func() error) (time.Duration, int, error) {
	start := time.Now()
	for runs := 1; ; runs++ {
		if err := f(); err != nil {
			return 0, runs, err
		}
		if el := time.Since(start); el >= planBenchRound {
			return el / time.Duration(runs), runs, nil
		}
	}
}

func ms(d time.Duration) float64 { return float64(d.Nanoseconds()) / 1e6 }

// planBenchDiff describes the first difference between two plans, or
// returns "" if they are identical.
func planBenchDiff(ref, heap planner.Plan) string {
	for i := range min(len(ref.Victims), len(heap.Victims)) {
		if ref.Victims[i] != heap.Victims[i] {
			return fmt.Sprintf("victim %d is %d (reference) vs %d (heap)", i, ref.Victims[i], heap.Victims[i])
		}
	}
	switch {
	case len(ref.Victims) != len(heap.Victims):
		return fmt.Sprintf("%d victims (reference) vs %d (heap)", len(ref.Victims), len(heap.Victims))
	case !slices.Equal(ref.PlannedFreed, heap.PlannedFreed):
		return fmt.Sprintf("planned_freed %v (reference) vs %v (heap)", ref.PlannedFreed, heap.PlannedFreed)
	case !slices.Equal(ref.Remaining, heap.Remaining):
		return fmt.Sprintf("remaining %v (reference) vs %v (heap)", ref.Remaining, heap.Remaining)
	}
	return ""
}

func planBenchTable(w io.Writer, r planBenchResult, deficits []int64, st planner.Stats) {
	fmt.Fprintf(w, "owner-lane planner: %d candidates, deficit %d pages over %d lanes %v, seed %d\n",
		r.Candidates, r.Deficit, r.CP, deficits, r.Seed)
	fmt.Fprintf(w, "snapshot: %d nodes; plan: %d victims\n\n", r.Nodes, r.Victims)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "planner\tmedian time/plan\truns\t\n")
	fmt.Fprintf(tw, "reference (full rescan)\t%s\t%d\t\n", planBenchFmtMS(r.ReferenceMS), r.ReferenceRuns)
	fmt.Fprintf(tw, "heap (lazy re-evaluation)\t%s\t%d\t\n", planBenchFmtMS(r.HeapMS), r.HeapRuns)
	tw.Flush()
	identical := "yes"
	if !r.Identical {
		identical = "NO"
	}
	fmt.Fprintf(w, "\nspeedup %.0fx (median over %d interleaved rounds); plans identical: %s\n", r.Speedup, r.Rounds, identical)
	fmt.Fprintf(w, "heap work: %d score evaluations (%d initial, %d stale re-keys)\n",
		st.Evaluations, st.Candidates, st.Stale)
}

// planBenchFmtMS prints milliseconds with three significant digits.
func planBenchFmtMS(v float64) string {
	s := fmt.Sprintf("%.3g", v)
	if strings.ContainsAny(s, "e") {
		s = fmt.Sprintf("%.0f", v)
	}
	return s + " ms"
}
