package traces

import (
	"fmt"
	"math"
	"strconv"
)

// ScaleRate makes the reader yield its records at k times the trace's
// rate: every Arrival and ThinkTime divided by k and rounded to the
// nearest nanosecond (order and ties are kept). k must be > 0; 1 changes
// nothing. Call it before the first Next.
func (r *Reader) ScaleRate(k float64) error {
	if !(k > 0) || math.IsInf(k, 0) {
		return fmt.Errorf("rate scale: must be a finite number > 0 (got %v)", k)
	}
	if k == 1 {
		return nil
	}
	s := scaled{dec: r.dec, k: k}
	if _, ok := r.dec.(interface{ lineNo() int }); ok {
		r.dec = &scaledLines{s}
	} else {
		r.dec = &s
	}
	note := "rate x" + strconv.FormatFloat(k, 'g', -1, 64)
	if r.hdr.Note != "" {
		note = r.hdr.Note + "; " + note
	}
	r.hdr.Note = note
	return nil
}

// scaled divides the times of dec's records by k.
type scaled struct {
	dec decoder
	k   float64
}

func (s *scaled) next() (Record, error) {
	rec, err := s.dec.next()
	if err == nil {
		rec.Arrival = int64(math.Round(float64(rec.Arrival) / s.k))
		rec.ThinkTime = int64(math.Round(float64(rec.ThinkTime) / s.k))
	}
	return rec, err
}

// scaledLines is scaled over a decoder with line numbers, which it keeps.
type scaledLines struct{ scaled }

func (s *scaledLines) lineNo() int { return s.dec.(interface{ lineNo() int }).lineNo() }
