package main

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kvsim/kvsim/internal/testutil"
)

// The table prints one row per compare output with the real runs and their
// own disagreement, and the gate fails on a cache target, not on timing.
func TestTableGate(t *testing.T) {
	write := tempWriter(t)
	metrics := `"metrics":[{"name":"cache_hit_rate","measured":0.5,"predicted":0.53},{"name":"median_ttft_ms","measured":10,"predicted":11}]`
	c1 := write("chat-c1.json", `{`+metrics+`,"requests_compared":8,"ttft_mape_pct":20,"e2e_mape_pct":12,"cached_tokens_exact_share":1,"cache_hit_rate_diff_pp":0,"measured_runs":1}`)
	c4 := write("chat-c4.json", `{`+metrics+`,"requests_compared":8,"ttft_mape_pct":14,"e2e_mape_pct":9,"cached_tokens_exact_share":0.9,"cache_hit_rate_diff_pp":3,"measured_runs":3,"noise":{"ttft_mape_pct":12,"e2e_mape_pct":8}}`)
	var out strings.Builder
	if err := table([]string{c1, c4}, &out); err != nil {
		t.Fatalf("without -gate: %v", err)
	}
	for _, want := range []string{"| chat | 1 | 1 | 8 | 0.5000 / 0.5300 | 100% |", "| chat | 4 | 3 | 8 |", "| 14.0% | 9.0% | 12.0% / 8.0% |", "cache target missed: chat at concurrency 4: hit rate off by more than 2 pp"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("table lacks %q:\n%s", want, out.String())
		}
	}
	out.Reset()
	var g gateError
	if err := table([]string{"-gate", c1, c4}, &out); !errors.As(err, &g) {
		t.Errorf("-gate with a 3 pp hit-rate miss: %v, want a gate error", err)
	}
	if err := table([]string{"-gate", "-max-hit-pp", "5", c1, c4}, &out); err != nil {
		t.Errorf("-gate within 5 pp, timing met: %v", err)
	}
	if err := table([]string{"-gate", "-gate-timing", "-max-hit-pp", "5", "-max-ttft-mape", "10", c1, c4}, &out); !errors.As(err, &g) {
		t.Errorf("-gate-timing with TTFT MAPE 14%% > 10%%: %v, want a gate error", err)
	}
}

// breakdown pairs a concurrency-1 run with the server log's last tasks
// (the warm-up first) and splits each TTFT; it refuses runs that overlap
// and pairs that disagree on the tokens evaluated.
func TestBreakdown(t *testing.T) {
	write := tempWriter(t)
	log := write("server.log", `0.00.010.000 I srv  llama_server: listening on http://127.0.0.1:1
0.00.100.000 I slot get_availabl: id  0 | task -1 | selected slot by LRU, n_tokens = 0, t_last = -1
0.00.100.050 I slot launch_slot_: id  0 | task 0 | processing task, is_child = 0
0.00.110.000 I slot print_timing: id  0 | task 0 | prompt eval time =       9.00 ms /    10 tokens (    0.90 ms per token,  1111.11 tokens per second)
0.01.000.000 I slot get_availabl: id  1 | task -1 | selected slot by LRU, n_tokens = 0, t_last = -1
0.01.000.500 I slot launch_slot_: id  1 | task 3 | processing task, is_child = 0
0.01.010.000 I slot print_timing: id  1 | task 3 | prompt eval time =       8.00 ms /    20 tokens (    0.40 ms per token,  2500.00 tokens per second)
0.01.100.000 I slot get_availabl: id  1 | task -1 | selected slot by LCP similarity, f_sim_best = 0.800 (> 0.100 thold), f_keep = 1.000
0.01.100.100 I slot launch_slot_: id  1 | task 6 | processing task, is_child = 0
0.01.104.000 I slot print_timing: id  1 | task 6 | prompt eval time =       3.00 ms /     5 tokens (    0.60 ms per token,  1666.67 tokens per second)
`)
	per := write("run.jsonl", `{"kvsim_trace":1,"format":"kvsim"}
{"id":"a","arrival_ns":0,"input_len":20,"output_len":2,"observed":{"cached_tokens":0,"ttft_ns":10000000,"e2e_ns":12000000,"status":"ok"}}
{"id":"b","arrival_ns":50000000,"input_len":25,"output_len":2,"observed":{"cached_tokens":20,"ttft_ns":4000000,"e2e_ns":5000000,"status":"ok"}}
`)
	var out strings.Builder
	if err := breakdown([]string{"-log", log, "-per-request", per}, &out); err != nil {
		t.Fatal(err)
	}
	// a: 10 ms = 8 eval + 0.5 selection to launch + 1.5; b: 4 = 3 + 0.1 + 0.9.
	for _, want := range []string{"| a | 20 | 0 | 10.00 | 8.00 | 0.50 | 1.50 |", "| b | 25 | 20 | 4.00 | 3.00 | 0.10 | 0.90 |", "2 requests:"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("breakdown lacks %q:\n%s", want, out.String())
		}
	}
	overlap := write("overlap.jsonl", strings.Replace(readFile(t, per), `"arrival_ns":50000000`, `"arrival_ns":5000000`, 1))
	if err := breakdown([]string{"-log", log, "-per-request", overlap}, &out); err == nil || !strings.Contains(err.Error(), "concurrency-1") {
		t.Errorf("overlapping run: %v", err)
	}
	wrong := write("wrong.jsonl", strings.Replace(readFile(t, per), `"cached_tokens":20`, `"cached_tokens":10`, 1))
	if err := breakdown([]string{"-log", log, "-per-request", wrong}, &out); err == nil || !strings.Contains(err.Error(), "do not match") {
		t.Errorf("mismatched tokens: %v", err)
	}
}

func readFile(t *testing.T, p string) string {
	t.Helper()
	b := testutil.ReadFile(t, p)
	return string(b)
}

// tempWriter returns a function that writes a file in a fresh temporary
// directory and returns its path.
func tempWriter(t *testing.T) func(name, body string) string {
	dir := t.TempDir()
	return func(name, body string) string {
		t.Helper()
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
}
