// Package replay sends request traces to an LLM server or to the simulator
// and measures every request the way SGLang's serving benchmarks do, so
// that a real server and kvsim's simulation can be put side by side on the
// same workload ([Compare]); its per-request traces are what package
// calibrate fits the simulator's costs to. It also serves the simulator
// over HTTP ([Server]) and records live traffic as a trace ([Proxy]).
//
// # Model
//
// A [Replayer] drives a [Target] from a slice of [traces.Record]s
// ([Replayer.Run]) or from a record source read as the schedule reaches
// each record ([Replayer.RunStream]: the pacer forgets a record when it
// finishes, results are handed out in per-request-trace order as soon as
// nothing can come before them, and the summary is built from 64 bytes a
// record, exactly). The
// Target is declared here, where it is used: [HTTPTarget] speaks SGLang's
// native POST /generate (input_ids) or the OpenAI-compatible
// /v1/completions (token-id prompt) and /v1/chat/completions (text) with
// streaming; [SimTarget] is the simulator in process. Optional capabilities are small separate interfaces:
// [Flusher] (empty the prefix cache) and [Describer] (server info, model
// name).
//
// Time comes from an injected [Clock]: [WallClock] for real servers and
// testing/synctest's fake time in tests. Measurements are recorded, never
// fed back into any simulation. A [Replayer] whose target is a
// [SimTarget] does not use the clock: it runs single-threaded in the
// simulator's virtual time (an [engine.Engine] from the configured
// [engine.Factory]: sim.Online for SGLang, llamacpp.Online for
// llama-server), applying the same pacing
// decisions (one clock-free pacer serves both runners) at simulated
// instants, and measures each request from the simulator's token events
// through the same recorder as an HTTP stream, so every output (table,
// JSON, per-request trace) is produced the same way and is byte-identical
// from run to run.
//
// # Prompts
//
// Records with exact token ids are sent as they are. Hash-block traces
// (Mooncake, Bailian, WEKA) become exactly InputLen tokens through
// [traces.PromptTokens], deterministic in the hashes, so shared prefixes
// stay shared. Length-only traces (Azure) get tokens unique to each
// request (no prefix sharing: their cache hit rate says nothing about the
// workload). Output lengths below 1 are sent as 1. Without sampling
// parameters a record is sent greedy (temperature 0) with ignore_eos, as
// the benchmarks do, so the output length is exact.
//
// # Pacing
//
// [PaceASAP] sends everything at once, [PaceTimestamps] at the trace's
// arrival times divided by Speedup, [PaceRate] at seeded Poisson or
// uniform arrivals (seeded by Config.Seed). On top of the schedule, a record whose
// Parent or WaitFor names an earlier record waits for it to finish
// (success or failure) and, under PaceTimestamps, for its ThinkTime /
// Speedup after its Parent finished (a WaitFor gate adds no delay); then
// for one of MaxConcurrency slots, granted in
// record order. Per request, Due is when the schedule and dependencies
// released it, Slot when a slot was free, Start when it was handed to the
// target. Start - Slot is the client's own lateness, reported as mean, p99
// and max: the check that arrivals were kept on schedule. Slot - Due is
// the wait imposed by the concurrency cap.
//
// # Metrics
//
// Exactly as bench_serving.py / bench_warm_cache.py compute them, with
// [engine.Summarize] and [engine.Percentile]: TTFT is the time from Start to the
// first streamed chunk that carries output; each later chunk that adds k
// tokens adds k inter-token latencies of gap/k (gap since the previous
// such chunk); E2E is Start to the end of the stream ([DONE]); TPOT is
// (E2E - TTFT) / (output - 1) for outputs over one token; the output
// length is the last chunk's cumulative completion-token count. Means,
// medians, population std, p90 and p99 (numpy's linear interpolation);
// throughputs over the time from the first send to the last completion;
// concurrency = sum of E2E / duration. cache_hit_rate is sum(cached_tokens)
// / sum(prompt_tokens) over the completed requests whose server reported
// both (nil when none did). Failed requests are counted by reason
// ([RequestError]); warm-up records (Kind "warmup") are sent but not
// measured.
//
// # Faults
//
// A refused connection, an HTTP error status, a stall (the per-request
// Timeout), a stream cut before [DONE], a malformed or error event, or a
// server abort each fail that request alone, with a reason; the run goes
// on. Cancelling Run's context stops sending; requests in flight get
// Config.Drain to finish and are then cancelled ("interrupted"); unsent
// requests are counted as not sent. Run always returns what was measured.
//
// # Benchmarks
//
// [WarmCache] is bench_warm_cache.py's exact shared-prefix sweep;
// [MultiTurn] is bench_multiturn.py's closed-loop multi-turn chat
// (history grows by the server's own output ids when it returns them).
//
// # Serving, capturing, comparing
//
// [Server] answers SGLang's /generate and OpenAI's completions and chat
// APIs from one goroutine that owns an engine.Engine, streaming tokens at
// their simulated times scaled to the wall clock, or as fast as possible;
// output ids are [OutputTokens] of the prompt, as in SimTarget, so a
// closed-loop replay against it reproduces the in-process target's cached
// tokens exactly. Its /metrics asks the loop for the engine's series when
// a client reads them (never at a step), and its counters survive
// /flush_cache; a shutdown that cuts requests returns a [CutError].
// [Proxy] forwards to a server and writes every
// generation request, with what it measured, to a kvsim trace.
// [Compare] sets two runs side by side (every metric, per-request MAPE
// and Pearson r, hit-rate difference); [ResultsFromTrace] reads a
// per-request trace back for offline comparisons.
//
// # Not done here
//
// No tokenizer: the *_retokenized fields of the benchmarks are not
// computed, and chat prompts are token ids rendered as words
// (one common English word per id). The client does not retry failed requests. The drain
// timer runs on the wall clock.
package replay
