package calibrate

import (
	"cmp"
	"errors"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"

	"github.com/kvsim/kvsim/configs"
	"github.com/kvsim/kvsim/sim/engine"
	"github.com/kvsim/kvsim/sim/hw"
	"github.com/kvsim/kvsim/sim/llamacpp"
	"github.com/kvsim/kvsim/traces"
)

// LlamaCalibrationConfig shapes the calibration trace of a llama-server
// (LlamaCalibrationTrace).
type LlamaCalibrationConfig struct {
	// Slots is the server's -np: the largest decode batch measured.
	Slots int
	// SlotContext is -c / -np: no prompt plus output exceeds it.
	SlotContext int
	// Repeats is how many times each shape is measured (>= 1; default 3):
	// the fit takes the median of the repeats.
	Repeats int
	// Seed seeds the prompts' token ids, drawn from Vocab.
	Seed  uint64
	Vocab traces.Vocab
}

// LlamaCalibrationTrace returns the trace that `kvsim calibrate` fits a
// llama-server's CPU cost from. Replayed with --max-concurrency Slots, its
// records run in two phases, ordered by WaitFor dependencies:
//
//   - one at a time (each waits for the one before): cold prompts from 16
//     tokens to nearly a slot's context with 32 output tokens (prompt
//     processing against new tokens, decode at batch 1 against context),
//     prompts behind a cached prefix of about 300, 800 or 1400 tokens (a
//     1-token request puts the prefix in a slot; the next extends it by
//     about 40 to 512 new tokens: cost against cached tokens), those
//     extended prompts again with 8 more tokens once they have left their
//     slots (restored from the RAM cache: cost per restored byte), and
//     full hits (the same prompt again: 1 new token after many cached,
//     for their decode steps; the model charges the one token as a
//     decode token, so they are no prompt samples);
//   - batches of 2 to Slots unrelated prompts sent together (each batch
//     waits for the previous one), about 64 or 512 tokens with 64 outputs:
//     decode steps at batch 2..Slots;
//   - long decodes beside new prompts: Slots-1 prompts of about 1800
//     tokens (less when a slot's context is smaller) decode 160 tokens,
//     while in the last slot a 64-token leader decodes 16 and then prompts
//     of about 64, 256, 512 and 128 tokens start one after another, each
//     decoding 24 tokens before the next is sent ("long-1800-r1-2",
//     "lead-64-r1", "mid-256-r1"): decode steps at the contexts of a full
//     server (4500-7000 tokens at -c 8192 -np 4) just after prompt calls,
//     with steady steps between them (the after-prompt curve, and the
//     decode fit at large contexts).
//
// Every shape is repeated Repeats times with fresh prompts, after an
// unmeasured warm-up pass of the one-at-a-time phase (Kind "warmup", IDs
// ending in "-r0"). IDs say what a record measures by its nominal sizes
// ("cold-512-r1", "ext-1024+128-r2", "batch3-64-r1-2"); each repeat draws
// its lengths uniformly within a quarter of the nominal ones (cold prompts
// near a slot's context only downwards; the small extension stays in
// 30..50 tokens). llama.cpp's CPU kernels are fastest at some sizes (64
// new tokens behind 1024 cached took half the time of 60 to 63 on this
// project's machines; multiples of 64 are generally cheaper), so a trace of
// round sizes calibrates the fast path and under-predicts the sizes real
// traces have.
func LlamaCalibrationTrace(c LlamaCalibrationConfig) ([]traces.Record, error) {
	if c.Repeats == 0 {
		c.Repeats = 3
	}
	if c.Vocab == (traces.Vocab{}) {
		c.Vocab = traces.DefaultVocab
	}
	if err := c.validate(); err != nil {
		return nil, err
	}
	t := &calTrace{c: c, rng: rand.New(rand.NewPCG(c.Seed, 0x6c6c616d6163616c))} // "llamacal"
	// Pass 0 is a warm-up (Kind "warmup": sent, not measured, not fitted)
	// that leaves the slots and the RAM cache as every later pass leaves
	// them, so that each shape's start copies the same slot states in every
	// measured repeat.
	lens := t.coldLengths()
	for r := 0; r <= c.Repeats; r++ {
		t.kind = ""
		if r == 0 {
			t.kind = "warmup"
		}
		t.oneAtATime(r, lens)
	}
	t.kind = ""
	for r := 1; r <= c.Repeats; r++ {
		t.batches(r)
		t.prev = t.longDecodes(r, t.prev)
	}
	return t.recs, nil
}

// validate reports every problem of a calibration trace's settings.
func (c LlamaCalibrationConfig) validate() error {
	var errs []error
	if c.Slots < 1 {
		errs = append(errs, fmt.Errorf("slots: must be >= 1 (got %d)", c.Slots))
	}
	if c.SlotContext < 256 {
		errs = append(errs, fmt.Errorf("slot context: must be >= 256 tokens (got %d)", c.SlotContext))
	}
	if c.Repeats < 1 || c.Repeats > 1000 {
		errs = append(errs, fmt.Errorf("repeats: must be from 1 to 1000 (got %d)", c.Repeats))
	}
	errs = append(errs, c.Vocab.Validate()) // nil when valid: errors.Join drops it
	return errors.Join(errs...)
}

// calTrace builds the calibration trace: its records in order, what the
// next record waits for, and the one seeded stream every prompt and
// length is drawn from (in the order the records are added).
type calTrace struct {
	c    LlamaCalibrationConfig
	rng  *rand.Rand
	recs []traces.Record
	prev []string // what the next record waits for
	kind string   // "warmup" for the unmeasured first pass
}

// coldOut is the output length of the cold prompts and the full hits.
const coldOut = 32

// fresh draws a prompt of n random tokens.
func (t *calTrace) fresh(n int) []int32 {
	out := make([]int32, n)
	for i := range out {
		out[i] = t.c.Vocab.Lo + int32(t.rng.IntN(int(t.c.Vocab.Hi-t.c.Vocab.Lo)))
	}
	return out
}

// jit draws a length within a quarter of nominal n, never above hi.
func (t *calTrace) jit(n, hi int) int {
	lo, top := n-n/4, min(n+n/4, hi)
	if top <= lo {
		return min(n, hi)
	}
	return lo + t.rng.IntN(top-lo+1)
}

// add appends a record that waits for prev.
func (t *calTrace) add(id string, prompt []int32, out int) {
	t.recs = append(t.recs, traces.Record{
		ID: id, Kind: t.kind, InputLen: len(prompt), Tokens: prompt, OutputLen: out,
		WaitFor: t.prev, Sampling: &traces.Sampling{IgnoreEOS: true},
	})
}

// serial appends a record that the next one waits for.
func (t *calTrace) serial(id string, prompt []int32, out int) {
	t.add(id, prompt, out)
	t.prev = []string{id}
}

// coldLengths are the nominal lengths of the cold prompts: the round ones
// that fit a slot with their output, and the longest that does.
func (t *calTrace) coldLengths() []int {
	maxPrompt := t.c.SlotContext - coldOut - 16
	lens := []int{16, 64, 128, 256, 512, 1024, 1536}
	lens = slices.DeleteFunc(lens, func(l int) bool { return l > maxPrompt })
	if lens[len(lens)-1] != maxPrompt {
		lens = append(lens, maxPrompt)
	}
	return lens
}

// oneAtATime adds repeat r of the one-at-a-time phase: cold prompts,
// extensions of a base prompt, restores from the RAM cache, and full hits.
func (t *calTrace) oneAtATime(r int, lens []int) {
	c := t.c
	rs := "-r" + strconv.Itoa(r)
	maxPrompt := c.SlotContext - coldOut - 16
	for _, l := range lens {
		t.serial("cold-"+strconv.Itoa(l)+rs, t.fresh(t.jit(l, maxPrompt)), coldOut)
	}
	type extended struct {
		tag    string
		prompt []int32
	}
	var exts []extended
	for _, base := range []int{300, 800, 1400} {
		for _, ext := range []int{40, 80, 160, 512} {
			if base+base/4+ext+ext/4+1 > c.SlotContext {
				continue
			}
			b := t.fresh(t.jit(base, c.SlotContext))
			tag := strconv.Itoa(base) + "+" + strconv.Itoa(ext) + rs
			t.serial("base-"+tag, b, 1)
			e := append(slices.Clip(b), t.fresh(t.jit(ext, c.SlotContext))...)
			t.serial("ext-"+tag, e, 1)
			exts = append(exts, extended{tag, e})
		}
	}
	// By now the first extended prompts have left their slots for the
	// RAM cache; each comes back, oldest first, with 8 more tokens: it
	// is restored into the least recently used slot and the 8 tokens
	// are a small call behind it (not a full hit, whose one token the
	// model charges as a decode token, outside the prompt fit), so
	// that restored bytes have prompt samples.
	for _, e := range exts {
		t.serial("back-"+e.tag, append(slices.Clip(e.prompt), t.fresh(8)...), 1)
	}
	for _, l := range []int{64, 512, 1500} {
		if l+l/4+coldOut > c.SlotContext {
			continue
		}
		p := t.fresh(t.jit(l, c.SlotContext))
		tag := strconv.Itoa(l) + rs
		t.serial("first-"+tag, p, 1)
		t.serial("hit-"+tag, p, coldOut)
	}
}

// batches adds repeat r of the batched phase: k prompts of 64 and of 512
// tokens sent together, for every k from 2 to the slots.
func (t *calTrace) batches(r int) {
	c := t.c
	for k := 2; k <= c.Slots; k++ {
		for _, l := range []int{64, 512} {
			if l+l/4+64 > c.SlotContext {
				continue
			}
			var ids []string
			for i := 1; i <= k; i++ {
				id := fmt.Sprintf("batch%d-%d-r%d-%d", k, l, r, i)
				t.add(id, t.fresh(t.jit(l, c.SlotContext)), 64)
				ids = append(ids, id)
			}
			t.prev = ids
		}
	}
}

// longDecodes adds, after prev, Slots-1 prompts of about longLen
// tokens that decode longOut tokens while prompts of 64 to 512 tokens
// start one after another in the last slot, each decoding midOut
// tokens before the next is sent; it returns what the next records
// wait for. A leader of 64 tokens holds the last slot until the long
// prompts are processed.
func (t *calTrace) longDecodes(r int, after []string) []string {
	const longLen, longOut, leadOut, midOut = 1800, 160, 16, 24
	c := t.c
	n := min(longLen, c.SlotContext-longOut-16)
	if c.Slots < 2 || n < 64 {
		return after
	}
	t.prev = after
	rs := "-r" + strconv.Itoa(r)
	var ids []string
	for i := 1; i < c.Slots; i++ {
		id := fmt.Sprintf("long-%d%s-%d", n, rs, i)
		t.add(id, t.fresh(t.jit(n, c.SlotContext-longOut-16)), longOut)
		ids = append(ids, id)
	}
	lead := "lead-64" + rs
	t.add(lead, t.fresh(t.jit(64, c.SlotContext)), leadOut)
	t.prev = []string{lead}
	for _, l := range []int{64, 256, 512, 128} {
		if l+l/4+midOut > c.SlotContext {
			continue
		}
		t.serial("mid-"+strconv.Itoa(l)+rs, t.fresh(t.jit(l, c.SlotContext)), midOut)
	}
	return append(ids, t.prev...)
}

// LlamaCalibration is a fitted llama-server CPU cost and how well it fits.
type LlamaCalibration struct {
	Cost llamacpp.CPUCost `json:"cost"`
	// PrefillSamples and DecodeSamples count the requests used;
	// PrefillShapes and DecodeShapes the distinct shapes (medians) fitted.
	PrefillSamples int `json:"prefill_samples"`
	PrefillShapes  int `json:"prefill_shapes"`
	DecodeSamples  int `json:"decode_samples"`
	DecodeShapes   int `json:"decode_shapes"`
	// PrefillMAPE and DecodeMAPE are the fit's mean absolute percentage
	// errors on the shape medians; PrefillMAPEAll and DecodeMAPEAll on
	// every sample (repeats and their noise included).
	PrefillMAPE    float64 `json:"prefill_mape_pct"`
	DecodeMAPE     float64 `json:"decode_mape_pct"`
	PrefillMAPEAll float64 `json:"prefill_mape_all_pct"`
	DecodeMAPEAll  float64 `json:"decode_mape_all_pct"`
	// MaxBatch is the largest mean decode batch seen.
	MaxBatch float64 `json:"max_decode_batch"`
	// With server logs (LlamaFit.Logs), CopySamples and CopyShapes count
	// the requests run alone whose time outside the prompt call gave the
	// copy rates, CopyMAPE is that fit's error on the shape medians, and
	// CopyOtherNs its intercept: the part of a TTFT that is neither the
	// prompt call nor a copy (HTTP, parsing, the first token's way back).
	CopySamples int     `json:"copy_samples,omitempty"`
	CopyShapes  int     `json:"copy_shapes,omitempty"`
	CopyMAPE    float64 `json:"copy_mape_pct,omitempty"`
	CopyOtherNs float64 `json:"copy_other_ns,omitempty"`
	// AfterPromptSteps counts the decode steps within five calls
	// (afterPromptCalls) after a prompt call that gave the slowdown after prompt calls
	// (Cost.AfterPromptCurve), and AfterPromptBins are those steps by
	// context, one bin per point of the curve.
	AfterPromptSteps int              `json:"after_prompt_steps,omitempty"`
	AfterPromptBins  []AfterPromptBin `json:"after_prompt_bins,omitempty"`
	Method           string           `json:"method"`
}

// AfterPromptBin is the decode steps of a context range, measured after
// prompt calls: their median context, how many there are, and their median
// extra time in ns, one per call after the prompt call (j = 1 ..
// 5, afterPromptCalls), against the steady steps of their request.
type AfterPromptBin struct {
	Context int64     `json:"context_tokens"`
	From    int64     `json:"from_tokens"` // the range's bounds: From <= context < To
	To      int64     `json:"to_tokens"`
	Steps   int       `json:"steps"`
	Extra   []float64 `json:"extra_ns"`
}

// afterPromptCalls is how many calls after a prompt call the calibration
// measures the decode steps' extra time over: the extras of the first
// calls give llamacpp.CPUCost.AfterPromptCurve, and a request's steps
// further away are its steady steps.
const afterPromptCalls = 5

// afterPromptBin is the width, in context tokens, of the ranges the
// after-prompt fit starts from; afterPromptMinSteps is how many steps a
// range needs at each of the afterPromptCalls distances, or it is merged
// with the next range (the last with the one before).
const (
	afterPromptBin      = 500
	afterPromptMinSteps = 10
)

// FitLlama fits llamacpp.CPUCost to a per-request trace of the
// calibration trace's replay against a llama-server run with cfg's
// arguments (kvsim replay --per-request; the records' Arrival is each
// request's send time). Two samples per request:
//
//   - Prompt processing: the TTFT of a request that ran alone (no other
//     request in flight between its send and its first token) is the
//     copies of slot states its start made to and from the RAM cache, then
//     the prompt call(s) of its new tokens (prompt - cached) after the
//     cached ones, in chunks of at most -b tokens: a0·calls + a1·new +
//     a2·pairs + StateCopy·(saved + restored bytes) + StateFresh·saved
//     bytes beyond the RAM cache's high-water mark (one rate for saves
//     and restores: the same copy), where the pairs are those of
//     llamacpp.Attention with tiles (fit.Tile), else causal pairs, a
//     prompt of at most smallCall new tokens (a small call, see
//     llamacpp.CPUCost) having its pairs at SmallPair instead of a2, and
//     one of at most MediumCall at MediumPair (0: no such tier). The
//     copied bytes come from running the records through the llamacpp
//     model with cfg (its cache decisions are exact for requests that run
//     alone). The fixed part a0 also takes the HTTP and sampling time of a
//     request, which only a per-call constant can carry here.
//   - Decode: the mean time of its decode steps is b0 + b1·B + b2·C, where
//     B is the mean number of requests generating during a step (itself
//     included) and C their mean total context (decodeSample: from the
//     token stream times when the records carry inter-token latencies,
//     leaving out steps that carried another request's prompt; else from
//     (E2E - TTFT) / (output - 1) and time-weighted means).
//
// Robust to a noisy machine: requests of the same shape (the calibration
// trace's nominal shape, from the ID; for other records the same prompt
// length and cached tokens within 16; for decode also the same rounded
// batch) are repeats, and each shape counts once, by its median request
// (the one with the median time, with its own features; the median, not
// the minimum: the fidelity runs meet the same noise, and the median is
// what a typical request sees). Both fits are non-negative least squares
// with a free intercept on relative errors (Calibrate's solver).
func FitLlama(recs []traces.Record, cfg llamacpp.Config, smallCall int) (*LlamaCalibration, error) {
	return FitLlamaRuns([][]traces.Record{recs}, cfg, LlamaFit{SmallCall: smallCall})
}

// LlamaFit are the settings of a llama-server fit that the runs cannot
// tell: SmallCall is the small-call bound in tokens (0: no small calls);
// RequestDelay the ns from a request's arrival until the server loop sees
// it (llamacpp.CPUCost.Delay), taken out of every TTFT before the fit and
// written to the config, so that the fitted fixed cost is the call's own.
type LlamaFit struct {
	SmallCall    int
	MediumCall   int // the medium tier's bound in tokens (> SmallCall; 0: none)
	RequestDelay int64
	// Tile, when > 0, fits llamacpp.CPUCost's tiled attention instead of
	// the call-size tiers (SmallCall and MediumCall must be 0): a prompt's
	// pairs are those Attention gives for its calls, with micro-batches
	// of the config's -ub.
	Tile int
	// Logs, when not nil, are the server's logs of the runs, one per run
	// in the same order (ReadLlamaServerLog): the copy rates are then
	// measured from them instead of fitted with the prompt cost (see
	// FitLlamaRuns).
	Logs [][]LlamaLogTask
	// LogNames, when not nil, name the logs in errors (one per log).
	LogNames []string
	// NoAfterPrompt leaves the slowdown of decode steps after a prompt
	// call out of the fit (no llamacpp.CPUCost.AfterPromptCurve; see
	// FitLlamaRuns).
	NoAfterPrompt bool
}

// FitLlamaRuns is FitLlama over several runs of the calibration
// trace, each against a fresh server with cfg's arguments (their send
// times are each from its own start): each run's requests give their
// samples as in one run, and a shape's repeats in all runs are pooled
// before its median request is taken. Runs spread over a session (between
// the measurements they are to predict, as e2e/fidelity.sh does) average
// the machine's drift in speed instead of fixing the speed of one moment.
//
// With the runs' server logs (fit.Logs), the copy rates are measured
// where the copies are, outside the prompt call: a request that ran alone
// spent its TTFT less the log's prompt eval time on its copies to and from
// the RAM cache and on things that do not depend on them (HTTP, parsing,
// the first token's way back); a fit of that time against the bytes
// copied and the saved bytes beyond the cache's high-water mark (each
// shape's median request, relative non-negative least squares with a free
// intercept) gives StateCopy (= StateRestore) and StateFresh. The prompt
// fit then takes the copies' time out of the TTFTs and fits the call alone.
// Without logs the copy rates are two more columns of the prompt fit, and
// take up whatever else comes with the copies: on the project's machines
// that fit gave 0.06-0.60 ns per byte copied between runs, where the logs
// give 0.22-0.30 (docs/fidelity.md).
func FitLlamaRuns(runs [][]traces.Record, cfg llamacpp.Config, fit LlamaFit) (*LlamaCalibration, error) {
	if err := fit.validate(cfg, len(runs)); err != nil {
		return nil, err
	}
	pre, dec, cps, maxB, err := pooledSamples(runs, cfg, fit)
	if err != nil {
		return nil, err
	}
	method := "median request of each shape, then non-negative least squares (Lawson-Hanson active set, free intercept), relative weights"
	var copies shapeFit // the copy fit, with server logs: intercept, copied, fresh
	if fit.Logs != nil {
		var note string
		if copies, pre, note, err = fitCopies(cps, pre); err != nil {
			return nil, err
		}
		method += note
	}
	prompt, tiered, note, err := fitPrompt(pre, &fit)
	if err != nil {
		return nil, err
	}
	method += note
	var apCurve []llamacpp.AfterPromptPoint
	var apSteps int
	var apBins []AfterPromptBin
	if !fit.NoAfterPrompt {
		apCurve, apSteps, apBins, note = takeOutAfterPrompt(dec)
		method += note
	}
	var decode shapeFit
	decode.x, decode.y = medianShapes(dec)
	if len(decode.y) < 3 {
		return nil, fmt.Errorf("calibrate: %d decode shapes, need at least 3 (requests with more than one output token)", len(decode.y))
	}
	if decode.coef, err = nnlsFreeIntercept(decode.x, decode.y, true); err != nil {
		return nil, fmt.Errorf("calibrate decode: %w", err)
	}
	pc, dc := prompt.coef, decode.coef
	c := &LlamaCalibration{
		Cost:           llamacpp.CPUCost{Fitted: hw.Fitted{Prefill: [4]float64{pc[colCalls], pc[colNew], pc[colPairs], 0}, Decode: [3]float64{dc[0], dc[1], dc[2]}}, StateCopy: pc[colCopied], StateRestore: pc[colCopied], StateFresh: pc[colFresh], Delay: fit.RequestDelay},
		PrefillSamples: len(pre), PrefillShapes: len(prompt.y), DecodeSamples: len(dec), DecodeShapes: len(decode.y), MaxBatch: maxB,
		AfterPromptSteps: apSteps, AfterPromptBins: apBins,
		Method: method,
	}
	c.Cost.AfterPromptCurve = apCurve
	if cc := copies.coef; cc != nil {
		c.Cost.StateCopy, c.Cost.StateRestore, c.Cost.StateFresh = cc[copyCopied], cc[copyCopied], cc[copyFresh]
		c.CopySamples, c.CopyShapes, c.CopyOtherNs = len(cps), len(copies.y), cc[copyOther]
		_, c.CopyMAPE = fitQuality(copies.x, copies.y, cc)
	}
	if fit.SmallCall > 0 {
		c.Cost.SmallCall, c.Cost.SmallPair = fit.SmallCall, pc[colShort]
	}
	if fit.Tile > 0 {
		c.Cost.Tile, c.Cost.ShortPair = fit.Tile, pc[colShort]
		if !(pc[colShort] > 0) {
			c.Method += fmt.Sprintf("; the pairs of fewer than %d rows fitted 0 ns (no sample needed them)", fit.Tile)
		}
	}
	if fit.MediumCall > 0 {
		c.Cost.MediumCall, c.Cost.MediumPair = fit.MediumCall, pc[colMedium]
	}
	_, c.PrefillMAPE = fitQuality(prompt.x, prompt.y, pc)
	_, c.DecodeMAPE = fitQuality(decode.x, decode.y, dc)
	c.PrefillMAPEAll, c.DecodeMAPEAll = samplesMAPE(tiered, pc), samplesMAPE(dec, dc)
	if err := c.Cost.Validate(); err != nil {
		return nil, fmt.Errorf("calibrate: %w", err)
	}
	return c, nil
}

// validate checks the fit's settings against the config and the number of
// runs.
func (fit LlamaFit) validate(cfg llamacpp.Config, runs int) error {
	if runs == 0 {
		return errors.New("calibrate: no runs")
	}
	if fit.RequestDelay < 0 {
		return fmt.Errorf("calibrate: request delay must be >= 0 (got %d ns)", fit.RequestDelay)
	}
	if fit.MediumCall != 0 && fit.MediumCall <= fit.SmallCall {
		return fmt.Errorf("calibrate: the medium-call bound (%d tokens) must be above the small-call bound (%d)", fit.MediumCall, fit.SmallCall)
	}
	if err := cfg.Validate(); err != nil {
		return fmt.Errorf("calibrate: %w", err)
	}
	if fit.SmallCall < 0 {
		return fmt.Errorf("calibrate: small-call size must be >= 0 (got %d)", fit.SmallCall)
	}
	switch {
	case fit.Tile < 0:
		return fmt.Errorf("calibrate: tile must be >= 0 (got %d)", fit.Tile)
	case fit.Tile > 0 && (fit.SmallCall != 0 || fit.MediumCall != 0):
		return fmt.Errorf("calibrate: tiles (%d rows) exclude the small- and medium-call tiers (got %d and %d tokens)", fit.Tile, fit.SmallCall, fit.MediumCall)
	case fit.Tile > cfg.UbatchSize():
		return fmt.Errorf("calibrate: tiles of %d rows do not fit micro-batches of %d tokens (ubatch_size, batch_size): every prompt row would take the per-row kernel", fit.Tile, cfg.UbatchSize())
	}
	if fit.Logs != nil && len(fit.Logs) != runs {
		return fmt.Errorf("calibrate: %d server logs for %d runs: give one per run, in the same order", len(fit.Logs), runs)
	}
	if fit.LogNames != nil && len(fit.LogNames) != len(fit.Logs) {
		return fmt.Errorf("calibrate: %d log names for %d server logs", len(fit.LogNames), len(fit.Logs))
	}
	return nil
}

// pooledSamples reads the prompt, decode and copy samples of every run
// (with its server log, if given) into one pool each; maxB is the largest
// batch seen.
func pooledSamples(runs [][]traces.Record, cfg llamacpp.Config, fit LlamaFit) (pre, dec, cps []calSample, maxB float64, err error) {
	for i, recs := range runs {
		var log []LlamaLogTask
		logName := "server log"
		if fit.Logs != nil {
			log = fit.Logs[i]
			if fit.LogNames != nil {
				logName = fit.LogNames[i]
			}
		}
		p, d, cp, b, err := llamaSamples(recs, log, logName, cfg, fit)
		if err != nil {
			if len(runs) > 1 {
				return nil, nil, nil, 0, fmt.Errorf("run %d: %w", i+1, err)
			}
			return nil, nil, nil, 0, err
		}
		pre, dec, cps, maxB = append(pre, p...), append(dec, d...), append(cps, cp...), max(maxB, b)
	}
	return pre, dec, cps, maxB, nil
}

// fitCopies fits the state copy rates to the requests run alone that the
// server logs time (cps: TTFT less the logged prompt eval time) and takes
// the copies' time, now known, out of the prompt samples (dropping those
// left with none). note is what the fit adds to the method.
func fitCopies(cps, pre []calSample) (copies shapeFit, kept []calSample, note string, err error) {
	copies.x, copies.y = medianShapes(cps)
	if len(copies.y) < 3 {
		return copies, nil, "", fmt.Errorf("calibrate: %d shapes of requests run alone that the server logs time, need at least 3 (are they the logs of these runs?)", len(copies.y))
	}
	if copies.coef, err = nnlsFreeIntercept(copies.x, copies.y, true); err != nil {
		return copies, nil, "", fmt.Errorf("calibrate copies: %w", err)
	}
	cc := copies.coef
	kept = pre[:0]
	for _, s := range pre {
		s.y -= cc[copyCopied]*s.x[colCopied] + cc[copyFresh]*s.x[colFresh]
		s.x[colCopied], s.x[colFresh] = 0, 0
		if s.y > 0 {
			kept = append(kept, s)
		}
	}
	dropped := len(pre) - len(kept)
	note = fmt.Sprintf("; copy rates from the server logs (TTFT less the prompt eval time of %d requests run alone, %d shapes, against the bytes copied), taken out of the TTFTs before the prompt fit", len(cps), len(copies.y))
	if dropped > 0 {
		note += fmt.Sprintf(" (%d prompt samples left no time for the call and were dropped)", dropped)
	}
	return copies, kept, note, nil
}

// fitPrompt fits the prompt cost to the prompt samples put in fit's call
// tiers (tiered). A tier whose pair rate fits 0 (no sample in it, or none
// that needs it) is dropped (cleared in fit) and the fit made again
// without it: a config needs a positive rate for each tier it has. note is what it adds to
// the method.
func fitPrompt(pre []calSample, fit *LlamaFit) (prompt shapeFit, tiered []calSample, note string, err error) {
	for {
		tiered = inTiers(pre, *fit)
		prompt.x, prompt.y = medianShapes(tiered)
		if len(prompt.y) < 3 {
			return prompt, nil, "", fmt.Errorf("calibrate: %d prompt shapes measured alone, need at least 3 (replay the calibration trace: kvsim calibrate --gen-trace)", len(prompt.y))
		}
		if prompt.coef, err = nnlsFreeIntercept(prompt.x, prompt.y, true); err != nil {
			return prompt, nil, "", fmt.Errorf("calibrate prompt processing: %w", err)
		}
		switch {
		case fit.SmallCall > 0 && !(prompt.coef[colShort] > 0):
			fit.SmallCall = 0
			note += "; the small-call tier was dropped (its pair rate fitted 0)"
			continue
		case fit.MediumCall > 0 && !(prompt.coef[colMedium] > 0):
			fit.MediumCall = 0
			note += "; the medium-call tier was dropped (its pair rate fitted 0)"
			continue
		}
		return prompt, tiered, note, nil
	}
}

// takeOutAfterPrompt fits the extra time of decode steps after a prompt
// call and, if it found some, takes it out of the decode samples. note
// is what it adds to the method.
func takeOutAfterPrompt(dec []calSample) (curve []llamacpp.AfterPromptPoint, steps int, bins []AfterPromptBin, note string) {
	curve, steps, bins = fitAfterPrompt(dec)
	switch {
	case curve != nil:
		for i := range dec {
			dec[i].y -= meanAfterPrompt(dec[i].steps, curve)
		}
		note = fmt.Sprintf("; decode steps after a prompt call: the medians of %d steps within %d calls of one, against their request's steady steps, in %d context ranges, each fitted as ns * decay^(calls-1) at its median context and taken out of the decode samples before the decode fit", steps, afterPromptCalls, len(bins))
	case bins == nil:
		note = fmt.Sprintf("; decode steps after a prompt call: too few measured (%d steps within %d calls of one, need %d at each distance), not fitted", steps, afterPromptCalls, afterPromptMinSteps)
	default:
		note = fmt.Sprintf("; decode steps after a prompt call: no extra time found (%d steps within %d calls of one)", steps, afterPromptCalls)
	}
	return curve, steps, bins, note
}

// samplesMAPE is the mean absolute percentage error of coef on every
// sample, not only the shapes' medians.
func samplesMAPE(ss []calSample, coef []float64) float64 {
	xs, ys := make([][]float64, len(ss)), make([]float64, len(ss))
	for i, s := range ss {
		xs[i], ys[i] = s.x, s.y
	}
	_, m := fitQuality(xs, ys, coef)
	return m
}

// shapeFit is a fit of the shapes' medians: their features x, times y,
// and the coefficients (intercept first).
type shapeFit struct {
	x    [][]float64
	y    []float64
	coef []float64
}

// medianShapes represents each shape (in order of first appearance) by
// its median request: the one with the median time, with its own
// features (the mean of the middle two, time and features, for an even
// count). A request's time is a linear function of its features up to
// noise, so on noiseless data the representative lies on that function
// exactly, however the repeats' sizes differ; with noise, a stalled
// repeat is never the median.
func medianShapes(ss []calSample) ([][]float64, []float64) {
	groups := map[string][]calSample{}
	var keys []string
	for _, s := range ss {
		if _, ok := groups[s.key]; !ok {
			keys = append(keys, s.key)
		}
		groups[s.key] = append(groups[s.key], s)
	}
	var xs [][]float64
	var ys []float64
	for _, k := range keys {
		g := slices.Clone(groups[k])
		slices.SortStableFunc(g, func(a, b calSample) int { return cmp.Compare(a.y, b.y) })
		mid := g[(len(g)-1)/2 : len(g)/2+1]
		x := make([]float64, len(g[0].x))
		var y float64
		for _, s := range mid {
			for j := range x {
				x[j] += s.x[j] / float64(len(mid))
			}
			y += s.y / float64(len(mid))
		}
		xs = append(xs, x)
		ys = append(ys, y)
	}
	return xs, ys
}

// calSample is one request's sample of a calibration fit: its shape key,
// features and time (ns), and for a prompt sample its new tokens.
type calSample struct {
	key       string
	x         []float64
	y         float64
	newTokens int
	// steps are a decode sample's steps, when its stream timed each one
	// (y is their mean time).
	steps []calStep
}

// calStep is one decode step of a decode sample: its time, its batch and
// context, and how many calls back the last call that ended a prompt was
// (1: the call just before the step's; 0: none in the maxAfterPrompt
// calls before). unsure says that a call since then may have ended a
// prompt unseen (a stream whose first chunk was held back), so after may
// be wrong.
type calStep struct {
	dt     float64
	batch  int   // the generating requests in the step
	ctx    int64 // the step's context: every generating request's tokens
	after  int
	unsure bool
}

// The columns of a prompt sample's features, and of the prompt fit.
const (
	colCalls  = iota // prompt calls: the fixed cost, a0 (the free intercept)
	colNew           // new tokens, a1
	colPairs         // attention pairs at a2: causal, or with tiles the tiled ones
	colCopied        // bytes copied to or from the RAM cache
	colFresh         // saved bytes beyond the RAM cache's high-water mark
	colShort         // pairs of a small call, or with tiles of fewer rows than a tile
	colMedium        // pairs of a medium call
	numPromptCols
)

// The columns of a copy sample (a request's TTFT less its prompt eval
// time, from the server log) and of the copy fit.
const (
	copyOther  = iota // the intercept: what is neither prompt call nor copy
	copyCopied        // bytes copied to or from the RAM cache
	copyFresh         // saved bytes beyond the RAM cache's high-water mark
)

// inTiers returns the prompt samples with each one's pairs moved from
// colPairs to the column of its pair-rate tier: colShort for a small
// call, colMedium for a medium one. The tier goes by the prompt's new
// tokens; the simulator decides per call, which differs only for a prompt
// longer than -b whose last chunk is small. With tiles promptFeatures has
// already put the short pairs in colShort.
func inTiers(pre []calSample, fit LlamaFit) []calSample {
	if fit.Tile > 0 {
		return pre
	}
	out := make([]calSample, len(pre))
	for i, s := range pre {
		s.x = slices.Clone(s.x)
		switch {
		case s.newTokens <= fit.SmallCall:
			s.x[colPairs], s.x[colShort] = 0, s.x[colPairs]
		case s.newTokens <= fit.MediumCall:
			s.x[colPairs], s.x[colMedium] = 0, s.x[colPairs]
		}
		out[i] = s
	}
	return out
}

// llamaSamples are the prompt and decode samples of one calibration run's
// per-request records (see FitLlama), with the run's server log the
// copy samples (see FitLlamaRuns), and the largest mean decode batch
// seen.
func llamaSamples(recs []traces.Record, log []LlamaLogTask, logName string, cfg llamacpp.Config, fit LlamaFit) (pre, dec, cps []calSample, maxB float64, err error) {
	copied, err := llamaCopies(recs, cfg)
	if err != nil {
		return nil, nil, nil, 0, err
	}
	taskOf, failed, err := llamaLogTasks(recs, log)
	if err != nil {
		return nil, nil, nil, 0, fmt.Errorf("%s: %w", logName, err)
	}
	ok, spans := measuredSpans(recs)
	flights, blind := inFlight(recs)
	times, held := tokenTimes(recs, ok, spans)
	tl := newCallTimeline(spans, times, held)
	for n, i := range ok {
		r, o, s := &recs[i], recs[i].Observed, spans[n]
		// A stream with fewer chunks than tokens had tokens held back
		// (the server sends no incomplete UTF-8 character): its first
		// chunk may come steps after the first token and a gap may span
		// several steps, so it gives no sample (it still counts as a
		// request in flight for the others).
		if held[n] {
			continue
		}
		alone := ranAlone(flights, i, s)
		cp := copied[r.ID]
		startKey, tagged := startShape(r, cp)
		// A prompt whose last chunk is one token (a full hit: one new
		// token) is not a prompt sample: the model charges that token as
		// a decode token (llamacpp.CPUCost.CallTime), which the prompt
		// features cannot express.
		if alone && o.CachedTokens >= 0 && o.CachedTokens < r.InputLen && (r.InputLen-o.CachedTokens-1)%cfg.Batch+1 != 1 {
			x := promptFeatures(int64(r.InputLen), int64(o.CachedTokens), cfg, fit.Tile)
			// One column for the bytes copied either way: a save into
			// memory the cache has held before and a restore (into the
			// slot's KV, allocated at start) are the same copy, and the
			// verbose log timed them alike (0.17-0.28 and 0.19-0.35 ns per
			// byte), where a restore rate of its own swung from 0 to 1.06
			// between calibrations.
			x[colCopied] = float64(cp.Saved + cp.Restored)
			x[colFresh] = float64(cp.Fresh)
			if y := o.TTFT - fit.RequestDelay; y > 0 {
				pre = append(pre, calSample{key: startKey, x: x, y: float64(y), newTokens: r.InputLen - o.CachedTokens})
			}
		}
		if t, ok := taskOf[i]; ok && alone && o.CachedTokens >= 0 && t.HasEval {
			if err := checkPairing(r, t, logName, failed); err != nil {
				return nil, nil, nil, 0, err
			}
			if y := o.TTFT - t.PromptEvalNs; y > 0 {
				cps = append(cps, calSample{key: startKey, x: []float64{1, float64(cp.Saved + cp.Restored), float64(cp.Fresh)}, y: float64(y)})
			}
		}
		if r.OutputLen < 2 || s.end <= s.first {
			continue
		}
		key := startKey
		if !tagged {
			key = fmt.Sprintf("%d/%d", r.InputLen, r.OutputLen)
		}
		x, y, b, steps, good := decodeSample(recs, ok, spans, blind, times, tl, n)
		if !good {
			continue
		}
		maxB = max(maxB, b)
		dec = append(dec, calSample{key: fmt.Sprintf("%s/%.0f", key, math.Round(b)), x: x, y: y, steps: steps})
	}
	return pre, dec, cps, maxB, nil
}

// measuredSpans returns the records that give samples (measured, ok, a
// first token before the end; not the warm-up) and their spans.
func measuredSpans(recs []traces.Record) (ok []int, spans []calSpan) {
	for i := range recs {
		o := recs[i].Observed
		if o == nil || (o.Status != "ok" && o.Status != "") || recs[i].Kind == "warmup" || o.TTFT <= 0 || o.E2E < o.TTFT {
			continue
		}
		ok = append(ok, i)
		a := recs[i].Arrival
		spans = append(spans, calSpan{a, a + o.TTFT, a + o.E2E})
	}
	return ok, spans
}

// calFlight is a request in flight, by record index, from send to end.
type calFlight struct {
	i          int
	start, end int64
}

// inFlight returns every request sent, also those that give no sample
// (one without a TTFT still ran beside the others), and of those the
// ones that give no span (blind: no first token seen).
func inFlight(recs []traces.Record) (flights []calFlight, blind []calSpan) {
	for i := range recs {
		o := recs[i].Observed
		if o == nil {
			continue
		}
		if end := max(o.E2E, o.TTFT); end > 0 {
			flights = append(flights, calFlight{i, recs[i].Arrival, recs[i].Arrival + end})
			if o.TTFT <= 0 || o.E2E < o.TTFT || (o.Status != "ok" && o.Status != "") {
				blind = append(blind, calSpan{recs[i].Arrival, recs[i].Arrival, recs[i].Arrival + end})
			}
		}
	}
	return flights, blind
}

// tokenTimes returns times[n], the stream times of request ok[n]'s
// tokens: its first token, then one per inter-token latency (nil without
// ITLs); and held[n], whether its stream had fewer chunks than tokens.
func tokenTimes(recs []traces.Record, ok []int, spans []calSpan) (times [][]int64, held []bool) {
	times = make([][]int64, len(ok))
	for n, i := range ok {
		o := recs[i].Observed
		if len(o.ITL) == 0 {
			continue
		}
		t := spans[n].first
		times[n] = append(make([]int64, 0, len(o.ITL)+1), t)
		for _, d := range o.ITL {
			t += d
			times[n] = append(times[n], t)
		}
	}
	held = make([]bool, len(ok))
	for n, i := range ok {
		o := recs[i].Observed
		held[n] = len(o.ITL) > 0 && len(o.ITL)+1 < recs[i].OutputLen
	}
	return times, held
}

// ranAlone says whether no other request was in flight between record
// i's send and its first token.
func ranAlone(flights []calFlight, i int, s calSpan) bool {
	for _, f := range flights {
		if f.i != i && f.start < s.first && f.end > s.start {
			return false
		}
	}
	return true
}

// startShape is the shape of a prompt or copy sample: the calibration
// trace's records by their nominal shape (the ID without the repeat;
// tagged); other records by their sizes, where a fresh prompt can share
// its first token or two with a slot by chance: cached counts within 16
// tokens are one shape; so are copies within 4 KiB.
func startShape(r *traces.Record, cp llamacpp.Copies) (key string, tagged bool) {
	key, tagged = shapeTag(r.ID)
	if !tagged {
		key = fmt.Sprintf("%d/%d/%d/%d/%d", r.InputLen, (r.Observed.CachedTokens+8)/16, cp.Saved>>12, cp.Restored>>12, cp.Fresh>>12)
	}
	return key, tagged
}

// checkPairing checks that the log's task t evaluated the prompt tokens
// of request r it is paired with: at least one (the last again on a full
// hit).
func checkPairing(r *traces.Record, t LlamaLogTask, logName string, failed int) error {
	o := r.Observed
	n := max(1, r.InputLen-o.CachedTokens)
	if t.PromptEvalTokens == n {
		return nil
	}
	hint := ""
	if failed > 0 {
		hint = fmt.Sprintf(" (%d requests of the run failed; one that never reached the server has no task and shifts the pairing: run the calibration again)", failed)
	}
	return fmt.Errorf("%s:%d: task %d evaluated %d prompt tokens, but request %s, paired with it, has %d new (%d prompt tokens, %d cached): is this the log of this run?%s", logName, t.Line, t.Task, t.PromptEvalTokens, r.ID, n, r.InputLen, o.CachedTokens, hint)
}

// llamaLogTasks pairs a run's records with the tasks of its server log (nil
// without one), by record index: the server launches tasks in the order
// the requests reach it, so the records that were sent, in send order, are
// the log's last tasks (a replay's warm-up request comes first). Requests
// sent together may launch in another order among themselves; a request
// that ran alone is where the send order puts it, and llamaSamples checks
// each one it uses against its task's evaluated tokens.
func llamaLogTasks(recs []traces.Record, log []LlamaLogTask) (taskOf map[int]LlamaLogTask, failed int, err error) {
	if log == nil {
		return nil, 0, nil
	}
	var sent []int
	for i := range recs {
		if o := recs[i].Observed; o != nil {
			sent = append(sent, i)
			if o.Status != "ok" && o.Status != "" {
				failed++
			}
		}
	}
	slices.SortStableFunc(sent, func(a, b int) int { return cmp.Compare(recs[a].Arrival, recs[b].Arrival) })
	if len(log) < len(sent) {
		return nil, failed, fmt.Errorf("%d tasks for %d requests sent: is it the log of this run?", len(log), len(sent))
	}
	log = log[len(log)-len(sent):]
	taskOf = make(map[int]LlamaLogTask, len(sent))
	for k, i := range sent {
		taskOf[i] = log[k]
	}
	return taskOf, failed, nil
}

// llamaCopies returns the slot state bytes each request's start saved to
// and restored from the RAM cache, by running the records (in send order)
// through the llamacpp model with cfg. The cost model is a token one:
// cache decisions do not depend on time for requests sent one after
// another, and the prompt samples use only those.
func llamaCopies(recs []traces.Record, cfg llamacpp.Config) (map[string]llamacpp.Copies, error) {
	var in []traces.Record
	for i := range recs {
		if o := recs[i].Observed; o != nil && (o.Status == "ok" || o.Status == "") {
			in = append(in, recs[i])
		}
	}
	slices.SortStableFunc(in, func(a, b traces.Record) int { return cmp.Compare(a.Arrival, b.Arrival) })
	s, err := llamacpp.New(cfg, &llamacpp.CPUCost{Fitted: hw.Fitted{Prefill: [4]float64{1, 1, 0, 0}, Decode: [3]float64{1, 1, 0}}})
	if err != nil {
		return nil, fmt.Errorf("calibrate: %w", err)
	}
	if _, err := s.Run(engine.NewSliceSource(in)); err != nil {
		return nil, fmt.Errorf("calibrate: replaying the cache decisions: %w", err)
	}
	out := make(map[string]llamacpp.Copies, len(in))
	for i := range in {
		if c, ok := s.CopyBytesOf(in[i].ID); ok {
			out[in[i].ID] = c
		}
	}
	return out, nil
}

// calSpan is a request's send time, first token and end, in ns.
type calSpan struct{ start, first, end int64 }

// decodeSample is the decode sample of request ok[n]: the features (1,
// batch, total context) and time of its decode steps, averaged, with the
// mean batch. With the stream times of every request's tokens (times), a
// step is the gap between two of its tokens; steps during which another
// request was still processing its prompt are left out (their call carried
// that prompt too); each step's batch is the requests generating at its
// start and its context their prompts and the tokens they had streamed by
// then, one more each (the token being decoded). Without them the steps
// are taken as one: (E2E - TTFT) / (output - 1), with the time-weighted
// mean batch and context over [first, end), other requests' outputs
// generated at an even pace. Steps while a request without a first token
// (blind: failed, or no TTFT) was in flight are left out too. good is
// false when no step is left.
//
// With stream times, steps are the steps taken, each with the calls before
// it that ended a prompt (calStep, from tl).
func decodeSample(recs []traces.Record, ok []int, spans, blind []calSpan, times [][]int64, tl *callTimeline, n int) (x []float64, y, batch float64, steps []calStep, good bool) {
	r, s := &recs[ok[n]], spans[n]
	// A request in flight without a first token seen (blind) could have
	// had its prompt or its tokens in any step while it ran: those steps
	// give no sample.
	unseen := func(a, z int64) bool {
		for _, t := range blind {
			if t.start < z && t.end > a {
				return true
			}
		}
		return false
	}
	if tt := times[n]; len(tt) >= 2 {
		var sum [3]float64
		var sy float64
	gaps:
		for k := 1; k < len(tt); k++ {
			a, z := tt[k-1], tt[k]
			if unseen(a, z) {
				continue
			}
			var b, c float64
			for m, t := range spans {
				if m != n && t.start < z && t.first > a {
					continue gaps // another prompt rode along
				}
				if t.first > a || t.end <= a {
					continue
				}
				q := &recs[ok[m]]
				streamed := 1 // the first token
				if tm := times[m]; tm != nil {
					streamed, _ = slices.BinarySearch(tm, a+1)
				} else if t.end > t.first {
					streamed += int(float64(q.OutputLen-1) * float64(a-t.first) / float64(t.end-t.first))
				}
				b++
				c += float64(q.InputLen + streamed)
			}
			sum[0]++
			sum[1] += b
			sum[2] += c
			sy += float64(z - a)
			after, unsure := tl.after(z)
			steps = append(steps, calStep{dt: float64(z - a), batch: int(b), ctx: int64(c), after: after, unsure: unsure})
		}
		if len(steps) == 0 {
			return nil, 0, 0, nil, false
		}
		f := float64(len(steps))
		return []float64{sum[0] / f, sum[1] / f, sum[2] / f}, sy / f, sum[1] / f, steps, true
	}
	if unseen(s.first, s.end) {
		return nil, 0, 0, nil, false
	}
	var w, wc float64
	for m, t := range spans {
		lo, hi := max(s.first, t.first), min(s.end, t.end)
		if hi <= lo {
			continue
		}
		q := &recs[ok[m]]
		frac := 1.0
		if t.end > t.first {
			frac = (float64(lo+hi)/2 - float64(t.first)) / float64(t.end-t.first)
		}
		w += float64(hi - lo)
		wc += float64(hi-lo) * (float64(q.InputLen) + frac*float64(q.OutputLen))
	}
	d := float64(s.end - s.first)
	o := r.Observed
	return []float64{1, w / d, wc / d}, float64(o.E2E-o.TTFT) / float64(r.OutputLen-1), w / d, nil, true
}

// callTol is how far apart two requests' tokens can reach the client and
// still come from one llama_decode call: the server samples every slot of
// a call before it answers any, and two calls are at least a decode step
// (over a millisecond for the tiny model) apart.
const callTol = 500_000

// maxAfterPrompt is how many calls back callTimeline.after looks for prompt
// calls: as far as the simulator charges them (maxAfterPromptDecay^48 is
// below 0.01).
const maxAfterPrompt = llamacpp.MaxAfterPrompt

// maxAfterPromptDecay bounds the decay fitAfterPrompt tries.
const maxAfterPromptDecay = 0.9

// callTimeline is a run's llama_decode calls as the client saw them: every
// token of every stream, grouped into calls (tokens within callTol of the
// previous one came from one call), in time order, whether a request's
// first token came in each (a prompt ended in it), and whether the first
// chunk of a stream that held tokens back came in it (unsure: the server
// sends no incomplete UTF-8, so that request's prompt may have ended in an
// earlier call, unmarked). Calls whose only tokens belong to requests
// without a timed stream (failed, or without a first token) are not seen,
// nor is a prompt chunk that does not end its prompt when no slot decodes
// beside it: after counts the calls seen, and on the calibration trace
// these are rare.
type callTimeline struct {
	start          []int64 // the first token time of each call
	prompt, unsure []bool
}

// newCallTimeline groups the requests' token times (times, or the first
// token alone for a request without them) into calls; held[n] says that
// request n's stream held tokens back.
func newCallTimeline(spans []calSpan, times [][]int64, held []bool) *callTimeline {
	type tok struct {
		at          int64
		first, held bool
	}
	var all []tok
	for n, s := range spans {
		all = append(all, tok{s.first, !held[n], held[n]})
		if len(times[n]) > 1 {
			for _, t := range times[n][1:] {
				all = append(all, tok{at: t})
			}
		}
	}
	slices.SortFunc(all, func(a, b tok) int { return cmp.Compare(a.at, b.at) })
	tl := &callTimeline{}
	last := int64(math.MinInt64)
	for _, t := range all {
		if len(tl.start) == 0 || t.at-last > callTol {
			tl.start = append(tl.start, t.at)
			tl.prompt = append(tl.prompt, false)
			tl.unsure = append(tl.unsure, false)
		}
		last = t.at
		c := len(tl.start) - 1
		tl.prompt[c] = tl.prompt[c] || t.first
		tl.unsure[c] = tl.unsure[c] || t.held
	}
	return tl
}

// after returns, for the call in which a token came at time z, how many
// calls back the last earlier call that ended a prompt was (1: the call
// just before; 0: none up to maxAfterPrompt calls back), and whether the
// call itself or a call since that one was unsure.
func (tl *callTimeline) after(z int64) (after int, unsure bool) {
	c, found := slices.BinarySearch(tl.start, z)
	if !found {
		c-- // z came within the call that starts before it
	}
	unsure = tl.unsure[c]
	for p := c - 1; p >= 0 && c-p <= maxAfterPrompt; p-- {
		if tl.prompt[p] {
			return c - p, unsure
		}
		unsure = unsure || tl.unsure[p]
	}
	return 0, unsure
}

// fitAfterPrompt measures how much longer decode steps take in the calls
// after a prompt call, against the steps' context. For each decode sample
// with timed steps, a line through its steady steps' (no prompt call
// within afterPromptCalls calls before) times against their context
// (Theil-Sen: the median slope of all pairs, robust to a stalled step),
// one line per batch size the request decoded in, gives the time a step
// of that batch would take without prompt calls (with three steady steps
// of it or more), and a step j calls after its last prompt call took the
// rest more (only the last prompt call counts, as in the simulator). The
// context, not the token's position: the requests beside this one change,
// and their prompts' sizes with them. The steps are put in ranges of
// afterPromptBin context tokens, merged until each has
// afterPromptMinSteps steps at every j = 1 .. afterPromptCalls; in each
// range the medians of the extras are fitted, by least squares, as ns *
// decay^(j-1) (decay on a grid of 0.01 up to maxAfterPromptDecay, ns in
// closed form), a point of the curve at the range's median context. The
// fit is repeated, each round taking the previous one's extra time out of
// the steady steps (which still carry a little of it) before it draws
// their lines again, until the curve stays the same or afterPromptRounds.
// Unsure steps (calStep) take no part. The curve is nil when no range has a positive
// extra, or when too few steps were measured for one range (bins is then
// nil). steps counts the steps measured; bins are the last round's ranges.
func fitAfterPrompt(dec []calSample) (curve []llamacpp.AfterPromptPoint, steps int, bins []AfterPromptBin) {
	type measured struct {
		ctx   int64
		j     int
		extra float64
	}
	for range afterPromptRounds {
		last := curve
		var all []measured
		for _, s := range dec {
			// One line per batch size: a request's batch changes when
			// another finishes or starts beside it.
			type line struct{ xs, ys []float64 }
			lines := map[int]*line{}
			for _, st := range s.steps {
				if !st.unsure && (st.after == 0 || st.after > afterPromptCalls) {
					l := lines[st.batch]
					if l == nil {
						l = &line{}
						lines[st.batch] = l
					}
					l.xs = append(l.xs, float64(st.ctx))
					l.ys = append(l.ys, st.dt-stepAfterPrompt(st, curve))
				}
			}
			fitted := map[int][2]float64{}
			for _, st := range s.steps {
				if st.unsure || st.after == 0 || st.after > afterPromptCalls {
					continue
				}
				ab, ok := fitted[st.batch]
				if !ok {
					l := lines[st.batch]
					if l == nil || len(l.ys) < 3 {
						continue
					}
					ab[0], ab[1] = theilSen(l.xs, l.ys)
					fitted[st.batch] = ab
				}
				all = append(all, measured{st.ctx, st.after, st.dt - (ab[0] + ab[1]*float64(st.ctx))})
			}
		}
		steps = len(all)
		slices.SortStableFunc(all, func(x, y measured) int { return cmp.Compare(x.ctx, y.ctx) })
		// The ranges: afterPromptBin tokens wide, merged up to
		// afterPromptMinSteps steps at each distance; the rest joins the
		// last range.
		bins = bins[:0]
		var groups [][]measured
		var n [afterPromptCalls]int
		start := 0
		for i, m := range all {
			n[m.j-1]++
			binEnd := i+1 == len(all) || all[i+1].ctx/afterPromptBin != m.ctx/afterPromptBin
			if binEnd && slices.Min(n[:]) >= afterPromptMinSteps {
				groups = append(groups, all[start:i+1])
				start, n = i+1, [afterPromptCalls]int{}
			}
		}
		if len(groups) == 0 {
			return nil, steps, nil
		}
		if start < len(all) {
			g := len(groups) - 1
			groups[g] = all[start-len(groups[g]):]
		}
		curve = nil
		for _, g := range groups {
			byCall := make([][]float64, afterPromptCalls)
			ctx := make([]float64, len(g))
			for i, m := range g {
				byCall[m.j-1] = append(byCall[m.j-1], m.extra)
				ctx[i] = float64(m.ctx)
			}
			bin := AfterPromptBin{Context: int64(math.Round(median(ctx))), From: g[0].ctx / afterPromptBin * afterPromptBin,
				To: (g[len(g)-1].ctx/afterPromptBin + 1) * afterPromptBin, Steps: len(g)}
			for _, e := range byCall {
				bin.Extra = append(bin.Extra, median(e))
			}
			bins = append(bins, bin)
			ns, decay := fitDecay(bin.Extra)
			curve = append(curve, llamacpp.AfterPromptPoint{Context: bin.Context, Ns: ns, Decay: decay})
		}
		if !slices.ContainsFunc(curve, func(p llamacpp.AfterPromptPoint) bool { return p.Ns > 0 }) {
			return nil, steps, bins
		}
		if slices.EqualFunc(curve, last, func(a, b llamacpp.AfterPromptPoint) bool {
			return a.Context == b.Context && a.Decay == b.Decay && math.Abs(a.Ns-b.Ns) <= 1e-6*b.Ns
		}) {
			break
		}
	}
	return curve, steps, bins
}

// afterPromptRounds bounds the rounds of fitAfterPrompt: each takes the
// last round's extra out of the steady steps, until the curve stays the
// same (within a millionth).
const afterPromptRounds = 30

// fitDecay fits extra[j-1] as ns * decay^(j-1) by least squares: decay on
// a grid of 0.01 up to maxAfterPromptDecay, ns >= 0 in closed form.
func fitDecay(extra []float64) (ns, decay float64) {
	best := math.Inf(1)
	for g := 0; float64(g) <= 100*maxAfterPromptDecay; g++ {
		r := float64(g) / 100
		var num, den float64
		for j, e := range extra {
			w := math.Pow(r, float64(j))
			num += e * w
			den += w * w
		}
		a := max(0, num/den)
		var sse float64
		for j, e := range extra {
			d := e - a*math.Pow(r, float64(j))
			sse += d * d
		}
		if sse < best {
			best, ns, decay = sse, a, r
		}
	}
	if ns == 0 {
		decay = 0
	}
	return ns, decay
}

// stepAfterPrompt is the extra time curve gives a step after its last
// prompt call, j calls back: ns * decay^(j-1), ns and decay at the step's
// context (0 without a prompt call within maxAfterPrompt calls).
func stepAfterPrompt(st calStep, curve []llamacpp.AfterPromptPoint) float64 {
	if st.after == 0 || len(curve) == 0 {
		return 0
	}
	ns, decay := llamacpp.AfterPromptAt(curve, st.ctx)
	return ns * math.Pow(decay, float64(st.after-1))
}

// theilSen fits y = a + b*x: b the median of the slopes of all pairs of
// points with distinct x, a the median of y - b*x.
func theilSen(xs, ys []float64) (a, b float64) {
	var slopes []float64
	for i := range xs {
		for j := i + 1; j < len(xs); j++ {
			if xs[j] != xs[i] {
				slopes = append(slopes, (ys[j]-ys[i])/(xs[j]-xs[i]))
			}
		}
	}
	if len(slopes) > 0 {
		b = median(slopes)
	}
	rest := make([]float64, len(xs))
	for i := range xs {
		rest[i] = ys[i] - b*xs[i]
	}
	return median(rest), b
}

// meanAfterPrompt is the mean extra time curve gives steps (see
// stepAfterPrompt).
func meanAfterPrompt(steps []calStep, curve []llamacpp.AfterPromptPoint) float64 {
	if len(steps) == 0 {
		return 0
	}
	var w float64
	for _, st := range steps {
		w += stepAfterPrompt(st, curve)
	}
	return w / float64(len(steps))
}

// median returns the middle value of v (the mean of the middle two for an
// even count: engine.Percentile's 50th); it sorts v.
func median(v []float64) float64 {
	slices.Sort(v)
	return engine.Percentile(v, 50)
}

// shapeTag is the nominal shape of a calibration trace record: its ID
// without the repeat ("cold-512-r3" and "batch3-64-r2-1" give "cold-512"
// and "batch3-64"), and false for an ID that is not one of
// LlamaCalibrationTrace's kinds or does not end in a repeat.
func shapeTag(id string) (string, bool) {
	i := strings.LastIndex(id, "-r")
	if i <= 0 {
		return "", false
	}
	kind, _, _ := strings.Cut(id, "-")
	switch strings.TrimRight(kind, "0123456789") {
	case "cold", "base", "ext", "back", "first", "hit", "batch", "long", "lead", "mid":
	default:
		return "", false // not a calibration trace record
	}
	rest := id[i+2:]
	if j := strings.IndexByte(rest, '-'); j >= 0 {
		if !allDigits(rest[j+1:]) {
			return "", false
		}
		rest = rest[:j]
	}
	if !allDigits(rest) {
		return "", false
	}
	return id[:i], true
}

func allDigits(s string) bool {
	for _, c := range []byte(s) {
		if c < '0' || c > '9' {
			return false
		}
	}
	return s != ""
}

// promptFeatures are the prompt features of a request alone with input
// tokens, cached of them in its slot: its calls of at most -b new tokens,
// the new tokens, and the attention pairs, all causal in colPairs or, with
// tiles, the tiled ones there and the short ones in colShort
// (llamacpp.Attention over each call, micro-batches of -ub). The copy
// columns are left to the caller.
func promptFeatures(input, cached int64, cfg llamacpp.Config, tile int) []float64 {
	x := make([]float64, numPromptCols)
	for left := input - cached; left > 0; {
		n := min(left, int64(cfg.Batch))
		x[colCalls]++
		x[colNew] += float64(n)
		if tile > 0 {
			tiled, short := llamacpp.Attention([]llamacpp.Chunk{{New: n, Cached: cached}}, cfg.UbatchSize(), tile)
			x[colPairs] += tiled
			x[colShort] += short
		} else {
			x[colPairs] += hw.PrefillFeatures([]hw.Extend{{New: n, Cached: cached}})[2]
		}
		cached += n
		left -= n
	}
	return x
}

// WriteLlamaTOML writes a complete llama-server config: engine, the
// server arguments of cfg and the fitted [llamacpp.cost], preceded by
// comments that say where the fit came from and how well it fits. The
// config is configs' EngineSection and LlamaSection marshalled with
// go-toml, so its keys are the ones configs reads; the coefficients have
// six significant digits.
func (c *LlamaCalibration) WriteLlamaTOML(w io.Writer, cfg llamacpp.Config, source string) error {
	var doc struct {
		Engine configs.EngineSection `toml:"engine"`
		Llama  configs.LlamaSection  `toml:"llamacpp"`
	}
	doc.Engine.Kind = configs.EngineLlamaCpp
	doc.Llama.Config = cfg
	doc.Llama.SlotPromptSimilarity = round6(cfg.SlotPromptSimilarity)
	k := c.Cost
	restore := round6(k.StateRestore)
	doc.Llama.Cost = configs.LlamaCost{
		Fitted: roundFitted(k.Fitted), StateCopy: round6(k.StateCopy), StateFresh: round6(k.StateFresh), StateRestore: &restore,
		SmallCall: k.SmallCall, SmallPair: round6(k.SmallPair), MediumCall: k.MediumCall, MediumPair: round6(k.MediumPair),
		Tile: k.Tile, ShortPair: round6(k.ShortPair), Delay: k.Delay,
	}
	for _, p := range k.AfterPromptCurve {
		doc.Llama.Cost.AfterPromptCurve = append(doc.Llama.Cost.AfterPromptCurve, configs.AfterPromptPoint{Context: p.Context, Ns: round6(p.Ns), Decay: round6(p.Decay)})
	}
	var b strings.Builder
	fmt.Fprintf(&b, `llama-server model fitted by kvsim calibrate from %s
prompt processing: %d requests run alone, %d shapes: MAPE %.2f%% on shape medians, %.2f%% on all requests
decode:            %d requests, %d shapes (mean batch up to %.2f): MAPE %.2f%% on shape medians, %.2f%% on all requests
`, source, c.PrefillSamples, c.PrefillShapes, c.PrefillMAPE, c.PrefillMAPEAll,
		c.DecodeSamples, c.DecodeShapes, c.MaxBatch, c.DecodeMAPE, c.DecodeMAPEAll)
	if c.CopySamples > 0 {
		fmt.Fprintf(&b, "copies (server logs): %d requests run alone, %d shapes: MAPE %.2f%% on shape medians; %.3g ms of each TTFT is neither call nor copy\n",
			c.CopySamples, c.CopyShapes, c.CopyMAPE, c.CopyOtherNs/1e6)
	}
	fmt.Fprintf(&b, "%s.\n", c.Method)
	b.WriteString(`[llamacpp.cost]:
prompt call ns = a0 + a1*new_tokens + a2*pairs (+ a3*chunks: 0, one prompt per call here): causal pairs,
or with tile_size the pairs of the blocks llama.cpp's tiled kernel computes
decode ns      = b0 + b1*generating_slots + b2*context_tokens (a mixed call pays max(a0, b0) once)
a task start's copies of slot states to and from the RAM cache: state_copy_ns_per_byte per byte
saved, state_fresh_ns_per_byte more per saved byte beyond the cache's high-water mark (new
memory), state_restore_ns_per_byte per byte restored
a request reaches the server loop request_delay_ns after it is sent (not fitted: kvsim
calibrate --request-delay; taken out of the TTFTs before the fit)
`)
	if k.SmallCall > 0 {
		b.WriteString("a call of at most small_call_tokens tokens pays small_call_pair_ns per prompt pair instead of prefill[2]\n")
	}
	if k.Tile > 0 {
		b.WriteString("attention by llama.cpp's kernels: a slot's prompt rows in a micro-batch (-ub) pay prefill[2] per pair of the\ntile_size x tile_size blocks the tiled kernel computes, or short_pair_ns per causal pair when fewer than tile_size\n")
	}
	if k.MediumCall > 0 {
		b.WriteString("a call of more than small_call_tokens and at most medium_call_tokens tokens pays medium_call_pair_ns\n")
	}
	if len(k.AfterPromptCurve) > 0 {
		b.WriteString("[[llamacpp.cost.after_prompt]]: a decode-only call over c context tokens, j calls (of any kind) after a call in\nwhich a prompt ended, takes ns * decay^(j-1) more, ns and decay linear in c between these points and the end\npoints' beyond them\n")
	}
	return writeTOML(w, b.String(), &doc)
}
