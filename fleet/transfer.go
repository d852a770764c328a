package fleet

import (
	"math"
	"slices"

	"github.com/kvsim/kvsim/sim/engine"
)

// link is a prefill replica's KV transfer link (fleet-spec 2.3, 5.16):
// queues FIFO transfer queues (SGLANG_DISAGGREGATION_QUEUE_SIZE) whose
// head transfers share the link's bandwidth equally (processor sharing);
// a transfer whose bytes are through lands latency later (the link is
// free meanwhile). Transfers to one decode replica go through one queue
// (SGLang shards the queues by destination), so a request's chunks land
// in order.
type link struct {
	bw      float64     // bytes per ns
	latency engine.Time // per transfer
	queues  [][]*xfer   // FIFO per queue; the head of each is on the link
	active  int         // heads on the link: queues not empty
	last    engine.Time // when the heads' remaining bytes were last updated
	landing []*xfer     // through the link, landing in order of land time
}

// xfer is one chunk's pages of one request on its way to the decode
// replica.
type xfer struct {
	req   *pdReq
	bytes float64
	pages int64
	rem   float64     // bytes still to move (the head of its queue)
	lands engine.Time // set when its bytes are through
	last  bool        // the request's last chunk (with the first token)
}

func newLink(gbps float64, latency engine.Time, queues int) *link {
	return &link{bw: gbps * 1e9 / 8 / 1e9, latency: latency, queues: make([][]*xfer, queues)}
}

// add queues x on queue q at time now (the link has been advanced to
// now).
func (l *link) add(now engine.Time, q int, x *xfer) {
	l.progress(now)
	x.rem = x.bytes
	l.queues[q] = append(l.queues[q], x)
	if len(l.queues[q]) == 1 {
		l.active++
	}
	l.finishThrough(now)
}

// next is the time of the link's next event: a landing or a head's bytes
// through.
func (l *link) next() (engine.Time, bool) {
	t, ok := engine.Never, false
	if len(l.landing) > 0 {
		t, ok = l.landing[0].lands, true
	}
	if l.active > 0 {
		if d := l.nextThrough(); d < t {
			t, ok = d, true
		}
	}
	return t, ok
}

// nextThrough is when the first head's bytes are through at the current
// share.
func (l *link) nextThrough() engine.Time {
	minRem := math.Inf(1)
	for _, q := range l.queues {
		if len(q) > 0 {
			minRem = min(minRem, q[0].rem)
		}
	}
	return l.last + engine.Time(math.Ceil(max(minRem, 0)*float64(l.active)/l.bw))
}

// progress moves every head's bytes on to now at the current share.
func (l *link) progress(now engine.Time) {
	if now <= l.last {
		return
	}
	if l.active > 0 {
		served := float64(now-l.last) * l.bw / float64(l.active)
		for _, q := range l.queues {
			if len(q) > 0 {
				q[0].rem -= served
			}
		}
	}
	l.last = now
}

// finishThrough moves the heads whose bytes are through (at now) to the
// landing list, in queue order, and starts their queues' next transfers.
func (l *link) finishThrough(now engine.Time) {
	for again := true; again; {
		again = false
		for i, q := range l.queues {
			if len(q) == 0 || q[0].rem > 1e-6 {
				continue
			}
			x := q[0]
			x.rem = 0
			x.lands = now + l.latency
			l.landing = append(l.landing, x)
			l.queues[i] = q[1:]
			if len(l.queues[i]) == 0 {
				l.active--
			}
			again = true // a zero-byte transfer behind it is through too
		}
	}
}

// advance runs the link to now and returns the transfers that land at or
// before it, in landing order (the slice is reused).
func (l *link) advance(now engine.Time, landed []*xfer) []*xfer {
	for l.active > 0 {
		t := l.nextThrough()
		if t > now {
			break
		}
		l.progress(t)
		l.finishThrough(t)
	}
	l.progress(now)
	k := 0
	for k < len(l.landing) && l.landing[k].lands <= now {
		k++
	}
	landed = append(landed, l.landing[:k]...)
	l.landing = l.landing[k:]
	return landed
}

// cancel drops request req's transfers from the link at now (the link
// moved on to now first): queued, on the link or landing. The heads
// behind a dropped one start now.
func (l *link) cancel(now engine.Time, req *pdReq) {
	l.progress(now)
	l.active = 0
	for i, q := range l.queues {
		l.queues[i] = slices.DeleteFunc(q, func(x *xfer) bool { return x.req == req })
		if len(l.queues[i]) > 0 {
			l.active++
		}
	}
	l.landing = slices.DeleteFunc(l.landing, func(x *xfer) bool { return x.req == req })
	l.finishThrough(now)
}
