// Package policy is kvsim's policy mode: a fast page-level simulator of
// where KV pages live in a two-tier cache, device (L1, GPU memory) and host
// (L2, CPU memory), under one of two residency policies. It has exactly the
// semantics of SGLang's standalone simulator
// benchmark/hicache/hicache_policy_simulator.py (sgl-project/sglang, with
// its driver simulate_hicache_policies.py; read at commit
// 110816e7f8883cb186f9ff4ee9b4ff3eb28192a9), so its counters can be compared
// with SGLang's number for number, and it runs a few hundred times faster.
// It also replays the device alone under [Belady], kvsim's offline optimum
// (see "The offline optimum").
//
// There is no time, batching, transfer or L3 here: requests are replayed
// one after the other, each in one step. For timing, use the event
// simulator in package sim.
//
// # Pages and the trie
//
// A request is a sequence of page keys (block hash ids, one page per block).
// Page identity is positional: the pages form a trie keyed by the key
// sequence from the root, so page i of a request is the node reached by
// following keys 0..i. Two requests share a page exactly when they share
// the key sequence up to it. (With Mooncake's prefix hashes, equal keys mean
// equal prefixes anyway.) A trie node can be on the device, on the host,
// both (a duplicate), or neither; a node holding neither and having no
// children is removed, so its hit count is forgotten. (Between requests no
// node holds neither: a page loses its last copy only when it has no
// children, and then it is removed; its parent keeps a copy.)
//
// Device residency is closed under ancestors: a page on the device always
// has its parent on the device.
//
// # One request
//
// Requests are replayed in timestamp order, ties in input order ([Run]; a
// stable sort, as SGLang does). Each request advances a clock by one, then:
//
//  1. Hits. Walk the trie along the request. The leading pages on the
//     device are L1 hits; after them, the pages on the host only are L2
//     hits; the first page found nowhere (or not in the trie) ends the
//     hits, and every later page is a miss. A page on both tiers counts as
//     an L1 hit.
//  2. Every page of the request is made device-resident (an L2 hit keeps
//     its host copy) and stamped with the clock.
//  3. The policy's host-write step (below).
//  4. L1 eviction: while more than L1Pages pages are on the device, evict
//     the first device leaf (a device page with no child on the device) in
//     eviction order. The current request is not protected: when it has
//     more pages than L1 holds, its own tail is evicted.
//
// # main_write_through
//
// Host write: every page of the request counts one hit (hit_count += 1,
// even pages already on host). A page not on host whose count has reached
// WriteThroughThreshold is written to host if its parent is the root or
// already on host; pages are handled parent first, so a new prefix can be
// written whole in one request. Writing allocates one host page: if L2 is
// full, host-only leaves (on host, not on device, no child on host) are
// evicted in eviction order; if none is left, or L2Pages is 0, the write
// fails and counts one failed_h_allocations. Host copies of device pages
// are never evicted, so host residency stays closed under ancestors.
//
// L1 eviction: a victim with a host copy becomes host-only; one without is
// deleted. This is not counted as a demotion.
//
// # boundary_l1_l2
//
// There is no hit counting and WriteThroughThreshold is ignored.
//
// Host write: the whole request path is reserved on host, all or nothing:
// the pages not yet on host are counted; if they are more than L2Pages the
// reservation fails at once; otherwise L2 evicts pages one at a time until
// they fit, and if it runs out of victims the reservation fails (pages
// already evicted stay evicted). Each failure counts one
// failed_h_allocations. The request's pages are protected from this
// eviction.
//
// L2 eviction: first the oldest duplicate leaf (on device and host, no
// child on host) loses its host copy and stays on the device
// (dh_to_d_l2_dedup_evictions); only when there is none is the oldest
// host-only leaf deleted (h_to_deleted_evictions). Protected pages are
// passed over.
//
// L1 eviction of a victim v:
//   - v has a host copy: if its parent is neither the root nor on host,
//     the parent is reserved on host first (protecting parent and v); then
//     v becomes host-only. If the parent cannot get a host page, v loses
//     its host copy too (one L2 eviction) and is deleted.
//   - v is device-only: v, preceded by its parent when the parent is on
//     the device without a host copy, is reserved on host all or nothing
//     (protecting just those); on success v becomes host-only and
//     d_to_h_demotions counts one; on failure v is deleted.
//
// # Eviction order and tie-breaking
//
// SGLang keeps three lazily invalidated heaps of (last access, path key,
// insertion counter, node), where the path key is the tuple of repr() of
// the page keys from the root, and pops the first entry that is still
// current and valid. This package picks exactly the same victims (SGLang
// re-queues a node on every change that can make it valid, so its heaps
// never miss a candidate) by the order (last access, depth). That is the
// same order: all pages stamped with one clock value lie on one request's
// path, so two distinct live nodes with the same last access are ancestor
// and descendant, and the ancestor's path key is a prefix of the
// descendant's, which sorts first in Python. The brute-force twin in the
// tests uses SGLang's literal string key.
//
// Two of the three orders are plain recency, kept in intrusive lists with
// O(1) updates: every device page in (last access, deeper first) order,
// whose head is always the L1 victim, and every host-only page in the same
// order, whose first unprotected leaf is the host-only victim (the
// argument is in lru.go). Only boundary_l1_l2's duplicate leaves, which
// join in the middle of the order when an L1 victim's parent gets a host
// copy, are kept in an index-tracked binary heap.
//
// # Counters
//
// The JSON object of the command line has exactly these names:
//
//   - requests: requests replayed.
//   - total_input_pages: pages over all requests.
//   - l1_hit_pages, l2_hit_pages, miss_pages: step 1 above, summed;
//     l1 + l2 + miss = total.
//   - l1_hit_rate: l1_hit_pages / total_input_pages (0 when no pages).
//   - l1_l2_hit_rate: (l1_hit_pages + l2_hit_pages) / total_input_pages.
//   - l1_evictions: pages that left the device by L1 eviction (demoted,
//     made host-only, or deleted).
//   - l2_evictions: host copies dropped, = dh_to_d_l2_dedup_evictions +
//     h_to_deleted_evictions; the latter also counts, under boundary_l1_l2,
//     a device+host L1 victim that loses both copies because its parent
//     could not be backed up.
//   - d_to_h_demotions: boundary_l1_l2 only: device-only pages that got a
//     host copy on L1 eviction. Always 0 under main_write_through.
//   - failed_h_allocations: failed host reservations (one per attempt, not
//     per page: a boundary path reservation of 40 pages that fails counts 1).
//   - d_pages, h_pages: pages on device / on host at the end.
//   - duplicate_ratio: pages on both tiers / h_pages (0 when h_pages is 0).
//
// [Result] also carries SGLang's other counters: dh_to_d_l2_dedup_evictions,
// h_to_deleted_evictions, dh_pages and unique_cached_pages
// (d_pages + h_pages - dh_pages).
//
// A property that follows from the rules and is tested: L1 residency does
// not depend on the host tier (an L1 victim always leaves the device), and
// the device holds the L1Pages most recent pages in (last access, deeper
// first) order, so L1 hits are the same for both policies and every
// L2Pages, and never decrease when L1Pages grows (the LRU stack property).
//
// # The offline optimum
//
// [Belady] is kvsim's own policy, not SGLang's: the most L1 hits any
// eviction policy can get from L1Pages pages of device memory, for
// deciding whether a better policy or more memory is the way to more hits.
// It has no host tier (L2Pages must be 0). Requests are replayed in the
// same order as the other policies, and for each:
//
//  1. Hits: the longest prefix of the request's pages on the device, before
//     anything changes (all L1 hits).
//  2. Every page of the request is put on the device; then, while more than
//     L1Pages pages are there, the page whose next reference is furthest
//     is evicted. The next reference is the position of the page's next
//     occurrence in the whole trace's page sequence (all requests' pages
//     concatenated in replay order); a page never referenced again is
//     furthest, and among those the most recently created trie node goes
//     first.
//
// No special rule keeps the device prefix-closed: a page's parent occurs
// right before it wherever it occurs, so the parent's next reference is
// strictly nearer than the child's, or both are never referenced again and
// the parent, created first, goes last. A cached page's parent is therefore
// always cached, and the hits of step 1 are exactly the request's pages on
// the device. Belady's exchange argument then makes the policy optimal
// among all eviction schedules, prefix-closed or not, and the device at
// L1Pages is a subset of the device at L1Pages+1 after every request, so
// hits never decrease with L1Pages. The engine, its proofs and its cost
// are [traces.OPT]'s; the tests check the optimum against an exhaustive
// search on tiny traces, against every other policy (at L1Pages, and at
// L1Pages + L2Pages against a policy's L1+L2 hits), monotonicity in
// L1Pages, and prefix closure after every request.
//
// The oracle ignores timing and concurrency, as the whole policy mode
// does: it sees each request whole and alone. The counters are the same
// as the other policies' (l2_hit_pages, h_pages and the host counters are
// 0; failed_h_allocations too, since nothing is written to host). Since it
// needs the future, [New] refuses it; [Run] replays it. It costs
// O(pages · log L1Pages) time and memory proportional to the trace's
// pages; the Mooncake conversation trace takes about 0.16 s (see
// BenchmarkBeladyMooncakeConversation).
//
// # Aborts
//
// Under boundary_l1_l2 SGLang's simulator can stop with an AssertionError:
// demoting a device-only page v whose parent p is on both tiers reserves
// only v, and the L2 eviction that makes room may take p's duplicate copy,
// leaving host-only v below device-only p. If p later becomes an L1 victim
// whose host reservation fails, SGLang refuses to delete it
// ("Refusing to delete a non-D-only leaf"); a device+host victim with host
// descendants whose parent cannot be backed up aborts likewise. SGLang then
// reports nothing. [Simulator.Process] returns an [*AbortError] at the same
// request and stops. It takes tiny caches (L1 and L2 of a page or two) to
// get there; none of the Mooncake FAST'25 traces' runs in the package's
// golden files aborts.
//
// # Differences from SGLang's simulator
//
//   - Page keys are uint64 (SGLang accepts ints or strings); the order of
//     the keys never matters (see tie-breaking).
//   - Timestamps are int64 (SGLang: float); the command line feeds
//     nanoseconds from package traces, whose Mooncake reader rejects
//     records whose timestamp goes backwards and records without
//     input_length/output_length, where SGLang would sort or accept them.
//   - A page's hit count saturates at 2^31-1, which takes as many requests
//     to the page: a write-through threshold above that is never reached.
//   - SGLang's optional progress display and sanity checks are left out;
//     with -tags invariants an O(n) self-check runs after every request
//     on small tries and after about every (nodes/256)-th on large ones.
//
// # Cost
//
// Pages live in dense slots of flat arrays, and only while they are in
// the trie: a page that leaves the cache entirely gives its slot back, and
// the next new page takes it. Memory therefore follows the cache, not the
// trace: about L1Pages + L2Pages slots at most (more only for requests
// longer than that: every page in the trie holds a copy). A slot is a 32-byte node that every request reads and
// writes (links, child counters, residency, the key when it is below
// 2^32-1); boundary_l1_l2 adds a 16-byte record of last access, depth and
// duplicate-heap position; a write-through threshold above 1 adds a 4-byte
// hit count; a key indexed in the child index's map adds 8. The child index adds 4 bytes per key value below its bound (Run
// sizes that table from the trace's largest key). Finding a page's slot is
// one array read when the trace's keys are small integers that always
// follow the same parent (Mooncake's block ids are), and a hash-map lookup
// otherwise; below a page the walk has just created there is nothing to
// find. Each request then costs O(pages) list and counter updates, plus
// O(log n) heap updates under boundary_l1_l2 for the pages whose
// duplicate-leaf status or key changes; which pages those are follows from
// the flags and counters of the page and its parent, and a reservation's
// protection is a guard on the victim search (the request's path, or an L1
// victim and its parent), not a mark on each page. No step scans the
// trie, and a replay allocates nothing per request.
// BenchmarkPolicyMooncakeConversation reports pages per second, and
// docs/performance.md ("Policy mode") the figures.
package policy
