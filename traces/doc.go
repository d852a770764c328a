// Package traces defines kvsim's request record and reads, writes,
// generates and summarises LLM request traces.
//
// # The record
//
// A [Record] is one request: when it is sent (integer nanoseconds since the
// trace start), which session and turn it belongs to and which earlier
// requests it waits for ([Record.Parent], [Record.WaitFor], with the
// client's [Record.ThinkTime]), its prompt, its output length, and
// optionally sampling parameters and the results observed when the trace
// was captured ([Observed]).
//
// The prompt is either exact token ids ([Record.Tokens]) or one hash per
// block of [Record.BlockSize] tokens ([Record.Blocks]). Block hashes are
// prefix hashes: block i's hash stands for all tokens up to the end of block
// i, so equal hashes mean equal prefixes. The prompt length is always
// [Record.InputLen]; the last block may be partial or, in formats that hash
// full blocks only, absent. Within one [Reader]'s output hash ids are
// unambiguous across files and conversations. [PromptTokens] turns a hash
// record into exactly InputLen deterministic token ids for a real server.
//
// # Reading and writing
//
// [Open], [OpenFiles] and [NewReader] return a [Reader] whose Next method
// streams records in arrival order and returns io.EOF at the end. Formats:
// Mooncake, Alibaba Qwen-Bailian, WEKA agentic sessions, Azure LLM
// inference CSV, token-id JSONL and kvsim's own JSONL ([Format]). The format
// is detected from the first record when not given ([Detect]); gzip and
// zstd input is decompressed transparently. Every reader reads its input
// once and only peeks ahead (never seeks), so pipes work; Open("-") reads
// standard input. [Writer] writes the kvsim
// format; every reader's output round-trips through it unchanged.
//
// Bad input gives a [*ParseError] with path, line, column and field; it
// matches [ErrBadRecord] with errors.Is, and reading can go on with the next
// record. Readers never panic (fuzzed by FuzzRead<Format>).
//
// Memory: the line formats hold one record at a time (Bailian adds one map
// entry per request to link conversations); WEKA conversations are merged
// by arrival across files, so they are held whole.
//
// # Generators
//
// [GenerateChat], [GenerateRoundRobin], [GenerateSharedPrefix] and
// [GenerateWarmCache] build the synthetic workloads of SGLang's HiCache
// benchmarks (bench_multiturn.py, bench_serving.py's multi-turn and
// shared-prefix modes, bench_warm_cache.py) as exact token ids from a
// seeded math/rand/v2 PCG. They record dependencies, not completion times:
// gating a turn on its parent is the replayer's job.
//
// # Statistics
//
// [ComputeStats] reports lengths, arrivals, sessions and block-level prefix
// hit rates (an unbounded cache and LRUs at fractions of the unique blocks)
// with the procedure of the shared traces' README, so its figures reproduce
// the published Mooncake and ShareGPT numbers. The LRU is O(1) per access.
//
// # What it does not do
//
// It does not tokenize text, model the server, or decide page keys: the
// simulator owns paging. Time is never read from the clock and nothing
// depends on map iteration order. The grammar of each format is in
// docs/trace-formats.md.
package traces
