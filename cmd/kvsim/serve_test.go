package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/kvsim/kvsim/internal/testutil"
	"github.com/kvsim/kvsim/replay/replaytest"
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
			out1, _ := runOK(t, append(slices.Clone(common), "--target", url, "--per-request", viaHTTP)...)
			out2, _ := runOK(t, append(slices.Clone(common), "--target", "sim", "--config", simConfig, "--per-request", inProc)...)
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

// kvsim serve --config FLEET.toml serves the whole fleet behind one
// endpoint: two replicas behind round_robin get requests in turn, so the
// same prompt sent three times misses on replica 0, misses on replica 1
// and hits on replica 0 (one server would hit the second time); the
// OpenAI completions API and streaming go through the router too; a
// prompt no replica holds is refused; /server_info has a replica's
// arguments and the fleet's; /metrics has the router's decisions and
// per-replica series.
func TestServeCLIFleet(t *testing.T) {
	cfg := filepath.Join(t.TempDir(), "fleet.toml")
	writeFile(t, cfg, string(testutil.ReadFile(t, simConfig))+"\n[[fleet.groups]]\nname = \"pair\"\ncount = 2\n\n[router]\npolicy = \"round_robin\"\n")
	url := startServe(t, "--config", cfg, "--time-scale", "0")
	post := func(path, body string) string {
		t.Helper()
		resp, err := http.Post(url+path, "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("%s: %d %s", path, resp.StatusCode, b)
		}
		return string(b)
	}
	prompt := strings.TrimSuffix(strings.Repeat("7,", 500), ",")
	gen := `{"input_ids":[` + prompt + `],"sampling_params":{"max_new_tokens":2}}`
	var cached []string
	for range 3 {
		out := post("/generate", gen)
		_, after, ok := strings.Cut(out, `"cached_tokens":`)
		if !ok {
			t.Fatalf("no cached_tokens in %s", out)
		}
		n, _, _ := strings.Cut(after, ",")
		cached = append(cached, n)
	}
	if cached[0] != "0" || cached[1] != "0" || cached[2] == "0" {
		t.Errorf("cached_tokens of the same prompt three times = %v, want 0, 0 (the other replica), then a hit", cached)
	}
	// The fourth request goes to replica 1, which has the prompt: streamed
	// OpenAI completions report the hit.
	out := post("/v1/completions", `{"prompt":[`+prompt+`],"max_tokens":2,"stream":true,"stream_options":{"include_usage":true}}`)
	if !strings.Contains(out, "data: [DONE]") || strings.Contains(out, `"cached_tokens":0}`) {
		t.Errorf("streamed completion on replica 1:\n%s", out)
	}
	// A prompt no replica's KV pool holds is refused as one server
	// refuses it; /server_info has a replica's arguments and the fleet's.
	code, b := replaytest.Do(t, "POST", url+"/generate", `{"input_ids":[`+strings.Repeat("7,", 30000)+`7]}`)
	if code != http.StatusBadRequest || !strings.Contains(b, "exceeds the KV pool of 20000 tokens") {
		t.Errorf("too long a prompt: %d %s", code, b)
	}
	_, b = replaytest.Do(t, "GET", url+"/server_info", "")
	for _, want := range []string{`"kvsim_replicas":2`, `"max_total_num_tokens":20000`, `"kvsim_router_policy":"round_robin"`, `"kvsim_fleet":["pair: 2 x `} {
		if !strings.Contains(b, want) {
			t.Errorf("/server_info lacks %s: %s", want, b)
		}
	}
	_, b = replaytest.Do(t, "GET", url+"/metrics", "")
	for _, want := range []string{
		"kvsim_requests_total 5\n",         // the refused one too
		"kvsim_prompt_tokens_total 2000\n", // but not its prompt
		"kvsim_requests_failed_total 1\n",
		`kvsim_router_decisions_total{reason="round_robin"} 4` + "\n",
		`kvsim_replica_requests_routed_total{replica="0",group="pair"} 2` + "\n",
		`kvsim_replica_requests_routed_total{replica="1",group="pair"} 2` + "\n",
		`kvsim_replica_requests_in_flight{replica="1",group="pair"} 0` + "\n",
		`kvsim_decode_steps_total{replica="0",group="pair"}`,
	} {
		if !strings.Contains(b, want) {
			t.Errorf("/metrics lacks %q:\n%s", want, b)
		}
	}
}

// Ctrl-C lets a stream in flight finish within --shutdown-timeout and
// exits 0; a stream that does not finish in it is cut, counted on stderr,
// and the exit code is 1 (it used to be 0, with "stopped" alone).
func TestServeCLIShutdownCutsStreams(t *testing.T) {
	for _, tc := range []struct {
		name, timeout string
		tokens        int
		code          int
		stderr        string
	}{
		// 50 tokens at real time: ~0.1 s of decode steps.
		{"finished", "30s", 50, exitOK, "kvsim serve: stopped\n"},
		// 10,000 tokens: ~20 s.
		{"cut", "200ms", 10000, exitFail, "stopped; 1 request in flight cut: not finished within the shutdown timeout of 200ms"},
		{"cut-at-once", "0s", 10000, exitFail, "stopped; 1 request in flight cut: not finished within the shutdown timeout of 0s"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			addr, stop := startListening(t, "serve", listenHooks{&serveSignalContext, &serveListen, &serveReady},
				"--config", simConfig, "--time-scale", "1", "--shutdown-timeout", tc.timeout)
			defer stop()
			resp, err := http.Post("http://"+addr+"/generate", "application/json",
				strings.NewReader(`{"input_ids":[1,2,3],"stream":true,"sampling_params":{"max_new_tokens":`+strconv.Itoa(tc.tokens)+`}}`))
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			br := bufio.NewReader(resp.Body)
			if line, err := br.ReadString('\n'); err != nil || !strings.HasPrefix(line, "data: {") {
				t.Fatalf("the stream's first line: %q, %v", line, err)
			}
			bodyc := make(chan string, 1)
			go func() { b, _ := io.ReadAll(br); bodyc <- string(b) }()
			code, stderr := stop()
			if code != tc.code || !strings.Contains(stderr, tc.stderr) {
				t.Errorf("exit %d, stderr %q; want %d and %q", code, stderr, tc.code, tc.stderr)
			}
			if body := <-bodyc; strings.Contains(body, "[DONE]") != (tc.code == exitOK) {
				t.Errorf("stream ended with [DONE] = %v, want %v", strings.Contains(body, "[DONE]"), tc.code == exitOK)
			}
		})
	}
}

// kvsim serve refuses a fleet whose groups run different models, at the
// group's key: it would serve them all under the first one's name, and
// SGLang's router routes a request naming a model to that model's
// replicas only. A fleet of one model in groups of different settings is
// served under the model's name, and a request naming another model gets
// 404 naming it.
func TestServeCLIFleetModels(t *testing.T) {
	base := string(testutil.ReadFile(t, simConfig))
	mixed := filepath.Join(t.TempDir(), "mixed.toml")
	groups := "\n[[fleet.groups]]\nname = \"qwen\"\ncount = 2\n\n[[fleet.groups]]\nname = \"llama\"\ncount = 1\n"
	writeFile(t, mixed, base+groups+"set = { \"model.preset\" = \"llama-3.1-8b\" }\n")
	line := strings.Count(base+groups, "\n") + 1
	_, _, err := buildServe(mixed, 0, time.Second)
	want := fmt.Sprintf(`mixed.toml:%d:1: fleet.groups[1].set: group "llama" runs model "llama-3.1-8b", group "qwen" model "qwen2.5-14b": kvsim serve serves one model`, line)
	if err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("a fleet of two models: %v\nwant %s", err, want)
	}

	one := filepath.Join(t.TempDir(), "one.toml")
	writeFile(t, one, base+groups+"set = { \"server.hicache_ratio\" = 4.0 }\n")
	url := startServe(t, "--config", one, "--time-scale", "0")
	code, b := replaytest.Do(t, "GET", url+"/v1/models", "")
	if code != http.StatusOK || !strings.Contains(b, `"id":"qwen2.5-14b"`) {
		t.Errorf("/v1/models: %d %s", code, b)
	}
	code, b = replaytest.Do(t, "GET", url+"/get_model_info", "")
	if code != http.StatusOK || !strings.Contains(b, `{"model_path":"qwen2.5-14b","tokenizer_path":"qwen2.5-14b","is_generation":true}`) {
		t.Errorf("/get_model_info: %d %s", code, b)
	}
	code, b = replaytest.Do(t, "POST", url+"/v1/completions", `{"model":"llama-3.1-8b","prompt":[1,2,3],"max_tokens":2}`)
	if code != http.StatusNotFound || !strings.Contains(b, "llama-3.1-8b") || !strings.Contains(b, "qwen2.5-14b") {
		t.Errorf("a request naming another model: %d %s", code, b)
	}
}
