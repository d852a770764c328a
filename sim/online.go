package sim

import (
	"errors"
	"fmt"

	"github.com/kvsim/kvsim/traces"
	"github.com/kvsim/kvsim/tree"
)

// Event is something an online simulation reports about one request: a
// token streamed (Tokens is the request's count so far; the first token is
// the TTFT instant) or the request's end (Done, with its Result).
type Event struct {
	ID     string
	Time   Time
	Tokens int64
	// CachedTokens is the request's cached_tokens (known from its first
	// admission on), carried by every event as SGLang's meta_info does.
	CachedTokens int64
	Done         bool
	Result       RequestResult // set when Done
}

// Online runs a simulation incrementally: requests are submitted while it
// runs and virtual time advances only when asked. Replays whose next
// request depends on an earlier one finishing (multi-turn sessions, a
// concurrency limit) and kvsim serve drive the simulator this way. It is as
// deterministic as [Sim.Run]: the same submissions at the same virtual times
// give the same events.
type Online struct {
	s      *Sim
	q      *Queue
	events []Event
	err    error
}

// ErrNoneYet is what a [Queue] returns when nothing is queued now but more
// may be submitted: an online simulator waits instead of ending the run.
var ErrNoneYet = errors.New("sim: no record queued yet")

// Queue is the Source of an online simulation: records submitted and not
// yet arrived, in submission order.
type Queue struct {
	recs []traces.Record
	head int
}

// Push queues rec.
func (q *Queue) Push(rec traces.Record) { q.recs = append(q.recs, rec) }

// Next implements Source; it returns ErrNoneYet when the queue is empty.
func (q *Queue) Next() (traces.Record, error) {
	if q.head == len(q.recs) {
		q.recs, q.head = q.recs[:0], 0
		return traces.Record{}, ErrNoneYet
	}
	q.head++
	return q.recs[q.head-1], nil
}

// NewOnline returns an online simulation of cfg with the given cost model.
func NewOnline(cfg Config, cost CostModel) (*Online, error) {
	if cfg.Cache.Eviction == tree.Belady {
		return nil, ErrOracleOnline
	}
	s, err := New(cfg, cost)
	if err != nil {
		return nil, err
	}
	o := &Online{s: s, q: &Queue{}}
	s.src = o.q
	s.observe = func(e Event) { o.events = append(o.events, e) }
	return o, nil
}

// Now returns the virtual time the simulation has reached.
func (o *Online) Now() Time { return o.s.now }

// CheckSubmit is the arrival check of an online simulator's Submit (this
// package's and llamacpp's): rec may not arrive before the simulation's
// time now nor before the previous submission's arrival last.
func CheckSubmit(rec *traces.Record, now, last Time) error {
	if rec.Arrival < now {
		return fmt.Errorf("request %q submitted for %d ns, before the simulation's time %d ns", rec.ID, rec.Arrival, now)
	}
	if rec.Arrival < last {
		return fmt.Errorf("request %q arrives at %d ns, before the previous submission (%d ns)", rec.ID, rec.Arrival, last)
	}
	return nil
}

// Submit queues a request that arrives at rec.Arrival, which must not be
// before Now() nor before an earlier submission's arrival.
func (o *Online) Submit(rec traces.Record) error {
	if o.err != nil {
		return o.err
	}
	if err := CheckSubmit(&rec, o.s.now, o.s.lastArr); err != nil {
		return err
	}
	o.q.Push(rec)
	if o.s.pending == nil {
		if err := o.s.scheduleNextArrival(); err != nil {
			o.err = err
			return err
		}
	}
	return nil
}

// Next returns the time of the next pending event, if there is one.
func (o *Online) Next() (Time, bool) {
	if len(o.s.events) == 0 {
		return 0, false
	}
	return o.s.events[0].at, true
}

// RunUntil processes every event up to and including time t, advances the
// clock to t, and returns the events reported, in order. The slice is
// reused by the next call.
func (o *Online) RunUntil(t Time) ([]Event, error) {
	o.events = o.events[:0]
	if o.err != nil {
		return nil, o.err
	}
	if t < o.s.now {
		return nil, fmt.Errorf("RunUntil(%d) is before the simulation's time %d", t, o.s.now)
	}
	for len(o.s.events) > 0 && o.s.events[0].at <= t {
		if err := o.s.processNext(); err != nil {
			o.err = err
			return nil, err
		}
	}
	o.s.now = t
	return o.events, nil
}

// Counters returns the run's counters so far.
func (o *Online) Counters() Counters { return o.s.counters }

// Queue returns the number of waiting and running requests.
func (o *Online) Queue() (waiting, running int) { return len(o.s.waiting), len(o.s.running) }

// Evictions returns the device tokens evicted without a host copy
// (deleted), the device tokens demoted to host, and the host tokens evicted,
// so far.
func (o *Online) Evictions() (deviceDeleted, demoted, hostEvicted int64) {
	st := o.s.tree.Stats()
	return st.DeviceEvicted - st.Demoted, st.Demoted, st.HostEvicted
}

// Active returns the number of requests submitted and arrived but not yet
// finished.
func (o *Online) Active() int { return o.s.active }

// Finish runs every remaining event and returns the run's results. The
// Online cannot be used afterwards.
func (o *Online) Finish() (*Result, error) {
	if o.err != nil {
		return nil, o.err
	}
	for len(o.s.events) > 0 {
		if err := o.s.processNext(); err != nil {
			return nil, err
		}
	}
	o.err = errors.New("sim: online simulation already finished")
	return o.s.finish(), nil
}
