package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/kvsim/kvsim/calibrate"
	"github.com/kvsim/kvsim/configs"
	"github.com/kvsim/kvsim/sim/llamacpp"
	"github.com/kvsim/kvsim/traces"
)

func init() {
	register(&command{
		name:    "calibrate",
		summary: "fit the simulator's fitted cost model to measured per-request results and write the TOML snippet",
		run:     runCalibrate,
	})
}

const calibrateUsage = `usage: kvsim calibrate --per-request F [--config C.toml] --out snippet.toml [--json]
       kvsim calibrate --config LLAMA.toml --gen-trace cal.jsonl [--seed N] [--repeats N] [--vocab LO:HI]
       kvsim calibrate --config LLAMA.toml --per-request F [--per-request F2 ...] [--server-log L ...] --out calibrated.toml [--json]

Fits the fitted cost model (prefill ns = a0 + a1*new + a2*attention_pairs,
decode ns = b0 + b2*context) to a per-request trace of a concurrency-1 replay
(kvsim replay --max-concurrency 1 --per-request F, or kvsim capture of such a
run): each TTFT is a prefill of the prompt's uncached tokens (in chunks of the
server's chunked_prefill_size, from --config), each ITL a decode step at
batch 1. Non-negative least squares (slopes >= 0), relative weights. Prints
R² and MAPE of TTFT and ITL, and writes the [cost] section kvsim loads to
--out (paste it into a config in place of its [cost] section).

With a llama-server config (engine.kind = "llamacpp"), --gen-trace writes the
calibration trace (cold prompts, cached prefixes and full hits one at a time,
then decode batches of 2 to -np requests; every shape repeated), to be
replayed with kvsim replay --max-concurrency NP --per-request F; calibrate
then fits the llama-server CPU cost (prompt call: fixed, per new token, per
causal pair, per byte of slot state saved to and restored from the RAM cache;
decode call: fixed, per generating slot, per context token) to the median
request of each shape, and writes a complete llama-server config (the
--config's server arguments and the fitted [llamacpp.cost]) to --out. Several
--per-request files (runs of the calibration trace against fresh servers,
spread over a session) pool their repeats: the fit then averages the
machine's drift in speed over the session. With the server's log of each run
(--server-log, one per --per-request, same order), the copy rates are measured
from each request's TTFT less the prompt eval time the log gives, instead of
being fitted with the prompt call (where they take up other costs: 0.06-0.60
ns per byte between runs, against the logs' 0.22-0.30; docs/fidelity.md).
See docs/replay.md and docs/fidelity.md.
`

func runCalibrate(args []string, stdout, stderr io.Writer) int {
	fs := newCommand("kvsim calibrate", calibrateUsage, stderr)
	var a calibrateArgs
	fs.Var(&a.perReqs, "per-request", "per-request trace of a concurrency-1 replay (or capture); with a llama-server config, one per run of the calibration trace (repeat the flag: their repeats are pooled)")
	fs.Var(&a.serverLogs, "server-log", "llama-server config: llama-server's `LOG` (default verbosity, with timestamps) of each --per-request run, one per run in the same order (repeat the flag): the copy rates are then measured from each TTFT less the logged prompt eval time instead of fitted with the prompt cost")
	fs.StringVar(&a.cfgPath, "config", "", "the measured server's config, for its chunked_prefill_size and page size (default: the bundled default)")
	fs.StringVar(&a.out, "out", "", "write the TOML snippet to this file")
	fs.BoolVar(&a.absolute, "absolute", false, "minimise absolute instead of relative errors")
	fs.StringVar(&a.genTrace, "gen-trace", "", "llama-server config: write the calibration trace to this file and exit")
	fs.Uint64Var(&a.trace.seed, "seed", 1, "with --gen-trace: seed of the prompts")
	fs.IntVar(&a.trace.repeats, "repeats", 3, "with --gen-trace: measurements of each shape (the fit takes their median)")
	vocab := vocabFlag(traces.Vocab{Lo: 1, Hi: 256})
	fs.Var(&vocab, "vocab", "with --gen-trace: token id range `LO:HI` of the prompts (replay them with the same --vocab)")
	fs.IntVar(&a.trace.tile, "tile", 64, "llama-server config: fit the attention by llama.cpp's kernels, with this tile in rows (64: GGML_FA_TILE_Q of llama.cpp's CPU flash attention): a slot's prompt rows in a micro-batch pay per pair of the tiles computed, or per causal pair below a tile; 0: one cost per causal pair, with the call-size tiers below")
	fs.IntVar(&a.trace.smallCall, "small-call-tokens", 63, "llama-server config with --tile 0: prompts of at most this many new tokens get their own cost per attention pair (0: no such tier; llama.cpp's CPU attention is slow below 64 query tokens)")
	fs.IntVar(&a.trace.mediumCall, "medium-call-tokens", 127, "llama-server config with --tile 0: prompts of more than --small-call-tokens and at most this many new tokens get a second cost per attention pair (0: no such tier; with both 0, one cost for all)")
	fs.DurationVar(&a.trace.requestDelay, "request-delay", 0, "llama-server config: time from a request's send until the server loop sees it (written to the config as request_delay_ns and taken out of every TTFT before the fit; not fitted; default: the --config's request_delay_ns)")
	fs.BoolVar(&a.trace.noAfterPrompt, "no-after-prompt", false, "llama-server config: do not fit the extra time of decode steps after a prompt call (after_prompt_ns 0; the decode fit then spreads it over all steps)")
	fs.BoolVar(&a.asJSON, "json", false, "print the fit as JSON instead of text")
	if code, ok := fs.parse(args); !ok {
		return code
	}
	a.trace.vocab = traces.Vocab(vocab)
	a.set = map[string]bool{}
	fs.Visit(func(fl *flag.Flag) { a.set[fl.Name] = true })
	a.usageErr = fs.usageErr
	f, err := loadConfig(a.cfgPath, "kvsim calibrate fits")
	if err != nil {
		return a.usageErr("%v", err)
	}
	srv, err := f.BuildServer(configs.ServerOptions{NoTimeline: true})
	if err != nil {
		return a.usageErr("%v", err)
	}
	kind := srv.Info().Kind
	fit, ok := calibrators[kind]
	if !ok {
		panic(fmt.Sprintf("kvsim calibrate: no calibration for engine kind %q", kind))
	}
	return fit(&a, f, stdout, stderr)
}

// calibrateArgs are kvsim calibrate's flags, for every server model.
type calibrateArgs struct {
	perReqs, serverLogs    pathsFlag
	cfgPath, out, genTrace string
	absolute, asJSON       bool
	trace                  llamaTraceOpts
	// set holds the flags given on the command line.
	set      map[string]bool
	usageErr func(format string, a ...any) int
}

// A calibrator is one server model's calibration: it checks the flags
// that apply to it and fits that model's cost to the measurements.
type calibrator func(a *calibrateArgs, f *configs.File, stdout, stderr io.Writer) int

// calibrators holds the calibration of each server model, by the engine
// kind the config builds ([configs.File.BuildServer] is the one place
// that reads engine.kind), so kvsim calibrate does not branch on it.
var calibrators = map[string]calibrator{
	"sglang":   calibrateSGLang,
	"llamacpp": calibrateLlamaServer,
}

// calibrateLlamaServer checks the llama-server flags and runs the
// llama-server calibration: the trace with --gen-trace, else the fit.
func calibrateLlamaServer(a *calibrateArgs, f *configs.File, stdout, stderr io.Writer) int {
	o := &a.trace
	if !a.set["request-delay"] {
		o.requestDelay = time.Duration(f.Llama.Cost.Delay)
	}
	switch {
	case o.repeats < 1 || o.repeats > 1000:
		return a.usageErr("--repeats: must be from 1 to 1000 (got %d)", o.repeats)
	case o.tile < 0:
		return a.usageErr("--tile: must be >= 0 (got %d)", o.tile)
	case o.tile > 0 && (a.set["small-call-tokens"] || a.set["medium-call-tokens"]):
		return a.usageErr("--small-call-tokens and --medium-call-tokens are the tiers of --tile 0; the tiles replace them")
	case o.tile > 0:
		o.smallCall, o.mediumCall = 0, 0
	}
	return calibrateLlama(f, a.cfgPath, a.genTrace, a.perReqs, a.serverLogs, a.out, *o, a.asJSON, stdout, stderr)
}

// calibrateSGLang fits the SGLang model's fitted cost ([cost] fitted
// coefficients) to one concurrency-1 per-request trace.
func calibrateSGLang(a *calibrateArgs, f *configs.File, stdout, stderr io.Writer) int {
	usageErr := a.usageErr
	switch {
	case a.genTrace != "":
		return usageErr("--gen-trace: only for a llama-server config (engine.kind = \"llamacpp\")")
	case len(a.serverLogs) > 0:
		return usageErr("--server-log: only for a llama-server config (engine.kind = \"llamacpp\")")
	case len(a.perReqs) == 0:
		return usageErr("--per-request is required")
	case len(a.perReqs) > 1:
		return usageErr("--per-request: one file for an SGLang config (several runs are for a llama-server config)")
	case a.out == "":
		return usageErr("--out is required")
	}
	perReq := &a.perReqs[0]
	built, err := f.Build()
	if err != nil {
		return usageErr("%v", err)
	}
	recs, err := traces.ReadAll(*perReq, traces.FormatAuto, 0)
	if err != nil {
		fmt.Fprintf(stderr, "kvsim calibrate: %v\n", err)
		return exitFail
	}
	cc := calibrate.Config{
		ChunkedPrefillSize: built.Sim.Scheduler.ChunkedPrefillSize,
		PageSize:           built.Sim.Cache.PageSize, Relative: !a.absolute,
	}
	if cc.PageSize == 0 {
		cc.PageSize = 1
	}
	c, err := calibrate.Calibrate(recs, cc)
	if err != nil {
		fmt.Fprintf(stderr, "kvsim calibrate: %s: %v\n", *perReq, err)
		return exitFail
	}
	if err := writeAtomic(a.out, func(w io.Writer) error { return c.WriteTOML(w, *perReq) }); err != nil {
		fmt.Fprintf(stderr, "kvsim calibrate: %v\n", err)
		return exitFail
	}
	if a.asJSON {
		if err := json.NewEncoder(stdout).Encode(c); err != nil {
			fmt.Fprintf(stderr, "kvsim calibrate: %v\n", err)
			return exitFail
		}
		return exitOK
	}
	p, d := c.Fitted.Prefill, c.Fitted.Decode
	fmt.Fprintf(stdout, "prefill ns = %.6g + %.6g*new_tokens + %.6g*attention_pairs   (%d TTFTs: R² %.4f, MAPE %.2f%%)\n",
		p[0], p[1], p[2], c.PrefillSamples, c.PrefillR2, c.TTFTMAPE)
	fmt.Fprintf(stdout, "decode ns  = %.6g + %.6g*context_tokens                     (%d ITLs: R² %.4f, MAPE %.2f%%)\n",
		d[0], d[2], c.DecodeSamples, c.DecodeR2, c.ITLMAPE)
	fmt.Fprintf(stdout, "method: %s (chunked_prefill_size %d, page size %d)\n", c.Method, cc.ChunkedPrefillSize, cc.PageSize)
	fmt.Fprintf(stdout, "wrote %s\n", a.out)
	return exitOK
}

// llamaTraceOpts are the --gen-trace settings.
type llamaTraceOpts struct {
	seed          uint64
	repeats       int
	vocab         traces.Vocab
	smallCall     int           // --small-call-tokens
	mediumCall    int           // --medium-call-tokens
	tile          int           // --tile
	requestDelay  time.Duration // --request-delay
	noAfterPrompt bool          // --no-after-prompt
}

// calibrateLlama is kvsim calibrate for a llama-server config: write the
// calibration trace, or fit the CPU cost to its replay.
func calibrateLlama(f *configs.File, cfgPath, genTrace string, perReqs, serverLogs []string, out string, o llamaTraceOpts, asJSON bool, stdout, stderr io.Writer) int {
	fail := func(err error) int {
		fmt.Fprintf(stderr, "kvsim calibrate: %v\n", err)
		return exitFail
	}
	usageErr := func(msg string) int {
		fmt.Fprintf(stderr, "kvsim calibrate: %s\n", msg)
		return exitUsage
	}
	lb, err := f.BuildLlama()
	if err != nil {
		return usageErr(err.Error())
	}
	cfg := lb.Config
	if genTrace != "" {
		if len(perReqs) > 0 || len(serverLogs) > 0 || out != "" {
			return usageErr("--gen-trace writes the calibration trace only: no --per-request, --server-log or --out")
		}
		return genLlamaTrace(cfg, cfgPath, genTrace, o, stdout, stderr)
	}
	switch {
	case len(perReqs) == 0:
		return usageErr("--per-request is required (or --gen-trace)")
	case out == "":
		return usageErr("--out is required")
	case len(serverLogs) > 0 && len(serverLogs) != len(perReqs):
		return usageErr(fmt.Sprintf("--server-log: %d logs for %d --per-request runs; give one per run, in the same order", len(serverLogs), len(perReqs)))
	}
	var runs [][]traces.Record
	for _, p := range perReqs {
		recs, err := traces.ReadAll(p, traces.FormatAuto, 0)
		if err != nil {
			return fail(err)
		}
		runs = append(runs, recs)
	}
	if o.requestDelay < 0 {
		return usageErr(fmt.Sprintf("--request-delay: must be >= 0 (got %v)", o.requestDelay))
	}
	fit := calibrate.LlamaFit{SmallCall: o.smallCall, MediumCall: o.mediumCall, Tile: o.tile, RequestDelay: o.requestDelay.Nanoseconds(), NoAfterPrompt: o.noAfterPrompt}
	for _, p := range serverLogs {
		tasks, err := readLlamaLog(p)
		if err != nil {
			return fail(err)
		}
		fit.Logs = append(fit.Logs, tasks)
		fit.LogNames = append(fit.LogNames, p)
	}
	c, err := calibrate.FitLlamaRuns(runs, cfg, fit)
	if err != nil {
		names := strings.Join(perReqs, ", ")
		if len(serverLogs) > 0 {
			names += " with " + strings.Join(serverLogs, ", ")
		}
		return fail(fmt.Errorf("%s: %w", names, err))
	}
	source := strings.Join(perReqs, " ")
	if len(serverLogs) > 0 {
		source += " with the server logs " + strings.Join(serverLogs, " ")
	}
	if err := writeAtomic(out, func(w io.Writer) error { return c.WriteLlamaTOML(w, cfg, source) }); err != nil {
		return fail(err)
	}
	if asJSON {
		if err := json.NewEncoder(stdout).Encode(c); err != nil {
			return fail(err)
		}
		return exitOK
	}
	printLlamaFit(stdout, c, cfg)
	fmt.Fprintf(stdout, "wrote %s\n", out)
	return exitOK
}

// readLlamaLog reads the tasks of a llama-server log file.
func readLlamaLog(path string) ([]calibrate.LlamaLogTask, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return calibrate.ReadLlamaServerLog(f, path)
}

// genLlamaTrace writes the llama-server calibration trace for cfg's slots
// to path (--gen-trace) and says how to replay it.
func genLlamaTrace(cfg llamacpp.Config, cfgPath, path string, o llamaTraceOpts, stdout, stderr io.Writer) int {
	recs, err := calibrate.LlamaCalibrationTrace(calibrate.LlamaCalibrationConfig{
		Slots: cfg.Slots, SlotContext: cfg.SlotContext(), Repeats: o.repeats, Seed: o.seed, Vocab: o.vocab,
	})
	if err != nil {
		fmt.Fprintf(stderr, "kvsim calibrate: %v\n", err)
		return exitUsage
	}
	hdr := traces.Header{Format: "kvsim", Source: fmt.Sprintf("kvsim calibrate --config %s --gen-trace --seed %d --repeats %d --vocab %s", cfgPath, o.seed, o.repeats, o.vocab)}
	if err := writeAtomic(path, func(w io.Writer) error { return writeRecords(w, hdr, recs) }); err != nil {
		fmt.Fprintf(stderr, "kvsim calibrate: %v\n", err)
		return exitFail
	}
	fmt.Fprintf(stdout, "wrote %s: %d requests; replay it with --max-concurrency %d --vocab %s --per-request F, then kvsim calibrate --config %s --per-request F --out calibrated.toml\n",
		path, len(recs), cfg.Slots, o.vocab, cfgPath)
	return exitOK
}

// printLlamaFit prints a llama-server fit as formulas, with how well they
// fit.
func printLlamaFit(stdout io.Writer, c *calibrate.LlamaCalibration, cfg llamacpp.Config) {
	p, d := c.Cost.Prefill, c.Cost.Decode
	pairs := "causal_pairs"
	if c.Cost.Tile > 0 {
		pairs = "tiled_pairs"
	}
	fmt.Fprintf(stdout, "prompt call ns = %.6g + %.6g*new_tokens + %.6g*%s, after %.4g*state_bytes_saved + %.4g*state_bytes_saved_beyond_high_water + %.4g*state_bytes_restored   (%d requests alone, %d shapes: MAPE %.2f%% on medians, %.2f%% on all)\n",
		p[0], p[1], p[2], pairs, c.Cost.StateCopy, c.Cost.StateFresh, c.Cost.StateRestore, c.PrefillSamples, c.PrefillShapes, c.PrefillMAPE, c.PrefillMAPEAll)
	if c.Cost.SmallCall > 0 {
		fmt.Fprintf(stdout, "                 with %.6g*causal_pairs instead in a call of at most %d tokens\n", c.Cost.SmallPair, c.Cost.SmallCall)
	}
	if c.Cost.Tile > 0 {
		fmt.Fprintf(stdout, "                 tiled_pairs: those of the %dx%d blocks llama.cpp's tiled kernel computes; a slot's prompt rows in a micro-batch of fewer than %d pay %.6g*causal_pairs instead\n", c.Cost.Tile, c.Cost.Tile, c.Cost.Tile, c.Cost.ShortPair)
	}
	if c.Cost.MediumCall > 0 {
		fmt.Fprintf(stdout, "                 with %.6g*causal_pairs instead in a call of %d to %d tokens\n", c.Cost.MediumPair, c.Cost.SmallCall+1, c.Cost.MediumCall)
	}
	fmt.Fprintf(stdout, "decode call ns = %.6g + %.6g*slots + %.6g*context_tokens      (%d requests, %d shapes, batch up to %.2f: MAPE %.2f%% on medians, %.2f%% on all)\n",
		d[0], d[1], d[2], c.DecodeSamples, c.DecodeShapes, c.MaxBatch, c.DecodeMAPE, c.DecodeMAPEAll)
	if c.CopySamples > 0 {
		fmt.Fprintf(stdout, "copies (server logs): TTFT - prompt eval ns = %.6g + %.4g*state_bytes_copied + %.4g*state_bytes_saved_beyond_high_water   (%d requests alone, %d shapes: MAPE %.2f%% on medians)\n",
			c.CopyOtherNs, c.Cost.StateCopy, c.Cost.StateFresh, c.CopySamples, c.CopyShapes, c.CopyMAPE)
	}
	if len(c.Cost.AfterPromptCurve) > 0 {
		fmt.Fprintf(stdout, "after a prompt call: a decode-only call j calls later takes ns*decay^(j-1) more, by its context   (%d steps)\n", c.AfterPromptSteps)
		for i, p := range c.Cost.AfterPromptCurve {
			b := c.AfterPromptBins[i]
			extra := make([]string, len(b.Extra))
			for k, e := range b.Extra {
				extra[k] = fmt.Sprintf("%.3g", e/1e6)
			}
			fmt.Fprintf(stdout, "  %5d context tokens: %.6g*%.3g^(j-1) ns   (%d steps of %d-%d tokens; median extras at j = 1-%d: %s ms)\n",
				p.Context, p.Ns, p.Decay, b.Steps, b.From, b.To-1, len(extra), strings.Join(extra, ", "))
		}
	}
	fmt.Fprintf(stdout, "method: %s (-b %d)\n", c.Method, cfg.Batch)
}
