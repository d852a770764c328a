// Package tree is kvsim's model of what is cached where: SGLang's paged radix
// tree of prompt prefixes (RadixCache) with HiCache's host tier
// (HiRadixCache), owner lanes for context parallelism, lock accounting, and
// SGLang's eviction orders. It counts tokens; it holds no KV data and has no
// notion of time beyond the timestamps the caller passes in. Transfers are
// state changes here; when they finish is the simulator's business.
//
// # Keys and pages
//
// A key is a sequence of whole pages ([PageID]); a page is PageSize tokens.
// Callers turn prompts into keys with a [Pager], which cuts a prompt down to
// whole pages (the unaligned tail is never cached, as in SGLang) and gives
// equal pages equal ids exactly: token pages are interned by content, and
// pages of block-hash traces (Mooncake's 512-token hash_ids, say) by the
// blocks that cover them; a pager's single user may let it forget the
// blocks it no longer holds ([Pager.Forget]), so that a long trace's block
// table follows the cache, not the trace. Matching compares whole pages and
// stops at the first page that differs; a node that matches only in part is
// split, and the new upper node copies the lower one's locks, hit count,
// priority and residency (SGLang's _split_node).
//
// Inside the tree a key is held as runs of consecutive page ids
// ([PageRun]), and [Tree.MatchRuns], [Tree.InsertRuns] and
// [Tree.InsertFromRuns] take keys in that form: a block-hash prompt is a
// few runs however long it is (its blocks' pages, and the blocks first seen
// together), so matching, inserting and splitting cost per run, not per
// page, and nothing is copied page by page. Any cut of the same pages into
// runs is the same key. A node whose key averages under two pages a run
// (token pages, interned by content, rarely come in runs) keeps it one id a
// page instead, which costs less; [Node.Pages] gives either form one id a
// page.
//
// # Node state
//
// Every node is on the device, on the host, or both (SGLang's value and
// host_value). Device residency is prefix-closed along every root-to-leaf
// path, so a match looks like [device nodes][host-only nodes]; under the
// write-through policies host residency is prefix-closed too (a node is
// copied to host only if its parent already is). Each node keeps a lock
// count (a lock pins the node's whole path to the root), its last access
// (simulated time, plus a tree-wide stamp that orders accesses exactly, as
// SGLang's monotonic clock does), its creation, its hit count (counted on
// non-chunked inserts only, and not at all under write-back with a host
// tier), its request priority, and its id.
//
// The tree keeps SGLang's accounts, per owner lane: evictable tokens
// (device, unlocked) and protected tokens (device, locked); device tokens in
// the tree plus tokens held by requests outside it ([Tree.Reserve]) never
// exceed a lane's device capacity, and host tokens in the tree plus tokens
// reserved for in-flight storage prefetches ([Tree.ReserveHost]) never
// exceed its host capacity. A node's host protection count
// ([Tree.ProtectHost]) keeps host eviction away from it; unlike a lock it
// is the node's own, not its path's, and a split leaves it with the lower
// node (which keeps the upper one from being a leaf).
//
// # Owner lanes
//
// With CP = c lanes (context-parallel ranks), logical page k of a sequence
// belongs to lane k mod c ([LanePages], the default), or token p to lane
// p mod c ([LaneTokens], as SGLang's decode context parallelism stripes
// KV). Every node knows its tokens per lane, and capacity is per lane: a lane
// can run out while others have room. The owner-lane planner (package
// planner) chooses device victims that cover each lane's deficit.
//
// # Operations
//
//   - [Tree.Match] finds the cached prefix: device hit, host hit, the last
//     device node and the last host node (SGLang's match_prefix).
//   - [Tree.Insert] adds a prefix after prefill or at finish, adopting the
//     request's own KV for new pages; non-chunked inserts count hits and may
//     start a write-through (threshold 1 under write_through, 2 under
//     write_through_selective).
//   - [Tree.Lock] and [Tree.Unlock] pin and release a path.
//   - [Tree.Evict] frees device tokens leaf by leaf in strategy order:
//     backed-up leaves are demoted to host-only, others deleted, or under
//     write_back copied to host first. [Tree.EvictNode] evicts one leaf
//     chosen by a planner.
//   - [Tree.EvictHost] frees host-only leaves; host copies of device nodes
//     are never reclaimed.
//   - [Tree.LoadBack] brings a host-only chain back, all or nothing, not
//     below 10 tokens, evicting once if the device is short.
//   - [Tree.AckWrites] and [Tree.AckLoads] finish the asynchronous copies
//     and release the locks they held, in FIFO order, when the simulator
//     says they are done.
//
// For HiCache's storage tier (L3), whose contents the tree does not track:
//
//   - [Tree.ProtectHost] and [Tree.ReleaseHost] pin a host copy while a
//     storage read or write uses it (SGLang's protect_host/release_host);
//     with Config.HoldWriteBacks every write-back copy starts pinned and is
//     handed out by [Tree.TakeWriteBacks] for backup.
//   - [Tree.ReserveHost] takes host tokens for a prefetch, all or nothing,
//     evicting host-only leaves once if short; [Tree.ReleaseHostReservation]
//     gives them back.
//   - [Tree.InsertHost] lands a prefetch (SGLang's _insert_helper_host): the
//     fetched pages become one host-only leaf under the deepest matched node,
//     paid from the reservation; existing nodes are left alone, and nothing
//     is inserted if the prefix is gone or the deepest matched node has no
//     host copy (host prefix-closure).
//
// # Eviction orders
//
// The strategies are SGLang's evict_policy.py keys, smallest evicted first:
// lru (last access), lfu (hits, then last access), fifo (creation), mru,
// filo, priority (request priority, then last access), slru (probation,
// fewer than 2 hits, before protected, LRU inside each). Besides SGLang's
// unbounded slru there is [SegmentedLRU], the classic segmented LRU of
// Karedla, Love and Wherry (1994): the protected segment may hold only a
// share of the device, and its least recently used nodes are demoted to
// probation when it overflows. Keys are kept live in index-tracked heaps, so
// an eviction costs O(log n) per victim; ties are broken by node id.
//
// # What it does not do
//
// No timing, bandwidth or batching (package sim), no storage tier metadata
// (SGLang keeps none in the tree either), no LoRA extra keys or EAGLE bigram
// keys. Where kvsim departs from SGLang it is said at the method: the one
// case is a write-back eviction that finds no host space for a node whose
// children were already written back, where SGLang would fail an assertion
// and kvsim drops the subtree.
//
// # Invariants
//
// [Tree.Check] verifies every invariant above in O(n); builds with
// -tags invariants run it after every mutation.
package tree
