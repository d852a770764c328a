package sim

import (
	"fmt"

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
// time (8 bytes) and its slot, 4 bytes in a table indexed by the ID when
// the IDs are decimal integers numbered densely (Mooncake's and kvsim trace
// gen's are), a map entry otherwise. Waiters are kept only for the records
// someone waits for.
type DepTracker struct {
	ids     recordSlots
	end     []engine.Time     // by index: finish time once finished, else notFinished
	waiters map[int32][]int32 // by index: held records waiting for it (indices into held)

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
	parent    int32       // index of the Parent record, or -1
	depEnd    engine.Time // max(arrival, finished dependencies' finishes)
	parentEnd engine.Time // the Parent's finish, once finished
}

// notFinished is the finish time of a record that has not finished.
const notFinished engine.Time = -1

// NewDepTracker returns an empty tracker. onDue is called for every
// record that becomes due, with its release time, and returns the record's
// key: due records are released in (time, key) order, so keys must be
// unique (the sim gives its release event's sequence number, which orders
// releases among its other events at one instant).
func NewDepTracker(onDue func(engine.Time) uint64) *DepTracker {
	return &DepTracker{ids: recordSlots{named: map[string]int32{}}, waiters: map[int32][]int32{},
		due: map[uint64]*traces.Record{}, onDue: onDue}
}

// Arrive registers rec, arriving at now (its trace time). It reports
// whether rec may be released now; otherwise the tracker holds it, calls
// onDue with its release time once that is known, and returns it from
// Release then. The tracker keeps rec until then.
func (d *DepTracker) Arrive(rec *traces.Record, now engine.Time) (bool, error) {
	if _, dup := d.ids.find(rec.ID); dup {
		return false, fmt.Errorf("request %q: expected unique request ids to run the trace's dependencies (closed loop), found a repeat", rec.ID)
	}
	h := heldRecord{rec: rec, parent: -1, depEnd: now}
	var unfinished [4]int32
	wait := unfinished[:0]
	add := func(id string, isParent bool) {
		if id == "" {
			return
		}
		j, ok := d.ids.find(id)
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
		if d.end[j] == notFinished {
			wait = append(wait, j)
			h.left++
			return
		}
		h.depEnd = max(h.depEnd, d.end[j])
		if isParent {
			h.parentEnd = d.end[j]
		}
	}
	add(rec.Parent, true)
	for _, w := range rec.WaitFor {
		add(w, false)
	}
	d.ids.add(rec.ID, int32(len(d.end)))
	d.end = append(d.end, notFinished)
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
	if h.parent >= 0 && h.rec.ThinkTime > 0 {
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
	j, ok := d.ids.find(id)
	if !ok {
		return
	}
	if now < 0 {
		panic(fmt.Sprintf("sim: request %q finished at %d ns, before time 0", id, now))
	}
	d.end[j] = now
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

// recordSlots maps record IDs to their indices (0, 1, 2, ... in arrival
// order). An ID that is a decimal integer n in canonical form ("0", "17",
// not "017" or "+17") goes in dense at n while the IDs stay dense: dense
// grows to cover n only if that keeps it at most four times the IDs seen
// (plus denseMinIDs), so scattered integers fall back to named, as every
// other ID does. An ID is in exactly one of the two.
type recordSlots struct {
	dense []int32 // canonical ID n -> index + 1 (0: not seen)
	named map[string]int32
	n     int // IDs added
}

// denseMinIDs is the smallest dense table of record slots (4 KiB).
const denseMinIDs = 1024

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

func (r *recordSlots) find(id string) (int32, bool) {
	if n, ok := decimalID(id); ok && n < len(r.dense) && r.dense[n] != 0 {
		return r.dense[n] - 1, true
	}
	i, ok := r.named[id]
	return i, ok
}

// add records id's index i; id must not have been added.
func (r *recordSlots) add(id string, i int32) {
	r.n++
	n, ok := decimalID(id)
	if ok && n >= len(r.dense) && n < 4*r.n+denseMinIDs {
		grown := make([]int32, max(2*len(r.dense), n+1, denseMinIDs))
		copy(grown, r.dense)
		r.dense = grown
	}
	if ok && n < len(r.dense) {
		r.dense[n] = i + 1
		return
	}
	r.named[id] = i
}
