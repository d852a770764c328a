// Package fleet simulates a fleet of LLM server replicas behind a
// router on one deterministic event loop: N engines (each a full
// single-server kvsim, possibly of different GPUs, models or HiCache
// settings), SGLang's router between the trace and them, optionally a
// HiCache L3 store shared by every replica and prefill/decode
// disaggregation, all on one virtual clock with ties broken by a fixed
// order (router events before replica events at the same instant, then
// replica index). See issue 21 and docs/fleet.md.
//
// [Fleet] is the event loop: N engines ([github.com/kvsim/kvsim/sim/engine.Engine], built by each
// replica's [github.com/kvsim/kvsim/sim/engine.Factory]) and a [github.com/kvsim/kvsim/fleet/router.Router] on one virtual clock.
// It takes each arrival from an [github.com/kvsim/kvsim/sim/engine.Source], routes it at its arrival
// time, submits it to the chosen replica, advances the replicas with
// Next/RunUntil in (time, replica index) order, finishes completions at
// the router, ticks the router's tree eviction in virtual time and polls
// the replicas' load every router.load_poll_interval (requests in the
// server for power_of_two; KV token usage for cache_aware's usage
// triggers, kv_aware's usage score and cache_aware_oracle), so the
// snapshot's staleness is modelled. It starts no goroutine and reads no clock: the same
// replicas, router config, seed and trace give byte-identical results.
//
// [NewPD] builds a prefill/decode disaggregated fleet (fleet-spec 2):
// each request gets a prefill and a decode replica from two routers
// (router.PD); the decode replica preallocates its prompt's KV (with
// num_reserved_decode_tokens of headroom, back-pressuring the prefill
// side), then the prefill replica computes it with max_new_tokens = 1 and
// sends each chunk's pages (after the decode side's radix hit, if it has
// a radix cache) over its link (transfer queues sharing the
// bandwidth, a latency per transfer), and when the last page lands the
// decode replica emits the first token in a prebuilt step and decodes.
// The engines' two modes are sim.Online's, reached through the
// prefillServer and decodeServer interfaces declared here. Results split
// each request's TTFT into bootstrap wait, prefill queue, prefill compute,
// transfer tail and first decode step ([PDRequest]). SGLang's bootstrap
// and waiting timeouts abort a request not preallocated, or whose KV has
// not landed, in time, on both sides and on the link (pdtimeout.go). With
// decode offload the decode replicas write each finished request's
// generated pages to their (shared) L3 store (sim's Storage.DecodeOffload).
//
// Replicas whose storage is shared (Replica.SharedL3, storage.shared) use
// one [github.com/kvsim/kvsim/sim.SharedL3] store per namespace and page
// size instead of their own: a prefix one replica backed up is a storage
// hit for another once its backup has landed (sharedl3.go, docs/fleet.md
// "Shared L3").
//
// Under router.policy = kv_aware the router's [github.com/kvsim/kvsim/fleet/router.CacheOracle] is an
// index of the replicas' KV events (kvindex.go): every replica pages
// prompts with one shared pager and publishes each residency change of
// its radix tree (sim.Online.SetKVEventSink); the index applies each
// event router.kv_signal_delay after it happened, in (time, replica,
// sequence) order, and answers a prompt's cached prefix on device, then
// host from that view, then L3 as the store holds it now.
//
// [Online] is the same loop as an [github.com/kvsim/kvsim/sim/engine.Engine]: Submit queues a request
// for the router, which decides when the fleet's clock reaches its
// arrival, so whatever drives one simulated server (kvsim serve, studies
// through [Factory]) drives a fleet; [Fleet.Run] is the batch loop over it
// (each record submitted once every earlier instant has run).
//
// [Fleet.RunClosedLoop] runs a trace's dependencies as one server does
// (sim.Sim.RunClosedLoop, with its tracker, closedloop.go): a request
// reaches the router when its parent and wait_for requests have finished
// on whichever replica, plus its think time; [Fleet.Run] is open loop
// (every request at its trace arrival). The decode side's HiCache,
// kv_aware and cache_aware_oracle in a disaggregated fleet and the shared
// L3's aggregate bandwidth cap are still to build (docs/fleet.md).
package fleet
