// Package traces defines kvsim's request record and reads, writes and
// generates LLM request traces.
//
// # The record
//
// A [Record] is one request: when it arrives (integer nanoseconds since the
// trace start), which session and turn it belongs to and which earlier
// request it depends on, its prompt (exact token ids, or one hash per block
// of tokens), its output length, and optionally sampling parameters and the
// results observed when the trace was captured.
//
// Block hashes are prefix hashes: block i's hash stands for all tokens up
// to the end of block i, so equal hashes mean equal prefixes. The prompt
// length is always [Record.InputLen]; the last block may be partial.
//
// # Reading
//
// [Open] and [NewReader] return a [Reader] whose Next method streams
// records in arrival order and returns io.EOF at the end. The format is
// detected from the content of the first record when not given ([Detect]);
// gzip and zstd input is decompressed transparently. Bad input gives a
// [*ParseError] with path, line, column and field; it matches
// [ErrBadRecord] with errors.Is, and reading can go on with the next
// record. Readers never panic.
//
// The grammar of each format is in docs/trace-formats.md.
//
// # Determinism
//
// Nothing here reads the clock or a global random source: generators take
// an explicit seed, and output never depends on map iteration order.
package traces
