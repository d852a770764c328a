package engine

import (
	"errors"
	"fmt"
	"io"

	"github.com/kvsim/kvsim/traces"
)

// Source yields trace records in non-decreasing arrival order and io.EOF
// at the end; an online source ([Queue]) returns [ErrNoneYet] when nothing
// is queued now but more may come. *traces.Reader implements it.
type Source interface {
	Next() (traces.Record, error)
}

// SliceSource is a Source over records held in memory.
type SliceSource struct {
	recs []traces.Record
	i    int
}

// NewSliceSource returns a Source that yields recs in order.
func NewSliceSource(recs []traces.Record) *SliceSource { return &SliceSource{recs: recs} }

// Next implements Source.
func (s *SliceSource) Next() (traces.Record, error) {
	if s.i >= len(s.recs) {
		return traces.Record{}, io.EOF
	}
	s.i++
	return s.recs[s.i-1], nil
}

// ErrNoneYet is what a [Queue] returns when nothing is queued now but more
// may be submitted: an online simulator waits instead of ending the run.
var ErrNoneYet = errors.New("engine: no record queued yet")

// Queue is the Source of an online simulation: records submitted and not
// yet arrived, in submission order. Its memory is reused from the start
// whenever it is emptied (a slice taken from the front would be
// reallocated on nearly every push).
type Queue struct {
	recs []traces.Record
	head int
}

// Push queues rec.
func (q *Queue) Push(rec traces.Record) { q.recs = append(q.recs, rec) }

// Len returns the number of records queued.
func (q *Queue) Len() int { return len(q.recs) - q.head }

// Peek returns the next record, which stays queued; the queue must not be
// empty. The pointer is valid until the next Push.
func (q *Queue) Peek() *traces.Record { return &q.recs[q.head] }

// Next implements Source; it returns ErrNoneYet when the queue is empty.
func (q *Queue) Next() (traces.Record, error) {
	if q.head == len(q.recs) {
		return traces.Record{}, ErrNoneYet
	}
	rec := q.recs[q.head]
	q.recs[q.head] = traces.Record{} // no reference kept to its slices
	q.head++
	if q.head == len(q.recs) {
		q.recs, q.head = q.recs[:0], 0
	}
	return rec, nil
}

// CheckSubmit is the arrival check of an [Engine]'s Submit: rec may not
// arrive before the engine's time now nor before the previous submission's
// arrival last.
func CheckSubmit(rec *traces.Record, now, last Time) error {
	if Time(rec.Arrival) < now {
		return fmt.Errorf("request %q submitted for %d ns, before the simulation's time %d ns", rec.ID, rec.Arrival, now)
	}
	if Time(rec.Arrival) < last {
		return fmt.Errorf("request %q arrives at %d ns, before the previous submission (%d ns)", rec.ID, rec.Arrival, last)
	}
	return nil
}
