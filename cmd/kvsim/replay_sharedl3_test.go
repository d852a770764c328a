package main

import (
	"path/filepath"
	"slices"
	"testing"

	"github.com/kvsim/kvsim/internal/testutil"
)

// On a fleet of two replicas sharing a slow L3 store behind round_robin,
// a closed-loop replay against `kvsim serve --time-scale 0` gets, request
// by request, the cached tokens of `kvsim replay --target sim`. The
// warm-up (the first record's prompt, on replica 0) is still being backed
// up to the store when the first measured request (the same prompt, on
// replica 1) arrives, so it misses on both paths. (The simulator target
// used to run the warm-up's backup to its end before the measured run, and
// that request hit the whole prompt in L3 there, none through serve.)
func TestServeCLIMatchesReplaySimSharedL3(t *testing.T) {
	cfg := filepath.Join(t.TempDir(), "fleet.toml")
	writeFile(t, cfg, string(testutil.ReadFile(t, simConfig))+`
[storage]
enabled = true
shared = true
prefetch_policy = "wait_complete"
read_gbps = 10.0
write_gbps = 1.0

[[fleet.groups]]
name = "pair"
count = 2

[router]
policy = "round_robin"
`)
	url := startServe(t, "--config", cfg, "--time-scale", "0")
	tr := genTrace(t, "multiturn", "--clients", "4", "--rounds", "3", "--request-length", "3000", "--output-length", "16", "--sub-question-length", "300", "--rate", "inf")
	dir := t.TempDir()
	viaHTTP, inProc := filepath.Join(dir, "http.jsonl"), filepath.Join(dir, "sim.jsonl")
	common := []string{"replay", "--trace", tr, "--max-concurrency", "1", "--json"}
	runOK(t, append(slices.Clone(common), "--target", url, "--per-request", viaHTTP)...)
	runOK(t, append(slices.Clone(common), "--target", "sim", "--config", cfg, "--per-request", inProc)...)
	got, want := cachedPerRequest(t, viaHTTP), cachedPerRequest(t, inProc)
	if len(got) != len(want) || len(want) != 12 {
		t.Fatalf("%d requests via serve, %d in process, want 12", len(got), len(want))
	}
	hits := 0
	for _, r := range readTraceRecords(t, inProc) {
		if got[r.ID] != want[r.ID] {
			t.Errorf("%s: cached %d via serve, %d in process", r.ID, got[r.ID], want[r.ID])
		}
		if want[r.ID] > 0 {
			hits++
		}
	}
	if hits == 0 {
		t.Error("no request hit the cache: the check is vacuous")
	}
}
