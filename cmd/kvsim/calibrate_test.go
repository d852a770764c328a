package main

import (
	"cmp"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/kvsim/kvsim/configs"
	"github.com/kvsim/kvsim/internal/testutil"
	"github.com/kvsim/kvsim/sim/llamacpp"
	"github.com/kvsim/kvsim/traces"
)

// Calibrating on `kvsim replay --target sim` at concurrency 1 recovers the
// config's fitted coefficients, and the snippet loads as the [cost] section
// of a config.
func TestCalibrateCLIRecoversSimCoefficients(t *testing.T) {
	dir := t.TempDir()
	tr := genTrace(t, "multiturn", "--clients", "4", "--rounds", "4", "--request-length", "3000", "--output-length", "16", "--sub-question-length", "200", "--rate", "inf")
	per := filepath.Join(dir, "per.jsonl")
	runOK(t, "replay", "--trace", tr, "--target", "sim", "--config", simConfig, "--max-concurrency", "1", "--warmup=false", "--per-request", per, "--json")
	snippet := filepath.Join(dir, "cost.toml")
	code, stdout, stderr := runCLI(t, "calibrate", "--per-request", per, "--config", simConfig, "--out", snippet)
	if code != exitOK || !strings.Contains(stdout, "R² 1.0000") {
		t.Fatalf("calibrate: exit %d\n%s%s", code, stdout, stderr)
	}
	base := testutil.ReadFile(t, simConfig)
	snip := testutil.ReadFile(t, snippet)
	// The config without its [cost] section, plus the snippet.
	noCost := regexp.MustCompile(`(?s)\[cost\].*`).ReplaceAll(base, nil)
	f, err := configs.Parse(append(noCost, snip...), "calibrated.toml")
	if err != nil {
		t.Fatalf("the snippet does not load: %v\n%s", err, snip)
	}
	got, want := f.Cost.Fitted, [7]float64{1e6, 1e4, 1, 0, 2e6, 0, 1}
	all := [7]float64{got.Prefill[0], got.Prefill[1], got.Prefill[2], got.Prefill[3], got.Decode[0], got.Decode[1], got.Decode[2]}
	for i := range all {
		if d := all[i] - want[i]; d > 0.01*want[i]+1e-9 || d < -0.01*want[i]-1e-9 {
			t.Errorf("coefficient %d = %v, want %v", i, all[i], want[i])
		}
	}
	if f.Cost.Kind != "fitted" {
		t.Errorf("kind %q", f.Cost.Kind)
	}
}

func TestCalibrateCLIErrors(t *testing.T) {
	code, _, stderr := runCLI(t, "calibrate", "--out", "x.toml")
	if code != exitUsage || !strings.Contains(stderr, "--per-request is required") {
		t.Errorf("exit %d %q", code, stderr)
	}
	code, _, stderr = runCLI(t, "calibrate", "--per-request", replayTrace, "--out", filepath.Join(t.TempDir(), "x.toml"))
	if code != exitFail || !strings.Contains(stderr, "usable TTFT samples") {
		t.Errorf("a trace without observations: exit %d %q", code, stderr)
	}
}

// The llama-server loop: --gen-trace, a replay of it against the simulated
// llama-server, and calibrate give back the config's own coefficients in a
// complete config that loads.
func TestCalibrateCLILlamaCpp(t *testing.T) {
	dir := t.TempDir()
	cfg := filepath.Join("..", "..", "configs", "llamacpp", "tiny.toml")
	tr := filepath.Join(dir, "cal.jsonl")
	if code, stdout, stderr := runCLI(t, "calibrate", "--config", cfg, "--gen-trace", tr, "--repeats", "2"); code != exitOK || !strings.Contains(stdout, "--max-concurrency 4") {
		t.Fatalf("gen-trace: exit %d\n%s%s", code, stdout, stderr)
	}
	per := filepath.Join(dir, "per.jsonl")
	runOK(t, "replay", "--trace", tr, "--target", "sim", "--config", cfg, "--max-concurrency", "4", "--vocab", "1:256", "--per-request", per, "--json")
	want, err := configs.Load(cfg)
	if err != nil {
		t.Fatal(err)
	}
	// The request delay is not fitted: without --request-delay calibrate
	// takes the config's out of the TTFTs and writes it back.
	if want.Llama.Cost.Delay == 0 {
		t.Fatalf("%s has no request delay: the test needs one", cfg)
	}
	out := filepath.Join(dir, "calibrated.toml")
	code, stdout, stderr := runCLI(t, "calibrate", "--config", cfg, "--per-request", per, "--out", out)
	if code != exitOK || !strings.Contains(stdout, "batch up to 4.00") {
		t.Fatalf("calibrate: exit %d\n%s%s", code, stdout, stderr)
	}
	got, err := configs.Load(out)
	if err != nil {
		t.Fatalf("the written config does not load: %v", err)
	}
	if got.Llama.Config != want.Llama.Config {
		t.Errorf("server arguments %+v, want %+v", got.Llama.Config, want.Llama.Config)
	}
	g, w := got.Llama.Cost, want.Llama.Cost
	if g.Delay != w.Delay {
		t.Errorf("request delay %d ns, want %d", g.Delay, w.Delay)
	}
	all := [][2]float64{{g.Prefill[0], w.Prefill[0]}, {g.Prefill[1], w.Prefill[1]}, {g.Prefill[2], w.Prefill[2]}, {g.Decode[0], w.Decode[0]}, {g.Decode[1], w.Decode[1]}, {g.Decode[2], w.Decode[2]}}
	for i, c := range all {
		if d := c[0] - c[1]; d > 0.01*c[1] || d < -0.01*c[1] {
			t.Errorf("coefficient %d = %v, want %v within 1%%", i, c[0], c[1])
		}
	}
	if code, _, stderr := runCLI(t, "calibrate", "--config", cfg, "--per-request", per, "--out", out, "--small-call-tokens", "63"); code != exitUsage || !strings.Contains(stderr, "tiers of --tile 0") {
		t.Errorf("--small-call-tokens with tiles: exit %d %q", code, stderr)
	}
	if code, _, stderr := runCLI(t, "calibrate", "--gen-trace", tr); code != exitUsage || !strings.Contains(stderr, "only for a llama-server config") {
		t.Errorf("--gen-trace with the SGLang default: exit %d %q", code, stderr)
	}

	// --server-log: one log per run, in llama-server's format, whose
	// prompt eval times are the config's for each prompt's calls: the copy
	// rates come back from the TTFTs less those (within 2%: the log's
	// 10 µs). A log whose tasks evaluated other token counts is refused.
	built, err := want.BuildLlama()
	if err != nil {
		t.Fatal(err)
	}
	evalOf := func(r traces.Record) int64 {
		var ns int64
		cached := int64(r.Observed.CachedTokens)
		for left := int64(r.InputLen) - cached; left > 0; {
			n := min(left, int64(built.Config.Batch))
			ns += built.Cost.CallTime([]llamacpp.Chunk{{New: n, Cached: cached}}, built.Config.UbatchSize())
			cached += n
			left -= n
		}
		return ns
	}
	recs, err := traces.ReadAll(per, traces.FormatAuto, 0)
	if err != nil {
		t.Fatal(err)
	}
	slices.SortStableFunc(recs, func(a, b traces.Record) int { return cmp.Compare(a.Arrival, b.Arrival) })
	writeLog := func(name string, newTokens func(traces.Record) int) string {
		var b strings.Builder
		stamp := func(ns int64) string {
			us := ns / 1e3
			return fmt.Sprintf("%d.%02d.%03d.%03d", us/60e6, us/1e6%60, us/1e3%1000, us%1000)
		}
		for k, r := range recs {
			fmt.Fprintf(&b, "%s I slot get_availabl: id  0 | task -1 | selected slot by LRU, n_tokens = 0, t_last = -1\n", stamp(r.Arrival))
			fmt.Fprintf(&b, "%s I slot launch_slot_: id  0 | task %d | processing task, is_child = 0\n", stamp(r.Arrival), k)
			eval := evalOf(r)
			fmt.Fprintf(&b, "%s I slot print_timing: id  0 | task %d | prompt eval time = %10.2f ms / %5d tokens\n", stamp(r.Arrival+r.Observed.TTFT), k, float64(eval)/1e6, newTokens(r))
		}
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(b.String()), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	good := writeLog("server.log", func(r traces.Record) int { return r.InputLen - r.Observed.CachedTokens })
	code, stdout, stderr = runCLI(t, "calibrate", "--config", cfg, "--per-request", per, "--server-log", good, "--out", out)
	if code != exitOK || !strings.Contains(stdout, "copies (server logs)") {
		t.Fatalf("calibrate --server-log: exit %d\n%s%s", code, stdout, stderr)
	}
	logged, err := configs.Load(out)
	if err != nil {
		t.Fatalf("the written config does not load: %v", err)
	}
	for _, c := range [][3]any{{"state_copy_ns_per_byte", logged.Llama.Cost.StateCopy, w.StateCopy}, {"state_fresh_ns_per_byte", logged.Llama.Cost.StateFresh, w.StateFresh}} {
		if got, want := c[1].(float64), c[2].(float64); want <= 0 || math.Abs(got-want) > 0.02*want {
			t.Errorf("%s = %g with the log, want %g within 2%%", c[0], got, want)
		}
	}
	bad := writeLog("other.log", func(r traces.Record) int { return r.InputLen - r.Observed.CachedTokens + 1 })
	for _, c := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"--config", cfg, "--per-request", per, "--server-log", bad, "--out", out}, exitFail, "is this the log of this run?"},
		{[]string{"--config", cfg, "--per-request", per, "--server-log", good, "--server-log", good, "--out", out}, exitUsage, "2 logs for 1 --per-request runs"},
		{[]string{"--config", cfg, "--per-request", per, "--server-log", filepath.Join(dir, "missing.log"), "--out", out}, exitFail, "missing.log"},
		{[]string{"--per-request", per, "--server-log", good, "--out", out}, exitUsage, "--server-log: only for a llama-server config"},
	} {
		if code, _, stderr := runCLI(t, append([]string{"calibrate"}, c.args...)...); code != c.code || !strings.Contains(stderr, c.want) {
			t.Errorf("calibrate %v: exit %d %q, want %d and %q", c.args, code, stderr, c.code, c.want)
		}
	}
}
