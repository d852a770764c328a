package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kvsim/kvsim/internal/testutil"
)

// Outputs are checked before the run: a folder, two flags naming one
// file, an output naming the config or the trace are refused, and the
// files named are left as they were.
func TestSimOutputsCheckedBeforeTheRun(t *testing.T) {
	dir := t.TempDir()
	trace := filepath.Join(dir, "t.jsonl")
	data := testutil.ReadFile(t, fleetTrace)
	if err := os.WriteFile(trace, data, 0o644); err != nil {
		t.Fatal(err)
	}
	cfg := filepath.Join(dir, "c.toml")
	if err := os.WriteFile(cfg, []byte("[model]\npreset = \"qwen2.5-14b\"\n[gpu]\npreset = \"h100-sxm\"\n[server]\ntp_size = 4\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, "out")
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--per-request", dir}, "--per-request: cannot write " + dir + ": it is a folder"},
		{[]string{"--per-request", out, "--timeline", out}, "--per-request and --timeline: both name " + out},
		{[]string{"--per-request", trace}, "--per-request " + trace + ": that is an input of this run"},
		{[]string{"--timeline", cfg}, "--timeline " + cfg + ": that is an input of this run"},
	} {
		args := append([]string{"sim", "--config", cfg, "--trace", trace}, tc.args...)
		code, _, errOut := runCLI(t, args...)
		if code != exitUsage || !strings.Contains(errOut, tc.want) {
			t.Errorf("%v: exit %d, stderr %q; want %q", tc.args, code, errOut, tc.want)
		}
	}
	if got, _ := os.ReadFile(trace); string(got) != string(data) {
		t.Error("the trace was changed")
	}
	if _, err := os.Stat(out); err == nil {
		t.Error("an output was written")
	}
}

// A fleet's --per-request may not overwrite its own config.
func TestSimFleetOutputIsNotAnInput(t *testing.T) {
	code, _, errOut := runCLI(t, "sim", "--config", fleetExample, "--trace", fleetTrace, "--per-request", fleetExample)
	if code != exitUsage || !strings.Contains(errOut, "that is an input of this run") {
		t.Errorf("exit %d, stderr %q", code, errOut)
	}
}

// A write error of a streamed output names the flag and the path given,
// not the trace or the temporary file.
func TestOutputErrorNamesTheFlag(t *testing.T) {
	err := runError("trace.jsonl", &outputError{"per-request", "/x/pr", &os.PathError{Op: "write", Path: "/x/.pr.tmp123", Err: os.ErrPermission}})
	if got, want := err.Error(), "--per-request /x/pr: permission denied"; got != want {
		t.Errorf("got %q, want %q", got, want)
	}
	if got := runError("trace.jsonl", os.ErrClosed).Error(); !strings.Contains(got, "trace.jsonl") {
		t.Errorf("a run error lost the trace's name: %q", got)
	}
}
