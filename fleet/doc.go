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
// the replicas' load (requests in the server, Engine.Active) every
// router.load_poll_interval for power_of_two, so the snapshot's staleness
// is modelled. It starts no goroutine and reads no clock: the same
// replicas, router config, seed and trace give byte-identical results.
//
// [Online] is the same loop as an [github.com/kvsim/kvsim/sim/engine.Engine]: Submit queues a request
// for the router, which decides when the fleet's clock reaches its
// arrival, so whatever drives one simulated server (kvsim serve, studies
// through [Factory]) drives a fleet; [Fleet.Run] is the batch loop over it
// (each record submitted once every earlier instant has run).
//
// The fleet runs open loop: a request reaches the router at its trace
// arrival, whatever its dependencies. The shared L3, P/D transfers and
// kv_aware's cache oracle are still to build (docs/fleet.md).
package fleet
