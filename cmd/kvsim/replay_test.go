package main

import (
	"bufio"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/kvsim/kvsim/internal/testutil"
	"github.com/kvsim/kvsim/replay/replaytest"
	"github.com/kvsim/kvsim/traces"
)

const replayTrace = "testdata/replay/mooncake_small.jsonl"

// replayJSON is the part of replay's --json object the tests check.
type replayJSON struct {
	Backend       string           `json:"backend"`
	Completed     int64            `json:"completed"`
	NumPrompts    int              `json:"num_prompts"`
	TotalInput    int64            `json:"total_input"`
	TotalOutput   int64            `json:"total_output"`
	MeanTTFT      float64          `json:"mean_ttft_ms"`
	MeanTPOT      float64          `json:"mean_tpot_ms"`
	P99E2E        float64          `json:"p99_e2e_latency_ms"`
	RequestRate   any              `json:"request_rate"`
	CacheHitRate  *float64         `json:"cache_hit_rate"`
	Failed        int64            `json:"failed"`
	FailedReasons map[string]int64 `json:"failed_reasons"`
	NotSent       int64            `json:"not_sent"`
	Interrupted   bool             `json:"interrupted"`
	Model         string           `json:"model"`
	Pacing        string           `json:"pacing"`
}

func decodeReplayJSON(t *testing.T, s string) replayJSON {
	t.Helper()
	var out replayJSON
	if err := json.Unmarshal([]byte(s), &out); err != nil {
		t.Fatalf("stdout is not one JSON object: %v\n%s", err, s)
	}
	return out
}

func TestReplayCLIHashTraceCachedTokens(t *testing.T) {
	for _, api := range []string{"sglang", "openai"} {
		t.Run(api, func(t *testing.T) {
			srv := replaytest.NewServer(replaytest.Config{TokenDelay: 300 * time.Microsecond})
			defer srv.Close()
			dir := t.TempDir()
			per := filepath.Join(dir, "per.jsonl")
			outFile := filepath.Join(dir, "runs.jsonl")
			args := []string{"replay", "--trace", replayTrace, "--target", srv.URL, "--api", api, "--timestamps", "--speedup", "2",
				"--max-concurrency", "1", "--flush", "--json", "--per-request", per, "--output-file", outFile}
			code, stdout, stderr := runCLI(t, args...)
			if code != exitOK {
				t.Fatalf("exit %d\n%s", code, stderr)
			}
			out := decodeReplayJSON(t, stdout)
			// Requests 1 and 2 share the first 512-token block of request 0;
			// request 2 shares request 0's whole 600-token prompt (its
			// second block's first 88 tokens equal request 0's partial block).
			want := 1112.0 / 2800
			if out.Completed != 4 || out.TotalInput != 2800 || out.TotalOutput != 10 || out.CacheHitRate == nil || *out.CacheHitRate != want {
				t.Fatalf("completed %d input %d output %d hit %v, want 4 2800 10 %v", out.Completed, out.TotalInput, out.TotalOutput, out.CacheHitRate, want)
			}
			if out.Backend != api || out.Pacing != "timestamps" || out.RequestRate != "inf" || out.Model != "fake-model" || out.Failed != 0 || out.MeanTTFT <= 0 || out.MeanTPOT <= 0 {
				t.Errorf("json %+v", out)
			}
			if srv.Flushes() != 1 || srv.Requests() != 5 {
				t.Errorf("server saw %d flushes and %d requests, want 1 and 4 + warm-up", srv.Flushes(), srv.Requests())
			}
			recs := readTraceRecords(t, per)
			wantCached := map[string]int{"0": 0, "1": 512, "2": 600, "3": 0}
			for _, r := range recs {
				if r.Observed == nil || r.Observed.Status != "ok" || r.Observed.CachedTokens != wantCached[r.ID] || r.Observed.TTFT <= 0 || len(r.Observed.ITL) != r.OutputLen-1 {
					t.Errorf("per-request %s: %+v", r.ID, r.Observed)
				}
			}
			// The file is in completion order: on a loaded machine request 3
			// (no parent) may be sent before request 2 waits out its parent.
			i2 := slices.IndexFunc(recs, func(r traces.Record) bool { return r.ID == "2" })
			if len(recs) != 4 || i2 < 0 || recs[i2].Parent != "0" || recs[i2].Arrival < 25e6 {
				t.Errorf("per-request records %d: %+v; want request 2 sent at its arrival / 2, after its parent and think time / 2", len(recs), recs)
			}
			// A second run appends a second line.
			if code, _, stderr := runCLI(t, args...); code != exitOK {
				t.Fatalf("second run: exit %d\n%s", code, stderr)
			}
			b := testutil.ReadFile(t, outFile)
			if n := strings.Count(string(b), "\n"); n != 2 {
				t.Errorf("output file has %d lines, want 2", n)
			}
			// The per-request trace replays again.
			code, stdout, stderr = runCLI(t, "replay", "--trace", per, "--target", srv.URL, "--api", api, "--json", "--flush", "--max-concurrency", "1")
			if code != exitOK || decodeReplayJSON(t, stdout).Completed != 4 {
				t.Fatalf("replaying the per-request trace: exit %d\n%s%s", code, stdout, stderr)
			}
		})
	}
}

func TestReplayCLITableAndChat(t *testing.T) {
	srv := replaytest.NewServer(replaytest.Config{})
	defer srv.Close()
	code, stdout, stderr := runCLI(t, "replay", "--trace", replayTrace, "--target", srv.URL, "--api", "openai-chat", "--chat-text", "words",
		"--request-rate", "200", "--seed", "3")
	if code != exitOK {
		t.Fatalf("exit %d\n%s", code, stderr)
	}
	for _, want := range []string{
		"============ Serving Benchmark Result ============",
		"Backend:                                 openai-chat",
		"Traffic request rate:                    200",
		"Max request concurrency:                 not set",
		"Successful requests:                     4",
		"---------------Time to First Token----------------",
		"-----Time per Output Token (excl. 1st token)------",
		"Cache hit rate (cached/prompt):",
		"Failed requests:                         0",
	} {
		if !strings.Contains(stdout, want) {
			t.Errorf("table lacks %q:\n%s", want, stdout)
		}
	}
}

func TestReplayCLIUsageErrors(t *testing.T) {
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"no trace", []string{"--target", "http://127.0.0.1:1"}, "--trace is required"},
		{"no target", []string{"--trace", replayTrace}, "--target is required"},
		{"config without sim", []string{"--trace", replayTrace, "--target", "http://127.0.0.1:1", "--config", "x.toml"}, "use it with --target sim"},
		{"bad sim config", []string{"--trace", replayTrace, "--target", "sim", "--config", "testdata/replay/missing.toml"}, "missing.toml"},
		{"rate and timestamps", []string{"--trace", replayTrace, "--target", "http://127.0.0.1:1", "--timestamps", "--request-rate", "3"}, "exclude each other"},
		{"bad api", []string{"--trace", replayTrace, "--target", "http://127.0.0.1:1", "--api", "grpc"}, `--api: expected sglang, openai or openai-chat, found "grpc"`},
		{"chat without text", []string{"--trace", replayTrace, "--target", "http://127.0.0.1:1", "--api", "openai-chat"}, "--chat-text words"},
		{"bad url", []string{"--trace", replayTrace, "--target", "localhost:30000"}, "expected a base URL"},
		{"bad extra", []string{"--trace", replayTrace, "--target", "http://127.0.0.1:1", "--extra-request-body", "{"}, "extra-request-body: expected a JSON object"},
		{"bad speedup", []string{"--trace", replayTrace, "--target", "http://127.0.0.1:1", "--timestamps", "--speedup", "0"}, "speedup: must be"},
		{"bad vocab", []string{"--trace", replayTrace, "--target", "http://127.0.0.1:1", "--vocab", "9"}, "--vocab: expected LO:HI"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, _, stderr := runCLI(t, append([]string{"replay"}, tc.args...)...)
			if code != exitUsage || !strings.Contains(stderr, tc.want) {
				t.Fatalf("exit %d, stderr %q; want %d and %q", code, stderr, exitUsage, tc.want)
			}
		})
	}
}

func TestReplayCLIBadTraceHasPosition(t *testing.T) {
	p := filepath.Join(t.TempDir(), "bad.jsonl")
	if err := os.WriteFile(p, []byte(`{"timestamp": 0, "input_length": 600, "output_length": 3, "hash_ids": [1, 2]}`+"\n"+`{"timestamp": 1, "input_length": "x", "output_length": 3, "hash_ids": [1]}`+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	code, _, stderr := runCLI(t, "replay", "--trace", p, "--target", "http://127.0.0.1:1")
	if code != exitFail || !strings.Contains(stderr, "bad.jsonl:2:") {
		t.Fatalf("exit %d, stderr %q", code, stderr)
	}
}

func TestReplayCLIServerDown(t *testing.T) {
	url := replaytest.RefusedURL(t)
	code, _, stderr := runCLI(t, "replay", "--trace", replayTrace, "--target", url)
	if code != exitFail || !strings.Contains(stderr, "warm-up failed (connect") {
		t.Fatalf("exit %d, stderr %q", code, stderr)
	}
	per := filepath.Join(t.TempDir(), "per.jsonl")
	code, stdout, stderr := runCLI(t, "replay", "--trace", replayTrace, "--target", url, "--warmup=false", "--json", "--per-request", per)
	if code != exitFail || !strings.Contains(stderr, "all 4 requests failed: connect x4") {
		t.Fatalf("exit %d, stderr %q", code, stderr)
	}
	if out := decodeReplayJSON(t, stdout); out.Failed != 4 || out.FailedReasons["connect"] != 4 || out.CacheHitRate != nil {
		t.Errorf("json %+v", out)
	}
	for _, r := range readTraceRecords(t, per) {
		if r.Observed.Status != "connect" || r.Observed.CachedTokens != -1 {
			t.Errorf("per-request %s: %+v", r.ID, r.Observed)
		}
	}
}

func TestReplayCLIServerErrorsCounted(t *testing.T) {
	good := replaytest.NewServer(replaytest.Config{})
	defer good.Close()
	var n atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// Every other generation request is refused as overloaded.
		if r.URL.Path == "/generate" {
			if n.Add(1)%2 == 0 {
				http.Error(w, "overloaded", http.StatusServiceUnavailable)
				return
			}
		}
		good.Config.Handler.ServeHTTP(w, r)
	}))
	defer srv.Close()
	code, stdout, stderr := runCLI(t, "replay", "--trace", replayTrace, "--target", srv.URL, "--json", "--max-concurrency", "1")
	if code != exitOK {
		t.Fatalf("exit %d\n%s", code, stderr)
	}
	// The warm-up is request 1: requests 2 and 4 of the trace fail.
	if out := decodeReplayJSON(t, stdout); out.Completed != 2 || out.Failed != 2 || out.FailedReasons["http 503"] != 2 {
		t.Fatalf("json %+v", out)
	}
}

func TestReplayCLIInterruptWritesPartialResults(t *testing.T) {
	srv := replaytest.NewServer(replaytest.Config{FirstDelay: 5 * time.Second})
	defer srv.Close()
	old := replaySignalContext
	defer func() { replaySignalContext = old }()
	replaySignalContext = func() (context.Context, context.CancelFunc) {
		ctx, cancel := context.WithCancel(context.Background())
		time.AfterFunc(300*time.Millisecond, cancel)
		return ctx, cancel
	}
	dir := t.TempDir()
	per := filepath.Join(dir, "per.jsonl")
	outFile := filepath.Join(dir, "runs.jsonl")
	start := time.Now()
	code, stdout, stderr := runCLI(t, "replay", "--trace", replayTrace, "--target", srv.URL, "--warmup=false", "--timestamps", "--speedup", "0.01",
		"--json", "--per-request", per, "--output-file", outFile, "--drain", "200ms")
	if took := time.Since(start); took > 3*time.Second {
		t.Errorf("interrupted run took %v", took)
	}
	if code != exitFail || !strings.Contains(stderr, "interrupted: 3 requests not sent") {
		t.Fatalf("exit %d, stderr %q", code, stderr)
	}
	out := decodeReplayJSON(t, stdout)
	if !out.Interrupted || out.NotSent != 3 || out.FailedReasons["interrupted"] != 1 {
		t.Errorf("json %+v", out)
	}
	recs := readTraceRecords(t, per)
	if len(recs) != 1 || recs[0].Observed.Status != "interrupted" {
		t.Errorf("per-request: %+v", recs)
	}
	f, err := os.Open(outFile)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if sc := bufio.NewScanner(f); !sc.Scan() || !strings.Contains(sc.Text(), `"interrupted":true`) {
		t.Errorf("output file lacks the interrupted run")
	}
}

// --target sim with a llama-server config replays against sim/llamacpp:
// a shared-prefix trace at concurrency 1 hits every document after its
// first question, exactly as the real server did (docs/fidelity.md).
func TestReplayCLILlamaCppConfig(t *testing.T) {
	tr := genTrace(t, "shared-prefix", "--groups", "2", "--questions", "3", "--system-prompt-len", "400", "--question-len", "40", "--output-len", "4", "--vocab", "1:256")
	per := filepath.Join(t.TempDir(), "per.jsonl")
	cfg := filepath.Join("..", "..", "configs", "llamacpp", "tiny.toml")
	stdout, _ := runOK(t, "replay", "--trace", tr, "--target", "sim", "--config", cfg, "--max-concurrency", "1", "--vocab", "1:256", "--warmup=false", "--per-request", per, "--json")
	var out struct {
		Backend      string  `json:"backend"`
		CacheHitRate float64 `json:"cache_hit_rate"`
	}
	if err := json.Unmarshal([]byte(stdout), &out); err != nil {
		t.Fatal(err)
	}
	// 6 prompts of 440 tokens; the 4 later questions hit their 400-token document.
	if want := 4 * 400.0 / (6 * 440); out.CacheHitRate != want || out.Backend != "sim" {
		t.Errorf("backend %q hit rate %v, want sim and %v", out.Backend, out.CacheHitRate, want)
	}
}

// Synthesised prompts keep inside the vocabulary the server reports
// (llama-server's n_vocab); where it reports none and answers 400, the
// error names --vocab; a trace whose own ids are outside the reported
// vocabulary fails before anything is sent, saying how to make it again.
func TestReplayCLIServerVocab(t *testing.T) {
	reported := replaytest.NewServer(replaytest.Config{Vocab: 4096, ReportVocab: true})
	defer reported.Close()
	code, stdout, stderr := runCLI(t, "replay", "--trace", replayTrace, "--target", reported.URL, "--api", "openai", "--json")
	if code != exitOK || decodeReplayJSON(t, stdout).Completed != 4 || !strings.Contains(stderr, "vocabulary has 4096 token ids: synthesised prompts use ids 1000:4096") {
		t.Fatalf("reported vocab: exit %d\n%s%s", code, stdout, stderr)
	}
	// --vocab is the user's word, even against the server's.
	if code, _, stderr := runCLI(t, "replay", "--trace", replayTrace, "--target", reported.URL, "--api", "openai", "--json", "--vocab", "1000:30000"); code != exitFail || !strings.Contains(stderr, "Prompt contains invalid tokens") {
		t.Fatalf("explicit --vocab outside the vocabulary: exit %d\n%s", code, stderr)
	}
	silent := replaytest.NewServer(replaytest.Config{Vocab: 4096})
	defer silent.Close()
	code, _, stderr = runCLI(t, "replay", "--trace", replayTrace, "--target", silent.URL, "--api", "openai", "--json")
	if code != exitFail || !strings.Contains(stderr, "synthesised in 1000:30000 and the server did not report its vocabulary") || !strings.Contains(stderr, "--vocab LO:HI") {
		t.Fatalf("unreported vocab: exit %d\n%s", code, stderr)
	}
	if code, _, stderr := runCLI(t, "replay", "--trace", replayTrace, "--target", silent.URL, "--api", "openai", "--json", "--vocab", "100:4000"); code != exitOK {
		t.Fatalf("unreported vocab with --vocab: exit %d\n%s", code, stderr)
	}
	gen := genTrace(t, "multiturn", "--clients", "2", "--rounds", "2", "--request-length", "50", "--output-length", "4")
	code, _, stderr = runCLI(t, "replay", "--trace", gen, "--target", reported.URL, "--api", "openai", "--json")
	if code != exitFail || !strings.Contains(stderr, "outside the server's vocabulary of 4096 ids") || !strings.Contains(stderr, "--vocab 1000:4096") || reported.Requests() != 5+1 {
		t.Fatalf("trace ids outside the vocab: exit %d (server saw %d requests)\n%s", code, reported.Requests(), stderr)
	}
}
