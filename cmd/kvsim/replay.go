package main

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"os/signal"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/kvsim/kvsim/replay"
	"github.com/kvsim/kvsim/traces"
)

func init() {
	register(&command{
		name:    "replay",
		summary: "replay a trace against a real server (SGLang /generate or OpenAI API) and measure TTFT, TPOT, ITL, E2E and cache hits",
		run:     runReplay,
	})
}

const replayUsage = `usage: kvsim replay --trace FILE --target URL [--format F] [--api sglang|openai|openai-chat]
                    [--request-rate R | --timestamps [--speedup X]] [--max-concurrency N]
                    [--flush] [--output-file F] [--per-request F] [--json] [--timeout D]
                    [--extra-request-body JSON] [--num-prompts N]

Sends every request of the trace to the server at URL, streaming, and prints
SGLang's serving-benchmark metrics. Pacing: as fast as possible (default),
--request-rate R (seeded Poisson or uniform arrivals), or --timestamps (the
trace's arrival times divided by --speedup). A turn that names a parent
waits for it. Ctrl-C stops sending and writes what was measured.
See docs/replay.md.
`

// replaySignalContext returns the context that SIGINT/SIGTERM cancel; tests
// replace it.
var replaySignalContext = func() (context.Context, context.CancelFunc) {
	return signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
}

// replayFlags are the flags shared by replay and bench.
type replayFlags struct {
	target, api, model, apiKey, extra, chatText string
	timeout                                     time.Duration
	vocab                                       string
}

func (f *replayFlags) register(fs *flag.FlagSet, defaultTimeout time.Duration) {
	fs.StringVar(&f.target, "target", "", "server base URL, e.g. http://127.0.0.1:30000 (sim: the in-process simulator, not yet available)")
	fs.StringVar(&f.api, "api", "sglang", "API: sglang (/generate), openai (/v1/completions), openai-chat (/v1/chat/completions)")
	fs.StringVar(&f.model, "model", "", "model name for the OpenAI APIs (default: the first of /v1/models)")
	fs.StringVar(&f.apiKey, "api-key", "", "bearer token to send, if the server wants one")
	fs.StringVar(&f.extra, "extra-request-body", "", "JSON object whose fields are added to every request body")
	fs.StringVar(&f.chatText, "chat-text", "", "openai-chat only: 'words' sends each token id as an English word")
	fs.DurationVar(&f.timeout, "timeout", defaultTimeout, "per-request timeout, from send to the end of the stream (0: none)")
	fs.StringVar(&f.vocab, "vocab", traces.DefaultVocab.String(), "token id range LO:HI of synthesised prompts")
}

// build checks the flags and returns the HTTP target; a non-empty usage
// message means a usage error.
func (f *replayFlags) build() (*replay.HTTPTarget, traces.Vocab, error) {
	var v traces.Vocab
	if f.target == "" {
		return nil, v, errors.New("--target is required")
	}
	if f.target == "sim" {
		return nil, v, errors.New("--target sim: the in-process simulator target is not yet available; give a server URL")
	}
	lo, hi, ok := strings.Cut(f.vocab, ":")
	a, err1 := strconv.ParseInt(lo, 10, 32)
	b, err2 := strconv.ParseInt(hi, 10, 32)
	if !ok || err1 != nil || err2 != nil {
		return nil, v, fmt.Errorf("--vocab: expected LO:HI token ids, found %q", f.vocab)
	}
	v = traces.Vocab{Lo: int32(a), Hi: int32(b)}
	if err := v.Validate(); err != nil {
		return nil, v, fmt.Errorf("--vocab: %w", err)
	}
	api, err := replay.ParseAPI(f.api)
	if err != nil {
		return nil, v, fmt.Errorf("--api: %w", err)
	}
	tg, err := replay.NewHTTPTarget(replay.HTTPConfig{
		BaseURL: f.target, API: api, Model: f.model, APIKey: f.apiKey,
		Extra: json.RawMessage(f.extra), ChatText: f.chatText,
	}, replay.WallClock{})
	if err != nil {
		return nil, v, err
	}
	return tg, v, nil
}

// replayOutput is the JSON object of one replay run: the seed's fields,
// cache_hit_rate and failed, and the run's settings.
type replayOutput struct {
	replay.Summary
	Target  string  `json:"target"`
	Model   string  `json:"model,omitempty"`
	Pacing  string  `json:"pacing"`
	Speedup float64 `json:"speedup,omitempty"`
	Seed    uint64  `json:"seed"`
	Version string  `json:"kvsim_version"`
}

func runReplay(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("replay", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() { io.WriteString(stderr, replayUsage); fs.PrintDefaults() }
	var rf replayFlags
	rf.register(fs, 10*time.Minute)
	tracePath := fs.String("trace", "", "trace file (any format kvsim reads)")
	format := fs.String("format", "", "trace format (mooncake, bailian, weka, azure, tokens, kvsim); default: detected")
	rate := fs.Float64("request-rate", math.Inf(1), "requests per second (inf: as fast as possible)")
	dist := fs.String("distribution", "poisson", "arrivals at --request-rate: poisson or uniform")
	seed := fs.Uint64("seed", 1, "seed of the arrival process")
	stamps := fs.Bool("timestamps", false, "send at the trace's arrival times")
	speedup := fs.Float64("speedup", 1, "with --timestamps: divide trace times (and think times) by this")
	maxConc := fs.Int("max-concurrency", 0, "maximum requests in flight (0: no limit)")
	flush := fs.Bool("flush", false, "flush the server's cache (after the warm-up) before measuring")
	warmup := fs.Bool("warmup", true, "send the first record's prompt once before measuring (not measured)")
	outFile := fs.String("output-file", "", "append the run's JSON object to this JSONL file")
	perReq := fs.String("per-request", "", "write every request's measurements as a kvsim trace to this file")
	asJSON := fs.Bool("json", false, "print the run's JSON object instead of the table")
	numPrompts := fs.Int("num-prompts", 0, "replay only the first N records (0: all)")
	drain := fs.Duration("drain", 10*time.Second, "on Ctrl-C, how long requests in flight may finish")
	noEOS := fs.Bool("disable-ignore-eos", false, "send ignore_eos=false")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return exitOK
		}
		return exitUsage
	}
	usageErr := func(format string, a ...any) int {
		fmt.Fprintf(stderr, "kvsim replay: "+format+"\n", a...)
		return exitUsage
	}
	if fs.NArg() > 0 {
		return usageErr("unexpected argument %q", fs.Arg(0))
	}
	if *tracePath == "" {
		return usageErr("--trace is required")
	}
	rateSet := false
	fs.Visit(func(f *flag.Flag) { rateSet = rateSet || f.Name == "request-rate" })
	if *stamps && rateSet {
		return usageErr("--timestamps and --request-rate exclude each other")
	}
	if *numPrompts < 0 {
		return usageErr("--num-prompts: must be >= 0 (got %d)", *numPrompts)
	}
	tg, vocab, err := rf.build()
	if err != nil {
		return usageErr("%v", err)
	}
	defer tg.CloseIdle()
	cfg := replay.Default()
	cfg.Pacing = replay.PaceASAP
	switch {
	case *stamps:
		cfg.Pacing = replay.PaceTimestamps
	case !math.IsInf(*rate, 1):
		cfg.Pacing = replay.PaceRate
	}
	cfg.Rate, cfg.Distribution, cfg.Speedup, cfg.Seed = *rate, *dist, *speedup, *seed
	cfg.MaxConcurrency, cfg.Timeout, cfg.Drain, cfg.Vocab, cfg.DisableIgnoreEOS = *maxConc, rf.timeout, *drain, vocab, *noEOS
	r, err := replay.New(cfg, tg, replay.WallClock{})
	if err != nil {
		return usageErr("%v", err)
	}

	tf := traces.FormatAuto
	if *format != "" {
		if tf, err = traces.ParseFormat(*format); err != nil {
			return usageErr("--format: %v", err)
		}
	}
	recs, err := readRecords(*tracePath, tf, *numPrompts)
	if err != nil {
		fmt.Fprintf(stderr, "kvsim replay: %v\n", err)
		return exitFail
	}
	if len(recs) == 0 {
		fmt.Fprintf(stderr, "kvsim replay: %s: no records\n", *tracePath)
		return exitFail
	}
	if !recs[0].HasPrefixInfo() {
		fmt.Fprintln(stderr, "kvsim replay: note: the trace has no prefix information; every prompt is made of tokens unique to its request")
	}

	ctx, stop := replaySignalContext()
	defer stop()
	info, err := tg.Info(ctx)
	if err != nil {
		fmt.Fprintf(stderr, "kvsim replay: warning: %v\n", err)
	}
	if *warmup {
		w := recs[0]
		w.ID, w.Kind, w.Parent, w.WaitFor, w.OutputLen = "warmup", "warmup", "", nil, min(max(w.OutputLen, 1), 32)
		res, err := r.Run(ctx, []traces.Record{w})
		if err != nil {
			fmt.Fprintf(stderr, "kvsim replay: warm-up: %v\n", err)
			return exitFail
		}
		if wr := res.Requests[0]; !wr.Sent || wr.Failed != "" {
			fmt.Fprintf(stderr, "kvsim replay: warm-up failed (%s %s); check --target and --api\n", cmp.Or(wr.Failed, "interrupted"), wr.Detail)
			return exitFail
		}
	}
	if *flush {
		if err := tg.Flush(ctx); err != nil {
			fmt.Fprintf(stderr, "kvsim replay: %v\n", err)
			return exitFail
		}
	}
	res, err := r.Run(ctx, recs)
	if err != nil {
		fmt.Fprintf(stderr, "kvsim replay: %v\n", err)
		return exitFail
	}
	sum := replay.Summarize(res.Requests)
	sum.Backend = rf.api
	sum.DatasetName = filepath.Base(*tracePath)
	sum.RequestRate = replay.Rate(math.Inf(1))
	if cfg.Pacing == replay.PaceRate {
		sum.RequestRate = replay.Rate(*rate)
	}
	if *maxConc > 0 {
		sum.MaxConcurrency = maxConc
	}
	sum.Interrupted = res.Interrupted
	out := replayOutput{Summary: sum, Target: rf.target, Model: cmp.Or(tg.Model(), info.Model), Pacing: cfg.Pacing.String(), Seed: *seed, Version: version}
	if cfg.Pacing == replay.PaceTimestamps {
		out.Speedup = *speedup
	}
	code := exitOK
	if *perReq != "" {
		if err := writeAtomic(*perReq, func(w io.Writer) error {
			tw, err := traces.NewWriter(w, replay.PerRequestHeader("kvsim replay "+*tracePath+" against "+rf.target, info))
			if err != nil {
				return err
			}
			return replay.WritePerRequest(tw, recs, res)
		}); err != nil {
			fmt.Fprintf(stderr, "kvsim replay: %v\n", err)
			code = exitFail
		}
	}
	if *outFile != "" {
		if err := appendJSONL(*outFile, out); err != nil {
			fmt.Fprintf(stderr, "kvsim replay: %v\n", err)
			code = exitFail
		}
	}
	if *asJSON {
		if err := json.NewEncoder(stdout).Encode(out); err != nil {
			fmt.Fprintf(stderr, "kvsim replay: %v\n", err)
			return exitFail
		}
	} else {
		replay.PrintTable(stdout, replay.TableHeader{Backend: sum.Backend, RequestRate: sum.RequestRate, MaxConcurrency: *maxConc}, &sum)
	}
	switch {
	case res.Interrupted:
		fmt.Fprintf(stderr, "kvsim replay: interrupted: %d requests not sent; partial results written\n", sum.NotSent)
		return exitFail
	case sum.Completed == 0:
		fmt.Fprintf(stderr, "kvsim replay: all %d requests failed: %s\n", sum.Failed, reasonList(sum.FailedReasons))
		return exitFail
	}
	return code
}

// readRecords reads up to n records (0: all) of a trace.
func readRecords(path string, f traces.Format, n int) ([]traces.Record, error) {
	rd, err := traces.Open(path, f)
	if err != nil {
		return nil, err
	}
	defer rd.Close()
	var recs []traces.Record
	for n == 0 || len(recs) < n {
		rec, err := rd.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			return nil, err
		}
		recs = append(recs, rec)
	}
	return recs, nil
}

// appendJSONL appends v as one JSON line to path.
func appendJSONL(path string, v any) error {
	line, err := json.Marshal(v)
	if err != nil {
		return fmt.Errorf("append %s: %w", path, err)
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err != nil {
		return fmt.Errorf("append %s: %w", path, err)
	}
	_, werr := f.Write(append(line, '\n'))
	if cerr := f.Close(); werr == nil {
		werr = cerr
	}
	if werr != nil {
		return fmt.Errorf("append %s: %w", path, werr)
	}
	return nil
}

func reasonList(m map[string]int64) string {
	var parts []string
	for k, v := range m {
		parts = append(parts, fmt.Sprintf("%s x%d", k, v))
	}
	sort.Strings(parts)
	return strings.Join(parts, ", ")
}
