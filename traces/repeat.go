package traces

import (
	"errors"
	"fmt"
	"io"
	"math"
	"math/bits"
	"strconv"
	"strings"
)

// Repeat writes copies of the trace that open opens, back to back in time,
// to w in the kvsim format, so that a trace of a day can be built from a
// trace of an hour with the same load and the same cache behaviour in each
// copy. Copy k (from 0) is the trace with:
//
//   - every arrival moved later by k periods, a period being the trace's
//     span (last arrival minus first) plus its mean gap between arrivals
//     ((last - first) / (requests - 1); 1 ns for a trace of one instant);
//   - block hash ids shifted by k * (largest id + 1), and token ids (prompt
//     and output) by k * (largest token id + 1), so that no prefix of a
//     copy is a prefix of another copy's prompt;
//   - request ids (and the parent and wait_for references to them) and
//     session ids renamed apart: when every one is a decimal integer, by
//     adding k * (largest + 1); otherwise by appending a separator and k
//     ("a" becomes "a#2"), the separator being the first of # ~ @ ^ that no
//     id contains.
//
// Copy 0 is the trace itself, so Repeat with one copy writes what a
// conversion to the kvsim format writes. The input is read copies times,
// front to back, never held in memory: open must open the same trace each
// time (standard input cannot be repeated). The result is deterministic.
func Repeat(open func() (*Reader, error), copies int, w io.Writer) error {
	if copies < 1 {
		return fmt.Errorf("repeat: copies: expected >= 1, found %d", copies)
	}
	r, err := open()
	if err != nil {
		return err
	}
	hdr := r.Header()
	if copies > 1 {
		hdr.Source = strings.TrimSpace(fmt.Sprintf("%s (%d copies back to back, kvsim trace gen repeat)", hdr.Source, copies))
	}
	tw, err := NewWriter(w, hdr)
	if err != nil {
		r.Close()
		return err
	}
	var p repeatPlan
	p.ids.init()
	p.sessions.init()
	if err := eachRecord(r, func(rec *Record) error {
		p.learn(rec)
		return tw.Write(*rec)
	}); err != nil {
		return err
	}
	if copies > 1 {
		if err := p.finish(copies); err != nil {
			return fmt.Errorf("repeat %s: %w", r.Path(), err)
		}
	}
	for k := 1; k < copies; k++ {
		r, err := open()
		if err != nil {
			return err
		}
		n := 0
		if err := eachRecord(r, func(rec *Record) error {
			n++
			if n > p.n {
				return fmt.Errorf("repeat %s: copy %d: expected the %d records of the first reading, found more (the trace changed while it was read)", r.Path(), k, p.n)
			}
			p.shift(rec, k)
			return tw.Write(*rec)
		}); err != nil {
			return err
		}
		if n != p.n {
			return fmt.Errorf("repeat %s: copy %d: expected the %d records of the first reading, found %d (the trace changed while it was read)", r.Path(), k, p.n, n)
		}
	}
	return tw.Flush()
}

// eachRecord calls fn for every record of r and closes r; it stops at
// the first error, of r or of fn.
func eachRecord(r *Reader, fn func(*Record) error) error {
	defer r.Close()
	for {
		rec, err := r.Next()
		if err == io.EOF {
			return r.Close()
		}
		if err != nil {
			return err
		}
		if err := fn(&rec); err != nil {
			return err
		}
	}
}

// repeatPlan is what Repeat learns from the first reading: how far apart
// the copies go in time and in each id space.
type repeatPlan struct {
	n           int
	first, last int64
	maxBlock    uint64
	hasBlocks   bool
	maxToken    int32
	hasTokens   bool
	period      int64
	ids         idSpace // request ids, parents, wait_for
	sessions    idSpace
}

func (p *repeatPlan) learn(rec *Record) {
	if p.n == 0 {
		p.first = rec.Arrival
	}
	p.last = rec.Arrival
	p.n++
	for _, b := range rec.Blocks {
		p.maxBlock = max(p.maxBlock, b)
		p.hasBlocks = true
	}
	for _, ts := range [][]int32{rec.Tokens, rec.OutputTokens} {
		for _, t := range ts {
			p.maxToken = max(p.maxToken, t)
			p.hasTokens = true
		}
	}
	p.ids.learn(rec.ID)
	if rec.Parent != "" {
		p.ids.learn(rec.Parent)
	}
	for _, w := range rec.WaitFor {
		p.ids.learn(w)
	}
	if rec.Session != "" {
		p.sessions.learn(rec.Session)
	}
}

// finish works out the shifts for copies copies, or says which id space
// they would overflow.
func (p *repeatPlan) finish(copies int) error {
	k := uint64(copies - 1)
	if p.hasBlocks {
		hi, lo := bits.Mul64(k, p.maxBlock+1)
		if p.maxBlock == math.MaxUint64 || hi != 0 || lo > math.MaxUint64-p.maxBlock {
			return fmt.Errorf("blocks: %d copies of hash ids up to %d do not fit in 64 bits", copies, p.maxBlock)
		}
	}
	if p.hasTokens && (k > math.MaxInt32 || k*(uint64(p.maxToken)+1)+uint64(p.maxToken) > math.MaxInt32) {
		return fmt.Errorf("tokens: %d copies of token ids up to %d do not fit in 32 bits: use fewer copies", copies, p.maxToken)
	}
	span := p.last - p.first
	p.period = span + 1
	if p.n > 1 && span > 0 {
		p.period = span + span/int64(p.n-1)
	}
	if p.last > MaxTime || k > uint64(MaxTime/p.period) || int64(k)*p.period > MaxTime-p.last {
		return fmt.Errorf("arrival: %d copies of a trace spanning %d ns (period %d ns) end beyond %d ns (285 years)", copies, span, p.period, int64(MaxTime))
	}
	if err := p.ids.finish(copies); err != nil {
		return fmt.Errorf("id: %w", err)
	}
	if err := p.sessions.finish(copies); err != nil {
		return fmt.Errorf("session: %w", err)
	}
	return nil
}

// shift turns a record of the trace into its copy k.
func (p *repeatPlan) shift(rec *Record, k int) {
	rec.Arrival += int64(k) * p.period
	if rec.Blocks != nil {
		off := uint64(k) * (p.maxBlock + 1)
		for i := range rec.Blocks {
			rec.Blocks[i] += off
		}
	}
	off := int32(k) * (p.maxToken + 1)
	for _, ts := range [][]int32{rec.Tokens, rec.OutputTokens} {
		for i := range ts {
			ts[i] += off
		}
	}
	rec.ID = p.ids.rename(rec.ID, k)
	if rec.Parent != "" {
		rec.Parent = p.ids.rename(rec.Parent, k)
	}
	for i, w := range rec.WaitFor {
		rec.WaitFor[i] = p.ids.rename(w, k)
	}
	if rec.Session != "" {
		rec.Session = p.sessions.rename(rec.Session, k)
	}
}

// repeatSeparators are the separators idSpace may append, in order of
// preference.
const repeatSeparators = "#~@^"

// idSpace renames the ids of one kind (requests or sessions) apart for
// each copy.
type idSpace struct {
	numeric bool  // every id is a canonical non-negative decimal int64
	max     int64 // the largest, when numeric
	used    [len(repeatSeparators)]bool
	sep     string // chosen by finish when not numeric
	stride  int64  // max + 1, when numeric
}

func (s *idSpace) init() { s.numeric = true }

func (s *idSpace) learn(id string) {
	if s.numeric {
		v, err := strconv.ParseInt(id, 10, 64)
		if err != nil || v < 0 || strconv.FormatInt(v, 10) != id {
			s.numeric = false
		} else {
			s.max = max(s.max, v)
		}
	}
	for i := range len(repeatSeparators) {
		if !s.used[i] && strings.IndexByte(id, repeatSeparators[i]) >= 0 {
			s.used[i] = true
		}
	}
}

func (s *idSpace) finish(copies int) error {
	k := int64(copies - 1)
	if s.numeric && s.max < math.MaxInt64 && k <= (math.MaxInt64-s.max)/(s.max+1) {
		s.stride = s.max + 1
		return nil
	}
	s.numeric = false
	for i, u := range s.used {
		if !u {
			s.sep = repeatSeparators[i : i+1]
			return nil
		}
	}
	return errors.New("every separator kvsim could append to tell the copies' ids apart (" + strings.Join(strings.Split(repeatSeparators, ""), " ") + ") is in some id")
}

func (s *idSpace) rename(id string, k int) string {
	if k == 0 {
		return id
	}
	if s.numeric {
		v, err := strconv.ParseInt(id, 10, 64)
		if err != nil {
			panic("traces: repeat: an id learnt as numeric does not parse: " + id)
		}
		return strconv.FormatInt(v+int64(k)*s.stride, 10)
	}
	return id + s.sep + strconv.Itoa(k)
}
