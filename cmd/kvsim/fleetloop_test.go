package main

import (
	"bytes"
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kvsim/kvsim/internal/testutil"
)

// A fleet of one replica runs a trace of dependencies (multi-turn
// conversations sent at once: each turn waits for the one before) as
// kvsim sim runs its server alone: closed loop by
// default, open loop with --open-loop or workload.open_loop = true, every
// request's line (its release and dependency wait included) the same but
// for the fleet's replica field.
func TestSimFleetOfOneClosedLoop(t *testing.T) {
	server := string(testutil.ReadFile(t, filepath.Join("testdata", "replay", "sim_small.toml")))
	dir := t.TempDir()
	trace := filepath.Join(dir, "turns.jsonl")
	runOK(t, "trace", "gen", "multiturn", "--clients", "8", "--rounds", "3", "--rate", "inf", "--request-length", "300",
		"--output-length", "16", "--seed", "2", "--out", trace)
	single := filepath.Join(dir, "single.toml")
	writeFile(t, single, server)
	fleetCfg := filepath.Join(dir, "fleet.toml")
	writeFile(t, fleetCfg, server+"\n[[fleet.groups]]\ncount = 1\n")
	openCfg := filepath.Join(dir, "open.toml")
	writeFile(t, openCfg, server+"\n[workload]\nopen_loop = true\n[[fleet.groups]]\ncount = 1\n")
	perRequest := func(args ...string) []map[string]any {
		out := filepath.Join(dir, "pr.jsonl")
		runQuiet(t, append([]string{"sim", "--trace", trace, "--per-request", out}, args...)...)
		var lines []map[string]any
		dec := json.NewDecoder(bytes.NewReader(testutil.ReadFile(t, out)))
		for dec.More() {
			var m map[string]any
			if err := dec.Decode(&m); err != nil {
				t.Fatal(err)
			}
			delete(m, "replica")
			lines = append(lines, m)
		}
		return lines
	}
	same := func(what string, got, want []map[string]any) {
		t.Helper()
		g, _ := json.Marshal(got)
		w, _ := json.Marshal(want)
		if !bytes.Equal(g, w) {
			t.Fatalf("%s: fleet of one\n%s\nserver alone\n%s", what, g, w)
		}
	}
	closed := perRequest("--config", single)
	waited := false
	for _, m := range closed {
		waited = waited || m["dep_wait_ns"] != nil
	}
	if !waited {
		t.Fatal("no request of the trace waited for its dependencies: the test proves nothing")
	}
	same("closed loop", perRequest("--config", fleetCfg), closed)
	open := perRequest("--config", single, "--open-loop")
	same("--open-loop", perRequest("--config", fleetCfg, "--open-loop"), open)
	same("workload.open_loop", perRequest("--config", openCfg), open)
}

// kvsim sim --explain on a fleet prints, group by group, the group's line
// and the derivation kvsim sim --explain prints for its server alone (the
// fleet file's server with the group's set keys), then the fleet's table.
func TestSimFleetExplain(t *testing.T) {
	server := string(testutil.ReadFile(t, filepath.Join("testdata", "replay", "sim_small.toml")))
	dir := t.TempDir()
	alone := func(text string) []string {
		path := filepath.Join(dir, "alone.toml")
		writeFile(t, path, text)
		out, _ := runOK(t, "sim", "--config", path, "--trace", fleetTrace, "--explain")
		head, _, _ := strings.Cut(out, "\n\n")
		return strings.Split(head, "\n")
	}
	cfg := filepath.Join(dir, "fleet.toml")
	writeFile(t, cfg, server+"\n[[fleet.groups]]\nname = \"a\"\ncount = 1\n[[fleet.groups]]\nname = \"b\"\ncount = 2\nset = { \"gpu.preset\" = \"h100-sxm\" }\n")
	out, _ := runOK(t, "sim", "--config", cfg, "--trace", fleetTrace, "--explain")
	var want []string
	h100 := strings.Replace(server, `preset = "h200"`, `preset = "h100-sxm"`, 1)
	for _, g := range []struct{ line, text string }{{"a: 1 x ", server}, {"b: 2 x ", h100}} {
		lines := alone(g.text)
		if len(lines) < 5 {
			t.Fatalf("kvsim sim --explain printed %q", lines)
		}
		want = append(want, g.line)
		for _, l := range lines {
			want = append(want, "  "+l)
		}
	}
	head, rest, _ := strings.Cut(out, "\n\n")
	got := strings.Split(head, "\n")
	if len(got) != len(want) {
		t.Fatalf("explain printed %d lines, want %d:\n%s", len(got), len(want), head)
	}
	for i := range got {
		if got[i] != want[i] && !(strings.HasSuffix(want[i], " x ") && strings.HasPrefix(got[i], want[i])) {
			t.Fatalf("line %d: %q, want %q", i, got[i], want[i])
		}
	}
	if !strings.Contains(rest, "kvsim fleet simulation") {
		t.Fatalf("no fleet table after the explanation:\n%s", rest)
	}
}
