package replay

import (
	"container/heap"
	"fmt"
	"io"
	"math"
	"slices"

	"github.com/kvsim/kvsim/sim/engine"
	"github.com/kvsim/kvsim/traces"
)

// pacer is the one definition of a replay's pacing rules, shared by the
// wall-clock runner (Replayer.Run against an HTTP target) and the
// simulator's virtual-time driver. It holds no clock and starts nothing:
// its caller advances it with poll(now) and reports completions with
// finish; it answers which records may be sent, with their due and slot
// times. All times are ns from the run's start.
//
// The rules:
//   - Records are released by the schedule (see schedule) in record order:
//     record i at max(sched[i], release of i-1).
//   - A released record whose Parent and WaitFor (earlier records only) have
//     all finished is ready at max(release, their latest finish) and, under
//     PaceTimestamps, not before its Parent's finish plus ThinkTime /
//     Speedup (the delay counts from the parent only: a WaitFor gate adds
//     no delay of its own). That is its due time.
//   - Ready records queue for one of MaxConcurrency slots (0: no cap) in the
//     order they became ready (record order for ties); a slot is granted at
//     max(due, the finish that freed it). A finish frees its slot before it
//     readies its dependents, so they queue behind the requests already
//     waiting.
//   - With a SendGap, a granted record is sent no sooner than SendGap after
//     the previous send, in grant order: its slot time is max(grant time,
//     previous send + SendGap). Its concurrency slot is held meanwhile.
//
// The pacer reads its records from a source as the schedule reaches them
// (the next record to release is read when the previous one is released),
// and forgets each record when it finishes. What it holds is its window:
// the records read and not finished (released and waiting, queued, in
// flight, and the next one to release), plus, for every record read, its
// index and finish time under its ID, since a later record may name any
// earlier one.
//
// As fast as possible with a concurrency cap (PaceASAP, or PaceRate at an
// infinite rate, and MaxConcurrency > 0) every record is released at 0,
// so by the rules the queue is every record without a dependency in
// record order, then the others in the order their last dependency
// finished (record order among those one finish readies). The pacer
// then reads lazily (see lazyGrant): a record only when a slot is free and
// the queue holds no earlier one, so that its window is the requests in
// flight plus the records read past that wait for a dependency, not the
// whole trace. The order it grants in is the same (the eager pacer, which
// releases everything at the first poll, is the tests' model).
type pacer struct {
	pacing  Pacing
	speedup float64
	cap     int
	gap     int64 // SendGap in ns

	src     engine.Source
	srcDone bool
	err     error // a read error or a repeated ID: the run stops
	sch     scheduler
	read    int              // records read
	live    map[int]*paced   // the window: records read and not finished, by index
	ids     map[string]named // every record read, by ID
	maxLive int              // the largest window so far

	lazy   bool   // read when a slot is free (see lazyGrant), not when released
	kicked bool   // lazy: the first poll has granted the first slots
	finSeq uint64 // finishes so far: the order of the queue under lazy
	enqSeq uint64 // enqueues so far: the order of the queue otherwise

	next   int   // next record to release
	relAt  int64 // release time of the previous record
	timers minHeap[wait]
	seq    uint64

	queue    minHeap[queued] // ready records waiting for a slot
	inUse    int
	outbox   []grant // granted a slot, waiting for the send gap; slot is the grant time
	lastSend int64   // when poll returned the previous send
	sent     int
	out      []grant
}

// paced is a record in the pacer's window.
type paced struct {
	rec        traces.Record
	rr         RequestResult // the runner's measurements
	sched      int64
	dependents []int // records waiting for this one to finish
	left       int   // dependencies not yet finished
	depEnd     int64 // max(release, the finished dependencies' finishes)
	parent     int   // index of the Parent record, or -1
	parentEnd  int64 // the Parent's finish, once finished
	released   bool
	deps       int    // distinct earlier records named as Parent or in WaitFor
	lastFin    uint64 // the latest finSeq of those finished when it was read
}

// named is a record's index and its finish (notFinished until it
// finishes), with the finish's sequence number.
type named struct {
	idx int
	end int64
	fin uint64
}

const notFinished = math.MinInt64

// grant is a record allowed to be sent now.
type grant struct {
	idx       int
	due, slot int64
}

// queued is a ready record waiting for a slot, in the order (k1, k2): the
// enqueue order, or under lazy (finishing that readied it, record index),
// with (0, index) for a record without dependencies.
type queued struct {
	idx    int
	due    int64
	k1, k2 uint64
}

func (q queued) before(o queued) bool { return q.k1 < o.k1 || (q.k1 == o.k1 && q.k2 < o.k2) }

// newPacer returns a pacer of src's records.
func newPacer(cfg Config, src engine.Source) *pacer {
	asap := cfg.Pacing == PaceASAP || (cfg.Pacing == PaceRate && math.IsInf(cfg.Rate, 1))
	return &pacer{
		pacing: cfg.Pacing, speedup: cfg.Speedup, cap: cfg.MaxConcurrency, gap: int64(cfg.SendGap),
		src: src, sch: scheduler{cfg: cfg}, live: map[int]*paced{}, ids: map[string]named{},
		lazy: asap && cfg.MaxConcurrency > 0,
	}
}

// fill reads the next record to release if it is not read yet: its
// schedule, its dependencies on earlier records, and its ID. A read error
// or a repeated ID ends the source and is kept in p.err.
func (p *pacer) fill() {
	if p.lazy || p.next < p.read || p.srcDone {
		return
	}
	p.readOne()
}

// readAll reads the whole source at once, as a pacer over a slice did
// before it streamed (tests compare the two); it releases at the first
// poll, not lazily.
func (p *pacer) readAll() {
	p.lazy = false
	for !p.srcDone {
		p.readOne()
	}
}

// readOne reads the next record of the source.
func (p *pacer) readOne() {
	rec, err := p.src.Next()
	if err != nil {
		p.srcDone = true
		if err != io.EOF {
			p.err = err
		}
		return
	}
	i := p.read
	if _, dup := p.ids[rec.ID]; dup {
		p.srcDone = true
		p.err = fmt.Errorf("record %d: id %q: expected unique ids, found a repeat", i, rec.ID)
		return
	}
	e := &paced{rec: rec, sched: p.sch.at(i, &rec), parent: -1}
	e.rr = RequestResult{Index: i, ID: rec.ID, Warmup: rec.Kind == "warmup", CachedTokens: -1}
	if n, ok := p.ids[rec.Parent]; ok {
		e.parent = n.idx
	}
	deps := append([]string{rec.Parent}, rec.WaitFor...)
	for k, id := range deps {
		n, ok := p.ids[id]
		if !ok || slices.Contains(deps[:k], id) {
			continue
		}
		e.deps++
		if n.end == notFinished {
			d := p.live[n.idx]
			d.dependents = append(d.dependents, i)
			e.left++
			continue
		}
		e.lastFin = max(e.lastFin, n.fin)
		e.depEnd = max(e.depEnd, n.end)
		if n.idx == e.parent {
			e.parentEnd = n.end
		}
	}
	p.ids[rec.ID] = named{idx: i, end: notFinished}
	p.live[i] = e
	p.read++
	p.maxLive = max(p.maxLive, len(p.live))
}

// entry returns record i of the window (read and not finished).
func (p *pacer) entry(i int) *paced { return p.live[i] }

// releaseTime is when record p.next (read) is released by the schedule.
func (p *pacer) releaseTime() int64 { return max(p.live[p.next].sched, p.relAt) }

// nextWake returns the next time at which poll has something to do by
// itself (a release or the end of a think time).
func (p *pacer) nextWake() (int64, bool) {
	if p.lazy && !p.kicked {
		return 0, true
	}
	p.fill()
	t, ok := int64(math.MaxInt64), false
	if p.next < p.read {
		t, ok = p.releaseTime(), true
	}
	if len(p.timers) > 0 && p.timers[0].at < t {
		t, ok = p.timers[0].at, true
	}
	if len(p.outbox) > 0 && p.sendAt() < t {
		t, ok = p.sendAt(), true
	}
	return t, ok
}

// sendAt is when the head of the outbox may be sent.
func (p *pacer) sendAt() int64 {
	at := p.outbox[0].slot
	if p.gap > 0 && p.sent > 0 {
		at = max(at, p.lastSend+p.gap)
	}
	return at
}

// poll processes the releases and think-time ends up to now, in time order
// (a release before a think-time end at the same time), and returns every
// record to be sent by now that was not returned before, in grant order,
// with its slot time set to its send time. The slice is reused by the next
// call.
func (p *pacer) poll(now int64) []grant {
	if p.lazy && !p.kicked {
		p.kicked = true
		p.grantFree(0)
	}
	for {
		p.fill()
		rel := p.next < p.read && p.releaseTime() <= now
		tm := len(p.timers) > 0 && p.timers[0].at <= now
		switch {
		case rel && (!tm || p.releaseTime() <= p.timers[0].at):
			i, at := p.next, p.releaseTime()
			p.next++
			p.relAt = at
			e := p.live[i]
			e.released = true
			e.depEnd = max(e.depEnd, at)
			if e.left == 0 {
				p.ready(i, at)
			}
		case tm:
			w := heap.Pop(&p.timers).(wait)
			p.enqueue(w.idx, w.at)
		default:
			for len(p.outbox) > 0 && p.sendAt() <= now {
				g := p.outbox[0]
				g.slot = p.sendAt()
				p.outbox = p.outbox[1:]
				// now, not g.slot: a caller that polls late (a wall
				// clock) still leaves the whole gap before the next send.
				p.lastSend = now
				p.sent++
				p.out = append(p.out, g)
			}
			out := p.out
			p.out = p.out[:0]
			return out
		}
	}
}

// ready handles a released record whose dependencies have all finished;
// depEnd holds max(release, their finishes).
func (p *pacer) ready(i int, at int64) {
	e := p.live[i]
	due := e.depEnd
	if p.pacing == PaceTimestamps && e.rec.ThinkTime > 0 && e.parent >= 0 {
		// The delay counts from the parent's completion.
		due = max(due, e.parentEnd+int64(float64(e.rec.ThinkTime)/p.speedup))
	}
	if due > at {
		p.seq++
		heap.Push(&p.timers, wait{at: due, seq: p.seq, idx: i})
		return
	}
	p.enqueue(i, due)
}

// enqueue puts a ready record in the slot queue and grants what it can.
func (p *pacer) enqueue(i int, due int64) {
	q := queued{idx: i, due: due, k1: p.enqSeq}
	p.enqSeq++
	if p.lazy {
		q.k1, q.k2 = p.finSeq, uint64(i)
	}
	heap.Push(&p.queue, q)
	p.grantFree(due)
}

// grantFree grants slots to the head of the queue while some are free; at
// is when the slots became free.
func (p *pacer) grantFree(at int64) {
	for p.cap == 0 || p.inUse < p.cap {
		if p.lazy && p.lazyGrant(at) {
			continue
		}
		if len(p.queue) == 0 {
			return
		}
		q := heap.Pop(&p.queue).(queued)
		p.grant(q.idx, q.due, at)
	}
}

// grant gives record i a slot freed at at.
func (p *pacer) grant(i int, due, at int64) {
	p.inUse++
	p.outbox = append(p.outbox, grant{idx: i, due: due, slot: max(due, at)})
}

// lazyGrant reads on (under lazy) until it finds a record without
// dependencies, grants it a slot freed at at and returns true; it returns
// false at the end of the source. Each record it reads is released (at 0,
// as all are); one with dependencies waits for them as it would have from
// the start, and one whose dependencies have all finished already joins
// the queue where their last finish would have put it.
func (p *pacer) lazyGrant(at int64) bool {
	for !p.srcDone {
		p.readOne()
		if p.next == p.read {
			continue // nothing read: the source ended or failed
		}
		i := p.next
		p.next++
		e := p.live[i]
		e.released = true
		switch {
		case e.deps == 0:
			p.grant(i, 0, at)
			return true
		case e.left == 0:
			heap.Push(&p.queue, queued{idx: i, due: e.depEnd, k1: e.lastFin, k2: uint64(i)})
		}
	}
	return false
}

// finish reports that granted record i finished (succeeded or failed) at
// at: its slot is handed on, then its dependents are readied. The record
// leaves the window; finish returns it.
func (p *pacer) finish(i int, at int64) *paced {
	p.inUse--
	if p.inUse < 0 {
		panic("replay: pacer: finish without a grant")
	}
	p.grantFree(at)
	e := p.live[i]
	delete(p.live, i)
	p.finSeq++
	p.ids[e.rec.ID] = named{idx: i, end: at, fin: p.finSeq}
	for _, d := range e.dependents {
		de := p.live[d]
		de.left--
		de.depEnd = max(de.depEnd, at)
		if de.parent == i {
			de.parentEnd = at
		}
		if de.left == 0 && de.released {
			p.ready(d, at)
		}
	}
	return e
}

// allGranted reports whether every record has been returned by poll (or
// the source failed: see p.err).
func (p *pacer) allGranted() bool {
	p.fill()
	return p.err != nil || (p.srcDone && p.sent == p.read)
}

// wait is a record in its think time.
type wait struct {
	at  int64
	seq uint64
	idx int
}

func (w wait) before(o wait) bool { return w.at < o.at || (w.at == o.at && w.seq < o.seq) }

// minHeap is a container/heap of values that order themselves: before is
// a strict total order, so that equal times pop in a fixed order.
type minHeap[T interface{ before(T) bool }] []T

func (h minHeap[T]) Len() int           { return len(h) }
func (h minHeap[T]) Less(i, j int) bool { return h[i].before(h[j]) }
func (h minHeap[T]) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *minHeap[T]) Push(x any)        { *h = append(*h, x.(T)) }
func (h *minHeap[T]) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}
