package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/kvsim/kvsim/replay"
	"github.com/kvsim/kvsim/traces"
)

func init() {
	register(&command{
		name:    "bench",
		summary: "SGLang's HiCache benchmarks against a server: warm-cache (exact shared-prefix sweep), multiturn (closed-loop chat)",
		run:     runBench,
	})
}

const benchUsage = `usage: kvsim bench <benchmark> --target URL [flags]
       kvsim bench warm-cache|multiturn --target sim [--config C.toml] [flags]

benchmarks:
  warm-cache   bench_warm_cache.py: per shared-prefix percentage, flush, warm the
               prefix, send every prompt with a concurrency limit, report
  multiturn    bench_multiturn.py: clients whose turns grow by the previous
               output and a new question, Poisson arrivals gated by --max-parallel,
               cache hit rate per round

Run 'kvsim bench <benchmark> -h' for its flags. See docs/replay.md.
`

func runBench(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		io.WriteString(stderr, benchUsage)
		return exitUsage
	}
	switch args[0] {
	case "-h", "-help", "--help", "help":
		io.WriteString(stdout, benchUsage)
		return exitOK
	case "warm-cache":
		return benchWarmCache(args[1:], stdout, stderr)
	case "multiturn":
		return benchMultiTurn(args[1:], stdout, stderr)
	}
	fmt.Fprintf(stderr, "kvsim bench: unknown benchmark %q\n\n%s", args[0], benchUsage)
	return exitUsage
}

// warmCacheRow is one JSONL line of the warm-cache sweep, with the seed's
// fields (the outer ones take precedence over the embedded Summary's).
type warmCacheRow struct {
	Backend         string      `json:"backend"`
	DatasetName     string      `json:"dataset_name"`
	RequestRate     replay.Rate `json:"request_rate"`
	MaxConcurrency  int         `json:"max_concurrency"`
	SharedPrefixPct int         `json:"shared_prefix_pct"`
	PrefixLen       int         `json:"prefix_len"`
	SuffixLen       int         `json:"suffix_len"`
	TotalTokens     int         `json:"total_tokens"`
	NumPrompts      int         `json:"num_prompts"`
	OutputLen       int         `json:"output_len"`
	replay.Summary
	Seed    uint64 `json:"seed"`
	Version string `json:"kvsim_version"`
}

func benchWarmCache(args []string, stdout, stderr io.Writer) int {
	fs, rf := newBenchCommand("warm-cache", stderr)
	numPrompts := fs.Int("num-prompts", 64, "prompts per shared-prefix percentage")
	total := fs.Int("total-tokens", 70000, "tokens per prompt (shared prefix + unique suffix)")
	outLen := fs.Int("output-len", 200, "output tokens per request")
	maxConc := fs.Int("max-concurrency", 4, "maximum requests in flight")
	pcts := fs.String("pcts", "0,10,20,30,40,50,60,70,80,90,92,95,97,99", "comma-separated shared-prefix percentages")
	seed := fs.Uint64("seed", 42, "seed of the synthetic prompts")
	noEOS := fs.Bool("disable-ignore-eos", false, "send ignore_eos=false")
	outFile := fs.String("output-file", "", "append one JSON object per percentage to this JSONL file")
	if code, ok := rf.parse(fs, args); !ok {
		return code
	}
	usageErr := fs.usageErr
	st, h, vocab, err := rf.server(fs.Name(), stderr, func() error {
		if rf.api != "sglang" {
			return fmt.Errorf("--api %s: the warm-cache sweep uses SGLang's native /generate (as the bench does)", rf.api)
		}
		return nil
	})
	if err != nil {
		return usageErr("%v", err)
	}
	var tg replay.Target = st
	backend := "sim"
	if h != nil {
		defer h.CloseIdle()
		tg, backend = h, "sglang"
	}
	pl, err := traces.ParseIntList(*pcts)
	if err != nil {
		return usageErr("--pcts: %v", err)
	}
	cfg := replay.WarmCacheConfig{
		TotalTokens: *total, NumPrompts: *numPrompts, OutputLen: *outLen, MaxConcurrency: *maxConc, Pcts: pl,
		Seed: *seed, Vocab: vocab, Timeout: rf.timeout, Settle: rf.settle, DisableIgnoreEOS: *noEOS, Log: stdout,
	}
	if err := cfg.Validate(); err != nil {
		return usageErr("%v", err)
	}
	ctx, stop := replaySignalContext()
	defer stop()
	var rows []replay.WarmCacheRow
	code := exitOK
	err = replay.WarmCache(ctx, cfg, tg, replay.WallClock{}, func(r replay.WarmCacheRow) error {
		rows = append(rows, r)
		s := r.Summary
		printBenchTable(stdout, &s, backend, "warm-cache", replay.Rate(math.Inf(1)), maxConc)
		if *outFile != "" {
			row := warmCacheRow{
				Backend: backend, DatasetName: "warm-cache", RequestRate: s.RequestRate, MaxConcurrency: *maxConc,
				SharedPrefixPct: r.Pct, PrefixLen: r.PrefixLen, SuffixLen: r.SuffixLen, TotalTokens: *total,
				NumPrompts: *numPrompts, OutputLen: *outLen, Summary: s, Seed: *seed, Version: version,
			}
			if err := appendJSONL(*outFile, row); err != nil {
				fmt.Fprintf(stderr, "kvsim bench warm-cache: %v\n", err)
				code = exitFail
			}
		}
		return nil
	})
	if len(rows) > 0 {
		printWarmCachePlot(stdout, rows)
	}
	if *outFile != "" && len(rows) > 0 {
		fmt.Fprintf(stdout, "JSONL results saved to %s\n", *outFile)
	}
	if err != nil {
		fmt.Fprintf(stderr, "kvsim bench warm-cache: %v\n", err)
		return exitFail
	}
	return code
}

// printBenchTable labels s with the run's backend, dataset, request rate
// and concurrency cap (as the JSONL lines carry them) and prints it as
// SGLang's benchmarks do.
func printBenchTable(w io.Writer, s *replay.Summary, backend, dataset string, rate replay.Rate, maxConc *int) {
	s.Backend, s.DatasetName, s.RequestRate, s.MaxConcurrency = backend, dataset, rate, maxConc
	replay.PrintTable(w, replay.TableHeader{Backend: backend, RequestRate: rate, MaxConcurrency: *maxConc}, s)
}

// printWarmCachePlot prints TTFT against the shared-prefix percentage, as
// a table with a bar per row scaled to the largest mean TTFT.
func printWarmCachePlot(w io.Writer, rows []replay.WarmCacheRow) {
	top := 0.0
	for _, r := range rows {
		top = max(top, r.Summary.MeanTTFT)
	}
	fmt.Fprintf(w, "\n%s\n", centre(" Mean TTFT by shared prefix ", 70, "="))
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "pct\tprefix\tmean TTFT ms\tp99 TTFT ms\thit rate\t")
	for _, r := range rows {
		bar := 0
		if top > 0 {
			bar = int(math.Round(30 * r.Summary.MeanTTFT / top))
		}
		hit := "n/a"
		if h := r.Summary.CacheHitRate; h != nil {
			hit = fmt.Sprintf("%.3f", *h)
		}
		fmt.Fprintf(tw, "%d%%\t%d\t%.2f\t%.2f\t%s\t%s\n", r.Pct, r.PrefixLen, r.Summary.MeanTTFT, r.Summary.P99TTFT, hit, strings.Repeat("#", bar))
	}
	tw.Flush()
}

func centre(title string, width int, fill string) string {
	n := max(width-len(title), 0)
	return strings.Repeat(fill, n/2) + title + strings.Repeat(fill, n-n/2)
}

// multiTurnLog is one JSONL line of bench multiturn, shaped like
// bench_multiturn.py's log (times in seconds there), with kvsim's serving
// summary (ms) and per-round figures added.
type multiTurnLog struct {
	Timestamp string `json:"timestamp"`
	Tag       string `json:"tag"`
	Summary   struct {
		TotalRequests  int         `json:"total_requests"`
		RequestRate    replay.Rate `json:"request_rate"`
		AverageTTFT    float64     `json:"average_ttft"`
		P90TTFT        float64     `json:"p90_ttft"`
		P99TTFT        float64     `json:"p99_ttft"`
		MedianTTFT     float64     `json:"median_ttft"`
		AverageLatency float64     `json:"average_latency"`
		P90Latency     float64     `json:"p90_latency"`
		P99Latency     float64     `json:"p99_latency"`
		MedianLatency  float64     `json:"median_latency"`
		AverageITL     float64     `json:"average_itl"`
		P90ITL         float64     `json:"p90_itl"`
		P99ITL         float64     `json:"p99_itl"`
		MedianITL      float64     `json:"median_itl"`
		InputThru      float64     `json:"input_token_throughput"`
		OutputThru     float64     `json:"output_token_throughput"`
		Throughput     float64     `json:"throughput"`
		CacheHitRate   *float64    `json:"cache_hit_rate"`
	} `json:"summary"`
	PerRound []replay.RoundStat `json:"per_round"`
	Serving  replay.Summary     `json:"serving"`
	Version  string             `json:"kvsim_version"`
}

func benchMultiTurn(args []string, stdout, stderr io.Writer) int {
	fs, rf := newBenchCommand("multiturn", stderr)
	clients := fs.Int("num-clients", 256, "number of clients (conversations)")
	maxPar := fs.Int("max-parallel", 128, "maximum requests in flight")
	reqLen := fs.Int("request-length", 512, "first prompt length in tokens")
	outLen := fs.Int("output-length", 64, "output tokens per turn")
	rounds := fs.Int("num-rounds", 5, "turns per client")
	dist := fs.String("distribution", "poisson", "inter-arrival gaps: poisson or uniform")
	rate := fs.Float64("request-rate", 1, "requests per second (inf: no gaps)")
	subLen := fs.Int("sub-question-input-length", 0, "tokens of each later question (0: --request-length)")
	queue := fs.String("ready-queue-policy", "random", "which ready turn goes next: random or fifo")
	seed := fs.Uint64("seed", 1, "seed of prompts, questions and arrivals")
	noAuto := fs.Bool("disable-auto-run", false, "run only --request-rate (default: the rates 16, 14, 12, 10, 9, ..., 1 unless --request-rate is given)")
	logFile := fs.String("log-file", "performance_metrics.jsonl", "append one JSON object per rate to this JSONL file ('' for none)")
	tag := fs.String("tag", "", "tag written with each log line")
	if code, ok := rf.parse(fs, args); !ok {
		return code
	}
	usageErr := fs.usageErr
	if rf.api == "openai-chat" {
		return usageErr("--api openai-chat: the multi-turn history is token ids; use sglang or openai")
	}
	// tg is the server: over HTTP in wall-clock time, or the simulator in
	// virtual time (the same clients, gaps and cap; nothing to settle).
	var tg interface {
		replay.Describer
		replay.Flusher
	}
	var run func(context.Context, replay.MultiTurnConfig) (*replay.MultiTurnResult, error)
	st, h, vocab, err := rf.server(fs.Name(), stderr, nil)
	if err != nil {
		return usageErr("%v", err)
	}
	backend := "sim"
	if h != nil {
		defer h.CloseIdle()
		tg, backend = h, rf.api
		run = func(ctx context.Context, cfg replay.MultiTurnConfig) (*replay.MultiTurnResult, error) {
			return replay.MultiTurn(ctx, cfg, h, replay.WallClock{})
		}
	} else {
		tg, run = st, st.MultiTurn
	}
	rates := multiTurnRates(fs.FlagSet, *rate, *noAuto)
	cfg := replay.MultiTurnConfig{
		Clients: *clients, MaxParallel: *maxPar, RequestLength: *reqLen, OutputLength: *outLen, Rounds: *rounds,
		SubQuestionLength: *subLen, Distribution: *dist, ReadyQueue: *queue, Seed: *seed, Vocab: vocab, Timeout: rf.timeout,
		Rate: rates[0],
	}
	if err := cfg.Validate(); err != nil {
		return usageErr("%v", err)
	}
	ctx, stop := replaySignalContext()
	defer stop()
	if _, err := tg.Info(ctx); err != nil {
		fmt.Fprintf(stderr, "kvsim bench multiturn: warning: %v\n", err)
	}
	for _, rt := range rates {
		cfg.Rate = rt
		if err := tg.Flush(ctx); err != nil {
			fmt.Fprintf(stderr, "kvsim bench multiturn: %v\n", err)
			return exitFail
		}
		if err := (replay.WallClock{}).SleepUntil(ctx, time.Now().Add(rf.settle)); err != nil {
			fmt.Fprintln(stderr, "kvsim bench multiturn: interrupted")
			return exitFail
		}
		fmt.Fprintf(stdout, "Running %d clients x %d rounds at %v requests/s (max parallel %d) ...\n", *clients, *rounds, rt, *maxPar)
		res, err := run(ctx, cfg)
		if err != nil {
			fmt.Fprintf(stderr, "kvsim bench multiturn: %v\n", err)
			return exitFail
		}
		s := replay.Summarize(res.Requests)
		s.Interrupted = res.Interrupted
		printBenchTable(stdout, &s, backend, "multiturn", replay.Rate(rt), maxPar)
		st := replay.RoundStats(res)
		printRounds(stdout, st)
		if res.OutputIDsMissing > 0 {
			fmt.Fprintf(stderr, "kvsim bench multiturn: note: %d turns got no output token ids from the server; their next prompt carries synthetic output tokens, which the server's cache cannot hit\n", res.OutputIDsMissing)
		}
		if *logFile != "" {
			if err := appendJSONL(*logFile, multiTurnLogLine(*tag, rt, &s, st)); err != nil {
				fmt.Fprintf(stderr, "kvsim bench multiturn: %v\n", err)
				return exitFail
			}
		}
		if res.Interrupted {
			fmt.Fprintln(stderr, "kvsim bench multiturn: interrupted; partial results written")
			return exitFail
		}
		if s.Completed == 0 {
			fmt.Fprintf(stderr, "kvsim bench multiturn: all requests failed: %s\n", reasonList(s.FailedReasons))
			return exitFail
		}
	}
	return exitOK
}

func printRounds(w io.Writer, st []replay.RoundStat) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "round\trequests\tfailed\tmean prompt\tmean TTFT ms\tcache hit rate\t")
	for _, r := range st {
		hit := "n/a"
		if r.CacheHit != nil {
			hit = fmt.Sprintf("%.4f", *r.CacheHit)
		}
		fmt.Fprintf(tw, "%d\t%d\t%d\t%.0f\t%.2f\t%s\t\n", r.Round, r.Requests, r.Failed, r.MeanInput, r.MeanTTFT, hit)
	}
	tw.Flush()
}

func multiTurnLogLine(tag string, rate float64, s *replay.Summary, st []replay.RoundStat) multiTurnLog {
	var l multiTurnLog
	l.Timestamp = time.Now().Format(time.RFC3339Nano)
	l.Tag = tag
	m := &l.Summary
	m.TotalRequests = int(s.Completed)
	m.RequestRate = replay.Rate(rate)
	m.AverageTTFT, m.P90TTFT, m.P99TTFT, m.MedianTTFT = s.MeanTTFT/1e3, s.P90TTFT/1e3, s.P99TTFT/1e3, s.MedianTTFT/1e3
	m.AverageLatency, m.P90Latency, m.P99Latency, m.MedianLatency = s.MeanE2E/1e3, s.P90E2E/1e3, s.P99E2E/1e3, s.MedianE2E/1e3
	m.AverageITL, m.P90ITL, m.P99ITL, m.MedianITL = s.MeanITL/1e3, s.P90ITL/1e3, s.P99ITL/1e3, s.MedianITL/1e3
	m.InputThru, m.OutputThru, m.Throughput = s.InputThroughput, s.OutputThroughput, s.RequestThroughput
	m.CacheHitRate = s.CacheHitRate
	l.PerRound, l.Serving, l.Version = st, *s, version
	return l
}

// buildSim is --target sim for a benchmark: the in-process simulator of
// the config (default: the bundled one) and the vocab of the prompts.
func (f *replayFlags) buildSim(cfgPath string) (*replay.SimTarget, traces.Vocab, error) {
	v, err := f.parseVocab()
	if err != nil {
		return nil, v, err
	}
	st, err := simTarget(cfgPath)
	return st, v, err
}

// buildHTTP is a server target for a benchmark, with the vocab of the
// prompts fitted to what the server reports (announced as prog).
func (f *replayFlags) buildHTTP(prog string, stderr io.Writer) (*replay.HTTPTarget, traces.Vocab, error) {
	h, v, err := f.build()
	if err != nil {
		return nil, v, err
	}
	info, _ := h.Info(context.Background())
	v, _ = f.fitVocab(v, info, stderr, prog, true)
	return h, v, nil
}

// multiTurnRates are the request rates bench multiturn runs: --request-rate
// alone when given or with --disable-auto-run, else bench_multiturn.py's
// automatic sweep.
func multiTurnRates(fs *flag.FlagSet, rate float64, noAuto bool) []float64 {
	rateSet := false
	fs.Visit(func(f *flag.Flag) { rateSet = rateSet || f.Name == "request-rate" })
	if noAuto || rateSet {
		return []float64{rate}
	}
	return []float64{16, 14, 12, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1}
}

// benchFlags are the flags both benchmarks share: the target's
// (replayFlags), --config for --target sim and --settle.
type benchFlags struct {
	replayFlags
	cfgPath string
	settle  time.Duration
}

// newBenchCommand returns the flag set of "kvsim bench NAME" with the
// shared flags registered.
func newBenchCommand(name string, stderr io.Writer) (*cmdFlags, *benchFlags) {
	name = "kvsim bench " + name
	fs := newCommand(name, "usage: "+name+" --target URL|sim [flags]\n\n", stderr)
	b := new(benchFlags)
	b.register(fs.FlagSet, 20*time.Minute)
	fs.StringVar(&b.cfgPath, "config", "", "with --target sim: the simulated server (TOML; default: the bundled configs/default.toml)")
	fs.DurationVar(&b.settle, "settle", time.Second, "pause after each flush")
	return fs, b
}

// server builds the server a benchmark measures: for --target sim the
// simulator of --config in virtual time (the same sweep, flushes and
// warm-ups; there is nothing to settle after a flush, so --settle becomes
// 0), else the HTTP server, once --config is refused and check (if any)
// has passed. Exactly one of st and h is set; the caller closes h's idle
// connections.
func (b *benchFlags) server(prog string, stderr io.Writer, check func() error) (st *replay.SimTarget, h *replay.HTTPTarget, v traces.Vocab, err error) {
	if b.target == "sim" {
		b.settle = 0
		st, v, err = b.buildSim(b.cfgPath)
		return st, nil, v, err
	}
	if b.cfgPath != "" {
		return nil, nil, v, errors.New("--config describes the simulated server: use it with --target sim")
	}
	if check != nil {
		if err := check(); err != nil {
			return nil, nil, v, err
		}
	}
	h, v, err = b.buildHTTP(prog, stderr)
	return nil, h, v, err
}

// parse parses a benchmark's flags and checks the target's; code and ok
// are as for cmdFlags.parse.
func (b *benchFlags) parse(fs *cmdFlags, args []string) (code int, ok bool) {
	if code, ok := fs.parse(args); !ok {
		return code, false
	}
	if err := b.validate(); err != nil {
		return fs.usageErr("%v", err), false
	}
	return exitOK, true
}
