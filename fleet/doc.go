// Package fleet will simulate a fleet of LLM server replicas behind a
// router on one deterministic event loop: N engines (each a full
// single-server kvsim, possibly of different GPUs, models or HiCache
// settings), SGLang's router between the trace and them, optionally a
// HiCache L3 store shared by every replica and prefill/decode
// disaggregation, all on one virtual clock with ties broken by a fixed
// order (router events before replica events at the same instant, then
// replica index). See issue 21 and docs/fleet.md.
//
// Today it holds [github.com/kvsim/kvsim/fleet/router], the router's
// policies, which need no engine. The event loop, the shared L3, P/D
// transfers and the fleet's metrics come next, on top of the engine
// interface of sim/engine.
package fleet
