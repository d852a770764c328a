// Package llamacpp is kvsim's model of llama.cpp's llama-server, a second
// server model beside the SGLang one in package sim. It predicts, for a
// request trace, which prompt tokens the server takes from its cache
// (cached_tokens, timings.cache_n), and when each request gets its first
// token and finishes. Every rule below was checked against the real server
// (llama.cpp b11669, Debian's llama.cpp-tools 0.7.0) by the probes in
// e2e/probes_test.go; e2e/llama/PROBES.md records what was sent and what
// came back, and docs/fidelity.md where the model differs.
//
// # Slots
//
// The server has -np slots; without --kv-unified (the default when -np is
// given) each owns -c / -np tokens of context and keeps, after a request,
// the KV of that request's prompt and output, minus the last sampled token
// (never decoded): prompt + output - 1 tokens.
//
// A new request (a task) takes an idle slot (get_available_slot):
//
//  1. the idle slot whose tokens share the longest common prefix with the
//     prompt, if that prefix is more than --slot-prompt-similarity (0.10)
//     of the prompt (strictly; float32 as the server computes it);
//  2. else the least recently released idle slot; never-used slots first,
//     the lowest id on ties.
//
// When every slot is busy the task waits (deferred) and tasks start in
// arrival order as slots free up. The request then keeps the common prefix
// of the slot's tokens and computes the rest; when the whole prompt is
// there, the last prompt token is evaluated again anyway (its logits are
// needed), so cached_tokens = prompt - 1 on a full hit; that token costs
// what a decode token costs (CPUCost.CallTime). A prompt longer
// than a slot's context fails (the server answers HTTP 400); generation
// stops when the slot's context is full (no context shift by default).
//
// # The RAM prompt cache (--cache-ram)
//
// Whole slot states (token sequence plus KV: StateBytesPerToken per token)
// live in a host-RAM list, oldest first, limited to --cache-ram MiB:
//
//   - a slot chosen by LRU, or by similarity but keeping less than half of
//     its tokens, first saves its state, then takes the cached state that
//     keeps at least a quarter of itself (f_keep >= 0.25) and beats the
//     slot's own on both the fraction of itself kept and the fraction of
//     the prompt matched (the first best in list order); a restored state
//     leaves the list;
//   - when a task starts, every other idle slot's state is saved too
//     (--cache-idle-slots, on by default; the slot keeps its KV);
//   - a save is skipped when a cached state already has the new one as a
//     prefix, removes cached states that are prefixes of the new one, is
//     refused when larger than the whole limit, and evicts the oldest
//     states to make room.
//
// cached_tokens counts restored tokens like any others; [engine.RequestResult]
// splits them into CachedDevice (the slot's own KV) and CachedHost
// (restored from RAM).
//
// # Continuous batching
//
// The server loop runs one llama_decode call at a time. Each call holds one
// token for every slot that is generating, then prompt tokens of the slots
// still processing their prompt, in slot order, up to -b tokens in all: a
// long prompt is processed in chunks that share calls with the other
// slots' decode tokens. At the end of a call each generating slot samples
// its next token (streamed at once) and a slot whose prompt is complete
// samples its first token. Tasks that arrived during a call start before
// the next call is built.
//
// # Time
//
// A [CostModel] gives each call's duration. [CPUCost] is linear in
// hw.Fitted's coefficients: per new prompt token, per causal attention
// pair, per prompt chunk; per generating slot and per context token; one
// fixed cost per call; a call of at most CPUCost.SmallCall tokens pays its
// own rate per attention pair (short prompts behind long cached prefixes
// run attention much like decode steps; on llama.cpp b11669 below 64
// query tokens), and a call of at most CPUCost.MediumCall tokens a second
// rate (the cost per pair keeps falling with the call's size); with
// CPUCost.Tile, the attention follows llama.cpp's kernels instead, over
// the micro-batches llama.cpp splits the call into ([Attention]). A cost
// model that is a [RequestDelayer] (CPUCost with a Delay) holds each
// request that long between its arrival and the server loop (HTTP and
// JSON work of the server's HTTP thread). A cost model that is also a
// [StateCopier] (CPUCost with
// a StateCopy per byte saved and a StateRestore per byte restored)
// charges the RAM-cache saves and restores of the tasks a loop turn
// starts: the server copies before it builds the next call, and tasks
// that arrive while it copies start in the same turn, so their prompts
// join that call (llama-server's queue loop takes every waiting task
// before it runs update_slots). A cost model that is an [AfterPrompter]
// (CPUCost with an AfterPromptCurve) makes the decode-only calls after a
// call in which a prompt ended slower, by an extra that falls by a factor
// with each call; both the extra and the factor depend on the decode
// call's context. [TinyCPU] holds coefficients measured on
// this project's 2-vCPU machines with the tiny model (see its comment);
// `kvsim calibrate` fits all of them, the copy rates included.
//
// # API
//
// [New] and [Sim.Run] simulate a whole [engine.Source], pulling its records
// one at a time; with [Sim.Stream] (Factory.Sink) each result goes to a
// sink as its request finishes instead of being kept, and the summary is
// built as they finish ([engine.Stats]), so a run's memory follows the
// requests in flight, not the trace's length. [NewOnline] gives an
// [engine.Engine] (Submit, Next, RunUntil, Finish) so replay can drive
// either server model. Results are [engine.Result]s (per request
// [engine.RequestResult], [engine.Summarize]'s metrics); [Stats] counts
// the cache decisions. Prompts come from [traces.PromptTokens] with
// Config.Vocab, the same ids replay sends, so simulated and real prefixes
// match token for token; outputs are the trace's OutputTokens when it has
// them, else ids that match no prompt.
//
// # Not modelled
//
// --kv-unified (the default only when -np is not given), context shift,
// --cache-reuse (KV shifting), speculative decoding, multimodal prompts,
// context checkpoints (SWA and recurrent models only), explicit id_slot
// requests, HTTP and tokenisation overheads, and the -ub micro-batch split
// inside a call (folded into the cost model).
package llamacpp
