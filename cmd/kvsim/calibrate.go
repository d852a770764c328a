package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"

	"github.com/kvsim/kvsim/configs"
	"github.com/kvsim/kvsim/replay"
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

Fits the fitted cost model (prefill ns = a0 + a1*new + a2*attention_pairs,
decode ns = b0 + b2*context) to a per-request trace of a concurrency-1 replay
(kvsim replay --max-concurrency 1 --per-request F, or kvsim capture of such a
run): each TTFT is a prefill of the prompt's uncached tokens (in chunks of the
server's chunked_prefill_size, from --config), each ITL a decode step at
batch 1. Non-negative least squares (slopes >= 0), relative weights. Prints
R² and MAPE of TTFT and ITL, and writes the [cost] section kvsim loads to
--out (paste it into a config in place of its [cost] section).
See docs/replay.md.
`

func runCalibrate(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("calibrate", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() { io.WriteString(stderr, calibrateUsage); fs.PrintDefaults() }
	perReq := fs.String("per-request", "", "per-request trace of a concurrency-1 replay (or capture)")
	cfgPath := fs.String("config", "", "the measured server's config, for its chunked_prefill_size and page size (default: the bundled default)")
	out := fs.String("out", "", "write the TOML snippet to this file")
	absolute := fs.Bool("absolute", false, "minimise absolute instead of relative errors")
	asJSON := fs.Bool("json", false, "print the fit as JSON instead of text")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return exitOK
		}
		return exitUsage
	}
	usageErr := func(format string, a ...any) int {
		fmt.Fprintf(stderr, "kvsim calibrate: "+format+"\n", a...)
		return exitUsage
	}
	switch {
	case fs.NArg() > 0:
		return usageErr("unexpected argument %q", fs.Arg(0))
	case *perReq == "":
		return usageErr("--per-request is required")
	case *out == "":
		return usageErr("--out is required")
	}
	f := configs.Default()
	if *cfgPath != "" {
		var err error
		if f, err = configs.Load(*cfgPath); err != nil {
			return usageErr("%v", err)
		}
	}
	built, err := f.Build()
	if err != nil {
		return usageErr("%v", err)
	}
	recs, err := readRecords(*perReq, traces.FormatAuto, 0)
	if err != nil {
		fmt.Fprintf(stderr, "kvsim calibrate: %v\n", err)
		return exitFail
	}
	cc := replay.CalibrateConfig{
		ChunkedPrefillSize: built.Sim.Scheduler.ChunkedPrefillSize,
		PageSize:           built.Sim.Cache.PageSize, Relative: !*absolute,
	}
	if cc.PageSize == 0 {
		cc.PageSize = 1
	}
	c, err := replay.Calibrate(recs, cc)
	if err != nil {
		fmt.Fprintf(stderr, "kvsim calibrate: %s: %v\n", *perReq, err)
		return exitFail
	}
	if err := writeAtomic(*out, func(w io.Writer) error { return c.WriteTOML(w, *perReq) }); err != nil {
		fmt.Fprintf(stderr, "kvsim calibrate: %v\n", err)
		return exitFail
	}
	if *asJSON {
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
	fmt.Fprintf(stdout, "wrote %s\n", *out)
	return exitOK
}
