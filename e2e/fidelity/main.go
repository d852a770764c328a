// Command fidelity is the helper of e2e/fidelity.sh, the run that puts
// kvsim's llama-server model against the real llama-server:
//
//	fidelity realize -url URL -in chat.jsonl -out chat-real.jsonl
//	fidelity table [-gate] [-max-hit-pp 2] [-max-ttft-mape 15] [-max-e2e-mape 10] [-gate-timing] RUN.json...
//	fidelity breakdown -log server.log -per-request run.jsonl
//	fidelity groups -predicted PRED.jsonl [-tol 500us] [-name NAME] REAL.jsonl...
//	fidelity refs -predicted PRED.jsonl [-k 1,3,5] [-max-ttft-mape 15] [-max-e2e-mape 10] [-name NAME] REAL.jsonl...
//	fidelity route|chain|simtrace|fleetcmp ...   (two llama-servers behind nginx: fleet.go)
//
// realize makes a generated multi-turn chat trace (kvsim trace gen
// multiturn) true to the server: it sends each turn, in trace order and one
// at a time, to llama-server's native POST /completion (greedy,
// ignore_eos, return_tokens) and rewrites the trace so that every later
// turn carries the server's real output ids where the generator had put
// synthetic ones, and every record's output_tokens are the server's. The
// server's greedy outputs are a function of the prompt, so a later replay
// of the realized trace sends exactly the conversation the server would
// have had, and the simulator (which takes output_tokens from the trace)
// caches the same tokens as the server's slots.
//
// table reads kvsim compare --json outputs named TRACE-cN.json and prints
// the predicted-against-measured table of docs/fidelity.md; with -gate it
// exits 1 when a concurrency-1 run predicted any request's cached tokens
// wrongly or a run at higher concurrency missed the hit-rate bound (and,
// with -gate-timing, the TTFT and E2E MAPE bounds).
//
// breakdown splits each TTFT of a concurrency-1 run by the server's own
// log: the prompt eval time llama-server prints per task, the time from
// its slot selection to the task's launch (where a state is restored from
// the RAM cache), and the rest (HTTP, JSON, the saves of idle slots, the
// first token's way back). docs/fidelity.md's figures on where a request's
// time goes come from it.
//
// groups sets the simulator's prompt calls beside the real runs': two
// requests whose first tokens reached the client within -tol of each other
// had their prompts in one llama_decode call. It counts the pairs most real
// runs put in one call and how many of them the simulator did, lists the
// pairs the two grouped differently, and says how much of the TTFT MAPE
// their requests carry: a request that waits for another's call, or shares
// it, instead of running alone is 30-50% off, so these pairs show how much
// of a run's error is the order in which the server met requests that
// arrived a few milliseconds apart.
//
// refs says how much the MAPEs depend on the reference: kvsim compare
// measures the simulator against the per-request median of the real runs,
// and llama-server's runs differ from each other by 20-50% per request, so
// a median of few runs is itself off. For each reference size k it takes
// every choice of k of the real runs and compares with their median both
// the simulator and the median of the runs not chosen (a predictor as good
// as the other runs' typical behaviour), and prints the range of the MAPEs
// and how often each met the TTFT and E2E bounds.
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/kvsim/kvsim/traces"
)

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: fidelity realize|table|breakdown|groups|refs|route|chain|simtrace|fleetcmp ...")
		os.Exit(2)
	}
	var err error
	switch os.Args[1] {
	case "realize":
		err = realize(os.Args[2:])
	case "table":
		err = table(os.Args[2:], os.Stdout)
	case "breakdown":
		err = breakdown(os.Args[2:], os.Stdout)
	case "groups":
		err = groups(os.Args[2:], os.Stdout)
	case "refs":
		err = refs(os.Args[2:], os.Stdout)
	case "route":
		err = route(os.Args[2:], os.Stdout)
	case "chain":
		err = chain(os.Args[2:])
	case "simtrace":
		err = simtrace(os.Args[2:])
	case "fleetcmp":
		err = fleetcmp(os.Args[2:], os.Stdout)
	default:
		err = fmt.Errorf("unknown command %q (realize, table, breakdown, groups, refs, route, chain, simtrace or fleetcmp)", os.Args[1])
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "fidelity:", err)
		var g gateError
		if errors.As(err, &g) {
			os.Exit(1)
		}
		os.Exit(2)
	}
}

// parseFlags parses args into fs and fails, naming them, when a flag in
// required is left empty.
func parseFlags(fs *flag.FlagSet, args []string, required ...string) error {
	if err := fs.Parse(args); err != nil {
		return err
	}
	var missing []string
	for _, name := range required {
		if fs.Lookup(name).Value.String() == "" {
			missing = append(missing, "-"+name)
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("%s: %s required (see -h)", fs.Name(), strings.Join(missing, ", "))
	}
	return nil
}

func realize(args []string) error {
	fs := flag.NewFlagSet("realize", flag.ContinueOnError)
	url := fs.String("url", "", "llama-server base URL")
	in := fs.String("in", "", "generated chat trace")
	out := fs.String("out", "", "realized trace to write")
	if err := parseFlags(fs, args, "url", "in", "out"); err != nil {
		return err
	}
	recs, err := traces.ReadAll(*in, traces.FormatAuto, 0)
	if err != nil {
		return err
	}
	orig := map[string]traces.Record{} // as generated
	done := map[string]traces.Record{} // realized
	client := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}, Timeout: 120 * time.Second}
	for i := range recs {
		r := recs[i]
		if r.Tokens == nil {
			return fmt.Errorf("record %q: no token ids (realize needs a generated token-id trace)", r.ID)
		}
		orig[r.ID] = r
		if r.Parent != "" {
			po, ok1 := orig[r.Parent]
			pr, ok2 := done[r.Parent]
			if !ok1 || !ok2 {
				return fmt.Errorf("record %q: parent %q is not earlier in the trace", r.ID, r.Parent)
			}
			// The generator's prompt is the parent's prompt, its output and
			// the new question: swap the first two for the realized ones.
			head := len(po.Tokens) + len(po.OutputTokens)
			if len(r.Tokens) < head || !equal(r.Tokens[:len(po.Tokens)], po.Tokens) || !equal(r.Tokens[len(po.Tokens):head], po.OutputTokens) {
				return fmt.Errorf("record %q does not extend its parent's prompt and output", r.ID)
			}
			q := r.Tokens[head:]
			r.Tokens = append(append(append([]int32(nil), pr.Tokens...), pr.OutputTokens...), q...)
			r.InputLen = len(r.Tokens)
		}
		outIDs, err := complete(client, *url, r.Tokens, r.OutputLen)
		if err != nil {
			return fmt.Errorf("record %q: %w", r.ID, err)
		}
		r.OutputTokens = outIDs
		done[r.ID] = r
		recs[i] = r
	}
	return writeTrace(*out, recs, "e2e/fidelity realize "+filepath.Base(*in)+" against llama-server (greedy outputs)")
}

// writeTrace writes recs to path in kvsim's format, source in its header.
func writeTrace(path string, recs []traces.Record, source string) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	w, err := traces.NewWriter(f, traces.Header{Format: "kvsim", Source: source})
	if err != nil {
		f.Close()
		return err
	}
	for _, r := range recs {
		if err := w.Write(r); err != nil {
			f.Close()
			return err
		}
	}
	if err := w.Flush(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

func equal(a, b []int32) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// complete sends one native completion and returns the output ids.
func complete(c *http.Client, url string, prompt []int32, n int) ([]int32, error) {
	body, err := json.Marshal(map[string]any{"prompt": prompt, "n_predict": n, "ignore_eos": true, "temperature": 0, "return_tokens": true, "cache_prompt": true})
	if err != nil {
		return nil, err
	}
	req, err := http.NewRequestWithContext(context.Background(), "POST", strings.TrimRight(url, "/")+"/completion", bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := c.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("POST /completion: HTTP %d: %s", resp.StatusCode, raw)
	}
	var r struct {
		Tokens []int32 `json:"tokens"`
	}
	if err := json.Unmarshal(raw, &r); err != nil {
		return nil, err
	}
	if len(r.Tokens) != n {
		return nil, fmt.Errorf("asked for %d tokens, got %d", n, len(r.Tokens))
	}
	return r.Tokens, nil
}

// run is what table needs of a kvsim compare --json output.
type run struct {
	Metrics []struct {
		Name      string  `json:"name"`
		Measured  float64 `json:"measured"`
		Predicted float64 `json:"predicted"`
	} `json:"metrics"`
	Requests    int      `json:"requests_compared"`
	TTFTMAPE    float64  `json:"ttft_mape_pct"`
	E2EMAPE     float64  `json:"e2e_mape_pct"`
	CachedExact *float64 `json:"cached_tokens_exact_share"`
	HitPP       *float64 `json:"cache_hit_rate_diff_pp"`
	Runs        int      `json:"measured_runs"`
	Noise       *struct {
		TTFTMAPE  float64  `json:"ttft_mape_pct"`
		E2EMAPE   float64  `json:"e2e_mape_pct"`
		HitRatePP *float64 `json:"cache_hit_rate_spread_pp"`
	} `json:"noise"`
}

func (r *run) metric(name string) (m, p float64) {
	for _, x := range r.Metrics {
		if x.Name == name {
			return x.Measured, x.Predicted
		}
	}
	return math.NaN(), math.NaN()
}

// gateError is a failed gate (exit 1), not a usage error.
type gateError struct{ msg string }

func (g gateError) Error() string { return g.msg }

var runName = regexp.MustCompile(`^(.+)-c(\d+)\.json$`)

func table(args []string, w io.Writer) error {
	fs := flag.NewFlagSet("table", flag.ContinueOnError)
	gate := fs.Bool("gate", false, "exit 1 when a gated target is missed")
	maxPP := fs.Float64("max-hit-pp", 2, "gate: hit-rate difference bound above concurrency 1, percentage points")
	maxTTFT := fs.Float64("max-ttft-mape", 15, "TTFT MAPE target above concurrency 1, percent")
	maxE2E := fs.Float64("max-e2e-mape", 10, "E2E MAPE target above concurrency 1, percent")
	gateTiming := fs.Bool("gate-timing", false, "gate on the TTFT and E2E MAPE targets too")
	ungated := fs.String("ungated", "", "comma-separated traces whose runs above concurrency 1 are reported, not gated")
	if err := fs.Parse(args); err != nil {
		return err
	}
	fmt.Fprintln(w, "| trace | conc. | real runs | requests | hit rate real / sim | cached_tokens exact | TTFT p50 ms real / sim | TTFT p99 | E2E p50 ms | E2E p99 | throughput tok/s | TTFT MAPE | E2E MAPE | real vs real: TTFT / E2E MAPE |")
	fmt.Fprintln(w, "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
	var misses, timing []string
	for _, path := range fs.Args() {
		m := runName.FindStringSubmatch(filepath.Base(path))
		if m == nil {
			return fmt.Errorf("%s: expected a file named TRACE-cN.json", path)
		}
		conc, _ := strconv.Atoi(m[2])
		raw, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		var r run
		if err := json.Unmarshal(raw, &r); err != nil {
			return fmt.Errorf("%s: %w", path, err)
		}
		pair := func(name, f string) string {
			a, b := r.metric(name)
			return fmt.Sprintf(f+" / "+f, a, b)
		}
		exact := "-"
		if r.CachedExact != nil {
			exact = fmt.Sprintf("%.0f%%", 100**r.CachedExact)
		}
		noise := "-"
		if r.Noise != nil {
			noise = fmt.Sprintf("%.1f%% / %.1f%%", r.Noise.TTFTMAPE, r.Noise.E2EMAPE)
		}
		fmt.Fprintf(w, "| %s | %d | %d | %d | %s | %s | %s | %s | %s | %s | %s | %.1f%% | %.1f%% | %s |\n",
			m[1], conc, max(r.Runs, 1), r.Requests, pair("cache_hit_rate", "%.4f"), exact,
			pair("median_ttft_ms", "%.1f"), pair("p99_ttft_ms", "%.1f"),
			pair("median_e2e_latency_ms", "%.1f"), pair("p99_e2e_latency_ms", "%.1f"),
			pair("total_throughput", "%.0f"), r.TTFTMAPE, r.E2EMAPE, noise)
		name := fmt.Sprintf("%s at concurrency %d", m[1], conc)
		if conc > 1 && slices.Contains(strings.Split(*ungated, ","), m[1]) {
			continue
		}
		if conc == 1 {
			if r.CachedExact == nil || *r.CachedExact != 1 {
				misses = append(misses, name+": not every request's cached_tokens predicted exactly ("+exact+")")
			}
			continue
		}
		if r.HitPP == nil || math.Abs(*r.HitPP) > *maxPP {
			misses = append(misses, fmt.Sprintf("%s: hit rate off by more than %g pp", name, *maxPP))
		}
		if r.TTFTMAPE > *maxTTFT {
			timing = append(timing, fmt.Sprintf("%s: TTFT MAPE %.1f%% > %g%%", name, r.TTFTMAPE, *maxTTFT))
		}
		if r.E2EMAPE > *maxE2E {
			timing = append(timing, fmt.Sprintf("%s: E2E MAPE %.1f%% > %g%%", name, r.E2EMAPE, *maxE2E))
		}
	}
	for _, t := range timing {
		fmt.Fprintln(w, "timing target missed:", t)
	}
	for _, mm := range misses {
		fmt.Fprintln(w, "cache target missed:", mm)
	}
	if *gateTiming {
		misses = append(misses, timing...)
	}
	if *gate && len(misses) > 0 {
		return gateError{fmt.Sprintf("gate: %d target(s) missed", len(misses))}
	}
	return nil
}
