package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/kvsim/kvsim/internal/testutil"
	"github.com/kvsim/kvsim/replay/replaytest"
	"github.com/kvsim/kvsim/traces"
)

func TestBenchWarmCacheCLI(t *testing.T) {
	srv := replaytest.NewServer(replaytest.Config{PageSize: 4})
	defer srv.Close()
	out := filepath.Join(t.TempDir(), "wc.jsonl")
	code, stdout, stderr := runCLI(t, "bench", "warm-cache", "--target", srv.URL, "--num-prompts", "6", "--total-tokens", "200",
		"--output-len", "3", "--max-concurrency", "2", "--pcts", "0,50,90", "--settle", "0s", "--output-file", out)
	if code != exitOK {
		t.Fatalf("exit %d\n%s", code, stderr)
	}
	for _, want := range []string{"shared_prefix=50% prefix_len=100 suffix_len=100 total=200", "Warming shared prefix only (100 tokens) ...",
		"Serving Benchmark Result", "Mean TTFT by shared prefix", "JSONL results saved to " + out} {
		if !strings.Contains(stdout, want) {
			t.Errorf("stdout lacks %q", want)
		}
	}
	b := testutil.ReadFile(t, out)
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	if len(lines) != 3 {
		t.Fatalf("%d JSONL rows, want 3", len(lines))
	}
	// Page-aligned hits: the prefix rounded down to 4-token pages.
	for i, want := range []struct {
		pct, prefix int
		hit         float64
	}{{0, 0, 0}, {50, 100, 0.5}, {90, 180, 0.9}} {
		var row map[string]any
		if err := json.Unmarshal([]byte(lines[i]), &row); err != nil {
			t.Fatal(err)
		}
		for _, k := range []string{"backend", "dataset_name", "request_rate", "max_concurrency", "shared_prefix_pct", "prefix_len", "suffix_len",
			"total_tokens", "num_prompts", "output_len", "completed", "benchmark_duration", "total_input", "total_output", "request_throughput",
			"input_throughput", "output_throughput", "total_throughput", "mean_ttft_ms", "median_ttft_ms", "std_ttft_ms", "p90_ttft_ms",
			"p99_ttft_ms", "mean_tpot_ms", "median_tpot_ms", "std_tpot_ms", "p90_tpot_ms", "p99_tpot_ms", "mean_itl_ms", "median_itl_ms",
			"std_itl_ms", "p90_itl_ms", "p99_itl_ms", "mean_e2e_latency_ms", "median_e2e_latency_ms", "std_e2e_latency_ms",
			"p99_e2e_latency_ms", "concurrency", "cache_hit_rate", "failed"} {
			if _, ok := row[k]; !ok {
				t.Errorf("row %d lacks %q", i, k)
			}
		}
		if row["shared_prefix_pct"] != float64(want.pct) || row["prefix_len"] != float64(want.prefix) || row["completed"] != 6.0 ||
			row["cache_hit_rate"] != want.hit || row["dataset_name"] != "warm-cache" || row["request_rate"] != "inf" || row["max_concurrency"] != 2.0 {
			t.Errorf("row %d: %v", i, lines[i])
		}
	}
	if srv.Flushes() != 3 {
		t.Errorf("%d flushes, want 3", srv.Flushes())
	}
}

func TestBenchWarmCacheCLIErrors(t *testing.T) {
	code, _, stderr := runCLI(t, "bench", "warm-cache", "--target", "http://127.0.0.1:1", "--pcts", "10,120", "--num-prompts", "0")
	if code != exitUsage || !strings.Contains(stderr, "pcts[1]: must be in [0, 100] (got 120)") || !strings.Contains(stderr, "num-prompts: must be from 1 to 16777216 (got 0)") {
		t.Fatalf("exit %d, stderr %q", code, stderr)
	}
	code, _, stderr = runCLI(t, "bench", "warm-cache", "--target", "http://127.0.0.1:1", "--api", "openai")
	if code != exitUsage || !strings.Contains(stderr, "native /generate") {
		t.Fatalf("exit %d, stderr %q", code, stderr)
	}
	code, _, stderr = runCLI(t, "bench", "nope")
	if code != exitUsage || !strings.Contains(stderr, `unknown benchmark "nope"`) {
		t.Fatalf("exit %d, stderr %q", code, stderr)
	}
}

func TestBenchMultiTurnCLI(t *testing.T) {
	srv := replaytest.NewServer(replaytest.Config{TokenDelay: 100 * time.Microsecond})
	defer srv.Close()
	logf := filepath.Join(t.TempDir(), "mt.jsonl")
	code, stdout, stderr := runCLI(t, "bench", "multiturn", "--target", srv.URL, "--num-clients", "4", "--max-parallel", "2",
		"--request-length", "32", "--output-length", "4", "--num-rounds", "3", "--sub-question-input-length", "8",
		"--request-rate", "inf", "--settle", "0s", "--log-file", logf, "--tag", "t1")
	if code != exitOK {
		t.Fatalf("exit %d\n%s", code, stderr)
	}
	if srv.MaxInFlight() > 2 || srv.Requests() != 12 {
		t.Errorf("server: %d requests, %d max in flight", srv.Requests(), srv.MaxInFlight())
	}
	// Round 2 prompt = 32 + 4 + 8 = 44 tokens, 35 cached (prompt and
	// output but its last token); round 3: 56 tokens, 47 cached.
	for _, want := range []string{"round  requests  failed  mean prompt  mean TTFT ms  cache hit rate",
		fmt.Sprintf("%.4f", 35.0/44), fmt.Sprintf("%.4f", 47.0/56)} {
		if !strings.Contains(stdout, want) {
			t.Errorf("stdout lacks %q:\n%s", want, stdout)
		}
	}
	b := testutil.ReadFile(t, logf)
	var l struct {
		Tag     string `json:"tag"`
		Summary struct {
			TotalRequests int     `json:"total_requests"`
			CacheHitRate  float64 `json:"cache_hit_rate"`
		} `json:"summary"`
		PerRound []struct {
			Round int `json:"round"`
		} `json:"per_round"`
		Serving struct {
			Backend        string  `json:"backend"`
			DatasetName    string  `json:"dataset_name"`
			RequestRate    string  `json:"request_rate"`
			MaxConcurrency float64 `json:"max_concurrency"`
		} `json:"serving"`
	}
	if err := json.Unmarshal(b, &l); err != nil {
		t.Fatal(err)
	}
	if want := 82.0 / 132; l.Tag != "t1" || l.Summary.TotalRequests != 12 || len(l.PerRound) != 3 || l.Summary.CacheHitRate != want {
		t.Errorf("log line %s (want hit rate %v)", b, want)
	}
	// The serving summary is labelled as the table printed.
	if s := l.Serving; s.Backend != "sglang" || s.DatasetName != "multiturn" || s.RequestRate != "inf" || s.MaxConcurrency != 2 {
		t.Errorf("serving = %+v, want backend sglang, dataset multiturn, rate inf, max concurrency 2", s)
	}
}

// BenchmarkReplayCLI measures kvsim replay end to end (trace reading,
// pacing, streaming, metrics, output) against the fake server on
// loopback: 4000 requests of 16 prompt and 4 output tokens, 64 in
// flight.
func BenchmarkReplayCLI(b *testing.B) {
	srv := replaytest.NewServer(replaytest.Config{})
	defer srv.Close()
	dir := b.TempDir()
	trace := filepath.Join(dir, "t.jsonl")
	const n = 4000
	recs := make([]traces.Record, n)
	for i := range recs {
		recs[i] = traces.Record{ID: fmt.Sprint(i), InputLen: 16, OutputLen: 4}
	}
	writeTrace(b, trace, traces.Header{Source: "BenchmarkReplayCLI"}, recs)
	for _, bc := range []struct {
		name  string
		flags []string
	}{
		{"asap", nil},
		// Poisson arrivals at 2000 req/s: the run must keep up, and the
		// lateness figures say by how much the client missed the schedule.
		{"rate2000", []string{"--request-rate", "2000"}},
	} {
		b.Run(bc.name, func(b *testing.B) {
			var total time.Duration
			var rps float64
			for b.Loop() {
				args := append([]string{"replay", "--trace", trace, "--target", srv.URL, "--max-concurrency", "64", "--json",
					"--per-request", filepath.Join(dir, "per.jsonl")}, bc.flags...)
				var out struct {
					Completed    int     `json:"completed"`
					Throughput   float64 `json:"request_throughput"`
					MeanLateness float64 `json:"mean_lateness_ms"`
					P99Lateness  float64 `json:"p99_lateness_ms"`
				}
				start := time.Now()
				runJSON(b, &out, args...) // decoding the one-line summary is noise beside the 1000 requests
				total += time.Since(start)
				if out.Completed != n {
					b.Fatalf("completed %d of %d", out.Completed, n)
				}
				rps = out.Throughput
				b.ReportMetric(out.MeanLateness, "mean-lateness-ms")
				b.ReportMetric(out.P99Lateness, "p99-lateness-ms")
			}
			b.ReportMetric(float64(n*b.N)/total.Seconds(), "req/s")
			b.ReportMetric(rps, "measured-req/s")
		})
	}
}

// The warm-cache sweep runs against the in-process simulator too: the same
// rows, in virtual time, with the bundled default server (whole-prompt
// prefixes hit exactly).
func TestBenchWarmCacheSim(t *testing.T) {
	out := filepath.Join(t.TempDir(), "wc.jsonl")
	code, stdout, stderr := runCLI(t, "bench", "warm-cache", "--target", "sim", "--num-prompts", "8", "--total-tokens", "4000",
		"--output-len", "8", "--pcts", "0,50,90", "--output-file", out)
	if code != exitOK || !strings.Contains(stdout, "Mean TTFT by shared prefix") {
		t.Fatalf("exit %d\n%s\n%s", code, stdout, stderr)
	}
	var prevTTFT float64
	for i, row := range readJSONLines[struct {
		Backend   string  `json:"backend"`
		Pct       int     `json:"shared_prefix_pct"`
		Completed int     `json:"completed"`
		HitRate   float64 `json:"cache_hit_rate"`
		TTFT      float64 `json:"mean_ttft_ms"`
	}](t, out) {
		want := []float64{0, 0.5, 0.9}[i]
		if row.Backend != "sim" || row.Completed != 8 || row.HitRate != want {
			t.Errorf("row %d: %+v, want backend sim, 8 completed, hit rate %v", i, row, want)
		}
		if i > 0 && !(row.TTFT < prevTTFT) {
			t.Errorf("row %d: mean TTFT %v ms not below the previous row's %v", i, row.TTFT, prevTTFT)
		}
		prevTTFT = row.TTFT
	}
	if code, _, stderr := runCLI(t, "bench", "warm-cache", "--target", "http://127.0.0.1:1", "--config", "x.toml"); code != exitUsage || !strings.Contains(stderr, "--target sim") {
		t.Errorf("--config with a URL: exit %d, %q", code, stderr)
	}
}

// bench multiturn runs against the in-process simulator in virtual time:
// byte-identical tables from the same flags, every turn served, later
// rounds hitting the history the simulator served.
func TestBenchMultiTurnSim(t *testing.T) {
	dir := t.TempDir()
	args := func(log string) []string {
		return []string{"bench", "multiturn", "--target", "sim", "--num-clients", "16", "--num-rounds", "3", "--request-length", "400",
			"--sub-question-input-length", "60", "--output-length", "16", "--max-parallel", "8", "--request-rate", "20", "--log-file", log}
	}
	code, out1, stderr := runCLI(t, args(filepath.Join(dir, "a.jsonl"))...)
	if code != exitOK {
		t.Fatalf("exit %d\n%s\n%s", code, out1, stderr)
	}
	code, out2, stderr := runCLI(t, args(filepath.Join(dir, "b.jsonl"))...)
	if code != exitOK || out1 != out2 {
		t.Fatalf("second run: exit %d, output differs:\n%s\n---\n%s\n%s", code, out1, out2, stderr)
	}
	b := testutil.ReadFile(t, filepath.Join(dir, "a.jsonl"))
	var l struct {
		Summary struct {
			TotalRequests int `json:"total_requests"`
		} `json:"summary"`
		PerRound []struct {
			Round    int      `json:"round"`
			Requests int      `json:"requests"`
			CacheHit *float64 `json:"cache_hit_rate"`
		} `json:"per_round"`
	}
	if err := json.Unmarshal(bytes.TrimSpace(b), &l); err != nil {
		t.Fatal(err)
	}
	if l.Summary.TotalRequests != 48 || len(l.PerRound) != 3 {
		t.Fatalf("%d requests in %d rounds, want 48 in 3", l.Summary.TotalRequests, len(l.PerRound))
	}
	for _, r := range l.PerRound {
		if r.Requests != 16 || r.CacheHit == nil || (r.Round > 1) != (*r.CacheHit > 0.5) {
			t.Errorf("round %d: %d requests, cache hit rate %v; want 16, and above 0.5 after the first round only", r.Round, r.Requests, r.CacheHit)
		}
	}
	if code, _, stderr := runCLI(t, "bench", "multiturn", "--target", "http://127.0.0.1:1", "--config", "x.toml"); code != exitUsage || !strings.Contains(stderr, "--target sim") {
		t.Errorf("--config with a URL: exit %d, %q", code, stderr)
	}
}
