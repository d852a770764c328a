package engine

import (
	"errors"
	"fmt"

	"github.com/kvsim/kvsim/traces"
)

// OnlineState is the plumbing an online simulator's [Engine] shares with
// every other: the [Queue] its submissions wait in, the events reported
// since the last RunUntil, and the error that stops the run (every later
// call returns it). sim.Online and llamacpp.Online hold one each.
type OnlineState struct {
	// Q is the simulator's Source.
	Q      Queue
	events []Event
	err    error
}

// Observe records e for the RunUntil in progress: the simulator reports
// its events to it.
func (o *OnlineState) Observe(e Event) { o.events = append(o.events, e) }

// Err returns the error that stopped the run, or nil.
func (o *OnlineState) Err() error { return o.err }

// Fail stops the run with err if err is not nil, and returns err.
func (o *OnlineState) Fail(err error) error {
	if err != nil {
		o.err = err
	}
	return err
}

// Push is the start of an Engine's Submit for a simulator at time now
// whose previous submission arrives at last: unless the run has stopped
// or rec fails [CheckSubmit] (the error is returned), rec is queued.
func (o *OnlineState) Push(rec traces.Record, now, last Time) error {
	if o.err != nil {
		return o.err
	}
	if err := CheckSubmit(&rec, now, last); err != nil {
		return err
	}
	o.Q.Push(rec)
	return nil
}

// StartRun is the start of an Engine's RunUntil(t) for a simulator at
// time now: it forgets the events of the previous call and returns the
// error that stopped the run, or one for a t before now.
func (o *OnlineState) StartRun(t, now Time) error {
	o.events = o.events[:0]
	if o.err != nil {
		return o.err
	}
	if t < now {
		return fmt.Errorf("RunUntil(%d) is before the simulation's time %d", t, now)
	}
	return nil
}

// Events returns the events observed since StartRun; the slice is reused
// by the next call.
func (o *OnlineState) Events() []Event { return o.events }

// Finished stops the run after an Engine's Finish: every later call
// returns an error saying so, prefixed with pkg.
func (o *OnlineState) Finished(pkg string) {
	o.err = errors.New(pkg + ": online simulation already finished")
}
