package main

import (
	"context"
	"io"
	"net"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

const simConfig = "testdata/replay/sim_small.toml"

// startServe runs `kvsim serve ARGS` in a goroutine on a loopback port and
// returns its base URL; the server is stopped (as by Ctrl-C) when the test
// ends, and must exit 0.
func startServe(t *testing.T, args ...string) string {
	t.Helper()
	addr, stop := startListening(t, "serve", listenHooks{&serveSignalContext, &serveListen, &serveReady}, args...)
	t.Cleanup(func() {
		if code, stderr := stop(); code != exitOK {
			t.Errorf("kvsim serve exited %d: %s", code, stderr)
		}
	})
	return "http://" + addr
}

// listenHooks points at the package variables through which a listening
// command (serve, capture) lets tests catch its signals, listener and
// readiness.
type listenHooks struct {
	signalContext *func() (context.Context, context.CancelFunc)
	listen        *func(string) (net.Listener, error)
	ready         *func(string)
}

// startListening runs `kvsim NAME ARGS` in a goroutine on a loopback port,
// through hooks, and returns its address once it listens, and stop, which
// ends it as Ctrl-C would (once; later calls repeat the outcome) and
// returns its exit code and stderr. The test fails if the command exits
// before it listens.
func startListening(t *testing.T, name string, h listenHooks, args ...string) (addr string, stop func() (int, string)) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	ready := make(chan string, 1)
	oldCtx, oldListen, oldReady := *h.signalContext, *h.listen, *h.ready
	*h.signalContext = func() (context.Context, context.CancelFunc) { return ctx, cancel }
	*h.listen = func(string) (net.Listener, error) { return net.Listen("tcp", "127.0.0.1:0") }
	*h.ready = func(addr string) { ready <- addr }
	defer func() { *h.signalContext, *h.listen, *h.ready = oldCtx, oldListen, oldReady }()
	var stderr strings.Builder
	done := make(chan int, 1)
	go func() { done <- run(append([]string{name}, args...), io.Discard, &stderr) }()
	select {
	case addr = <-ready:
	case code := <-done:
		cancel()
		t.Fatalf("kvsim %s exited %d: %s", name, code, stderr.String())
	}
	var code int
	stopped := false
	stop = func() (int, string) {
		if !stopped {
			cancel()
			code, stopped = <-done, true
		}
		return code, stderr.String()
	}
	return addr, stop
}

// genTrace writes a generated trace with `kvsim trace gen`.
func genTrace(t *testing.T, kind string, args ...string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), kind+".jsonl")
	if code, _, stderr := runCLI(t, append([]string{"trace", "gen", kind, "--out", p}, args...)...); code != exitOK {
		t.Fatalf("trace gen %s: exit %d: %s", kind, code, stderr)
	}
	return p
}

// cachedPerRequest reads a per-request trace: cached tokens by record id.
func cachedPerRequest(t *testing.T, path string) map[string]int {
	t.Helper()
	out := map[string]int{}
	for _, r := range readTraceRecords(t, path) {
		if r.Observed == nil || r.Observed.Status != "ok" {
			t.Fatalf("%s: %+v", r.ID, r.Observed)
		}
		out[r.ID] = r.Observed.CachedTokens
	}
	return out
}

// The acceptance check: replaying a trace closed-loop against
// `kvsim serve --time-scale 0` gives, request by request, the cached tokens
// of `kvsim replay --target sim` with the same config.
func TestServeCLIMatchesReplaySim(t *testing.T) {
	url := startServe(t, "--config", simConfig, "--time-scale", "0")
	for _, tc := range []struct {
		name  string
		trace string
		extra []string
	}{
		{"multiturn", genTrace(t, "multiturn", "--clients", "6", "--rounds", "4", "--request-length", "2000", "--output-length", "16", "--sub-question-length", "500", "--rate", "inf"), nil},
		{"shared-prefix", genTrace(t, "shared-prefix", "--groups", "5", "--questions", "6", "--system-prompt-len", "3000", "--question-len", "200", "--output-len", "8", "--order", "shuffled", "--rate", "inf"), []string{"--flush"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			viaHTTP, inProc := filepath.Join(dir, "http.jsonl"), filepath.Join(dir, "sim.jsonl")
			common := append([]string{"replay", "--trace", tc.trace, "--max-concurrency", "1", "--json"}, tc.extra...)
			code, out1, stderr := runCLI(t, append(slices.Clone(common), "--target", url, "--per-request", viaHTTP)...)
			if code != exitOK {
				t.Fatalf("replay against serve: exit %d: %s", code, stderr)
			}
			code, out2, stderr := runCLI(t, append(slices.Clone(common), "--target", "sim", "--config", simConfig, "--per-request", inProc)...)
			if code != exitOK {
				t.Fatalf("replay --target sim: exit %d: %s", code, stderr)
			}
			got, want := cachedPerRequest(t, viaHTTP), cachedPerRequest(t, inProc)
			if len(got) != len(want) || len(want) == 0 {
				t.Fatalf("%d requests via serve, %d in process", len(got), len(want))
			}
			for id, w := range want {
				if got[id] != w {
					t.Errorf("%s: cached %d via serve, %d in process", id, got[id], w)
				}
			}
			a, b := decodeReplayJSON(t, out1), decodeReplayJSON(t, out2)
			if a.CacheHitRate == nil || b.CacheHitRate == nil || *a.CacheHitRate != *b.CacheHitRate || *b.CacheHitRate == 0 {
				t.Errorf("hit rates %v vs %v", a.CacheHitRate, b.CacheHitRate)
			}
			if b.Backend != "sim" || b.Model != "qwen2.5-14b" {
				t.Errorf("sim run: backend %q model %q", b.Backend, b.Model)
			}
		})
	}
}

// `kvsim replay --target sim` is deterministic: the same inputs print the
// same bytes.
func TestReplayCLISimDeterministic(t *testing.T) {
	tr := genTrace(t, "multiturn", "--clients", "8", "--rounds", "3", "--request-length", "1500", "--output-length", "12", "--rate", "20")
	args := []string{"replay", "--trace", tr, "--target", "sim", "--config", simConfig, "--request-rate", "50", "--max-concurrency", "4", "--json"}
	_, a, e1 := runCLI(t, args...)
	_, b, e2 := runCLI(t, args...)
	if a != b || a == "" {
		t.Fatalf("two runs differ:\n%s\n%s\n%s%s", a, b, e1, e2)
	}
	var j = decodeReplayJSON(t, a)
	if j.Completed != 24 || j.Pacing != "rate" {
		t.Fatalf("completed %d pacing %q", j.Completed, j.Pacing)
	}
}

func TestServeCLIUsageErrors(t *testing.T) {
	checkUsageErrors(t, "serve", []usageCase{
		{[]string{"--time-scale", "-1"}, "--time-scale: must be >= 0"},
		{[]string{"--config", "testdata/replay/missing.toml"}, "missing.toml"},
		{[]string{"extra"}, `unexpected argument "extra"`},
	})
}
