package main

import (
	"path/filepath"
	"strings"
	"testing"
)

// startCapture runs `kvsim capture ARGS` on a loopback port; stop ends it
// as Ctrl-C would and returns its exit code and stderr.
func startCapture(t *testing.T, args ...string) (url string, stop func() (int, string)) {
	t.Helper()
	addr, stop := startListening(t, "capture", listenHooks{&captureSignalContext, &captureListen, &captureReady}, args...)
	t.Cleanup(func() { stop() })
	return "http://" + addr, stop
}

// kvsim capture between kvsim replay and kvsim serve: every request is
// recorded with the cached tokens the replay saw, and the captured trace
// replays in turn against the simulator with the same hits.
func TestCaptureCLIRecordsAndReplays(t *testing.T) {
	up := startServe(t, "--config", simConfig, "--time-scale", "0")
	dir := t.TempDir()
	captured := filepath.Join(dir, "captured.jsonl")
	url, stop := startCapture(t, "--upstream", up, "--out", captured)
	tr := genTrace(t, "shared-prefix", "--groups", "3", "--questions", "4", "--system-prompt-len", "1000", "--question-len", "100", "--output-len", "8", "--rate", "inf")
	per := filepath.Join(dir, "per.jsonl")
	runOK(t, "replay", "--trace", tr, "--target", url, "--max-concurrency", "1", "--warmup=false", "--per-request", per, "--json")
	if code, stderr := stop(); code != exitOK || !strings.Contains(stderr, "12 requests recorded") {
		t.Fatalf("capture exit %d: %s", code, stderr)
	}
	recs := readTraceRecords(t, captured)
	measured := readTraceRecords(t, per)
	if len(recs) != 12 || len(measured) != 12 {
		t.Fatalf("captured %d, measured %d", len(recs), len(measured))
	}
	for i, r := range recs {
		if r.Observed.CachedTokens != measured[i].Observed.CachedTokens || r.Observed.Status != "ok" || r.Kind != "generate" || r.InputLen != measured[i].InputLen {
			t.Errorf("record %d: captured %+v, measured %+v", i, r.Observed, measured[i].Observed)
		}
	}
	// The captured trace (token ids, output lengths) replays against the
	// simulator with the hits it recorded.
	again := filepath.Join(dir, "again.jsonl")
	runOK(t, "replay", "--trace", captured, "--target", "sim", "--config", simConfig, "--max-concurrency", "1", "--warmup=false", "--per-request", again, "--json")
	for i, r := range readTraceRecords(t, again) {
		if r.Observed.CachedTokens != recs[i].Observed.CachedTokens {
			t.Errorf("record %d: cached %d on replay, %d captured", i, r.Observed.CachedTokens, recs[i].Observed.CachedTokens)
		}
	}
}

func TestCaptureCLIUsageErrors(t *testing.T) {
	checkUsageErrors(t, "capture", []usageCase{
		{[]string{"--out", "x.jsonl"}, "--upstream is required"},
		{[]string{"--upstream", "http://127.0.0.1:1"}, "--out is required"},
		{[]string{"--upstream", "localhost:1", "--out", filepath.Join(t.TempDir(), "x.jsonl")}, "expected a base URL"},
		{[]string{"--upstream", "http://127.0.0.1:1", "--out", "x.jsonl", "--text-bytes-per-token", "0"}, "--text-bytes-per-token: expected a number from 0.0625 to 1024, found 0"},
		{[]string{"--upstream", "http://127.0.0.1:1", "--out", "x.jsonl", "--text-bytes-per-token", "1e17"}, "--text-bytes-per-token: expected a number from 0.0625 to 1024, found 1e+17"},
	})
}
