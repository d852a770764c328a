package main

import (
	"bufio"
	"cmp"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"regexp"
	"slices"
	"strconv"

	"github.com/kvsim/kvsim/traces"
)

// logTask is one task of llama-server's log: when its slot was selected
// and the task launched (seconds since the server started), and its prompt
// eval time and tokens from print_timing.
type logTask struct {
	id             int
	selected, lnch float64
	evalMs         float64
	evalTokens     int
	hasEval        bool
}

var (
	// 0.01.158.902: minutes, seconds, milliseconds, microseconds.
	logTime   = regexp.MustCompile(`^(\d+)\.(\d+)\.(\d+)\.(\d+) `)
	logSelect = regexp.MustCompile(`get_availabl: .*selected slot`)
	logLaunch = regexp.MustCompile(`launch_slot_: id +\d+ \| task (\d+) \| processing task`)
	logEval   = regexp.MustCompile(`print_timing: id +\d+ \| task (\d+) \| prompt eval time = +([\d.]+) ms / +(\d+) tokens`)
)

// parseServerLog reads the tasks of a llama-server log (default verbosity),
// in launch order.
func parseServerLog(r io.Reader) ([]logTask, error) {
	var tasks []logTask
	byID := map[int]int{}
	selected := -1.0
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for line := 1; sc.Scan(); line++ {
		l := sc.Text()
		m := logTime.FindStringSubmatch(l)
		if m == nil {
			continue
		}
		var f [4]float64
		for i := range f {
			v, err := strconv.Atoi(m[i+1])
			if err != nil {
				return nil, fmt.Errorf("line %d: time %q: %v", line, m[0], err)
			}
			f[i] = float64(v)
		}
		t := f[0]*60 + f[1] + f[2]/1e3 + f[3]/1e6
		switch {
		case logSelect.MatchString(l):
			selected = t
		case logLaunch.MatchString(l):
			id, _ := strconv.Atoi(logLaunch.FindStringSubmatch(l)[1])
			sel := selected
			if sel < 0 {
				sel = t
			}
			byID[id] = len(tasks)
			tasks = append(tasks, logTask{id: id, selected: sel, lnch: t})
			selected = -1
		case logEval.MatchString(l):
			e := logEval.FindStringSubmatch(l)
			id, _ := strconv.Atoi(e[1])
			i, ok := byID[id]
			if !ok {
				continue
			}
			ms, err := strconv.ParseFloat(e[2], 64)
			if err != nil {
				return nil, fmt.Errorf("line %d: prompt eval time %q: %v", line, e[2], err)
			}
			n, _ := strconv.Atoi(e[3])
			tasks[i].evalMs, tasks[i].evalTokens, tasks[i].hasEval = ms, n, true
		}
	}
	return tasks, sc.Err()
}

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
	tasks, err := parseServerLog(lf)
	if err != nil {
		return fmt.Errorf("%s: %w", *logPath, err)
	}
	recs, err := readTrace(*perReq)
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
func joinBreakdown(tasks []logTask, recs []traces.Record) ([]breakdownRow, error) {
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
		if o.TTFT <= 0 || !t.hasEval {
			continue
		}
		if n := r.InputLen - o.CachedTokens; t.evalTokens != n {
			return nil, fmt.Errorf("request %s (%d tokens, %d cached) and task %d (%d tokens evaluated) do not match", r.ID, r.InputLen, o.CachedTokens, t.id, t.evalTokens)
		}
		ttft := float64(o.TTFT) / 1e6
		launch := (t.lnch - t.selected) * 1e3
		rows = append(rows, breakdownRow{id: r.ID, input: r.InputLen, cached: o.CachedTokens, ttft: ttft, eval: t.evalMs, launch: launch, etc: ttft - t.evalMs - launch})
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
