// Package sim is kvsim's discrete-event model of an SGLang server with
// hierarchical caching (HiCache): given a configuration, a cost model and a
// trace, it predicts which prompt tokens hit on the device or the host, when
// each request gets its first token and finishes, how much moves over PCIe,
// and how full each tier is over time.
//
// # Engine
//
// Time is virtual, in integer nanoseconds. Events (arrivals, the end of a
// forward pass, a transfer landing while the GPU idles, timeline samples)
// sit in a heap ordered by (time, sequence), where the sequence is bumped at
// every schedule, so simultaneous events run in scheduling order. Idle time
// is skipped, never stepped. There is no wall clock, no goroutine, no map
// iteration that reaches a decision: the same configuration, cost model and
// trace give identical results whatever GOMAXPROCS is.
//
// # The server
//
// One scheduler drives one GPU (or one TP group) the way SGLang's event loop
// does. Arrivals join the waiting queue. Every iteration first acknowledges
// finished host copies (writing_check, loading_check), then tries to build
// a prefill batch (get_new_batch_prefill), and only if there is none runs
// one decode step for the running batch (prefill first). Admission follows
// SGLang's PrefillAdder: the queue is ordered by the policy (fcfs, lpm with
// its fall-back to fcfs above 128 waiting, dfs-weight, lof, or a seeded
// random shuffle); each request is matched (at most prompt-1 tokens, page
// aligned), and admitted while free + evictable device tokens, minus the
// running requests' decode reservations scaled by new_token_ratio, cover its
// new tokens and its clipped max_new_tokens, within max_prefill_tokens and
// chunked_prefill_size (one chunked request at a time) and
// max_running_requests. Host hits are loaded back (all or nothing, at least
// 10 tokens). The new tokens of all admitted requests are then allocated,
// evicting when the pool is short; decode allocates one token per request
// per step, and when free + evictable cannot cover a step, requests are
// retracted (fewest outputs, then longest prompts, first) and new_token_ratio
// is reset; it decays by (init - min)/600 per step otherwise and resets when
// the server idles.
//
// The cache operations happen at SGLang's points: insert after a prompt's
// last prefill forward (cache_unfinished_req) and after every intermediate
// chunk (chunked, uncounted), and at finish with prompt + output - 1 tokens
// (cache_finished_req); duplicates of what the tree already had are freed,
// and the request's lock moves to the deepest inserted node. cached_tokens
// is counted once, at the first admission: the device hit plus the host hit
// that was loaded back.
//
// # Tiers and transfers
//
// The device pool has a capacity per owner lane; the host pool likewise.
// Write-through copies are queued on the device-to-host link one after
// another and keep their node locked until an iteration after they land;
// write-back copies at eviction stall the scheduler for their transfer time.
// Load-backs queued during admission are merged into one host-to-device copy
// that starts with the prefill forward and overlaps it layer by layer: the
// forward takes max(compute, copy + compute/layers).
//
// # Storage tier (L3)
//
// With [StorageConfig] enabled (it needs a host tier), HiCache's storage
// backend is modelled as a set of pages with an optional capacity (exact
// LRU beyond it, or Mooncake Store's eviction rounds with lookup leases,
// StorageMooncake), a read link and a write link (bandwidth per rank plus a fixed
// latency per call of up to 128 pages). A page is identified by its exact
// path: the prefix before it plus its own contents, so lookups have SGLang's
// chained-hash semantics without collisions: contiguous from the prefix's
// start, stopping at the first missing page. The store is a compressed trie
// of page runs (views of the tree's own keys) with a per-page LRU order, so
// its cost grows with runs, not pages.
//
// Backup (L2 -> L3): when a write-through copy is acknowledged, or a
// write-back copy is made, the node's pages that storage lacks are queued on
// the write link; the node's host copy is protected from host eviction until
// the write is acknowledged at the start of a later iteration. An idle
// scheduler with a storage tier wakes for these acknowledgements, as
// SGLang's polling loop would see them.
//
// Prefetch (L3 -> L2), at arrival (SGLang's _prefetch_kvcache): the request
// is matched; if its deepest matched node is backed up (or is the root),
// storage is asked for the pages after the device + host hit (one call per
// 128 pages, up to the first miss, charged before reading starts). A hit of
// at least prefetch_threshold tokens (at least a page), when reservations
// are below the prefetch capacity limit (half the host pool), gets host
// tokens reserved for it (all or nothing, after one host eviction) and is
// read batch by batch on the read link, FIFO with other prefetches. At
// admission the policy decides: best_effort ends the prefetch with the
// batches read so far; wait_complete skips the request (others may pass it)
// until every batch is read; timeout skips it until then or until
// min(max, base + per_ki_token * hit/1024) has passed since the prefetch
// started. The read part is inserted as a host-only leaf (tree.InsertHost),
// the rest of the reservation released, and the request's match then sees
// it as a host hit, loaded back with its prefill. cached_tokens splits into
// device, host and storage parts; the storage part is what the request's
// own prefetch brought in and was loaded back.
//
// When memory is short, SGLang's eviction (strategy order until the
// allocation is covered, evicting the full allocation size) runs for one
// lane; with several owner lanes the owner-lane planner (package planner)
// chooses the victims that cover each lane's deficit, from a snapshot of the
// unlocked device nodes with their per-lane counts and SLRU keys.
//
// # Results
//
// An [engine.Result] holds every request's times and cached tokens, the
// run's metric set in the field names of SGLang's serving benchmarks
// ([engine.Summarize]), the counters of cache and transfer activity, and an
// occupancy timeline. [Online] is this model's [engine.Engine] and
// [Factory] its [engine.Factory]: the types and the driving contract are
// shared with every other server model (package sim/engine).
//
// # Disaggregation
//
// [Online.SetPrefillMode] and [Online.SetDecodeMode] make a server one
// side of SGLang's prefill/decode disaggregation, driven by package fleet:
// a prefill server forces max_new_tokens to 1 and reports the end of each
// prefill forward of a request (with [Online.HoldUntilSent] it then holds
// the request's KV and tree lock until [Online.KVSent]); a decode server (chunk cache, or a radix
// cache without a host tier) keeps requests in a preallocation queue
// until the new prompt tokens + reserved fit beside the reservations of
// the requests it holds, allocates them (after its radix hit), waits for
// [Online.KVReady], emits the first token in a
// prebuilt batch of no forward, and decodes. [Online.Abort] fails a
// request on either side: one waiting (or a prefill chunked between
// forwards) at once, one in a prefill forward at its end, freeing its KV
// and its tree lock. A regular server runs none of this.
//
// # Simplifications
//
// docs/model.md lists what kvsim models differently from SGLang and why:
// overlap scheduling and CUDA-graph effects are not modelled (each forward
// runs alone); the in-batch prefix-caching check of cache-aware policies is
// not modelled; with several owner lanes the admission budget sums the
// lanes; a request that can never fit fails instead of hanging the server.
package sim
