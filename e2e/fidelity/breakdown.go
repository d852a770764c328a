package main

import (
	"cmp"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"slices"

	"github.com/kvsim/kvsim/calibrate"
	"github.com/kvsim/kvsim/traces"
)

// breakdownRow is one request's TTFT split by the server log.
type breakdownRow struct {
	id                      string
	input, cached           int
	ttft, eval, launch, etc float64 // ms
}

// breakdown joins a concurrency-1 run's per-request records with the
// server's log and splits each TTFT into the server's prompt eval time,
// the time from slot selection to launch (restoring a state from the RAM
// cache happens there), and the rest (HTTP, JSON, the saves of idle slots
// after the launch, the first token's way back).
func breakdown(args []string, w io.Writer) error {
	fs := flag.NewFlagSet("breakdown", flag.ContinueOnError)
	logPath := fs.String("log", "", "llama-server's log of the run (e2e/llama/start.sh writes STATE_DIR/server.log)")
	perReq := fs.String("per-request", "", "the run's kvsim replay --per-request file (a concurrency-1 run)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *logPath == "" || *perReq == "" || fs.NArg() > 0 {
		return errors.New("usage: fidelity breakdown -log server.log -per-request run.jsonl")
	}
	lf, err := os.Open(*logPath)
	if err != nil {
		return err
	}
	defer lf.Close()
	tasks, err := calibrate.ReadLlamaServerLog(lf, *logPath)
	if err != nil {
		return err
	}
	recs, err := traces.ReadAll(*perReq, traces.FormatAuto, 0)
	if err != nil {
		return err
	}
	rows, err := joinBreakdown(tasks, recs)
	if err != nil {
		return fmt.Errorf("%s and %s: %w", *logPath, *perReq, err)
	}
	fmt.Fprintln(w, "| id | prompt | cached | TTFT ms | prompt eval ms | selection to launch ms | rest ms |")
	fmt.Fprintln(w, "|---|---|---|---|---|---|---|")
	var eval, launch, rest []float64
	for _, r := range rows {
		fmt.Fprintf(w, "| %s | %d | %d | %.2f | %.2f | %.2f | %.2f |\n", r.id, r.input, r.cached, r.ttft, r.eval, r.launch, r.etc)
		eval, launch, rest = append(eval, r.eval/r.ttft), append(launch, r.launch), append(rest, r.etc)
	}
	fmt.Fprintf(w, "\n%d requests: prompt eval a median %.0f%% of TTFT; selection to launch median %.2f ms; the rest median %.2f ms (p10 %.2f, p90 %.2f)\n",
		len(rows), 100*quantile(eval, 0.5), quantile(launch, 0.5), quantile(rest, 0.5), quantile(rest, 0.1), quantile(rest, 0.9))
	return nil
}

// joinBreakdown pairs the records (in send order) with the log's last
// tasks (a replay's warm-up request comes first): a concurrency-1 run
// starts its tasks in send order. Each pair must agree on the tokens
// evaluated.
func joinBreakdown(tasks []calibrate.LlamaLogTask, recs []traces.Record) ([]breakdownRow, error) {
	recs = slices.DeleteFunc(slices.Clone(recs), func(r traces.Record) bool { return r.Observed == nil })
	slices.SortStableFunc(recs, func(a, b traces.Record) int { return cmp.Compare(a.Arrival, b.Arrival) })
	for i := 1; i < len(recs); i++ {
		if p := recs[i-1]; p.Observed.E2E > 0 && recs[i].Arrival < p.Arrival+p.Observed.E2E {
			return nil, fmt.Errorf("%s was sent before %s ended: the breakdown needs a concurrency-1 run", recs[i].ID, p.ID)
		}
	}
	if len(tasks) < len(recs) {
		return nil, fmt.Errorf("%d requests but %d tasks in the log", len(recs), len(tasks))
	}
	tasks = tasks[len(tasks)-len(recs):]
	var rows []breakdownRow
	for i, r := range recs {
		t, o := tasks[i], r.Observed
		if o.TTFT <= 0 || !t.HasEval {
			continue
		}
		if n := r.InputLen - o.CachedTokens; t.PromptEvalTokens != n {
			return nil, fmt.Errorf("request %s (%d tokens, %d cached) and task %d (%d tokens evaluated) do not match", r.ID, r.InputLen, o.CachedTokens, t.Task, t.PromptEvalTokens)
		}
		ttft := float64(o.TTFT) / 1e6
		launch, eval := float64(t.Launched-t.Selected)/1e6, float64(t.PromptEvalNs)/1e6
		rows = append(rows, breakdownRow{id: r.ID, input: r.InputLen, cached: o.CachedTokens, ttft: ttft, eval: eval, launch: launch, etc: ttft - eval - launch})
	}
	if len(rows) == 0 {
		return nil, errors.New("no request with a TTFT and a prompt eval time")
	}
	return rows, nil
}

// quantile is the q-quantile of xs (nearest rank).
func quantile(xs []float64, q float64) float64 {
	s := slices.Clone(xs)
	slices.Sort(s)
	i := int(q * float64(len(s)-1))
	return s[i]
}
