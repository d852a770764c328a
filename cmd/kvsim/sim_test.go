package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kvsim/kvsim/internal/testutil"
)

// A small token trace with shared prefixes, written as a kvsim trace by the
// trace generator, is simulated end to end through the CLI.
func simTrace(t *testing.T) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "chat.jsonl")
	code, _, stderr := runCLI(t, "trace", "gen", "multiturn", "--clients", "4", "--rounds", "3",
		"--request-length", "300", "--output-length", "8", "--seed", "3", "--out", path)
	if code != exitOK {
		t.Fatalf("trace gen: exit %d: %s", code, stderr)
	}
	return path
}

func TestSimJSON(t *testing.T) {
	trace := simTrace(t)
	perReq := filepath.Join(t.TempDir(), "req.jsonl")
	timeline := filepath.Join(t.TempDir(), "tl.csv")
	stdout, _ := runOK(t, "sim", "--trace", trace, "--json", "--per-request", perReq, "--timeline", timeline)
	var out map[string]any
	if err := json.Unmarshal([]byte(stdout), &out); err != nil {
		t.Fatalf("stdout is not one JSON object: %v\n%s", err, stdout)
	}
	for _, k := range []string{"completed", "total_input", "total_output", "request_throughput", "mean_ttft_ms",
		"p99_ttft_ms", "p99_e2e_latency_ms", "concurrency", "cache_hit_rate", "device_hit_rate", "host_hit_rate",
		"storage_hit_rate", "simulated_seconds", "seed", "kvsim_version"} {
		if _, ok := out[k]; !ok {
			t.Errorf("JSON lacks %q", k)
		}
	}
	if out["completed"].(float64) != 12 {
		t.Errorf("completed = %v, want 12", out["completed"])
	}
	// Turns 2 and 3 of each client reuse the earlier turns.
	if hr := out["cache_hit_rate"].(float64); hr <= 0.3 {
		t.Errorf("cache_hit_rate = %v, want > 0.3 on a multi-turn trace", hr)
	}
	data, err := os.ReadFile(perReq)
	if err != nil || strings.Count(string(data), "\n") != 12 {
		t.Fatalf("per-request file: %v, %d lines", err, strings.Count(string(data), "\n"))
	}
	tl, err := os.ReadFile(timeline)
	if err != nil || !strings.HasPrefix(string(tl), "t_s,device_tree_tokens") {
		t.Fatalf("timeline: %v %q", err, tl)
	}
}

func TestSimTable(t *testing.T) {
	stdout, _ := runOK(t, "sim", "--trace", simTrace(t), "--explain")
	for _, want := range []string{"mem_fraction_static", "Successful requests:", "Mean TTFT (ms):", "Cache hit rate", "P99 ITL (ms):"} {
		if !strings.Contains(stdout, want) {
			t.Errorf("output lacks %q:\n%s", want, stdout)
		}
	}
}

func TestSimErrors(t *testing.T) {
	for _, tc := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"sim", "--config", "../../configs/testdata/bad/unknown_key.toml"}, exitUsage, "unknown_key.toml:8:1: cache.write_polcy"},
		{[]string{"sim", "--trace", "/nonexistent/trace.jsonl"}, exitFail, "no such file"},
		{[]string{"sim", "--format", "nope", "--trace", "x"}, exitUsage, "--format"},
		{[]string{"sim", "extra"}, exitUsage, "unexpected argument"},
	} {
		code, _, stderr := runCLI(t, tc.args...)
		if code != tc.code || !strings.Contains(stderr, tc.want) {
			t.Errorf("%v: exit %d, stderr %q; want exit %d containing %q", tc.args, code, stderr, tc.code, tc.want)
		}
	}
}

// A trace with a malformed line fails with its position and exit code 1.
func TestSimBadTrace(t *testing.T) {
	path := filepath.Join(t.TempDir(), "bad.jsonl")
	os.WriteFile(path, []byte(`{"timestamp": 0, "input_length": 10, "output_length": 2, "hash_ids": [1]}
{"timestamp": 5, "input_length": "ten", "output_length": 2, "hash_ids": [1]}
`), 0o644)
	code, _, stderr := runCLI(t, "sim", "--trace", path, "--format", "mooncake")
	if code != exitFail || !strings.Contains(stderr, "bad.jsonl:2:") {
		t.Fatalf("exit %d, stderr %q", code, stderr)
	}
}

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
	link := filepath.Join(dir, "link") // to out, which does not exist yet
	if err := os.Symlink("out", link); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--per-request", dir}, "--per-request: cannot write " + dir + ": it is a folder"},
		{[]string{"--per-request", out, "--timeline", out}, "--per-request and --timeline: both name " + out},
		{[]string{"--per-request", out, "--timeline", link}, "--per-request " + out + " and --timeline " + link + ": both reach " + out},
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

// A llama-server config simulates llama.cpp's server model instead.
func TestSimLlamaCppConfig(t *testing.T) {
	stdout, _ := runOK(t, "sim", "--config", "../../configs/llamacpp/tiny.toml", "--trace", simTrace(t), "--json")
	var out map[string]any
	if err := json.Unmarshal([]byte(stdout), &out); err != nil {
		t.Fatal(err)
	}
	if out["completed"].(float64) != 12 || out["cache_hit_rate"].(float64) <= 0.3 {
		t.Fatalf("llama-server model: completed %v, hit rate %v", out["completed"], out["cache_hit_rate"])
	}
	code, stdout, _ := runCLI(t, "sim", "--config", "../../configs/llamacpp/tiny.toml", "--trace", simTrace(t))
	if code != exitOK || !strings.Contains(stdout, "llama-server model, 4 slots of 2048 tokens") || !strings.Contains(stdout, "kept in the slot") {
		t.Fatalf("table:\n%s", stdout)
	}
}
