package replay

import (
	"container/heap"
	"context"
	"io"
	"math"
	"time"

	"github.com/kvsim/kvsim/sim/engine"
	"github.com/kvsim/kvsim/traces"
)

// StreamResult is the outcome of RunStream: what Result holds less the
// per-request entries, which went to the run's out function.
type StreamResult struct {
	// Summary is Summarize over every record of the source.
	Summary Summary
	// Start is the run's time origin (the times of the results count from
	// it).
	Start time.Time
	// Interrupted reports that the run's context was cancelled before
	// every request was sent and finished.
	Interrupted bool
	// Records is the number of records the source gave.
	Records int
	// OutputErr is the first error out returned; the run went on without
	// calling out again.
	OutputErr error
	// MaxWindow is the most records the pacer held at once: read and not
	// finished (see the pacer), the measure of a run's memory.
	MaxWindow int
}

// RunStream is Run reading its records from src as the schedule reaches
// them, and handing each sent request's record and result to out once it
// has finished, instead of keeping them: in the order WritePerRequest
// writes them (send time, then record order), as soon as no request sent
// or to be sent can come before it. Memory follows the pacer's window (the
// records read and not finished: with a schedule that releases records
// over time, or as fast as possible under a concurrency cap, those in
// flight and those waiting for a dependency or a slot), a few numbers a record for the exact summary (64 bytes), and the
// index and finish time of every record under its ID (a later record may
// name any earlier one). The summary is Summarize's over every record, the
// unsent ones (an interrupted run, whose source is then read to its end)
// counted as not sent.
//
// Pointers handed to out are valid during the call only. A read error of
// src, or a repeated record ID, stops the run at once (requests in flight
// on a wall-clock target are cancelled) and is returned.
func (r *Replayer) RunStream(ctx context.Context, src engine.Source, out func(rec *traces.Record, rr *RequestResult) error) (*StreamResult, error) {
	p := newPacer(r.cfg, src)
	if r.eager {
		p.readAll()
	}
	st := &runState{out: out, sum: newSummaryBuilder()}
	if t, ok := r.target.(*SimTarget); ok {
		if err := t.replay(ctx, r.cfg, p, st); err != nil && p.err == nil {
			return nil, err
		}
	} else {
		r.runWall(ctx, p, st)
	}
	if p.err != nil {
		return nil, p.err
	}
	st.emit(0, true)
	// The records read and never sent, then those never read (an
	// interrupted run), count as not sent.
	for i := range p.read {
		if e := p.entry(i); e != nil {
			st.record(&e.rr, false)
		}
	}
	for st.interrupted {
		rec, err := src.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			return nil, err
		}
		st.record(&RequestResult{Index: p.read, Warmup: rec.Kind == "warmup"}, false)
		p.read++
	}
	return &StreamResult{
		Summary: st.summary(), Start: st.start, Interrupted: st.interrupted,
		Records: p.read, OutputErr: st.outErr, MaxWindow: p.maxLive,
	}, nil
}

// runState is what a run keeps besides its pacer: the finished requests
// not yet handed to out, the requests in flight (whose send times bound
// what may be handed out), and the summary's numbers.
type runState struct {
	out         func(*traces.Record, *RequestResult) error
	outErr      error
	start       time.Time
	interrupted bool

	done   minHeap[finishedReq] // finished, not yet handed out
	flying minHeap[sendBound]   // granted: a lower bound of the send time
	landed map[int]bool         // finished requests still in flying

	compact   []compactResult // by record index: the summary's numbers
	reasons   []string        // failure reasons, numbered from 1
	reasonIdx map[string]uint16
	sum       *summaryBuilder
}

// finishedReq is a finished request waiting to be handed out.
type finishedReq struct {
	rec *traces.Record
	rr  *RequestResult
}

func (f finishedReq) before(o finishedReq) bool {
	return f.rr.Start < o.rr.Start || (f.rr.Start == o.rr.Start && f.rr.Index < o.rr.Index)
}

// sendBound is a granted request's index and a time its send time is not
// before.
type sendBound struct {
	at  int64
	idx int
}

func (b sendBound) before(o sendBound) bool { return b.at < o.at || (b.at == o.at && b.idx < o.idx) }

// granted notes that record i was granted at now: it is sent at now or
// later.
func (st *runState) granted(i int, now int64) {
	heap.Push(&st.flying, sendBound{now, i})
}

// finished takes the finished request of e: its numbers go to the summary
// and it waits to be handed out.
func (st *runState) finished(e *paced) {
	if st.landed == nil {
		st.landed = map[int]bool{}
	}
	st.landed[e.rr.Index] = true
	st.record(&e.rr, true)
	heap.Push(&st.done, finishedReq{&e.rec, &e.rr})
}

// record keeps the summary's numbers of rr (a finished request, or, with
// itl false, one never sent).
func (st *runState) record(rr *RequestResult, itl bool) {
	for len(st.compact) <= rr.Index {
		st.compact = append(st.compact, compactResult{})
	}
	st.compact[rr.Index] = st.compactOf(rr)
	if itl {
		st.sum.addITL(rr)
	}
}

// emit hands out, in order, the finished requests that no other request
// can come before: sent before floor (every later send is at floor or
// after) and before every request in flight. With all, it hands out
// everything finished.
func (st *runState) emit(floor int64, all bool) {
	for len(st.flying) > 0 && st.landed[st.flying[0].idx] {
		delete(st.landed, heap.Pop(&st.flying).(sendBound).idx)
	}
	for len(st.done) > 0 {
		h := st.done[0]
		if !all && (h.rr.Start >= floor || (len(st.flying) > 0 && !(sendBound{h.rr.Start, h.rr.Index}).before(st.flying[0]))) {
			return
		}
		heap.Pop(&st.done)
		if st.out != nil && st.outErr == nil {
			st.outErr = st.out(h.rec, h.rr)
		}
	}
}

// summary is Summarize over the records' numbers, in record order.
func (st *runState) summary() Summary {
	for i := range st.compact {
		rr := st.compact[i].result(st.reasons)
		st.sum.add(&rr)
	}
	return st.sum.summary()
}

// compactResult is what Summarize reads of a RequestResult but its
// inter-token latencies (which go to engine.Stats as the request
// finishes): 64 bytes a record.
type compactResult struct {
	start, first, end, slot, due      int64
	prompt, serverPrompt, out, cached int32
	failed                            uint16 // 0: none; else reasons[failed-1]
	flags                             uint8
}

const (
	compactSent = 1 << iota
	compactWarmup
	compactRetried
)

// compactOf returns rr's numbers, its failure reason numbered in
// st.reasons.
func (st *runState) compactOf(rr *RequestResult) compactResult {
	c := compactResult{
		start: rr.Start, first: rr.FirstToken, end: rr.End, slot: rr.Slot, due: rr.Due,
		prompt: int32(rr.PromptTokens), serverPrompt: int32(rr.ServerPromptTokens),
		out: int32(rr.OutputTokens), cached: int32(rr.CachedTokens),
	}
	if rr.Sent {
		c.flags |= compactSent
	}
	if rr.Warmup {
		c.flags |= compactWarmup
	}
	if rr.Retries > 0 {
		c.flags |= compactRetried
	}
	if rr.Failed != "" {
		k, ok := st.reasonIdx[rr.Failed]
		if !ok {
			if len(st.reasons) == math.MaxUint16 {
				panic("replay: more than 65535 failure reasons")
			}
			if st.reasonIdx == nil {
				st.reasonIdx = map[string]uint16{}
			}
			st.reasons = append(st.reasons, rr.Failed)
			k = uint16(len(st.reasons))
			st.reasonIdx[rr.Failed] = k
		}
		c.failed = k
	}
	return c
}

// result is the RequestResult the numbers stand for, as Summarize reads
// it.
func (c *compactResult) result(reasons []string) RequestResult {
	rr := RequestResult{
		Sent: c.flags&compactSent != 0, Warmup: c.flags&compactWarmup != 0,
		Start: c.start, FirstToken: c.first, End: c.end, Slot: c.slot, Due: c.due,
		PromptTokens: int(c.prompt), ServerPromptTokens: int(c.serverPrompt),
		OutputTokens: int(c.out), CachedTokens: int(c.cached),
	}
	if c.flags&compactRetried != 0 {
		rr.Retries = 1
	}
	if c.failed > 0 {
		rr.Failed = reasons[c.failed-1]
	}
	return rr
}
