package engine

import "github.com/kvsim/kvsim/traces"

// Engine is one simulated server driven online: requests are submitted
// while it runs and its virtual clock advances only when the caller asks.
// sim.Online (SGLang with HiCache) and llamacpp.Online (llama-server)
// implement it. The package documentation states the contract that lets
// several engines share one event loop and one clock.
type Engine interface {
	// Now returns the virtual time the engine has reached: the last t
	// given to RunUntil (0 before any).
	Now() Time
	// Submit queues a request that arrives at rec.Arrival, which must not
	// be before Now() nor before an earlier submission's arrival (see
	// CheckSubmit). Submit processes no event and does not move the clock;
	// it may make Next earlier.
	Submit(rec traces.Record) error
	// Next returns the time of the engine's earliest pending event, or
	// false when it has none (it is idle until the next Submit). The time
	// is never before Now().
	Next() (Time, bool)
	// RunUntil processes every pending event at or before t, in the
	// engine's (time, seq) order, sets the clock to t and returns the
	// token and completion events reported, in order of their Time. t must
	// not be before Now(). The slice is owned by the engine and reused by
	// the next call.
	RunUntil(t Time) ([]Event, error)
	// Active returns the number of requests arrived and not yet finished.
	Active() int
	// Finish runs every remaining event and returns the run's results. The
	// engine cannot be used afterwards.
	Finish() (*Result, error)
}

// Factory builds engines of one configured server model. configs builds
// one from a config file; callers drive it without knowing which model it
// is.
type Factory interface {
	// Info describes the simulated server for reports.
	Info() Info
	// New returns a fresh online engine, with an empty cache, at time 0.
	New() (Engine, error)
	// Run simulates a whole trace in one batch on the model's fast path:
	// open loop (every record reaches the server at its arrival), or, when
	// the model and its configuration say so, closed loop (a record with
	// dependencies is released when they have finished in virtual time).
	Run(src Source) (*Result, error)
}

// Info describes a factory's server.
type Info struct {
	// Kind is the model as configs' engine.kind spells it ("sglang",
	// "llamacpp").
	Kind string
	// Server is the name kvsim reports for the simulated server
	// ("kvsim-sim" for SGLang).
	Server string
	// PageSize is the KV cache's page size in tokens (1: token-granular).
	PageSize int
}
