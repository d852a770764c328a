// Package router is SGLang's request router (sgl-router, now
// sgl-model-gateway and SMG) as a deterministic library for kvsim's fleet
// mode: given a request and the router's own view of the replicas it
// returns the replica to send it to and why, and counts its decisions.
// docs/fleet.md describes each policy, its parameters with SGLang's
// defaults, and every place kvsim decides where SGLang leaves it to a hash
// map's order or a clock.
//
// # Policies
//
//   - cache_aware: an approximate radix tree over every replica's routed
//     prompts (characters of the routing text, else token ids in whole
//     pages, else block hashes), the imbalance
//     test on the router's in-flight counts before any lookup, a hit when
//     the match rate is strictly above cache_threshold, and a miss rule:
//     least loaded (SGLang since December 2025, the default) or smallest
//     tree (the classic router). The tree is cut to max_tree_size symbols
//     per replica, oldest leaf first, at every eviction_interval of virtual
//     time.
//   - round_robin, random: a counter over the available replicas; a
//     uniform draw from the router's seeded stream.
//   - power_of_two: two distinct seeded draws, the lower load wins, ties to
//     the first; the load is the snapshot the caller hands in at its poll
//     interval, or the in-flight count when either draw has none.
//   - consistent_hash: a hash ring with virtual nodes on the request's
//     session key, clockwise to the first available replica.
//   - kv_aware: llm-d's weighted scorers over each replica's real cached
//     prefix by tier (from a [CacheOracle] the caller supplies), its
//     in-flight count and its KV usage.
//   - cache_aware_oracle: cache_aware's imbalance test, threshold and miss
//     rule over each replica's real cached prefix (the [CacheOracle]'s
//     device and host, and L3 with oracle_storage) instead of the
//     approximate tree (fleet-spec 5.11).
//   - nginx_round_robin, nginx_hash: nginx's upstream balancers, so that a
//     fleet behind a real nginx is simulated exactly: smooth weighted round
//     robin with every weight 1 (it cycles in upstream order), and
//     `hash $http_x_session_id consistent`, a ketama ring of 160 CRC-32
//     points per server name ([Config].Nginx.Upstreams) keyed by the
//     session's CRC-32, round robin for a request without a session.
//     docs/model.md restates both in the fleet specification's terms.
//   - prefix_hash, manual: SMG's. A ring on the hash of the prompt's
//     first prefix_token_count tokens, kept while the ring's replica is
//     within a load factor of the mean; and a sticky map from the session
//     key to up to two replicas, new keys by a seeded draw (or among the
//     least loaded), idle keys forgotten at the eviction ticks.
//   - least_load: SMG's least expected wait from polled load reports
//     ([Router.SetLoadReport]): queued and recently routed tokens over the
//     generation rate, plus a KV-usage barrier.
//
// [PD] pairs a prefill router and a decode router, each with its own
// policy, as SGLang's PD router does.
//
// # Time, randomness and order
//
// The router has no clock. The caller tells it the virtual time with
// [Router.Tick] (cache_aware's eviction) and models staleness itself: it
// calls [Router.SetLoad] at its poll interval and answers [CacheOracle]
// queries from a delayed view. Randomness comes only from the *rand.Rand
// in [Deps]. Access stamps are an insert counter, not a clock. No map
// order reaches a decision: ties go to the lowest replica index, eviction
// pops a total order (stamp, replica, node id).
//
// # Invariants
//
// Every successful [Router.Route] counts the request in flight on the
// chosen replica until its one [Router.Finish]. In the approximate tree a
// node's replicas include each child's, every node but the root has one,
// a replica's stamps do not increase going down a path, and a replica's
// size is the sum of its nodes' edge lengths; -tags invariants checks
// these after every change.
//
// # Not here
//
// The router does not send anything, queue requests, model
// router-to-replica latency, or know what a replica really caches except
// through the caller's oracle. SMG's manual min_group assignment and
// event-driven (KV events) cache_aware are not modelled.
package router
