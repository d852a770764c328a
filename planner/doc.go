// Package planner chooses which device-resident radix-tree nodes to evict so
// that every context-parallel (CP) owner lane gets back the pages it is
// short of: the owner-lane eviction planner of a CP load-back.
//
// # Model
//
// With context parallelism of size cp, every page of the device KV pool
// belongs to one of cp owner lanes (ranks), so a tree node holds Counts[o]
// device pages on lane o. Before a load-back the scheduler knows, per lane,
// how many pages it still needs: deficits[o] >= 0. The planner picks victims
// among the nodes of a tree snapshot ([Node]; the root is ID 0 and is never
// listed) until every deficit is covered or nothing left helps.
//
// Units: counts and deficits are pages (any unit, as long as both agree);
// [Priority] is SGLang's SLRU key (segment, then last access time).
//
// A node n is eligible when it is device-resident, unlocked, not the root,
// and has no device-resident child that is not already chosen: eviction is
// leaf-up, as in SGLang's RadixCache.evict. With the current deficits d,
//
//	contribution(n) = Σ_o min(counts_n[o], d[o])   pages of n that some lane still needs
//	unlock(n)       = contribution(parent(n))      if evicting n makes its parent eligible
//	                  (the parent is not the root, is device-resident and unlocked,
//	                  and n is its only device-resident child not yet chosen)
//	                = 0                            otherwise
//	score(n)        = (-contribution(n), -unlock(n), SLRU(n), id(n))   lexicographic
//
// The greedy loop: while some deficit is positive, take the eligible node
// with the smallest score; if its contribution and unlock are both 0, stop
// (then every eligible node scores (0, 0): nothing left helps). Otherwise
// record it as a victim, add its counts to PlannedFreed, lower each d[o] by
// min(counts[o], d[o]), and, if its parent has now no device child left, the
// parent becomes eligible ("parent-push"). Because IDs are unique the score
// is a strict total order, so the plan is a deterministic function of the
// snapshot. The output is the victims in order, PlannedFreed and the
// remaining deficits ([Plan]).
//
// The unlock term lets the planner evict a leaf that frees little on the
// needed lanes when doing so exposes a parent that frees a lot (a long shared
// prefix whose only remaining child is a short suffix).
//
// # Two implementations
//
// [Reference] is the loop above written as plainly as possible: each step
// rescans every node, tests eligibility in O(1) from a count of remaining
// device children, and scores each eligible node in O(cp). A plan with V
// victims over N nodes costs O(V * N * cp). It is the specification.
//
// [Planner.Plan] produces the identical plan with a priority queue of
// eligible nodes keyed by score and lazy re-evaluation. Scores depend on the
// current deficits, which change after every choice, so a queue keyed by the
// initial scores is not correct, and re-keying every node after every choice
// would cost as much as the rescan. Instead each queue entry stores the score
// its node had when the entry was last evaluated, and:
//
//  1. Initially every eligible node is in the queue with its current score.
//  2. Look at the minimum entry and recompute its node's score. If it
//     differs from the stored one the entry is stale: take it out, store the
//     fresh score, put it back, and look again.
//  3. Otherwise (the entry is up to date) it is the choice. Stop if it scores
//     (0, 0); else take it out, record it, and update the deficits.
//  4. Let p be the victim's parent. If p is not the root, is unlocked, and
//     now has no device child left, add p with its fresh score
//     (parent-push). If p is not the root, is unlocked, and has exactly one
//     device child s left, and s is eligible (so in the queue), re-key s
//     with its fresh score (sibling refresh).
//
// The last remaining child of p is found in O(1): p keeps the XOR of its
// remaining device children's indices, which is the last child's index when
// exactly one is left.
//
// The queue is a bucket queue on the stored (contribution, unlock) pair:
// bucket index(c, u) = row(c) * cols + column(u), where with small
// contributions (below half the bucket limit) every contribution has its own
// row and the unlocks are split into as many columns as fit, and with large
// ones a row holds a range of contributions and has a single column. Any pair
// beyond the last row goes to the last bucket. The index never decreases
// when (c, u) grows lexicographically, so every entry of a higher bucket has
// a strictly smaller score than every entry of a lower one, and the minimum
// is the minimum of the highest non-empty bucket (found with a two-level
// bitmap). Inside a bucket the entries are a binary min-heap by the full
// score, built (heapified) only when the bucket first becomes the highest
// non-empty one; until then entries are merely appended. Just before it is
// heapified the bucket is settled: every entry is re-evaluated, dead ones
// are dropped and stale ones re-keyed into the lower buckets of their fresh
// scores (step 2 done ahead of time for the whole bucket, which the loop
// would have to empty anyway before it reaches a lower one). The layout only
// affects speed: the order inside a bucket is the full score order, so a
// bucket that holds several pairs is still ordered correctly.
//
// A sibling refresh re-keys an entry that may sit anywhere in the queue. It
// does not look for it: it bumps the node's version, which makes the old
// entry dead, and adds a new one. A dead entry is dropped when it reaches
// the top of its bucket. So "the entry of a node" below means its live
// entry, the one whose version is the node's current version.
//
// # Why the queue picks what the rescan picks
//
// Write score_t(n) for n's score after t choices, and S(e) for the score
// stored in entry e. The claim rests on one invariant:
//
//	(I) every eligible node n has exactly one live entry e, and S(e) <= score_t(n);
//	    no other node has a live entry.
//
// That is, stored scores are optimistic: they may be too good, never too bad.
//
// Dead entries are skipped and change nothing. If (I) holds and the minimum
// live entry e of node n is up to date
// (S(e) = score_t(n)), then for every other eligible node m with entry f:
// score_t(n) = S(e) <= S(f) <= score_t(m), and the first inequality is strict
// because the scores of distinct nodes differ in the id component. (The
// queue returns the minimum over all entries; a dead entry found there is
// dropped first, so the first live one found is the minimum live entry.) So n is
// exactly the node with the smallest current score: the rescan's choice, and
// the stop test sees the same (contribution, unlock) pair. If instead e is
// stale, re-keying it to score_t(n) keeps (I) (the new stored score equals
// the current one) and does not change any node's current score, so step 2
// can repeat. It terminates: a re-keyed entry is up to date until the next
// choice, so between two choices each entry is re-keyed at most once, and
// every dead entry is dropped at most once.
//
// (I) holds initially by step 1. It must survive a choice, which changes
// three things: deficits shrink, one node leaves the eligible set, and the
// victim's parent p loses a device child.
//
//   - Deficits only shrink, and min(c, d) is non-decreasing in d, so every
//     contribution can only shrink or stay. A smaller contribution makes the
//     first score component -contribution larger, so the score grows
//     regardless of the other components. With an unchanged contribution the
//     score can only shrink through a larger unlock.
//   - unlock(m) is contribution(parent(m)) or 0. While the condition "m is
//     the only remaining device child of an unlocked, non-root parent" does
//     not change, unlock(m) follows contribution(parent(m)) and can only
//     shrink. The condition depends only on the parent's remaining-child
//     count, which changes only for the victim's parent p. For p's other
//     children it can switch from false to true, exactly when p goes from two
//     remaining device children to one. That survivor s is the only node
//     whose score may have decreased, and only if s is eligible; step 4
//     re-keys s, restoring (I) for it. (The condition never switches from
//     true to false for a node still in the heap: the count only falls, and
//     when it falls to 0 the last child was the victim itself.) If p is
//     locked or the root, unlock is 0 for all its children and nothing
//     changes; if p is not device-resident it has no device children at all,
//     since residency is prefix-closed.
//   - The victim is popped, so it has no entry. Eligibility is otherwise
//     monotone: a node becomes eligible only when its last device child is
//     chosen, and stays eligible until chosen itself. The only node that can
//     become eligible is p, when its count reaches 0 (and p is not the root,
//     unlocked, and device-resident because the victim was). Step 4 pushes p
//     with its fresh score, which includes p's own contribution and its own
//     unlock with respect to its parent under the new deficits.
//
// So (I) holds after every choice and every plan step picks the rescan's
// node. Ties need no special care: the score is a total order because the id
// component breaks every tie, and equality of stored and current scores only
// needs to compare contribution and unlock, since SLRU and id never change.
//
// The old argument "stale scores are optimistic because contributions only
// shrink" (the seed commit's) is incomplete: without the sibling refresh a
// stale entry can be pessimistic, the heap can pick a different node from
// the rescan, or stop while a node with a positive unlock is buried under a
// stale (0, 0) entry. TestPropHeapMatchesReference finds such a case within about
// a hundred random inputs when the refresh is removed, and the named test
// "sibling unlock growth" pins one.
//
// # Cost
//
// Loading the snapshot and filling the queue is O(N * cp). Each choice costs
// O(cp + log m) plus the stale re-keys it triggers, each O(cp + log m), where
// m is the size of the bucket at the top; appending to a lower bucket is
// O(1), and each bucket is heapified at most once per plan (O(its size)).
// Finding the highest non-empty bucket reads at most B/4096 + 1 words for B
// buckets (B <= 16384). In the worst case, when one bucket holds everything
// (all contributions within one coarse row), this is the single binary heap
// with the log N factor. An entry is re-keyed only after its contribution
// or unlock changed, which happens only while a lane's deficit is below the
// node's count on that lane, i.e. near the end of a plan, so in practice the
// total stays near O(N * cp + (V + N) log N). In the worst case (every
// node's count above the lane deficits for many steps) it degrades towards
// the rescan's O(V * N * cp), never beyond it by more than the log factor.
// [Planner.Stats] reports the evaluation counts.
//
// On the synthetic snapshots of `kvsim plan-bench` (package synth),
// contributions are below 130 pages, so every bucket holds one exact
// (contribution, unlock) pair; about five stale re-keys happen per victim,
// nearly all in the last half of the plan as lanes run dry, and a stale
// entry's contribution or unlock has dropped, so it moves to a lower bucket
// where it is only appended. Settling finds them before the heap is built,
// so they are never sifted: without it, popping stale entries from the top
// bucket's heap (Floyd's bottom-up sift: one comparison per level, then a
// short sift-up) was a third of the plan, and settling made the 2,000
// candidate plan about 1.5x faster. Before the buckets, one binary heap over
// all entries spent 60% of the plan sifting re-keyed entries through its
// full depth. A shortcut that scores a node by its page total while no lane
// deficit is below the lane's largest count saved nothing measurable (the
// work is in the clipped end of a plan) and was dropped. Layouts measured without
// a gain worth their complexity: a 4-ary heap (slower), keys packed into one
// uint64 with duplicate entries instead of a slot index (same speed), and
// buckets kept sorted instead of heapified (sorting the 48-byte entries cost
// more than the heap pops it saved).
//
// # What it does not do
//
// The planner does not mutate a tree, move pages to the host, or know about
// time: the simulator converts its radix tree into a []Node snapshot, plans,
// and applies the victims itself. It ignores host residency except as "not on
// the device", and does not split nodes to free part of one. Public SGLang
// has no owner-lane planner: the contract comes only from the commit message
// of a fork (commit fdc23f7d61, "_plan_cp_load_back_owner_lane_evictions"),
// restated above, and this package follows that contract, not any SGLang
// source. The unlock term, the leaf-up rule and the SLRU tie-break are as
// that message describes them; the sibling refresh is this package's own.
//
// # References
//
// SLRU: R. Karedla, J. S. Love, B. G. Wherry, "Caching strategies to improve
// disk system performance", IEEE Computer 27(3), 1994. Lazy re-evaluation of
// a monotone greedy objective is the "lazy greedy" of M. Minoux,
// "Accelerated greedy algorithms for maximizing submodular set functions",
// 1978.
package planner
