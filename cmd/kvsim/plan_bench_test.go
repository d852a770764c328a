package main

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/kvsim/kvsim/planner"
	"github.com/kvsim/kvsim/planner/synth"
)

func shortPlanBench(t *testing.T) {
	t.Helper()
	oldMin, oldRound := planBenchMinTime, planBenchRound
	planBenchMinTime, planBenchRound = time.Millisecond, 100*time.Microsecond
	t.Cleanup(func() { planBenchMinTime, planBenchRound = oldMin, oldRound })
}

func TestPlanBenchJSON(t *testing.T) {
	shortPlanBench(t)
	code, stdout, stderr := runCLI(t, "plan-bench", "--candidates", "60", "--deficit", "236", "--cp", "4", "--seed", "5", "--json")
	if code != exitOK || stderr != "" {
		t.Fatalf("plan-bench --json = %d, stderr %q", code, stderr)
	}
	var got map[string]any
	if err := json.Unmarshal([]byte(stdout), &got); err != nil || !strings.HasSuffix(stdout, "}\n") || strings.Count(stdout, "\n") != 1 {
		t.Fatalf("output is not one JSON line: %q (%v)", stdout, err)
	}
	for _, f := range []string{"reference_ms", "heap_ms", "speedup", "identical", "victims", "candidates", "deficit", "cp", "seed"} {
		if _, ok := got[f]; !ok {
			t.Errorf("field %q missing from %s", f, stdout)
		}
	}
	// The victim count must be the planner's on the same snapshot.
	nodes, deficits, err := synth.Snapshot(synth.Config{Candidates: 60, Deficit: 236, Lanes: 4, Seed: 5})
	if err != nil {
		t.Fatal(err)
	}
	plan, err := planner.Reference(nodes, deficits)
	if err != nil {
		t.Fatal(err)
	}
	if got["identical"] != true || got["victims"] != float64(len(plan.Victims)) || got["candidates"] != 60.0 ||
		got["deficit"] != 236.0 || got["cp"] != 4.0 || got["seed"] != 5.0 {
		t.Errorf("plan-bench --json = %s, want identical plans with %d victims for the given flags", stdout, len(plan.Victims))
	}
	if ms := got["heap_ms"].(float64); ms <= 0 {
		t.Errorf("heap_ms = %v, want > 0", ms)
	}
}

func TestPlanBenchTable(t *testing.T) {
	shortPlanBench(t)
	code, stdout, stderr := runCLI(t, "plan-bench", "--candidates", "40", "--deficit", "100", "--cp", "2")
	if code != exitOK || stderr != "" {
		t.Fatalf("plan-bench = %d, stderr %q", code, stderr)
	}
	for _, want := range []string{"40 candidates, deficit 100 pages over 2 lanes", "reference (full rescan)", "heap (lazy re-evaluation)", "plans identical: yes"} {
		if !strings.Contains(stdout, want) {
			t.Errorf("table lacks %q:\n%s", want, stdout)
		}
	}
}

func TestPlanBenchUsageErrors(t *testing.T) {
	for _, args := range [][]string{
		{"--candidates", "0"},
		{"--deficit", "-1"},
		{"--cp", "0"},
		{"--cp", "2000"},
		{"--seed", "x"},
		{"extra"},
	} {
		code, stdout, stderr := runCLI(t, append([]string{"plan-bench"}, args...)...)
		if code != exitUsage || stdout != "" || stderr == "" {
			t.Errorf("plan-bench %q = %d, stdout %q, stderr %q; want %d and a message", args, code, stdout, stderr, exitUsage)
		}
	}
	code, stdout, _ := runCLI(t, "plan-bench", "-h")
	if code != exitOK || !strings.Contains(stdout, "usage: kvsim plan-bench") {
		t.Errorf("plan-bench -h = %d, %q", code, stdout)
	}
}

func TestPlanBenchDiff(t *testing.T) {
	a := planner.Plan{Victims: []int64{1, 2, 3}, PlannedFreed: []int64{4}, Remaining: []int64{0}}
	for _, tc := range []struct {
		b    planner.Plan
		want string
	}{
		{a, ""},
		{planner.Plan{Victims: []int64{1, 3, 2}, PlannedFreed: []int64{4}, Remaining: []int64{0}}, "victim 1 is 2 (reference) vs 3 (heap)"},
		{planner.Plan{Victims: []int64{1, 2}, PlannedFreed: []int64{4}, Remaining: []int64{0}}, "3 victims (reference) vs 2 (heap)"},
		{planner.Plan{Victims: []int64{1, 2, 3}, PlannedFreed: []int64{5}, Remaining: []int64{0}}, "planned_freed [4] (reference) vs [5] (heap)"},
		{planner.Plan{Victims: []int64{1, 2, 3}, PlannedFreed: []int64{4}, Remaining: []int64{1}}, "remaining [0] (reference) vs [1] (heap)"},
	} {
		if got := planBenchDiff(a, tc.b); got != tc.want {
			t.Errorf("planBenchDiff(%v, %v) = %q, want %q", a, tc.b, got, tc.want)
		}
	}
}
