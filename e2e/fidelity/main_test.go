package main

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// The table prints one row per compare output with the real runs and their
// own disagreement, and the gate fails on a cache target, not on timing.
func TestTableGate(t *testing.T) {
	dir := t.TempDir()
	write := func(name, body string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
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
