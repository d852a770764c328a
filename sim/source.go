package sim

import (
	"io"

	"github.com/kvsim/kvsim/traces"
)

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
