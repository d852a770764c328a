// Package engine is the seam between kvsim's server models and everything
// that drives them: the types every model shares ([Time], [Event],
// [RequestResult], [Result], [Summary], [Source], [Queue], and
// [OnlineState], the plumbing of both models' online Engine), the serving
// benchmark's metrics and table printers, and the [Engine] interface that
// package sim (SGLang with HiCache) and package sim/llamacpp
// (llama-server) both implement, with a [Factory] each (sim.Factory,
// llamacpp.Factory). configs builds the factory of the configured model;
// kvsim sim, replay --target sim, serve and study use it without knowing
// which model it is. What a model offers beyond the interface (SGLang's
// counters, llama-server's text streaming) is reached through small
// interfaces declared by the code that uses it.
//
// The package imports only traces, gonum's stat for the summary and
// internal/offheap for its long-lived numbers ([Stats]); the
// models import it, never each other.
//
// # Time
//
// [Time] is virtual time in integer nanoseconds, a defined int64 type.
// Engines never hold time in a float; the float views ([Time.Seconds],
// [Time.Milliseconds]) are for reports.
//
// # Driving engines on one clock
//
// An [Engine] is a deterministic discrete-event simulator that advances only
// when told. The contract, which lets a caller put several engines (and a
// router) on one event loop and one virtual clock:
//
//   - Now is the last time given to RunUntil (0 at the start). An engine's
//     clock never goes back, and RunUntil(t) with t < Now is an error.
//   - Submit(rec) queues rec for rec.Arrival >= Now (and >= the previous
//     submission's arrival). It processes no event and does not move the
//     clock; it may make Next earlier.
//   - Next reports the time of the engine's earliest pending event, never
//     before Now, or false when the engine is idle until a Submit.
//   - RunUntil(t) processes the engine's pending events with time <= t, and
//     only those, in its own (time, seq) order, then sets Now to t. It
//     reports the token and completion events of those steps in
//     non-decreasing Time, each at or before t. It never looks at another
//     engine, the wall clock or anything but what was submitted, so the
//     events it reports depend only on the submissions and the sequence of
//     RunUntil limits, not on which other engines share the loop.
//   - Advancing in several steps gives the same events as one step: calling
//     RunUntil(t1) then RunUntil(t2) reports what RunUntil(t2) alone would,
//     split at t1, provided nothing was submitted in between.
//
// A loop over several engines therefore takes the minimum of their Next
// times (and of its own pending arrivals), runs every engine until that
// time, and submits what the events it got back cause. Ties between engines
// at the same virtual time are broken by the loop (for example by engine
// index), never by the engines; an engine's own ties are broken by its
// sequence numbers. Engines share no state, so with a fixed tie rule the
// combined run is as deterministic as each engine alone:
// TestTwoEnginesOneClock drives an SGLang and a llama-server engine on one
// loop and checks that each gives byte-identical results to running alone.
//
// # What it does not do
//
// It models no server: scheduling, caching and cost live in the models. It
// holds no global state and starts no goroutine.
package engine
