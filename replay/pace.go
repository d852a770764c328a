package replay

import (
	"container/heap"
	"fmt"
	"math"

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
type pacer struct {
	pacing  Pacing
	speedup float64
	cap     int
	gap     int64 // SendGap in ns

	recs       []traces.Record
	sched      []int64
	dependents [][]int
	ndeps      []int   // dependencies
	left       []int   // dependencies not yet finished
	depEnd     []int64 // max(release, the finished dependencies' finishes)
	parent     []int   // index of the Parent record, or -1
	parentEnd  []int64 // the Parent's finish, once finished
	released   []bool

	next   int   // next record to release
	relAt  int64 // release time of the previous record
	timers minHeap[wait]
	seq    uint64

	queue    []queued
	inUse    int
	outbox   []grant // granted a slot, waiting for the send gap; slot is the grant time
	lastSend int64   // when poll returned the previous send
	sent     int
	out      []grant
}

// grant is a record allowed to be sent now.
type grant struct {
	idx       int
	due, slot int64
}

type queued struct {
	idx int
	due int64
}

// newPacer checks that record IDs are unique and builds the pacer.
func newPacer(cfg Config, recs []traces.Record) (*pacer, error) {
	idx := make(map[string]int, len(recs))
	for i := range recs {
		if _, dup := idx[recs[i].ID]; dup {
			return nil, fmt.Errorf("record %d: id %q: expected unique ids, found a repeat", i, recs[i].ID)
		}
		idx[recs[i].ID] = i
	}
	p := &pacer{
		pacing: cfg.Pacing, speedup: cfg.Speedup, cap: cfg.MaxConcurrency, gap: int64(cfg.SendGap),
		recs: recs, sched: schedule(cfg, recs),
		dependents: make([][]int, len(recs)),
		ndeps:      make([]int, len(recs)),
		left:       make([]int, len(recs)),
		parent:     make([]int, len(recs)),
		parentEnd:  make([]int64, len(recs)),
		depEnd:     make([]int64, len(recs)),
		released:   make([]bool, len(recs)),
	}
	for i := range recs {
		p.parent[i] = -1
		if j, ok := idx[recs[i].Parent]; ok && j < i {
			p.parent[i] = j
		}
		seen := map[int]bool{}
		for _, id := range append([]string{recs[i].Parent}, recs[i].WaitFor...) {
			if j, ok := idx[id]; ok && j < i && !seen[j] {
				seen[j] = true
				p.dependents[j] = append(p.dependents[j], i)
				p.left[i]++
				p.ndeps[i]++
			}
		}
	}
	return p, nil
}

// releaseTime is when record p.next is released by the schedule.
func (p *pacer) releaseTime() int64 { return max(p.sched[p.next], p.relAt) }

// nextWake returns the next time at which poll has something to do by
// itself (a release or the end of a think time).
func (p *pacer) nextWake() (int64, bool) {
	t, ok := int64(math.MaxInt64), false
	if p.next < len(p.recs) {
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
	for {
		rel := p.next < len(p.recs) && p.releaseTime() <= now
		tm := len(p.timers) > 0 && p.timers[0].at <= now
		switch {
		case rel && (!tm || p.releaseTime() <= p.timers[0].at):
			i, at := p.next, p.releaseTime()
			p.next++
			p.relAt = at
			p.released[i] = true
			p.depEnd[i] = max(p.depEnd[i], at)
			if p.left[i] == 0 {
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
	due := p.depEnd[i]
	rec := &p.recs[i]
	if p.pacing == PaceTimestamps && rec.ThinkTime > 0 && p.parent[i] >= 0 {
		// The delay counts from the parent's completion.
		due = max(due, p.parentEnd[i]+int64(float64(rec.ThinkTime)/p.speedup))
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
	p.queue = append(p.queue, queued{i, due})
	p.grantFree(due)
}

// grantFree grants slots to the head of the queue while some are free; at
// is when the slots became free.
func (p *pacer) grantFree(at int64) {
	for len(p.queue) > 0 && (p.cap == 0 || p.inUse < p.cap) {
		q := p.queue[0]
		p.queue = p.queue[1:]
		p.inUse++
		p.outbox = append(p.outbox, grant{idx: q.idx, due: q.due, slot: max(q.due, at)})
	}
}

// finish reports that granted record i finished (succeeded or failed) at
// at: its slot is handed on, then its dependents are readied.
func (p *pacer) finish(i int, at int64) {
	p.inUse--
	if p.inUse < 0 {
		panic("replay: pacer: finish without a grant")
	}
	p.grantFree(at)
	for _, d := range p.dependents[i] {
		p.left[d]--
		p.depEnd[d] = max(p.depEnd[d], at)
		if p.parent[d] == i {
			p.parentEnd[d] = at
		}
		if p.left[d] == 0 && p.released[d] {
			p.ready(d, at)
		}
	}
}

// allGranted reports whether every record has been returned by poll.
func (p *pacer) allGranted() bool { return p.sent == len(p.recs) }

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
