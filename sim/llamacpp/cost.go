package llamacpp

import (
	"cmp"
	"math"
	"slices"

	"github.com/kvsim/kvsim/sim/hw"
)

// CostModel gives the duration of one llama_decode call, in nanoseconds.
type CostModel interface {
	// CallTime is the time of one call of the chunks, in batch order, with
	// micro-batches of at most ubatch tokens (-ub). The chunks say which
	// slot each belongs to: llama.cpp splits a call into micro-batches by
	// sequence ([Attention]), and the attention kernel a chunk takes
	// depends on its rows in each.
	CallTime(call []Chunk, ubatch int) int64
}

// RequestDelayer is implemented by cost models that delay each request
// between its arrival and the moment the server loop can start it.
type RequestDelayer interface {
	// RequestDelay is that delay, in nanoseconds (>= 0).
	RequestDelay() int64
}

// StateCopier is implemented by cost models that charge for copying slot
// states to and from the host-RAM prompt cache. Without it copies are free.
type StateCopier interface {
	// CopyTime is the time of the copies of slot state c to and from the
	// RAM cache, in nanoseconds.
	CopyTime(c Copies) int64
}

// AfterPrompter is implemented by cost models whose decode-only calls run
// slower for a few calls after a call in which a prompt ended.
type AfterPrompter interface {
	// AfterPrompt is, for a decode-only call over context tokens (the
	// positions its generating slots read: each slot's tokens, the one it
	// decodes included), the extra time of such a call made just after a
	// prompt call, in ns (>= 0), and the factor (in [0, 1)) by which it
	// falls with each call after that. The last prompt call counts: the
	// extras of several do not add up.
	AfterPrompt(context int64) (ns, decay float64)
}

// AfterPromptPoint is the after-prompt term ([AfterPrompter]) of a
// decode-only call over Context tokens.
type AfterPromptPoint struct {
	Context int64   `json:"context_tokens"` // >= 0, ascending in a curve
	Ns      float64 `json:"ns"`             // >= 0
	Decay   float64 `json:"decay"`          // in [0, 1)
}

// AfterPromptAt is the after-prompt term of a call over context tokens on
// curve, points in ascending Context: linear between the two points around
// it, the first point's below the curve, the last point's above it (0, 0
// for an empty curve). A negative or NaN Ns counts as 0, a decay outside
// [0, 1) or NaN as 0 (configs reject both).
func AfterPromptAt(curve []AfterPromptPoint, context int64) (ns, decay float64) {
	if len(curve) == 0 {
		return 0, 0
	}
	i, _ := slices.BinarySearchFunc(curve, context, func(p AfterPromptPoint, c int64) int { return cmp.Compare(p.Context, c) })
	switch {
	case i == 0:
		ns, decay = curve[0].Ns, curve[0].Decay
	case i == len(curve):
		ns, decay = curve[i-1].Ns, curve[i-1].Decay
	default:
		a, b := curve[i-1], curve[i]
		f := float64(context-a.Context) / float64(b.Context-a.Context)
		ns, decay = a.Ns+f*(b.Ns-a.Ns), a.Decay+f*(b.Decay-a.Decay)
	}
	if !(ns > 0) || math.IsInf(ns, 1) {
		ns = 0
	}
	if !(decay > 0 && decay < 1) {
		decay = 0
	}
	return ns, decay
}

// CPUCost is a llama.cpp-on-CPU cost model with hw.Fitted's coefficients:
// the prompt part costs a1 per new token, a2 per causal (query, key) pair
// and a3 per prompt chunk; the decode part b1 per generating slot and b2
// per context token; the call's fixed cost is a0 for a prompt-only call,
// b0 for a decode-only call and the larger of the two for a mixed call.
// [Fitted] coefficients from `kvsim calibrate` plug in unchanged. StateCopy
// is the time per byte of slot state saved to the RAM cache
// (llama_state_seq_get_data into a new buffer) and StateRestore per byte
// restored from it (llama_state_seq_set_data into the slot's KV); 0 leaves
// them free. StateFresh is what a saved byte costs more when it lies beyond
// the RAM cache's high-water mark (Copies.Fresh): memory the server process
// has never touched, whose pages fault in as the copy writes them, where
// memory freed by states that left the cache is reused without faults. On
// llama-server b11669's verbose log (the chat trace at -np 4), saves of
// 1.3 to 3 MB took 0.56-1.04 ns per byte while the cache grew and
// 0.17-0.28 once restores had freed memory; restores (into the slot's KV,
// allocated at start) took 0.19-0.35 ns per byte.
//
// SmallCall is the size, in tokens (prompt and decode together), up to
// which a call's prompt pairs cost SmallPair each instead of a2. On
// llama-server's CPU backend a short prompt behind a long cached prefix
// costs much more per (query, key) pair than a long prompt, about what a
// decode step pays per context token (32 new tokens behind 1024 cached:
// 22-26 ms measured, 14 ms at a2). The bound is 63 on llama.cpp b11669:
// behind 1024 cached tokens, 60 to 63 new tokens took 58-68 ms (medians of
// three) and 64 took 33 ms, about the 65-68 and 124-132 rates. SmallCall 0
// turns the rule off.
//
// Delay is the time from a request's arrival (the client's send) until
// the server loop can start its task: llama-server's HTTP thread reads and
// parses the request and posts the task. A request that arrives just as a
// call starts then waits Delay less for that call to end. On the server's
// log, the next task of a concurrency-1 run is selected 1.0-1.1 ms after
// the previous request's last token, about 0.2 ms of which is the
// response's way to the client and the client's next send.
//
// MediumCall and MediumPair are a second tier: a call of more than
// SmallCall and at most MediumCall tokens pays MediumPair per pair. The
// cost per pair keeps falling with the call's size past 64 tokens: behind
// 800-1400 cached tokens, about 300 ns per pair at 80-100 new tokens, 190
// at 180, 200 at 550. Calibrations of six sessions put MediumPair for
// 64-127 tokens at 244-339 ns where a2 was 200-235. MediumCall 0 turns
// the tier off.
//
// With Tile > 0 the attention part follows llama.cpp's CPU kernels instead
// of the call-size tiers (SmallCall and MediumCall are then 0), through
// [CPUCost.CallTime]: the call is split into micro-batches by sequence
// ([Attention]); in each, a prompt chunk's rows of at least Tile pay
// Prefill[2] per pair of the Tile x Tile blocks the tiled kernel computes
// (the last block of rows padded: 80 new tokens are computed as 128 rows),
// and fewer rows pay ShortPair per causal pair (the per-row kernel).
// llama.cpp b11669 tiles by 64 (GGML_FA_TILE_Q) and takes the per-row
// kernel below 64 rows of one sequence in a micro-batch; this is why 60 to
// 63 new tokens behind 1024 cached took 58-68 ms and 64 took 33 ms, and
// why the cost per pair fell with the call's size from 64 to 127 tokens
// (the medium tier's 244-339 ns against 200-235). Refitting the
// calibration runs of five fidelity runs both ways, the tiles predicted
// the traces' prompt times at concurrency 1 (server log) with 13.8% MAPE
// against the tiers' 14.5%, with one rate fewer.
//
// AfterPromptCurve slows down the decode-only calls that follow a call in
// which a prompt ended (a request sampled its first token): a decode-only
// call over c context tokens, j calls after it (counting calls of every
// kind), takes ns(c) * decay(c)^(j-1) more, ns and decay read off the
// curve ([AfterPromptAt], [AfterPrompter]), j counted from the last
// prompt call (up to 48 calls back): a step after two or three prompt calls
// in a row is no slower than after one. On llama-server b11669 with -t 1, the
// decode steps of the calibration runs of six fidelity runs took 1.1, 0.6,
// 0.3 and 0.17 ms more (medians) in the first four calls after a prompt
// call than a fit of the steady steps; in the chat trace at -np 4 the real
// steps took about 1.4, 1.1 and 0.9 ms more than the model without the
// term, whose steady steps were within 5-15%. Both the extra and how long
// it lasts grow with the step's context: in the calibration runs of five
// fidelity runs, 0.66, 0.20 and 0.04 ms (j = 1, 2, 3) below 1000 context
// tokens, 1.61, 0.84 and 0.49 at 1000-1999 and 1.61, 1.22 and 0.83 at
// 2000-2999, where chat's steps of that size took 1.51, 1.18 and 0.84.
// The cause is not known (the CPU's caches refilling after the prompt's
// working set is one candidate). Without the term the decode fit, made
// from requests with one prompt call at their start, spreads it over all
// steps, and a trace whose requests see several prompt calls while they
// decode comes out short: chat's decode-only time by 12-18%. An empty
// curve turns it off.
type CPUCost struct {
	hw.Fitted
	StateCopy    float64 // ns per byte saved, >= 0
	StateFresh   float64 // ns more per byte saved into memory the RAM cache has not held before, >= 0
	StateRestore float64 // ns per byte restored, >= 0
	SmallCall    int     // tokens, >= 0
	SmallPair    float64 // ns per pair in a small call, >= 0
	MediumCall   int     // tokens, > SmallCall or 0
	MediumPair   float64 // ns per pair in a medium call, >= 0
	Tile         int     // the tiled attention kernel's tile, in rows (0: the pair-count model above)
	ShortPair    float64 // ns per causal pair of fewer than Tile rows, >= 0
	Delay        int64   // ns from a request's arrival until the server loop sees its task, >= 0
	// AfterPromptCurve is the after-prompt term against the decode call's
	// context, in ascending Context.
	AfterPromptCurve []AfterPromptPoint
}

// AfterPrompt implements AfterPrompter: AfterPromptAt on the curve.
func (c *CPUCost) AfterPrompt(context int64) (ns, decay float64) {
	return AfterPromptAt(c.AfterPromptCurve, context)
}

// RequestDelay implements RequestDelayer.
func (c *CPUCost) RequestDelay() int64 { return max(0, c.Delay) }

// pairRate is the cost per prompt (query, key) pair of a call of tokens
// tokens.
func (c *CPUCost) pairRate(tokens int) float64 {
	switch {
	case tokens <= c.SmallCall:
		return c.SmallPair
	case tokens <= c.MediumCall:
		return c.MediumPair
	}
	return c.Prefill[2]
}

// CallTime implements CostModel. A one-token prompt chunk (a full hit's
// last token, evaluated again) is charged as a decode token: it is the same
// work, one query row against its slot's context, and on llama-server
// b11669 a full hit behind 300 cached tokens took 1.3-1.5 ms of prompt eval
// (server log), a decode step's time, where the prompt call's fixed cost
// alone is about 2 ms. The fixed cost is a0 for a call with a prompt chunk,
// b0 for a decode-only one and the larger for a mixed one; a prompt token
// costs a1, a prompt chunk a3, a decode token b1 and each token of its
// context b2. The prompt chunks' attention is, with Tile 0, pairRate per
// causal pair (the rate of the call's size: prompt and decode tokens), and
// with tiles Prefill[2] per tiled pair and ShortPair per short one
// ([Attention]). round(max(0, t)) ns, 0 for an empty call.
func (c *CPUCost) CallTime(call []Chunk, ubatch int) int64 {
	var decodes, chunks int
	var context, tokens int64
	var pairs float64
	oneToken := false
	for _, ch := range call {
		switch {
		case ch.decodeToken():
			decodes++
			context += ch.Cached + 1
			oneToken = oneToken || !ch.Decode
		case ch.New > 0:
			chunks++
			tokens += ch.New
			pairs += causalPairs(ch.New, ch.Cached)
		}
	}
	var t float64
	switch {
	case chunks > 0 && decodes > 0:
		t = max(c.Prefill[0], c.Decode[0])
	case chunks > 0:
		t = c.Prefill[0]
	case decodes > 0:
		t = c.Decode[0]
	default:
		return 0
	}
	if chunks > 0 {
		t += c.Prefill[1]*float64(tokens) + c.Prefill[3]*float64(chunks)
		if c.Tile > 0 {
			split := call
			if oneToken {
				split = slices.Clone(call)
				for i := range split {
					split[i].Decode = split[i].decodeToken()
				}
			}
			tiled, short := Attention(split, ubatch, c.Tile)
			t += c.Prefill[2]*tiled + c.ShortPair*short
		} else {
			t += c.pairRate(int(tokens)+decodes) * pairs
		}
	}
	if decodes > 0 {
		t += c.Decode[1]*float64(decodes) + c.Decode[2]*float64(context)
	}
	return int64(math.Round(max(0, t)))
}

// callContext is the context of a call's decode tokens: the positions
// their slots read, each slot's cached tokens and the one it decodes (a
// full hit's one-token chunk counts as a decode token).
func callContext(call []Chunk) int64 {
	var context int64
	for _, ch := range call {
		if ch.decodeToken() {
			context += ch.Cached + 1
		}
	}
	return context
}

// CopyTime implements StateCopier: round(Saved * StateCopy + Fresh *
// StateFresh + Restored * StateRestore) ns.
func (c *CPUCost) CopyTime(k Copies) int64 {
	return int64(math.Round(max(0, float64(k.Saved)*c.StateCopy+float64(k.Fresh)*c.StateFresh+float64(k.Restored)*c.StateRestore)))
}

// TinyCPU returns CPUCost coefficients measured for the tiny random-weight
// model (internal/gguf preset "tiny": 256 hidden, 4 layers, f16) on
// llama-server b11669 with -t 2 on this project's 2-vCPU machines, by
// e2e's TestMeasureCPUCost (go test -tags e2e -run TestMeasureCPUCost -v
// ./e2e/) on 2026-11-30: minimum of three runs per point, least squares on
// relative error, 13 prompt points (16 to 2000 new tokens, 0 to 1536
// cached) and 11 decode points (batch 1 to 4, context 16 to 1900 per
// slot). The machine was shared (load average 4 to 6 on 2 vCPUs): the fit
// leaves 37% (prompt) and 31% (decode) mean absolute error on its own
// points, so these are a starting point for `kvsim calibrate`, not a
// calibration.
//
//	prompt call = 1.84 ms + 57.9 µs per new token + 186 ns per causal pair
//	decode step = 0.45 ms + 124 µs per generating slot + 0.52 µs per context token
func TinyCPU() *CPUCost {
	return &CPUCost{Fitted: hw.Fitted{
		Prefill: [hw.NumPrefillFeatures]float64{1.84447e6, 57852.8, 185.951, 0},
		Decode:  [hw.NumDecodeFeatures]float64{452420, 123932, 516.749},
	}}
}
