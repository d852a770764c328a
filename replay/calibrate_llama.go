package replay

import (
	"cmp"
	"errors"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"slices"
	"strconv"

	"github.com/kvsim/kvsim/sim"
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
//     prompts behind a cached prefix of 256 or 1024 tokens (a 1-token
//     request puts the prefix in a slot; the next extends it by 32 to 512
//     new tokens: cost against cached tokens), and full hits (the same
//     prompt again: 1 new token after many cached);
//   - batches of 2 to Slots unrelated prompts sent together (each batch
//     waits for the previous one), 64 or 512 tokens with 64 outputs: decode
//     steps at batch 2..Slots.
//
// Every shape is repeated Repeats times with fresh prompts, after an
// unmeasured warm-up pass of the one-at-a-time phase (Kind "warmup", IDs
// ending in "-r0"). IDs say what a record measures ("cold-512-r1",
// "ext-1024+256-r2", "batch3-64-r1-2").
func LlamaCalibrationTrace(c LlamaCalibrationConfig) ([]traces.Record, error) {
	if c.Repeats == 0 {
		c.Repeats = 3
	}
	if c.Vocab == (traces.Vocab{}) {
		c.Vocab = traces.DefaultVocab
	}
	var errs []error
	if c.Slots < 1 {
		errs = append(errs, fmt.Errorf("slots: must be >= 1 (got %d)", c.Slots))
	}
	if c.SlotContext < 256 {
		errs = append(errs, fmt.Errorf("slot context: must be >= 256 tokens (got %d)", c.SlotContext))
	}
	if c.Repeats < 1 {
		errs = append(errs, fmt.Errorf("repeats: must be >= 1 (got %d)", c.Repeats))
	}
	if err := c.Vocab.Validate(); err != nil {
		errs = append(errs, fmt.Errorf("vocab: %w", err))
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	rng := rand.New(rand.NewPCG(c.Seed, 0x6c6c616d6163616c)) // "llamacal"
	fresh := func(n int) []int32 {
		out := make([]int32, n)
		for i := range out {
			out[i] = c.Vocab.Lo + int32(rng.IntN(int(c.Vocab.Hi-c.Vocab.Lo)))
		}
		return out
	}
	var recs []traces.Record
	var prev []string // what the next record waits for
	kind := ""        // "warmup" for the unmeasured first pass
	add := func(id string, prompt []int32, out int) {
		recs = append(recs, traces.Record{
			ID: id, Kind: kind, InputLen: len(prompt), Tokens: prompt, OutputLen: out,
			WaitFor: prev, Sampling: &traces.Sampling{IgnoreEOS: true},
		})
	}
	serial := func(id string, prompt []int32, out int) {
		add(id, prompt, out)
		prev = []string{id}
	}
	const coldOut = 32
	maxPrompt := c.SlotContext - coldOut - 16
	lens := []int{16, 64, 128, 256, 512, 1024, 1536}
	lens = slices.DeleteFunc(lens, func(l int) bool { return l > maxPrompt })
	lens = append(lens, maxPrompt)
	// Pass 0 is a warm-up (Kind "warmup": sent, not measured, not fitted)
	// that leaves the slots and the RAM cache as every later pass leaves
	// them, so that each shape's start copies the same slot states in every
	// measured repeat.
	for r := 0; r <= c.Repeats; r++ {
		kind = ""
		if r == 0 {
			kind = "warmup"
		}
		rs := "-r" + strconv.Itoa(r)
		for _, l := range lens {
			serial("cold-"+strconv.Itoa(l)+rs, fresh(l), coldOut)
		}
		for _, base := range []int{256, 1024} {
			for _, ext := range []int{32, 128, 512} {
				if base+ext+1 > c.SlotContext {
					continue
				}
				b := fresh(base)
				tag := strconv.Itoa(base) + "+" + strconv.Itoa(ext) + rs
				serial("base-"+tag, b, 1)
				serial("ext-"+tag, append(slices.Clip(b), fresh(ext)...), 1)
			}
		}
		for _, l := range []int{64, 512, 1500} {
			if l+coldOut > c.SlotContext {
				continue
			}
			p := fresh(l)
			tag := strconv.Itoa(l) + rs
			serial("first-"+tag, p, 1)
			serial("hit-"+tag, p, coldOut)
		}
	}
	kind = ""
	for r := 1; r <= c.Repeats; r++ {
		for k := 2; k <= c.Slots; k++ {
			for _, l := range []int{64, 512} {
				if l+64 > c.SlotContext {
					continue
				}
				var ids []string
				for i := 1; i <= k; i++ {
					id := fmt.Sprintf("batch%d-%d-r%d-%d", k, l, r, i)
					add(id, fresh(l), 64)
					ids = append(ids, id)
				}
				prev = ids
			}
		}
	}
	return recs, nil
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
	Method   string  `json:"method"`
}

// CalibrateLlama fits llamacpp.CPUCost to a per-request trace of the
// calibration trace's replay against a llama-server run with cfg's
// arguments (kvsim replay --per-request; the records' Arrival is each
// request's send time). Two samples per request:
//
//   - Prompt processing: the TTFT of a request that ran alone (no other
//     request in flight between its send and its first token) is the
//     copies of slot states its start made to and from the RAM cache, then
//     the prompt call(s) of its new tokens (prompt - cached) after the
//     cached ones, in chunks of at most -b tokens: a0·calls + a1·new +
//     a2·causal pairs + StateCopy·copied bytes, where a prompt of at most
//     smallCall new tokens (a small call, see llamacpp.CPUCost) has its
//     pairs at SmallPair instead of a2 (smallCall 0: no small calls). The copied bytes come from
//     running the records through the llamacpp model with cfg (its cache
//     decisions are exact for requests that run alone). The fixed part a0
//     also takes the HTTP and sampling time of a request, which only a
//     per-call constant can carry here.
//   - Decode: (E2E - TTFT) / (output - 1), the mean time per decode step
//     of a request with more than one output token, is b0 + b1·B +
//     b2·B·(prompt + output/2), where B is the mean number of requests
//     decoding during its decode (time-weighted, itself included; 1 for a
//     request alone) and prompt + output/2 its mean context: the same-shape
//     batches of the calibration trace decode in lockstep.
//
// Robust to a noisy machine: requests of the same shape (the same prompt
// length, cached tokens within 16, and for decode the same output length
// and rounded batch) are
// repeats, and the fit uses the median of each shape's times (the median,
// not the minimum: the fidelity runs meet the same noise, and the median
// is what a typical request sees). Both fits are non-negative least
// squares with a free intercept on relative errors (Calibrate's solver).
func CalibrateLlama(recs []traces.Record, cfg llamacpp.Config, smallCall int) (*LlamaCalibration, error) {
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("calibrate: %w", err)
	}
	if smallCall < 0 {
		return nil, fmt.Errorf("calibrate: small-call size must be >= 0 (got %d)", smallCall)
	}
	batch := cfg.Batch
	copied, err := llamaCopies(recs, cfg)
	if err != nil {
		return nil, err
	}
	type span struct{ start, first, end int64 }
	var ok []int
	var spans []span
	for i := range recs {
		o := recs[i].Observed
		if o == nil || (o.Status != "ok" && o.Status != "") || recs[i].Kind == "warmup" || o.TTFT <= 0 || o.E2E < o.TTFT {
			continue
		}
		ok = append(ok, i)
		a := recs[i].Arrival
		spans = append(spans, span{a, a + o.TTFT, a + o.E2E})
	}
	type sample struct {
		key string
		x   []float64
		y   float64
	}
	var pre, dec []sample
	maxB := 0.0
	for n, i := range ok {
		r, o, s := &recs[i], recs[i].Observed, spans[n]
		alone := true
		for m, t := range spans {
			if m != n && t.start < s.first && t.end > s.start {
				alone = false
				break
			}
		}
		if alone && o.CachedTokens >= 0 && o.CachedTokens < r.InputLen {
			f := promptFeatures(int64(r.InputLen), int64(o.CachedTokens), int64(batch))
			cb := float64(copied[r.ID])
			x := []float64{f[0], f[1], f[2], cb}
			if smallCall > 0 {
				// The pairs of a small call have their own column.
				x = append(x, 0)
				if r.InputLen-o.CachedTokens <= smallCall {
					x[2], x[4] = 0, f[2]
				}
			}
			// A fresh prompt can share its first token or two with a slot
			// by chance: cached counts within 16 tokens are one shape; so
			// are copies within 4 KiB.
			key := fmt.Sprintf("%d/%d/%d", r.InputLen, (o.CachedTokens+8)/16, int64(cb)>>12)
			pre = append(pre, sample{key, x, float64(o.TTFT)})
		}
		if r.OutputLen < 2 || s.end <= s.first {
			continue
		}
		// Mean decode batch over [first, end): the time-weighted count of
		// requests between their first token and their end.
		var w float64
		for _, t := range spans {
			lo, hi := max(s.first, t.first), min(s.end, t.end)
			if hi > lo {
				w += float64(hi - lo)
			}
		}
		b := w / float64(s.end-s.first)
		maxB = max(maxB, b)
		ctx := float64(r.InputLen) + float64(r.OutputLen)/2
		y := float64(o.E2E-o.TTFT) / float64(r.OutputLen-1)
		dec = append(dec, sample{fmt.Sprintf("%d/%d/%.0f", r.InputLen, r.OutputLen, math.Round(b)), []float64{1, b, b * ctx}, y})
	}
	// median per shape; features averaged over the shape's samples
	shapes := func(ss []sample) ([][]float64, []float64) {
		groups := map[string][]sample{}
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
			g := groups[k]
			x := make([]float64, len(g[0].x))
			var y []float64
			for _, s := range g {
				for j := range x {
					x[j] += s.x[j] / float64(len(g))
				}
				y = append(y, s.y)
			}
			xs = append(xs, x)
			ys = append(ys, median(y))
		}
		return xs, ys
	}
	px, py := shapes(pre)
	dx, dy := shapes(dec)
	if len(py) < 3 {
		return nil, fmt.Errorf("calibrate: %d prompt shapes measured alone, need at least 3 (replay the calibration trace: kvsim calibrate --gen-trace)", len(py))
	}
	if len(dy) < 3 {
		return nil, fmt.Errorf("calibrate: %d decode shapes, need at least 3 (requests with more than one output token)", len(dy))
	}
	pc, err := nnlsFreeIntercept(px, py, true)
	if err != nil {
		return nil, fmt.Errorf("calibrate prompt processing: %w", err)
	}
	dc, err := nnlsFreeIntercept(dx, dy, true)
	if err != nil {
		return nil, fmt.Errorf("calibrate decode: %w", err)
	}
	c := &LlamaCalibration{
		Cost:           llamacpp.CPUCost{Fitted: hw.Fitted{Prefill: [4]float64{pc[0], pc[1], pc[2], 0}, Decode: [3]float64{dc[0], dc[1], dc[2]}}, StateCopy: pc[3]},
		PrefillSamples: len(pre), PrefillShapes: len(py), DecodeSamples: len(dec), DecodeShapes: len(dy), MaxBatch: maxB,
		Method: "median of each shape's repeats, then non-negative least squares (Lawson-Hanson active set, free intercept), relative weights",
	}
	if smallCall > 0 {
		c.Cost.SmallCall, c.Cost.SmallPair = smallCall, pc[4]
	}
	_, c.PrefillMAPE = fitQuality(px, py, pc)
	_, c.DecodeMAPE = fitQuality(dx, dy, dc)
	all := func(ss []sample, coef []float64) float64 {
		xs, ys := make([][]float64, len(ss)), make([]float64, len(ss))
		for i, s := range ss {
			xs[i], ys[i] = s.x, s.y
		}
		_, m := fitQuality(xs, ys, coef)
		return m
	}
	c.PrefillMAPEAll, c.DecodeMAPEAll = all(pre, pc), all(dec, dc)
	if err := c.Cost.Validate(); err != nil {
		return nil, fmt.Errorf("calibrate: %w", err)
	}
	return c, nil
}

// llamaCopies returns the slot state bytes each request's start copied to
// and from the RAM cache, by running the records (in send order) through
// the llamacpp model with cfg. The cost model is a token one: cache
// decisions do not depend on time for requests sent one after another,
// and the prompt samples use only those.
func llamaCopies(recs []traces.Record, cfg llamacpp.Config) (map[string]int64, error) {
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
	if _, err := s.Run(sim.NewSliceSource(in)); err != nil {
		return nil, fmt.Errorf("calibrate: replaying the cache decisions: %w", err)
	}
	out := make(map[string]int64, len(in))
	for i := range in {
		if n, ok := s.CopyBytesOf(in[i].ID); ok {
			out[in[i].ID] = n
		}
	}
	return out, nil
}

// promptFeatures are (calls, new tokens, causal pairs) of processing new
// = input - cached tokens in calls of at most batch tokens.
func promptFeatures(input, cached, batch int64) [3]float64 {
	var x [3]float64
	for left := input - cached; left > 0; {
		n := min(left, batch)
		f := hw.PrefillFeatures([]hw.Extend{{New: n, Cached: cached}})
		x[0]++
		x[1] += f[1]
		x[2] += f[2]
		cached += n
		left -= n
	}
	return x
}

func median(xs []float64) float64 {
	s := slices.Clone(xs)
	slices.Sort(s)
	return sim.Percentile(s, 50)
}

// WriteLlamaTOML writes a complete llama-server config: engine, the
// server arguments of cfg and the fitted [llamacpp.cost], preceded by
// comments that say where the fit came from and how well it fits.
func (c *LlamaCalibration) WriteLlamaTOML(w io.Writer, cfg llamacpp.Config, source string) error {
	small := ""
	if c.Cost.SmallCall > 0 {
		small = fmt.Sprintf("# a call of at most small_call_tokens tokens pays small_call_pair_ns per prompt pair instead of prefill[2]\nsmall_call_tokens = %d\nsmall_call_pair_ns = %s\n",
			c.Cost.SmallCall, tomlFloat(c.Cost.SmallPair))
	}
	p, d := c.Cost.Prefill, c.Cost.Decode
	_, err := fmt.Fprintf(w, `# llama-server model fitted by kvsim calibrate from %s
# prompt processing: %d requests run alone, %d shapes: MAPE %.2f%% on shape medians, %.2f%% on all requests
# decode:            %d requests, %d shapes (mean batch up to %.2f): MAPE %.2f%% on shape medians, %.2f%% on all requests
# %s.
[engine]
kind = "llamacpp"

[llamacpp]
parallel = %d
ctx_size = %d
batch_size = %d
slot_prompt_similarity = %s
cache_ram = %d
no_cache_idle_slots = %t
state_bytes_per_token = %d

[llamacpp.cost]
# prompt call ns = a0 + a1*new_tokens + a2*causal_pairs (+ a3*chunks: 0, one prompt per call here)
# decode ns      = b0 + b1*generating_slots + b2*context_tokens (a mixed call pays max(a0, b0) once)
# a task start's copies of slot states to and from the RAM cache: state_copy_ns_per_byte per byte
prefill = [%s, %s, %s, %s]
decode = [%s, %s, %s]
state_copy_ns_per_byte = %s
%s`, source, c.PrefillSamples, c.PrefillShapes, c.PrefillMAPE, c.PrefillMAPEAll,
		c.DecodeSamples, c.DecodeShapes, c.MaxBatch, c.DecodeMAPE, c.DecodeMAPEAll, c.Method,
		cfg.Slots, cfg.Context, cfg.Batch, tomlFloat(cfg.SlotPromptSimilarity), cfg.CacheRAMMiB, cfg.NoCacheIdleSlots, cfg.StateBytesPerToken,
		tomlFloat(p[0]), tomlFloat(p[1]), tomlFloat(p[2]), tomlFloat(p[3]),
		tomlFloat(d[0]), tomlFloat(d[1]), tomlFloat(d[2]), tomlFloat(c.Cost.StateCopy), small)
	return err
}
