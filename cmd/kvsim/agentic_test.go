package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kvsim/kvsim/internal/testutil"
)

// TestIdleGapCapFlags: --idle-gap-cap cuts the gaps of trace convert and
// trace stats and says how much, and a negative cap is a usage error.
func TestIdleGapCapFlags(t *testing.T) {
	in := filepath.Join("..", "..", "traces", "testdata", "wekadir")
	out := filepath.Join(t.TempDir(), "capped.jsonl")
	_, errOut := runOK(t, "trace", "convert", "--idle-gap-cap", "1s", "--out", out, in)
	if !strings.Contains(errOut, "cut 2 gaps in 2 session families, 4.500 s in all") {
		t.Fatalf("convert: stderr %q does not report the cut", errOut)
	}
	_, recs := readTrace(t, out)
	for i, want := range []int64{0, 1e9, 1e9, 2e9} {
		if recs[i].Arrival != want {
			t.Fatalf("record %d (%s) arrives at %d ns, want %d", i, recs[i].ID, recs[i].Arrival, want)
		}
	}
	code, _, errOut := runCLI(t, "trace", "stats", "--idle-gap-cap", "1s", in)
	if code != exitOK || !strings.Contains(errOut, "4.500 s in all") {
		t.Fatalf("stats: exit %d: %s", code, errOut)
	}
	for _, args := range [][]string{
		{"trace", "stats", "--idle-gap-cap", "-1s", in},
		{"sim", "--idle-gap-cap", "-1s", "--trace", in},
	} {
		if code, _, errOut := runCLI(t, args...); code != exitUsage || !strings.Contains(errOut, "idle-gap-cap") {
			t.Fatalf("%v: exit %d, stderr %q; want a usage error naming --idle-gap-cap", args, code, errOut)
		}
	}
	cfg := filepath.Join(t.TempDir(), "bad.toml")
	if err := os.WriteFile(cfg, []byte("[workload]\nidle_gap_cap = -5\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if code, _, errOut := runCLI(t, "sim", "--config", cfg, "--trace", in); code != exitUsage || !strings.Contains(errOut, "workload.idle_gap_cap") {
		t.Fatalf("bad workload.idle_gap_cap: exit %d, stderr %q", code, errOut)
	}
}

// TestSimOpenLoopFlag: kvsim sim runs a DAG trace closed-loop (release and
// dependency wait per request) unless --open-loop.
func TestSimOpenLoopFlag(t *testing.T) {
	in := filepath.Join("..", "..", "traces", "testdata", "weka.json")
	for _, open := range []bool{false, true} {
		out := filepath.Join(t.TempDir(), "pr.jsonl")
		args := []string{"sim", "--trace", in, "--per-request", out}
		if open {
			args = append(args, "--open-loop")
		}
		if code, _, errOut := runCLI(t, args...); code != exitOK {
			t.Fatalf("%v: exit %d: %s", args, code, errOut)
		}
		data := testutil.ReadFile(t, out)
		if got := strings.Contains(string(data), `"release_ns"`); got == open {
			t.Fatalf("%v: release_ns in the per-request output = %v, want %v", args, got, !open)
		}
	}
}
