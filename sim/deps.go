package sim

import (
	"encoding/binary"
	"fmt"

	"github.com/kvsim/kvsim/internal/offheap"
	"github.com/kvsim/kvsim/sim/engine"
	"github.com/kvsim/kvsim/traces"
)

// DepTracker runs a trace closed-loop: it holds each record back until
// the records it depends on have finished in simulated time, the release
// rule of kvsim replay's pacer (replay/pace.go) with no concurrency cap
// and no speedup. [Sim.RunClosedLoop] and a fleet's closed loop
// (fleet.Fleet.RunClosedLoop, records finishing on any replica) use it. A record arriving at its trace time a is released at
//
//	max(a, finish of every earlier Parent and WaitFor record,
//	    finish of its Parent + ThinkTime)
//
// Names of records not seen before (later records, records outside the
// trace) are ignored, as the pacer ignores them. A failed request counts
// as finished when it fails.
//
// A later record may name any earlier one, so the tracker keeps one entry
// per record seen, as a replay's pacer does, but a small one: its finish
// time, 6 bytes in a table indexed by the ID when the IDs are decimal
// integers numbered densely (Mooncake's and kvsim trace gen's are), a map
// entry otherwise (see recordEnds). Waiters are kept only for the records
// someone waits for.
type DepTracker struct {
	ends    recordEnds
	waiters map[int32][]int32 // by record: held records waiting for it (indices into held)

	held []heldRecord // records waiting for dependencies; reused through free
	free []int32

	// ready orders the records whose release time is known by (time,
	// key), in the simulator's own event heap; due holds each one by its
	// key, which onDue returned when it became due.
	ready eventHeap
	due   map[uint64]*traces.Record
	// ignored counts the dependencies that named no earlier request (the
	// trace is inconsistent: kvsim trace validate says where).
	ignored int
	onDue   func(engine.Time) uint64 // called for every record that becomes due, with its time
}

type heldRecord struct {
	rec       *traces.Record
	left      int         // unfinished dependencies
	parent    int32       // the Parent record, or noRecord
	depEnd    engine.Time // max(arrival, finished dependencies' finishes)
	parentEnd engine.Time // the Parent's finish, once finished
}

// NewDepTracker returns an empty tracker. onDue is called for every
// record that becomes due, with its release time, and returns the record's
// key: due records are released in (time, key) order, so keys must be
// unique (the sim gives its release event's sequence number, which orders
// releases among its other events at one instant).
func NewDepTracker(onDue func(engine.Time) uint64) *DepTracker {
	return &DepTracker{ends: recordEnds{named: map[string]int32{}}, waiters: map[int32][]int32{},
		due: map[uint64]*traces.Record{}, onDue: onDue}
}

// Arrive registers rec, arriving at now (its trace time). It reports
// whether rec may be released now; otherwise the tracker holds it, calls
// onDue with its release time once that is known, and returns it from
// Release then. The tracker keeps rec until then.
func (d *DepTracker) Arrive(rec *traces.Record, now engine.Time) (bool, error) {
	if _, dup := d.ends.find(rec.ID); dup {
		return false, fmt.Errorf("request %q: expected unique request ids to run the trace's dependencies (closed loop), found a repeat", rec.ID)
	}
	h := heldRecord{rec: rec, parent: noRecord, depEnd: now}
	var unfinished [4]int32
	wait := unfinished[:0]
	add := func(id string, isParent bool) {
		if id == "" {
			return
		}
		j, ok := d.ends.find(id)
		if !ok {
			d.ignored++
			return
		}
		if isParent {
			h.parent = j
		}
		for _, w := range wait {
			if w == j {
				return
			}
		}
		end, done := d.ends.end(j)
		if !done {
			wait = append(wait, j)
			h.left++
			return
		}
		h.depEnd = max(h.depEnd, end)
		if isParent {
			h.parentEnd = end
		}
	}
	add(rec.Parent, true)
	for _, w := range rec.WaitFor {
		add(w, false)
	}
	d.ends.add(rec.ID)
	if h.left == 0 {
		at := h.due()
		if at <= now {
			return true, nil
		}
		d.push(at, rec)
		return false, nil
	}
	var k int32
	if n := len(d.free); n > 0 {
		k, d.free = d.free[n-1], d.free[:n-1]
		d.held[k] = h
	} else {
		k = int32(len(d.held))
		d.held = append(d.held, h)
	}
	for _, j := range wait {
		d.waiters[j] = append(d.waiters[j], k)
	}
	return false, nil
}

// due is a record's release time once its dependencies have finished.
func (h *heldRecord) due() engine.Time {
	at := h.depEnd
	if h.parent != noRecord && h.rec.ThinkTime > 0 {
		end := h.parentEnd + engine.Time(h.rec.ThinkTime)
		if end < h.parentEnd {
			// Past int64 nanoseconds: the largest time, which the event
			// queue then reports as a clock past its end (sim.schedule).
			end = engine.Never
		}
		at = max(at, end)
	}
	return at
}

// Finish records that the request with this ID finished (or failed) at
// now, and makes the records that waited only for it due.
func (d *DepTracker) Finish(id string, now engine.Time) {
	j, ok := d.ends.find(id)
	if !ok {
		return
	}
	if now < 0 {
		panic(fmt.Sprintf("sim: request %q finished at %d ns, before time 0", id, now))
	}
	d.ends.finish(j, now)
	for _, k := range d.waiters[j] {
		h := &d.held[k]
		h.left--
		h.depEnd = max(h.depEnd, now)
		if h.parent == j {
			h.parentEnd = now
		}
		if h.left == 0 {
			d.push(max(h.due(), now), h.rec)
			*h = heldRecord{}
			d.free = append(d.free, k)
		}
	}
	delete(d.waiters, j)
}

func (d *DepTracker) push(at engine.Time, rec *traces.Record) {
	key := d.onDue(at)
	if _, dup := d.due[key]; dup {
		panic(fmt.Sprintf("sim: two due records of key %d", key))
	}
	d.ready.push(event{at: at, seq: key})
	d.due[key] = rec
}

// Next returns the release time and key of the earliest due record (in
// (time, key) order), if any.
func (d *DepTracker) Next() (engine.Time, uint64, bool) {
	if len(d.ready) == 0 {
		return 0, 0, false
	}
	return d.ready[0].at, d.ready[0].seq, true
}

// Release pops the earliest due record ([DepTracker.Next]): the sim
// schedules one release event per onDue call, so at each event the
// earliest due record is the one due then.
func (d *DepTracker) Release() *traces.Record {
	e := d.ready.pop()
	rec := d.due[e.seq]
	delete(d.due, e.seq)
	return rec
}

// Ignored is the number of dependencies that named no earlier record
// (RequestResult's IgnoredDeps).
func (d *DepTracker) Ignored() int { return d.ignored }

// Pending is the number of records held or due and not yet released.
func (d *DepTracker) Pending() int { return len(d.held) - len(d.free) + len(d.ready) }

// recordEnds holds each record's finish time, by its ID. An ID that is a
// decimal integer n in canonical form ("0", "17", not "017" or "+17") is
// record n, its time at n in dense, while the IDs stay dense: dense covers
// n only if that keeps it at most four times the IDs seen (plus
// denseChunk), so scattered integers fall back to named, as every other ID
// does: the k-th of those is record -2-k, its time in namedEnd[k]. An ID
// is in exactly one of the two. A time is 0 for an ID not seen, 1 for a
// record not finished, and ^t (negative) for one finished at t >= 0.
//
// dense is chunks of denseChunk times (64 KiB), allocated outside the
// garbage-collected heap (internal/offheap) as they are first written,
// never copied, 6 bytes a time (little-endian): 0 and 1 as above, t+3 for
// a record finished at t < 2^48-3 ns (78 hours), and 2 for one finished
// later, its time then in late. A day's trace takes 6 bytes a record, not
// 8, and every time is exact.
type recordEnds struct {
	dense    []*offheap.Bytes
	late     map[int32]engine.Time // dense records finished at 2^48-3 ns or later
	named    map[string]int32
	namedEnd []engine.Time
	n        int // IDs added
}

// denseChunk is the number of finish times in a chunk of recordEnds.dense.
const denseChunk = offheap.MinSize / denseSize

// denseSize is the bytes of a finish time in recordEnds.dense.
const denseSize = 6

// denseLate is the first finish time that recordEnds.dense keeps in late.
const denseLate = 1<<(8*denseSize) - 3

// noRecord is no record's number (a heldRecord without a Parent).
const noRecord int32 = -1

// decimalID returns n when id is the canonical decimal form of n < 2^31.
func decimalID(id string) (int, bool) {
	if len(id) == 0 || len(id) > 10 || (id[0] == '0' && len(id) > 1) {
		return 0, false
	}
	n := 0
	for i := 0; i < len(id); i++ {
		c := id[i]
		if c < '0' || c > '9' {
			return 0, false
		}
		n = n*10 + int(c-'0')
	}
	return n, n < 1<<31
}

// get returns record j's stored time, and false if j is past dense.
func (r *recordEnds) get(j int32) (engine.Time, bool) {
	if j < 0 {
		return r.namedEnd[-2-j], true
	}
	c := int(j) / denseChunk
	if c >= len(r.dense) || r.dense[c] == nil {
		return 0, false
	}
	b := r.dense[c].B[denseSize*(int(j)%denseChunk):]
	switch x := uint64(binary.LittleEndian.Uint32(b)) | uint64(binary.LittleEndian.Uint16(b[4:]))<<32; x {
	case 0, 1:
		return engine.Time(x), true
	case 2:
		return ^r.late[j], true
	default:
		return ^engine.Time(x - 3), true
	}
}

// set stores record j's time v; j's chunk must exist.
func (r *recordEnds) set(j int32, v engine.Time) {
	if j < 0 {
		r.namedEnd[-2-j] = v
		return
	}
	x := uint64(v) // 0 or 1
	if v < 0 {
		if t := ^v; t < denseLate {
			x = uint64(t) + 3
		} else {
			if r.late == nil {
				r.late = map[int32]engine.Time{}
			}
			r.late[j] = t
			x = 2
		}
	}
	b := r.dense[int(j)/denseChunk].B[denseSize*(int(j)%denseChunk):]
	binary.LittleEndian.PutUint32(b, uint32(x))
	binary.LittleEndian.PutUint16(b[4:], uint16(x>>32))
}

// find returns the record of id, if it was added.
func (r *recordEnds) find(id string) (int32, bool) {
	if n, ok := decimalID(id); ok {
		if v, ok := r.get(int32(n)); ok && v != 0 {
			return int32(n), true
		}
	}
	k, ok := r.named[id]
	return -2 - k, ok
}

// add adds id, not finished; id must not have been added.
func (r *recordEnds) add(id string) {
	r.n++
	if n, ok := decimalID(id); ok && n < 4*r.n+denseChunk {
		c := n / denseChunk
		if c >= len(r.dense) {
			r.dense = append(r.dense, make([]*offheap.Bytes, c+1-len(r.dense))...)
		}
		if r.dense[c] == nil {
			r.dense[c] = offheap.New(offheap.MinSize) // denseChunk times and 4 bytes to spare
		}
		r.set(int32(n), 1)
		return
	}
	if len(r.namedEnd) >= 1<<31-2 {
		panic("sim: over 2^31 records with IDs that are not dense integers")
	}
	r.named[id] = int32(len(r.namedEnd))
	r.namedEnd = append(r.namedEnd, 1)
}

// end returns the finish time of record j and whether it has finished.
func (r *recordEnds) end(j int32) (engine.Time, bool) {
	v, _ := r.get(j)
	return ^v, v < 0
}

// finish sets record j's finish time to t >= 0.
func (r *recordEnds) finish(j int32, t engine.Time) { r.set(j, ^t) }
