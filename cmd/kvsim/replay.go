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
	"net/http"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/kvsim/kvsim/configs"
	"github.com/kvsim/kvsim/internal/atomicfile"
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

const replayUsage = `usage: kvsim replay --trace FILE --target URL|sim [--config F.toml] [--format F] [--api sglang|openai|openai-chat]
                    [--request-rate R | --timestamps [--speedup X]] [--max-concurrency N]
                    [--flush] [--output-file F] [--per-request F] [--json] [--timeout D]
                    [--extra-request-body JSON] [--num-prompts N]

Sends every request of the trace to the server at URL, streaming, or to the
simulator described by --config in virtual time (--target sim), and prints
SGLang's serving-benchmark metrics. Pacing: as fast as possible (default),
--request-rate R (seeded Poisson or uniform arrivals), or --timestamps (the
trace's arrival times divided by --speedup). A turn that names a parent
waits for it. Ctrl-C stops sending and writes what was measured.
See docs/replay.md.
`

// replaySignalContext returns the context that SIGINT/SIGTERM cancel; tests
// replace it.
var replaySignalContext = interruptContext

// replayFlags are the flags shared by replay and bench.
type replayFlags struct {
	target, api, model, apiKey, extra, chatText string
	timeout                                     time.Duration
	vocab                                       string
	noKeepAlive                                 bool
}

func (f *replayFlags) register(fs *flag.FlagSet, defaultTimeout time.Duration) {
	fs.StringVar(&f.target, "target", "", "server base URL, e.g. http://127.0.0.1:30000, or sim (the in-process simulator, with --config)")
	fs.StringVar(&f.api, "api", "sglang", "API: sglang (/generate), openai (/v1/completions), openai-chat (/v1/chat/completions)")
	fs.StringVar(&f.model, "model", "", "model name for the OpenAI APIs (default: the first of /v1/models)")
	fs.StringVar(&f.apiKey, "api-key", "", "bearer token to send, if the server wants one")
	fs.StringVar(&f.extra, "extra-request-body", "", "JSON object whose fields are added to every request body")
	fs.StringVar(&f.chatText, "chat-text", "", "openai-chat only: 'words' sends each token id as an English word")
	fs.DurationVar(&f.timeout, "timeout", defaultTimeout, "per-request timeout, from send to the end of the stream (0: none)")
	fs.StringVar(&f.vocab, "vocab", "", "token id range LO:HI of synthesised prompts (default: "+traces.DefaultVocab.String()+", cut to the server's vocabulary when it reports one)")
	fs.BoolVar(&f.noKeepAlive, "no-keep-alive", false, "open a new connection for every request (a request that meets a connection the server has closed is resent on a fresh one anyway)")
}

// validate checks the flags whatever the target (the simulator ignores
// some of them, but a typo in them is still a typo).
func (f *replayFlags) validate() error {
	var errs []error
	if _, err := replay.ParseAPI(f.api); err != nil {
		errs = append(errs, fmt.Errorf("--api: %w", err))
	}
	if f.extra != "" {
		var m map[string]json.RawMessage
		if err := json.Unmarshal([]byte(f.extra), &m); err != nil || m == nil {
			errs = append(errs, fmt.Errorf("--extra-request-body: expected a JSON object, found %q", f.extra))
		}
	}
	if f.timeout < 0 {
		errs = append(errs, fmt.Errorf("--timeout: must be >= 0, 0 for none (got %v)", f.timeout))
	}
	if _, err := f.parseVocab(); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// parseVocab parses --vocab.
func (f *replayFlags) parseVocab() (traces.Vocab, error) {
	var v traces.Vocab
	if f.vocab == "" {
		return traces.DefaultVocab, nil
	}
	lo, hi, ok := strings.Cut(f.vocab, ":")
	a, err1 := strconv.ParseInt(lo, 10, 32)
	b, err2 := strconv.ParseInt(hi, 10, 32)
	if !ok || err1 != nil || err2 != nil {
		return v, fmt.Errorf("--vocab: expected LO:HI token ids, found %q", f.vocab)
	}
	v = traces.Vocab{Lo: int32(a), Hi: int32(b)}
	if err := v.Validate(); err != nil {
		return v, fmt.Errorf("--vocab: %w", err)
	}
	return v, nil
}

// fitVocab returns the id range for synthesised prompts: --vocab when it
// was given, else the default cut to the vocabulary the server reports
// (llama-server's n_vocab), saying so on stderr. learned reports whether
// the server's vocabulary is known.
func (f *replayFlags) fitVocab(v traces.Vocab, info replay.Info, stderr io.Writer, prog string, announce bool) (fitted traces.Vocab, learned bool) {
	if f.vocab != "" || info.VocabSize <= 0 {
		return v, f.vocab != ""
	}
	n := int32(min(info.VocabSize, math.MaxInt32))
	if v.Hi > n {
		v = traces.Vocab{Lo: min(v.Lo, n/4), Hi: n}
		if announce {
			fmt.Fprintf(stderr, "%s: the server's vocabulary has %d token ids: synthesised prompts use ids %s (--vocab sets them)\n", prog, n, v)
		}
	}
	return v, true
}

// tokensInVocab checks the trace's own prompt ids against the server's
// vocabulary of n ids (0: unknown), so that a trace made for another model
// fails before anything is sent, with the way out. A streamed trace is
// read again for it.
func (j *replayJob) tokensInVocab(n int) error {
	if n <= 0 {
		return nil
	}
	if j.streamed {
		return j.scan(func(rec *traces.Record) error { return recordInVocab(j.tracePath, rec, n) })
	}
	for i := range j.recs {
		if err := recordInVocab(j.tracePath, &j.recs[i], n); err != nil {
			return err
		}
	}
	return nil
}

// recordInVocab checks one record's prompt ids against a vocabulary of n
// ids.
func recordInVocab(path string, rec *traces.Record, n int) error {
	for _, id := range rec.Tokens {
		if int(id) >= n || id < 0 {
			return fmt.Errorf("%s: request %q: token id %d is outside the server's vocabulary of %d ids (0 to %d); a trace made by kvsim trace gen takes its ids from its --vocab (default %s): make it again with --vocab %d:%d",
				path, rec.ID, id, n, n-1, traces.DefaultVocab, min(traces.DefaultVocab.Lo, int32(n/4)), n)
		}
	}
	return nil
}

// tokenRefusals counts the requests a server refused with 400 for their
// token ids (llama-server: "Prompt contains invalid tokens"; vLLM: "Token
// id N is out of vocabulary"), not for their length or anything else.
func tokenRefusals(rs []replay.RequestResult) int {
	n := 0
	for _, r := range rs {
		d := strings.ToLower(r.Detail)
		if r.Failed == "http 400" && (strings.Contains(d, "invalid token") || strings.Contains(d, "vocab")) {
			n++
		}
	}
	return n
}

// synthesised reports whether some record's prompt ids are synthesised
// (it has no token ids of its own).
func synthesised(recs []traces.Record) bool {
	for i := range recs {
		if recs[i].Tokens == nil {
			return true
		}
	}
	return false
}

// vocabHint is added to a 400 answer to a synthesised prompt when the
// server's vocabulary is not known.
func vocabHint(v traces.Vocab) string {
	return fmt.Sprintf("; the prompt's token ids were synthesised in %s and the server did not report its vocabulary: if the model's is smaller, give --vocab LO:HI inside it", v)
}

// traceVocabHint is added to a 400 answer to a prompt of the trace's own
// ids when the server's vocabulary is not known.
const traceVocabHint = "; if the server refused the prompt's token ids, they may be outside its model's vocabulary: a trace made by kvsim trace gen takes its ids from its --vocab (default 1000:30000)"

// build checks the flags and returns the HTTP target; a non-empty usage
// message means a usage error.
func (f *replayFlags) build() (*replay.HTTPTarget, traces.Vocab, error) {
	var v traces.Vocab
	if f.target == "" {
		return nil, v, errors.New("--target is required")
	}
	if f.target == "sim" {
		return nil, v, errors.New("--target sim: this command needs a server URL (kvsim replay --target sim, or kvsim serve for an HTTP simulator)")
	}
	v, err := f.parseVocab()
	if err != nil {
		return nil, v, err
	}
	api, err := replay.ParseAPI(f.api)
	if err != nil {
		return nil, v, fmt.Errorf("--api: %w", err)
	}
	hc := replay.HTTPConfig{
		BaseURL: f.target, API: api, Model: f.model, APIKey: f.apiKey,
		Extra: json.RawMessage(f.extra), ChatText: f.chatText,
	}
	if f.noKeepAlive {
		// A connection per request costs ~0.1 ms on loopback.
		hc.Client = &http.Client{Transport: &http.Transport{DisableKeepAlives: true, DisableCompression: true, Proxy: nil}}
	}
	tg, err := replay.NewHTTPTarget(hc, replay.WallClock{})
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

// replayTarget is what a replay needs of its target.
type replayTarget interface {
	replay.Target
	replay.Flusher
	replay.Describer
}

// simTarget builds the in-process simulator target from a config file
// ("" = the bundled default): one simulated server, or, for a fleet file,
// the whole fleet behind its router as one engine, as kvsim serve runs it.
func simTarget(cfgPath string) (*replay.SimTarget, error) {
	f, err := loadFile(cfgPath)
	if err != nil {
		return nil, err
	}
	if f.IsFleet() {
		sc, _, err := fleetEngine(f, cfgPath)
		if err != nil {
			return nil, err
		}
		return replay.NewSimTarget(sc)
	}
	// The target measures every request from its events: it reads no
	// timeline (nor results) of the engine's, so none is sampled.
	srv, err := f.BuildServer(configs.ServerOptions{NoTimeline: true})
	if err != nil {
		return nil, err
	}
	return replay.NewSimTarget(replay.SimConfig{Engine: srv.Factory, Model: srv.Model, TraceOutputs: srv.TraceOutputs})
}

// fleetEngine builds a fleet file's whole fleet behind its router as one
// simulated server, for kvsim serve and the in-process target of replay,
// compare and bench. Its requests' outputs come from the trace when every
// replica's model echoes them (llama-server replicas; see
// replay.SimConfig.TraceOutputs).
func fleetEngine(f *configs.File, path string) (replay.SimConfig, *configs.FleetBuilt, error) {
	b, err := f.BuildFleet(configs.ServerOptions{NoTimeline: true}, 0)
	if err != nil {
		return replay.SimConfig{}, nil, fmt.Errorf("%s: %w", path, err)
	}
	echo := true
	for _, s := range b.Servers {
		echo = echo && s.TraceOutputs
	}
	return replay.SimConfig{Engine: b.Factory, Model: b.Groups[0].File.Model.Name, TraceOutputs: echo}, b, nil
}

// replayJob is one replay run: the flags of kvsim replay, parsed.
type replayJob struct {
	rf                replayFlags
	cfgPath           string
	tracePath, format string
	rate              float64
	dist              string
	seed              uint64
	stamps            bool
	speedup           float64
	maxConc           int
	sendGap           time.Duration
	flush, warmup     bool
	numPrompts        int
	drain             time.Duration
	noEOS             bool
	gapCap            time.Duration // --idle-gap-cap (kvsim replay only)
	gapCut            *traces.GapCut
	rateSet           bool
	cfg               replay.Config
	vocab             traces.Vocab
	tf                traces.Format
	recs              []traces.Record // the trace, unless it is streamed
	first             traces.Record   // its first record
	synth             bool            // some record's prompt ids are synthesised
	// streamable lets check stream the trace (kvsim replay): the file is
	// read once ahead for the checks, then again as the run goes, and
	// the measured run writes perReq as requests finish (replaystream.go).
	streamable bool
	streamed   bool
	perReq     string
	dupErr     error // a repeated record ID, found by the read ahead
}

// register adds the flags of a replay run (target flags included).
func (j *replayJob) register(fs *flag.FlagSet) {
	j.rf.register(fs, 10*time.Minute)
	fs.StringVar(&j.cfgPath, "config", "", "with --target sim: the simulated server (TOML; default: the bundled configs/default.toml)")
	fs.StringVar(&j.tracePath, "trace", "", "trace file (any format kvsim reads)")
	fs.StringVar(&j.format, "format", "", "trace format (mooncake, bailian, weka, azure, tokens, kvsim); default: detected")
	fs.Float64Var(&j.rate, "request-rate", math.Inf(1), "requests per second (inf: as fast as possible)")
	fs.StringVar(&j.dist, "distribution", "poisson", "arrivals at --request-rate: poisson or uniform")
	fs.Uint64Var(&j.seed, "seed", 1, "seed of the arrival process")
	fs.BoolVar(&j.stamps, "timestamps", false, "send at the trace's arrival times")
	fs.Float64Var(&j.speedup, "speedup", 1, "with --timestamps: divide trace times (and think times) by this")
	fs.IntVar(&j.maxConc, "max-concurrency", 0, "maximum requests in flight (0: no limit)")
	fs.DurationVar(&j.sendGap, "send-gap", 0, "least time between two sends, so that requests due together reach the server in a known order (0: none)")
	fs.BoolVar(&j.flush, "flush", false, "flush the server's cache (after the warm-up) before measuring")
	fs.BoolVar(&j.warmup, "warmup", true, "send the first record's prompt once before measuring (not measured)")
	fs.IntVar(&j.numPrompts, "num-prompts", 0, "replay only the first N records (0: all)")
	fs.DurationVar(&j.drain, "drain", 10*time.Second, "on Ctrl-C, how long requests in flight may finish")
	fs.BoolVar(&j.noEOS, "disable-ignore-eos", false, "send ignore_eos=false")
}

// check validates the parsed flags (needTarget: --target must be given)
// and reads the trace. A usage error is returned as errUsage-wrapped.
func (j *replayJob) check(fs *flag.FlagSet, needTarget bool) (usage error, fail error) {
	fs.Visit(func(f *flag.Flag) { j.rateSet = j.rateSet || f.Name == "request-rate" })
	switch {
	case j.tracePath == "":
		return errors.New("--trace is required"), nil
	case j.stamps && j.rateSet:
		return errors.New("--timestamps and --request-rate exclude each other"), nil
	case j.numPrompts < 0:
		return fmt.Errorf("--num-prompts: must be >= 0 (got %d)", j.numPrompts), nil
	case needTarget && j.rf.target == "":
		return errors.New("--target is required"), nil
	case j.cfgPath != "" && needTarget && j.rf.target != "sim":
		return errors.New("--config describes the simulated server: use it with --target sim"), nil
	}
	if err := j.rf.validate(); err != nil {
		return err, nil
	}
	v, _ := j.rf.parseVocab()
	j.vocab = v
	cfg := replay.Default()
	cfg.Pacing = replay.PaceASAP
	switch {
	case j.stamps:
		cfg.Pacing = replay.PaceTimestamps
	case !math.IsInf(j.rate, 1):
		cfg.Pacing = replay.PaceRate
	}
	cfg.Rate, cfg.Distribution, cfg.Speedup, cfg.Seed = j.rate, j.dist, j.speedup, j.seed
	cfg.MaxConcurrency, cfg.Timeout, cfg.Drain, cfg.Vocab, cfg.DisableIgnoreEOS = j.maxConc, j.rf.timeout, j.drain, v, j.noEOS
	cfg.SendGap = j.sendGap
	if err := cfg.Validate(); err != nil {
		return err, nil
	}
	j.cfg = cfg
	tf := traces.FormatAuto
	if j.format != "" {
		var err error
		if tf, err = traces.ParseFormat(j.format); err != nil {
			return fmt.Errorf("--format: %v", err), nil
		}
	}
	j.tf = tf
	if j.streamable && j.gapCap == 0 && rereadable(j.tracePath) {
		return nil, j.prescan()
	}
	recs, err := traces.ReadAll(j.tracePath, tf, j.numPrompts)
	if err != nil {
		return nil, err
	}
	if len(recs) == 0 {
		return nil, fmt.Errorf("%s: no records", j.tracePath)
	}
	if j.gapCap < 0 {
		return fmt.Errorf("--idle-gap-cap: must be >= 0 (got %v)", j.gapCap), nil
	}
	if j.gapCap > 0 {
		cut, err := traces.CapIdleGaps(recs, int64(j.gapCap))
		if err != nil {
			return nil, err
		}
		j.gapCut = &cut
	}
	j.recs = recs
	j.first, j.synth = recs[0], synthesised(recs)
	return nil, nil
}

// target builds the target named by --target: "sim" or a URL.
func (j *replayJob) target(name string) (replayTarget, func(), error) {
	if name == "sim" {
		st, err := simTarget(j.cfgPath)
		if err != nil {
			return nil, nil, err
		}
		return st, func() {}, nil
	}
	rf := j.rf
	rf.target = name
	tg, _, err := rf.build()
	if err != nil {
		return nil, nil, err
	}
	return tg, tg.CloseIdle, nil
}

// replayRun is what one run produced.
type replayRun struct {
	res         *replay.Result // nil when the trace was streamed
	sum         replay.Summary
	interrupted bool
	out         replayOutput
	info        replay.Info
	// perReqDone: --per-request was written as the run went (perReqErr
	// says whether it failed).
	perReqDone bool
	perReqErr  error
}

// run does the warm-up, the flush and the measured run against tg, and
// summarises it. name is the target as given (a URL or "sim").
func (j *replayJob) run(ctx context.Context, tg replayTarget, name string, stderr io.Writer, prog string) (*replayRun, error) {
	r, err := replay.New(j.cfg, tg, replay.WallClock{})
	if err != nil {
		return nil, err
	}
	info, err := tg.Info(ctx)
	if err != nil {
		fmt.Fprintf(stderr, "%s: warning: %v\n", prog, err)
	}
	vocabKnown, vocab := true, j.cfg.Vocab
	if name != "sim" {
		cfg := j.cfg
		cfg.Vocab, vocabKnown = j.rf.fitVocab(cfg.Vocab, info, stderr, prog, j.synth)
		vocab = cfg.Vocab
		if err := j.tokensInVocab(info.VocabSize); err != nil {
			return nil, err
		}
		if cfg.Vocab != j.cfg.Vocab {
			if r, err = replay.New(cfg, tg, replay.WallClock{}); err != nil {
				return nil, err
			}
		}
	}
	if j.warmup {
		w := j.first
		w.ID, w.Kind, w.Parent, w.WaitFor, w.OutputLen = "warmup", "warmup", "", nil, min(max(w.OutputLen, 1), 32)
		res, err := r.Run(ctx, []traces.Record{w})
		if err != nil {
			return nil, fmt.Errorf("warm-up: %w", err)
		}
		if wr := res.Requests[0]; !wr.Sent || wr.Failed != "" {
			hint := "; check --target and --api"
			switch {
			case wr.Failed != "http 400" || vocabKnown || tokenRefusals(res.Requests) == 0:
			case w.Tokens == nil:
				hint = vocabHint(vocab)
			default:
				hint = traceVocabHint + hint
			}
			return nil, fmt.Errorf("warm-up failed (%s %s)%s", cmp.Or(wr.Failed, "interrupted"), wr.Detail, hint)
		}
	}
	if j.flush {
		if err := tg.Flush(ctx); err != nil {
			return nil, err
		}
	}
	run := &replayRun{info: info}
	var refused int
	if j.streamed {
		err = j.runStreamed(ctx, r, name, run, &refused)
	} else {
		run.res, err = r.Run(ctx, j.recs)
		if err == nil {
			run.sum, run.interrupted = replay.Summarize(run.res.Requests), run.res.Interrupted
			refused = tokenRefusals(run.res.Requests)
		}
	}
	if err != nil {
		return nil, err
	}
	sum := run.sum
	if refused > 0 && !vocabKnown && j.synth {
		fmt.Fprintf(stderr, "%s: warning: the server refused %d requests' token ids (http 400)%s\n", prog, refused, vocabHint(vocab))
	}
	sum.Backend = j.rf.api
	if name == "sim" {
		sum.Backend = "sim"
	}
	sum.DatasetName = filepath.Base(j.tracePath)
	sum.RequestRate = replay.Rate(math.Inf(1))
	if j.cfg.Pacing == replay.PaceRate {
		sum.RequestRate = replay.Rate(j.rate)
	}
	if j.maxConc > 0 {
		mc := j.maxConc
		sum.MaxConcurrency = &mc
	}
	sum.Interrupted = run.interrupted
	model := info.Model
	if h, ok := tg.(*replay.HTTPTarget); ok {
		model = cmp.Or(h.Model(), info.Model)
	}
	out := replayOutput{Summary: sum, Target: name, Model: model, Pacing: j.cfg.Pacing.String(), Seed: j.seed, Version: version}
	if j.cfg.Pacing == replay.PaceTimestamps {
		out.Speedup = j.speedup
	}
	run.out = out
	return run, nil
}

// writePerRequest writes a run's per-request trace.
func (j *replayJob) writePerRequest(path, name string, run *replayRun) error {
	return writeAtomic(path, func(w io.Writer) error {
		tw, err := traces.NewWriter(w, replay.PerRequestHeader("kvsim replay "+j.tracePath+" against "+name, run.info))
		if err != nil {
			return err
		}
		return replay.WritePerRequest(tw, j.recs, run.res)
	})
}

func runReplay(args []string, stdout, stderr io.Writer) int {
	fs := newCommand("kvsim replay", replayUsage, stderr)
	j := replayJob{streamable: true}
	j.register(fs.FlagSet)
	durationVar(fs.FlagSet, &j.gapCap, "idle-gap-cap", 0, "cut every gap between consecutive request starts of a session family longer than this to it, shifting later times left (0: none)")
	outFile := fs.String("output-file", "", "append the run's JSON object to this JSONL file")
	perReq := fs.String("per-request", "", "write every request's measurements as a kvsim trace to this file")
	asJSON := fs.Bool("json", false, "print the run's JSON object instead of the table")
	if code, ok := fs.parse(args); !ok {
		return code
	}
	uerr, ferr := j.check(fs.FlagSet, true)
	if uerr == nil {
		if err := outputDirExists(*perReq); err != nil {
			uerr = fmt.Errorf("--per-request: %w", err)
		}
	}
	j.perReq = *perReq
	if uerr != nil {
		fmt.Fprintf(stderr, "kvsim replay: %v\n", uerr)
		return exitUsage
	}
	if ferr != nil {
		fmt.Fprintf(stderr, "kvsim replay: %v\n", ferr)
		return exitFail
	}
	tg, closeTarget, err := j.target(j.rf.target)
	if err != nil {
		fmt.Fprintf(stderr, "kvsim replay: %v\n", err)
		return exitUsage
	}
	defer closeTarget()
	if j.gapCut != nil {
		fmt.Fprintf(stderr, "kvsim replay: %s\n", gapCutNote(*j.gapCut))
	}
	if !j.first.HasPrefixInfo() {
		fmt.Fprintln(stderr, "kvsim replay: note: the trace has no prefix information; every prompt is made of tokens unique to its request")
	}

	ctx, stop := replaySignalContext()
	defer stop()
	run, err := j.run(ctx, tg, j.rf.target, stderr, "kvsim replay")
	if err != nil {
		fmt.Fprintf(stderr, "kvsim replay: %v\n", err)
		return exitFail
	}
	sum, out := &run.out.Summary, run.out
	code := exitOK
	if *perReq != "" {
		err := run.perReqErr
		if !run.perReqDone {
			err = j.writePerRequest(*perReq, j.rf.target, run)
		}
		if err != nil {
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
		replay.PrintTable(stdout, replay.TableHeader{Backend: sum.Backend, RequestRate: sum.RequestRate, MaxConcurrency: j.maxConc}, sum)
	}
	switch {
	case run.interrupted:
		fmt.Fprintf(stderr, "kvsim replay: interrupted: %d requests not sent; partial results written\n", sum.NotSent)
		return exitFail
	case sum.Completed == 0:
		fmt.Fprintf(stderr, "kvsim replay: all %d requests failed: %s\n", sum.Failed, reasonList(sum.FailedReasons))
		return exitFail
	}
	return code
}

// appendJSONL appends v as one JSON line to path. The file keeps whole
// lines only (internal/atomicfile.Lines): a line that does not fit is cut
// off and the error names the path.
func appendJSONL(path string, v any) error {
	line, err := json.Marshal(v)
	if err != nil {
		return fmt.Errorf("append %s: %w", path, err)
	}
	l, err := atomicfile.AppendLines(path)
	if err != nil {
		return err
	}
	_, werr := l.Write(append(line, '\n'))
	if cerr := l.Close(); werr == nil {
		werr = cerr
	}
	return werr
}

func reasonList(m map[string]int64) string {
	var parts []string
	for k, v := range m {
		parts = append(parts, fmt.Sprintf("%s x%d", k, v))
	}
	sort.Strings(parts)
	return strings.Join(parts, ", ")
}
