package fleet

import (
	"fmt"

	"github.com/kvsim/kvsim/sim"
	"github.com/kvsim/kvsim/sim/engine"
	"github.com/kvsim/kvsim/traces"
)

// closedLoop gates a closed-loop fleet's arrivals ([Fleet.RunClosedLoop]):
// a record reaches the router when the records it depends on have
// finished, on whichever replica, plus its think time: the single
// server's rule, with its tracker ([sim.DepTracker]). The router then sees
// the record as arriving at its release; its result is given back its
// trace arrival, with Release and DepWait as a single server's.
//
// At one instant the records arriving and the records due are released in
// the order of their keys, which mimic a single server's event sequence
// numbers: the next arrival's key is taken when the previous record
// arrives, a due record's when the tracker makes it due (at a completion,
// after the instant's routing), so a fleet of one releases them in the
// order the server would.
type closedLoop struct {
	deps     *sim.DepTracker
	arrivals engine.Queue // submitted, not yet at their trace arrival
	key      uint64       // the last key given
	nextKey  uint64       // the key of arrivals[0]'s arrival
	// arrival is the trace arrival of every record released after it, by
	// id (kept to the end: the replicas' own results are mended then).
	arrival map[string]engine.Time
}

func newClosedLoop() *closedLoop {
	c := &closedLoop{arrival: map[string]engine.Time{}, key: 1, nextKey: 1}
	c.deps = sim.NewDepTracker(func(engine.Time) uint64 { c.key++; return c.key })
	return c
}

// next is the earliest of the next trace arrival and the next release.
func (c *closedLoop) next() (engine.Time, bool) {
	t, ok := engine.Never, false
	if c.arrivals.Len() > 0 {
		t, ok = engine.Time(c.arrivals.Peek().Arrival), true
	}
	if at, _, has := c.deps.Next(); has && at < t {
		t, ok = at, true
	}
	return t, ok
}

// gate moves to r.pending, as arriving now, every record arriving now
// whose dependencies have finished and every held record due now.
func (c *closedLoop) gate(r *run) error {
	for {
		arrives := c.arrivals.Len() > 0 && engine.Time(c.arrivals.Peek().Arrival) == r.now
		at, key, due := c.deps.Next()
		due = due && at <= r.now
		switch {
		case due && (!arrives || key < c.nextKey):
			rec := c.deps.Release()
			if engine.Time(rec.Arrival) != r.now {
				c.arrival[rec.ID] = engine.Time(rec.Arrival)
			}
			rel := *rec
			rel.Arrival = int64(r.now)
			r.pending.Push(rel)
		case arrives:
			rec := new(traces.Record)
			*rec, _ = c.arrivals.Next()
			now, err := c.deps.Arrive(rec, r.now) // (which may make rec due later)
			if err != nil {
				return fmt.Errorf("fleet: %w", err)
			}
			c.key++ // the next arrival's, as a server schedules it after this one
			c.nextKey = c.key
			if now {
				r.pending.Push(*rec)
			}
		default:
			return nil
		}
	}
}

// finished records a request's completion (or failure) at ev.Time, making
// the records waiting for it due, and gives its result back its trace
// arrival: Release is when the router got it, DepWait how long after its
// arrival.
func (c *closedLoop) finished(ev *engine.Event) {
	c.deps.Finish(ev.ID, ev.Time)
	c.mend(&ev.Result)
}

// mend gives a result the replica reported (its Arrival the release) its
// trace arrival, Release and DepWait.
func (c *closedLoop) mend(res *engine.RequestResult) {
	rel := res.Arrival
	if a, ok := c.arrival[res.ID]; ok {
		res.Arrival = a
	}
	res.Release, res.DepWait = rel, rel-res.Arrival
}

// end checks that nothing is held and mends the replicas' own results.
func (c *closedLoop) end(reps []ReplicaResult) {
	if n := c.deps.Pending() + c.arrivals.Len(); n != 0 {
		panic(fmt.Sprintf("fleet: closed-loop run ended with %d records held", n))
	}
	for _, rep := range reps {
		if rep.Result == nil {
			continue
		}
		for k := range rep.Result.Requests {
			c.mend(&rep.Result.Requests[k])
		}
	}
}
