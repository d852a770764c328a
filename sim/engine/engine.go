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
