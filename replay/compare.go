package replay

import (
	"fmt"
	"io"
	"math"
	"reflect"
	"slices"
	"strings"

	"gonum.org/v1/gonum/stat"

	"github.com/kvsim/kvsim/traces"
)

// Comparison puts a measured run (a real server) and a predicted one (the
// simulator) side by side.
type Comparison struct {
	Measured  Summary `json:"measured"`
	Predicted Summary `json:"predicted"`
	// Metrics holds every numeric metric of the Summary, in its order.
	Metrics []MetricDiff `json:"metrics"`
	// Requests is the number of requests that succeeded in both runs
	// (matched by record ID); the per-request figures are over them.
	Requests int `json:"requests_compared"`
	// TTFTMAPE and E2EMAPE are mean absolute percentage errors of the
	// prediction, per request: mean(|predicted - measured| / measured) *
	// 100 over requests whose measured value is > 0 (for TTFT: whose
	// measured and predicted values both are: a stream without text has none).
	TTFTMAPE float64 `json:"ttft_mape_pct"`
	E2EMAPE  float64 `json:"e2e_mape_pct"`
	// TTFTPearson and E2EPearson are Pearson's r between measured and
	// predicted values (NaN, written null, with fewer than 2 requests or
	// no variance).
	TTFTPearson JSONFloat `json:"ttft_pearson_r"`
	E2EPearson  JSONFloat `json:"e2e_pearson_r"`
	// CachedExact is the share of compared requests whose cached tokens
	// are equal in both runs (both reported).
	CachedExact JSONFloat `json:"cached_tokens_exact_share"`
	// HitRateDiffPP is predicted minus measured cache hit rate in
	// percentage points; nil when either run reported no cached tokens.
	HitRateDiffPP *float64 `json:"cache_hit_rate_diff_pp"`

	// MeasuredRuns is the number of measured runs (see [CompareRuns]); 1
	// for [Compare].
	MeasuredRuns int `json:"measured_runs"`
	// Noise is the measured runs' own disagreement, set when there are
	// several: each run in turn is compared, as if it were the prediction,
	// with the per-request median of the other runs, and the figures are
	// the means over runs. A prediction cannot be expected to come closer
	// to the server than the server comes to itself.
	Noise *RunNoise `json:"noise,omitempty"`
}

// RunNoise is the disagreement between repeated measured runs.
type RunNoise struct {
	TTFTMAPE    float64 `json:"ttft_mape_pct"`
	E2EMAPE     float64 `json:"e2e_mape_pct"`
	CachedExact float64 `json:"cached_tokens_exact_share"`
	// HitRatePP is the largest difference between two runs' hit rates, in
	// percentage points; nil when a run reported no cached tokens.
	HitRatePP *float64 `json:"cache_hit_rate_spread_pp"`
}

// MetricDiff is one metric in both runs. RelError is (predicted -
// measured) / measured (NaN when measured is 0).
type MetricDiff struct {
	Name      string    `json:"name"`
	Measured  float64   `json:"measured"`
	Predicted float64   `json:"predicted"`
	RelError  JSONFloat `json:"rel_error"`
}

// JSONFloat is a float64 whose NaN and infinities are written as null.
type JSONFloat float64

// MarshalJSON implements json.Marshaler.
func (f JSONFloat) MarshalJSON() ([]byte, error) {
	x := float64(f)
	if math.IsNaN(x) || math.IsInf(x, 0) {
		return []byte("null"), nil
	}
	return []byte(formatFloat(x)), nil
}

// CompareRuns compares a prediction with several measured runs of the same
// records, for servers whose timing does not repeat: the measured side is
// the per-request median run (see [MedianRun]), and [Comparison.Noise] says
// how far the runs are from each other. With one run it is [Compare].
func CompareRuns(measured [][]RequestResult, predicted []RequestResult) Comparison {
	if len(measured) == 1 {
		return Compare(measured[0], predicted)
	}
	c := Compare(MedianRun(measured), predicted)
	c.MeasuredRuns = len(measured)
	var n RunNoise
	lo, hi, spread := math.Inf(1), math.Inf(-1), true
	others := make([][]RequestResult, 0, len(measured)-1)
	for i := range measured {
		others = append(others[:0], measured[:i]...)
		others = append(others, measured[i+1:]...)
		ci := Compare(MedianRun(others), measured[i])
		n.TTFTMAPE += ci.TTFTMAPE / float64(len(measured))
		n.E2EMAPE += ci.E2EMAPE / float64(len(measured))
		n.CachedExact += float64(ci.CachedExact) / float64(len(measured))
		if h := ci.Predicted.CacheHitRate; h != nil { // run i's, summarised by Compare
			lo, hi = min(lo, *h), max(hi, *h)
		} else {
			spread = false
		}
	}
	if spread {
		d := (hi - lo) * 100
		n.HitRatePP = &d
	}
	c.Noise = &n
	return c
}

// MedianRun merges several runs of the same records into one: every
// request that succeeded in all of them gets the median TTFT (over the runs
// that had one), E2E and cached tokens of the runs (the lower middle value
// for an even count, so that cached tokens stay a value some run saw),
// measured from the first run's start; the rest of it, and every other request, is as in the first
// run, except that a request that failed or was not sent in some run is
// marked failed ("not in every run").
func MedianRun(runs [][]RequestResult) []RequestResult {
	out := append([]RequestResult(nil), runs[0]...)
	byID := make([]map[string]*RequestResult, len(runs))
	for k, run := range runs {
		byID[k] = make(map[string]*RequestResult, len(run))
		for i := range run {
			byID[k][run[i].ID] = &run[i]
		}
	}
	var ttft []int64
	e2e, cached := make([]int64, len(runs)), make([]int64, len(runs))
	for i := range out {
		r := &out[i]
		if r.Warmup || !r.Sent || r.Failed != "" {
			continue
		}
		ok := true
		ttft = ttft[:0]
		for k := range runs {
			x := byID[k][r.ID]
			if x == nil || !x.Sent || x.Failed != "" {
				ok = false
				break
			}
			if x.FirstToken > 0 { // a stream without text has no TTFT
				ttft = append(ttft, x.TTFT())
			}
			e2e[k], cached[k] = x.E2E(), int64(x.CachedTokens)
		}
		if !ok {
			r.Failed, r.Detail = "not in every run", "failed or not sent in some measured run"
			continue
		}
		r.FirstToken = 0
		if len(ttft) > 0 {
			r.FirstToken = r.Start + lowerMedian(ttft)
		}
		r.End = r.Start + lowerMedian(e2e)
		r.CachedTokens = int(lowerMedian(cached))
	}
	return out
}

// lowerMedian returns the middle value of v (the lower of the two middle
// ones for an even count); it sorts v.
func lowerMedian(v []int64) int64 {
	slices.Sort(v)
	return v[(len(v)-1)/2]
}

// Compare compares two runs of the same records.
func Compare(measured, predicted []RequestResult) Comparison {
	c := Comparison{Measured: Summarize(measured), Predicted: Summarize(predicted), MeasuredRuns: 1}
	mv, pv := reflect.ValueOf(c.Measured), reflect.ValueOf(c.Predicted)
	// VisibleFields flattens the embedded serving metric set, in order.
	for _, f := range reflect.VisibleFields(mv.Type()) {
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if f.Anonymous || f.Type != reflect.TypeFor[float64]() && f.Type != reflect.TypeFor[int64]() || name == "num_prompts" {
			continue
		}
		m, p := toFloat(mv.FieldByIndex(f.Index)), toFloat(pv.FieldByIndex(f.Index))
		c.Metrics = append(c.Metrics, MetricDiff{Name: name, Measured: m, Predicted: p, RelError: JSONFloat(relErr(m, p))})
	}
	if h, g := c.Measured.CacheHitRate, c.Predicted.CacheHitRate; h != nil && g != nil {
		c.Metrics = append(c.Metrics, MetricDiff{Name: "cache_hit_rate", Measured: *h, Predicted: *g, RelError: JSONFloat(relErr(*h, *g))})
		d := (*g - *h) * 100
		c.HitRateDiffPP = &d
	}
	byID := make(map[string]*RequestResult, len(predicted))
	for i := range predicted {
		byID[predicted[i].ID] = &predicted[i]
	}
	var mt, pt, me, pe []float64
	var ttftErr, e2eErr []float64
	exact, reported := 0, 0
	for i := range measured {
		m := &measured[i]
		p := byID[m.ID]
		if p == nil || m.Warmup || !m.Sent || !p.Sent || m.Failed != "" || p.Failed != "" {
			continue
		}
		c.Requests++
		// A stream whose chunks carried no text has no TTFT (llama-server
		// holds back incomplete UTF-8): such a request has no TTFT error.
		if m.TTFT() > 0 && p.TTFT() > 0 {
			mt, pt = append(mt, float64(m.TTFT())), append(pt, float64(p.TTFT()))
			ttftErr = append(ttftErr, math.Abs(float64(p.TTFT()-m.TTFT()))/float64(m.TTFT()))
		}
		me, pe = append(me, float64(m.E2E())), append(pe, float64(p.E2E()))
		if m.E2E() > 0 {
			e2eErr = append(e2eErr, math.Abs(float64(p.E2E()-m.E2E()))/float64(m.E2E()))
		}
		if m.CachedTokens >= 0 && p.CachedTokens >= 0 {
			reported++
			if m.CachedTokens == p.CachedTokens {
				exact++
			}
		}
	}
	c.TTFTMAPE, c.E2EMAPE = 100*meanOr0(ttftErr), 100*meanOr0(e2eErr)
	c.TTFTPearson, c.E2EPearson = JSONFloat(pearson(mt, pt)), JSONFloat(pearson(me, pe))
	c.CachedExact = JSONFloat(math.NaN())
	if reported > 0 {
		c.CachedExact = JSONFloat(float64(exact) / float64(reported))
	}
	return c
}

func toFloat(v reflect.Value) float64 {
	if v.Kind() == reflect.Int64 {
		return float64(v.Int())
	}
	return v.Float()
}

func relErr(m, p float64) float64 {
	if m == 0 {
		if p == 0 {
			return 0
		}
		return math.NaN()
	}
	return (p - m) / m
}

func meanOr0(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	return mean(xs)
}

// pearson is gonum's stat.Correlation, NaN when undefined.
func pearson(x, y []float64) float64 {
	if len(x) < 2 {
		return math.NaN()
	}
	return stat.Correlation(x, y, nil)
}

// PrintComparison prints c as a table: every metric side by side with its
// relative error, then the per-request figures.
func PrintComparison(w io.Writer, measuredName, predictedName string, c *Comparison) {
	fmt.Fprintf(w, "%-32s %14s %14s %10s\n", "metric", trunc(measuredName, 14), trunc(predictedName, 14), "rel.err")
	fmt.Fprintln(w, strings.Repeat("-", 73))
	for _, m := range c.Metrics {
		re := "-"
		if !math.IsNaN(float64(m.RelError)) {
			re = fmt.Sprintf("%+.1f%%", 100*float64(m.RelError))
		}
		fmt.Fprintf(w, "%-32s %14s %14s %10s\n", m.Name, num(m.Measured), num(m.Predicted), re)
	}
	fmt.Fprintln(w, strings.Repeat("-", 73))
	fmt.Fprintf(w, "%-40s %d\n", "requests compared:", c.Requests)
	fmt.Fprintf(w, "%-40s %.2f%%\n", "per-request TTFT MAPE:", c.TTFTMAPE)
	fmt.Fprintf(w, "%-40s %.2f%%\n", "per-request E2E MAPE:", c.E2EMAPE)
	fmt.Fprintf(w, "%-40s %s\n", "per-request TTFT Pearson r:", fnum(float64(c.TTFTPearson)))
	fmt.Fprintf(w, "%-40s %s\n", "per-request E2E Pearson r:", fnum(float64(c.E2EPearson)))
	fmt.Fprintf(w, "%-40s %s\n", "cached tokens equal (share):", fnum(float64(c.CachedExact)))
	if c.HitRateDiffPP != nil {
		fmt.Fprintf(w, "%-40s %+.2f pp\n", "cache hit rate difference:", *c.HitRateDiffPP)
	} else {
		fmt.Fprintf(w, "%-40s %s\n", "cache hit rate difference:", "not reported by both")
	}
	if n := c.Noise; n != nil {
		fmt.Fprintf(w, "\nthe %d measured runs against each other (each against the median of the others):\n", c.MeasuredRuns)
		fmt.Fprintf(w, "%-40s %.2f%%\n", "per-request TTFT MAPE:", n.TTFTMAPE)
		fmt.Fprintf(w, "%-40s %.2f%%\n", "per-request E2E MAPE:", n.E2EMAPE)
		fmt.Fprintf(w, "%-40s %.4f\n", "cached tokens equal (share):", n.CachedExact)
		if n.HitRatePP != nil {
			fmt.Fprintf(w, "%-40s %.2f pp\n", "cache hit rate spread:", *n.HitRatePP)
		}
	}
}

func trunc(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return "..." + s[len(s)-n+3:]
}

func num(x float64) string {
	if x == math.Trunc(x) && math.Abs(x) < 1e12 {
		return fmt.Sprintf("%.0f", x)
	}
	return fmt.Sprintf("%.4g", x)
}

func fnum(x float64) string {
	if math.IsNaN(x) {
		return "-"
	}
	return fmt.Sprintf("%.4f", x)
}

// ReadResults reads the per-request trace at path (kvsim replay
// --per-request's, a capture's) back into request results, as
// [ResultsFromTrace] does; a trace without any observed result is an error.
func ReadResults(path string) ([]RequestResult, error) {
	recs, err := traces.ReadAll(path, traces.FormatAuto, 0)
	if err != nil {
		return nil, err
	}
	res := ResultsFromTrace(recs)
	if len(res) == 0 {
		return nil, fmt.Errorf("%s: no record with observed results", path)
	}
	return res, nil
}

// ResultsFromTrace turns a per-request trace (records with Observed, as
// WritePerRequest or a capture writes them) back into request results, so
// that comparisons can be redone offline. Times count from each record's
// Arrival; records without Observed are skipped.
func ResultsFromTrace(recs []traces.Record) []RequestResult {
	var out []RequestResult
	for i := range recs {
		r := &recs[i]
		o := r.Observed
		if o == nil {
			continue
		}
		rr := RequestResult{
			Index: len(out), ID: r.ID, Sent: true, Due: r.Arrival, Slot: r.Arrival, Start: r.Arrival,
			FirstToken: r.Arrival + o.TTFT, End: r.Arrival + o.E2E,
			PromptTokens: r.InputLen, ServerPromptTokens: r.InputLen, OutputTokens: r.OutputLen,
			CachedTokens: o.CachedTokens, ITL: o.ITL, Warmup: r.Kind == "warmup",
		}
		if o.Status != "ok" && o.Status != "" {
			rr.Failed, rr.CachedTokens = o.Status, -1
		}
		out = append(out, rr)
	}
	return out
}
