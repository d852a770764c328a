package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"strings"

	"github.com/kvsim/kvsim/replay"
)

func init() {
	register(&command{
		name:    "compare",
		summary: "replay a trace against a server and the simulator and put them side by side (or compare two per-request traces)",
		run:     runCompare,
	})
}

const compareUsage = `usage: kvsim compare --trace T --url URL [--config C.toml] [flags of replay]
       kvsim compare --measured F [--measured F2 ...] --predicted F

Replays the trace against the server at URL (measured) and against the
simulator of --config (predicted) with the same pacing, prints every metric
of both side by side with its relative error, the per-request TTFT and E2E
MAPE and Pearson r, and the cache hit rate difference in percentage points;
--json prints one object instead. With --measured and --predicted it compares
two per-request traces (kvsim replay --per-request, kvsim capture) offline.
Given --measured several times (runs of the same trace against fresh
servers), it compares the prediction with the per-request median of the
runs and also prints the runs' own disagreement, each run against the
median of the others: the noise floor of the comparison.
Exits 1 when the TTFT MAPE or the hit rate difference passes its threshold.
See docs/replay.md.
`

// compareOutput is compare's JSON object.
type compareOutput struct {
	replay.Comparison
	MeasuredFrom  string   `json:"measured_from"`
	PredictedFrom string   `json:"predicted_from"`
	MaxTTFTMAPE   float64  `json:"max_ttft_mape_pct"`
	MaxHitRatePP  float64  `json:"max_hit_rate_pp"`
	Pass          bool     `json:"pass"`
	Violations    []string `json:"violations"`
	Version       string   `json:"kvsim_version"`
}

// pathsFlag is a flag that may be given several times; each gives one path.
type pathsFlag []string

func (p *pathsFlag) String() string { return strings.Join(*p, ",") }
func (p *pathsFlag) Set(s string) error {
	if s == "" {
		return errors.New("empty path")
	}
	*p = append(*p, s)
	return nil
}

func runCompare(args []string, stdout, stderr io.Writer) int {
	fs := newCommand("kvsim compare", compareUsage, stderr)
	var j replayJob
	j.register(fs.FlagSet)
	url := fs.String("url", "", "the server's base URL (measured)")
	var measuredPaths pathsFlag
	fs.Var(&measuredPaths, "measured", "offline: a per-request trace of the server; repeat it for several runs (compared by their per-request median)")
	predictedPath := fs.String("predicted", "", "offline: a per-request trace of the simulator")
	saveMeasured := fs.String("save-measured", "", "write the server's per-request trace to this file")
	savePredicted := fs.String("save-predicted", "", "write the simulator's per-request trace to this file")
	maxMAPE := fs.Float64("max-ttft-mape", 15, "fail (exit 1) when the per-request TTFT MAPE is above this, in percent")
	maxPP := fs.Float64("max-hit-rate-pp", 5, "fail (exit 1) when the hit rates differ by more than this many percentage points")
	asJSON := fs.Bool("json", false, "print one JSON object instead of the table")
	if code, ok := fs.parse(args); !ok {
		return code
	}
	usageErr := fs.usageErr
	fail := func(err error) int {
		fmt.Fprintf(stderr, "kvsim compare: %v\n", err)
		return exitFail
	}
	if !(*maxMAPE >= 0) || !(*maxPP >= 0) {
		return usageErr("--max-ttft-mape and --max-hit-rate-pp must be >= 0")
	}
	offline := len(measuredPaths) > 0 || *predictedPath != ""
	var measured [][]replay.RequestResult
	var predicted []replay.RequestResult
	out := compareOutput{MaxTTFTMAPE: *maxMAPE, MaxHitRatePP: *maxPP, Version: version}
	if offline {
		if len(measuredPaths) == 0 || *predictedPath == "" || *url != "" || j.rf.target != "" {
			return usageErr("offline: give both --measured and --predicted, and no --url or --target")
		}
		for _, path := range measuredPaths {
			res, err := replay.ReadResults(path)
			if err != nil {
				return fail(err)
			}
			measured = append(measured, res)
		}
		var err error
		if predicted, err = replay.ReadResults(*predictedPath); err != nil {
			return fail(err)
		}
		out.MeasuredFrom, out.PredictedFrom = strings.Join(measuredPaths, ","), *predictedPath
	} else {
		if *url == "" {
			return usageErr("--url is required (or --measured and --predicted)")
		}
		if j.rf.target != "" {
			return usageErr("--target: compare replays against --url and the simulator; use --url")
		}
		j.rf.target = *url
		uerr, ferr := j.check(fs.FlagSet, false)
		if uerr != nil {
			return usageErr("%v", uerr)
		}
		if ferr != nil {
			return fail(ferr)
		}
		ctx, stop := replaySignalContext()
		defer stop()
		runs, uerr, ferr := j.runBoth(ctx, *url, stderr)
		if uerr != nil {
			return usageErr("%v", uerr)
		}
		if ferr != nil {
			return fail(ferr)
		}
		for _, x := range []struct{ path, name string }{{*saveMeasured, *url}, {*savePredicted, "sim"}} {
			if x.path != "" {
				if err := j.writePerRequest(x.path, x.name, runs[x.name]); err != nil {
					return fail(err)
				}
			}
		}
		measured, predicted = [][]replay.RequestResult{runs[*url].res.Requests}, runs["sim"].res.Requests
		out.MeasuredFrom, out.PredictedFrom = *url, "sim "+j.cfgPath
	}
	out.Comparison = replay.CompareRuns(measured, predicted)
	c := &out.Comparison
	if c.Requests == 0 {
		return fail(errors.New("no request succeeded in both runs"))
	}
	out.judge()
	if *asJSON {
		if err := json.NewEncoder(stdout).Encode(out); err != nil {
			return fail(err)
		}
	} else {
		out.print(stdout)
	}
	if !out.Pass {
		return exitFail
	}
	return exitOK
}

// runBoth replays the job against the server at url and the simulator,
// in that order, and returns both runs by target name; a usage error
// (the target cannot be built) comes back as uerr.
func (j *replayJob) runBoth(ctx context.Context, url string, stderr io.Writer) (runs map[string]*replayRun, uerr, ferr error) {
	runs = map[string]*replayRun{}
	for _, name := range []string{url, "sim"} {
		tg, closeTarget, err := j.target(name)
		if err != nil {
			return nil, err, nil
		}
		run, err := j.run(ctx, tg, name, stderr, "kvsim compare")
		closeTarget()
		if err != nil {
			return nil, nil, fmt.Errorf("%s: %w", name, err)
		}
		if run.res.Interrupted {
			return nil, nil, errors.New("interrupted")
		}
		runs[name] = run
	}
	return runs, nil, nil
}

// judge holds the comparison against the thresholds: the violations
// (never nil) and whether it passes.
func (out *compareOutput) judge() {
	c := &out.Comparison
	if c.TTFTMAPE > out.MaxTTFTMAPE {
		out.Violations = append(out.Violations, fmt.Sprintf("TTFT MAPE %.2f%% > %.2f%%", c.TTFTMAPE, out.MaxTTFTMAPE))
	}
	switch {
	case c.HitRateDiffPP == nil:
		out.Violations = append(out.Violations, "cache hit rate not reported by both")
	case math.Abs(*c.HitRateDiffPP) > out.MaxHitRatePP:
		out.Violations = append(out.Violations, fmt.Sprintf("cache hit rate differs by %.2f pp > %.2f", math.Abs(*c.HitRateDiffPP), out.MaxHitRatePP))
	}
	out.Pass = len(out.Violations) == 0
	if out.Violations == nil {
		out.Violations = []string{}
	}
}

// print writes the comparison's table and the verdict.
func (out *compareOutput) print(w io.Writer) {
	replay.PrintComparison(w, "measured", "predicted", &out.Comparison)
	if out.Pass {
		fmt.Fprintf(w, "\nPASS (TTFT MAPE <= %g%%, hit rate within %g pp)\n", out.MaxTTFTMAPE, out.MaxHitRatePP)
		return
	}
	for _, v := range out.Violations {
		fmt.Fprintf(w, "\nFAIL: %s", v)
	}
	fmt.Fprintln(w)
}
