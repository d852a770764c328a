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

// Several measured runs: the measured side is the per-request median, and
// the noise figures compare each run with the median of the others.
func TestCompareRuns(t *testing.T) {
	mk := func(id string, ttft, e2e int64, cached int) RequestResult {
		return RequestResult{ID: id, Sent: true, Start: 1000, FirstToken: 1000 + ttft, End: 1000 + e2e, PromptTokens: 100, ServerPromptTokens: 100, OutputTokens: 2, CachedTokens: cached}
	}
	runs := [][]RequestResult{
		{mk("a", 100, 200, 50), mk("b", 200, 400, 0), mk("c", 300, 600, 10)},
		{mk("a", 120, 240, 50), mk("b", 100, 200, 0), mk("c", 330, 660, 10)},
		{mk("a", 80, 160, 60), mk("b", 200, 400, 0), mk("c", 300, 600, 10)},
	}
	runs[2][2].Failed = "http 500"
	med := MedianRun(runs)
	if got := med[0]; got.TTFT() != 100 || got.E2E() != 200 || got.CachedTokens != 50 || got.Start != 1000 {
		t.Errorf("median of a = ttft %d e2e %d cached %d start %d, want 100 200 50 1000", got.TTFT(), got.E2E(), got.CachedTokens, got.Start)
	}
	if med[2].Failed == "" {
		t.Error("c failed in one run but not in the median run")
	}
	if runs[0][0].End != 1200 || runs[1][0].End != 1240 {
		t.Error("MedianRun changed its input")
	}
	// A run without a TTFT for a request (a stream without text) does not
	// count for its TTFT median: b's TTFTs 200 and 200 remain.
	runs[1][1].FirstToken = 0
	if got := MedianRun(runs)[1]; got.TTFT() != 200 || got.E2E() != 400 {
		t.Errorf("b with one TTFT missing: ttft %d e2e %d, want 200 and 400", got.TTFT(), got.E2E())
	}
	runs[0][1].FirstToken, runs[2][1].FirstToken = 0, 0
	if got := MedianRun(runs)[1]; got.FirstToken != 0 {
		t.Errorf("b without any TTFT: first token %d, want none", got.FirstToken)
	}
	runs[0][1].FirstToken, runs[1][1].FirstToken, runs[2][1].FirstToken = 1200, 1100, 1200
	pred := []RequestResult{mk("a", 110, 220, 50), mk("b", 220, 440, 0), mk("c", 300, 600, 10)}
	c := CompareRuns(runs, pred)
	if c.MeasuredRuns != 3 || c.Requests != 2 || math.Abs(c.TTFTMAPE-10) > 1e-9 || math.Abs(c.E2EMAPE-10) > 1e-9 {
		t.Fatalf("runs %d, compared %d, MAPE %v / %v; want 3, 2, 10 / 10", c.MeasuredRuns, c.Requests, c.TTFTMAPE, c.E2EMAPE)
	}
	// Leave-one-out (c failed in run 3, so only a and b count): run 1
	// (a 100, b 200) against the lower medians of runs 2 and 3 (a 80, b
	// 100) errs by 25% and 100%; run 2 (120, 100) against runs 1 and 3 (80,
	// 200) by 50% and 50%; run 3 (80, 200) against runs 1 and 2 (100, 100)
	// by 20% and 100%.
	n := c.Noise
	if want := (62.5 + 50 + 60) / 3; n == nil || math.Abs(n.TTFTMAPE-want) > 1e-9 {
		t.Fatalf("noise %+v, want TTFT MAPE %v", n, want)
	}
	if n.HitRatePP == nil || *n.HitRatePP <= 0 {
		t.Errorf("hit rate spread %v, want > 0 (run 3 cached more of a)", n.HitRatePP)
	}
	if one := CompareRuns(runs[:1], pred); one.Noise != nil || one.MeasuredRuns != 1 {
		t.Errorf("one run: noise %+v runs %d", one.Noise, one.MeasuredRuns)
	}
}
