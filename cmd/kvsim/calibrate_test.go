package main

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/kvsim/kvsim/configs"
)

// Calibrating on `kvsim replay --target sim` at concurrency 1 recovers the
// config's fitted coefficients, and the snippet loads as the [cost] section
// of a config.
func TestCalibrateCLIRecoversSimCoefficients(t *testing.T) {
	dir := t.TempDir()
	tr := genTrace(t, "multiturn", "--clients", "4", "--rounds", "4", "--request-length", "3000", "--output-length", "16", "--sub-question-length", "200", "--rate", "inf")
	per := filepath.Join(dir, "per.jsonl")
	if code, _, stderr := runCLI(t, "replay", "--trace", tr, "--target", "sim", "--config", simConfig, "--max-concurrency", "1", "--warmup=false", "--per-request", per, "--json"); code != exitOK {
		t.Fatalf("replay: exit %d: %s", code, stderr)
	}
	snippet := filepath.Join(dir, "cost.toml")
	code, stdout, stderr := runCLI(t, "calibrate", "--per-request", per, "--config", simConfig, "--out", snippet)
	if code != exitOK || !strings.Contains(stdout, "R² 1.0000") {
		t.Fatalf("calibrate: exit %d\n%s%s", code, stdout, stderr)
	}
	base, err := os.ReadFile(simConfig)
	if err != nil {
		t.Fatal(err)
	}
	snip, err := os.ReadFile(snippet)
	if err != nil {
		t.Fatal(err)
	}
	// The config without its [cost] section, plus the snippet.
	noCost := regexp.MustCompile(`(?s)\[cost\].*`).ReplaceAll(base, nil)
	f, err := configs.Parse(append(noCost, snip...), "calibrated.toml")
	if err != nil {
		t.Fatalf("the snippet does not load: %v\n%s", err, snip)
	}
	got, want := f.Cost.Fitted, [7]float64{1e6, 1e4, 1, 0, 2e6, 0, 1}
	all := [7]float64{got.Prefill[0], got.Prefill[1], got.Prefill[2], got.Prefill[3], got.Decode[0], got.Decode[1], got.Decode[2]}
	for i := range all {
		if d := all[i] - want[i]; d > 0.01*want[i]+1e-9 || d < -0.01*want[i]-1e-9 {
			t.Errorf("coefficient %d = %v, want %v", i, all[i], want[i])
		}
	}
	if f.Cost.Kind != "fitted" {
		t.Errorf("kind %q", f.Cost.Kind)
	}
}

func TestCalibrateCLIErrors(t *testing.T) {
	code, _, stderr := runCLI(t, "calibrate", "--out", "x.toml")
	if code != exitUsage || !strings.Contains(stderr, "--per-request is required") {
		t.Errorf("exit %d %q", code, stderr)
	}
	code, _, stderr = runCLI(t, "calibrate", "--per-request", replayTrace, "--out", filepath.Join(t.TempDir(), "x.toml"))
	if code != exitFail || !strings.Contains(stderr, "usable TTFT samples") {
		t.Errorf("a trace without observations: exit %d %q", code, stderr)
	}
}
