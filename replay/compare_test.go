package replay

import (
	"encoding/json"
	"math"
	"strings"
	"testing"
)

func TestCompareFigures(t *testing.T) {
	mk := func(id string, ttft, e2e int64, cached int) RequestResult {
		return RequestResult{ID: id, Sent: true, Start: 0, FirstToken: ttft, End: e2e, PromptTokens: 100, ServerPromptTokens: 100, OutputTokens: 2, CachedTokens: cached}
	}
	m := []RequestResult{mk("a", 100, 200, 50), mk("b", 200, 400, 0), mk("c", 400, 800, 100), mk("x", 1, 2, 0)}
	p := []RequestResult{mk("c", 440, 880, 90), mk("a", 110, 220, 50), mk("b", 180, 360, 0)}
	m[3].Failed = "http 503"
	c := Compare(m, p)
	if c.Requests != 3 {
		t.Fatalf("compared %d requests, want 3", c.Requests)
	}
	if math.Abs(c.TTFTMAPE-10) > 1e-9 || math.Abs(c.E2EMAPE-10) > 1e-9 {
		t.Errorf("MAPE ttft %v e2e %v, want 10 and 10", c.TTFTMAPE, c.E2EMAPE)
	}
	if r := float64(c.TTFTPearson); r < 0.99 || r > 1 {
		t.Errorf("Pearson r %v", r)
	}
	// Hit rates 150/300 measured, 140/300 predicted.
	if c.HitRateDiffPP == nil || math.Abs(*c.HitRateDiffPP-(140.0-150)/3) > 1e-9 {
		t.Errorf("hit rate diff %v pp", c.HitRateDiffPP)
	}
	if float64(c.CachedExact) != 2.0/3 {
		t.Errorf("exact share %v", c.CachedExact)
	}
	var found bool
	for _, d := range c.Metrics {
		if d.Name == "mean_ttft_ms" {
			found = true
			if math.Abs(float64(d.RelError)-((730.0/3)/(700.0/3)-1)) > 1e-9 {
				t.Errorf("mean_ttft rel error %v", d.RelError)
			}
		}
	}
	if !found {
		t.Fatal("no mean_ttft_ms metric")
	}

	// A request without a TTFT on either side (a stream without text)
	// counts for E2E only.
	p[1].FirstToken = 0
	m[2].FirstToken = 0
	if c := Compare(m, p); c.Requests != 3 || math.Abs(c.TTFTMAPE-10) > 1e-9 || math.Abs(c.E2EMAPE-10) > 1e-9 {
		t.Errorf("without TTFTs on a and c: %d requests, MAPE ttft %v e2e %v; want 3, 10 (b only), 10", c.Requests, c.TTFTMAPE, c.E2EMAPE)
	}
	b, err := json.Marshal(c)
	if err != nil || !strings.Contains(string(b), `"ttft_mape_pct":10`) {
		t.Fatalf("json %s %v", b, err)
	}
	var sb strings.Builder
	PrintComparison(&sb, "server", "sim", &c)
	if !strings.Contains(sb.String(), "per-request TTFT MAPE:                   10.00%") {
		t.Errorf("table:\n%s", sb.String())
	}
}
