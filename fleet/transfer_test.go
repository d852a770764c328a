package fleet

import (
	"testing"

	"github.com/kvsim/kvsim/sim/engine"
)

// The heads of a link's queues share its bandwidth equally; a queue sends
// one transfer at a time; a transfer lands its latency after its bytes are
// through; a zero-byte transfer (a last chunk with no page left) lands
// after the latency alone.
func TestLinkSharing(t *testing.T) {
	run := func(queues int, add func(l *link) []*xfer) []engine.Time {
		l := newLink(8, 100, queues) // 1 byte per ns
		xs := add(l)
		for {
			at, ok := l.next()
			if !ok {
				break
			}
			l.advance(at, nil)
		}
		var out []engine.Time
		for _, x := range xs {
			out = append(out, x.lands)
		}
		return out
	}
	two := func(q0, q1 int, b0, b1 float64) func(l *link) []*xfer {
		return func(l *link) []*xfer {
			x, y := &xfer{bytes: b0}, &xfer{bytes: b1}
			l.add(0, q0, x)
			l.add(0, q1, y)
			return []*xfer{x, y}
		}
	}
	for _, c := range []struct {
		name   string
		queues int
		add    func(l *link) []*xfer
		want   [2]engine.Time
	}{
		// Two queues: 1000 and 3000 bytes share the link until the first
		// is through at 2000 ns; the second has 2000 bytes left, alone.
		{"shared", 2, two(0, 1, 1000, 3000), [2]engine.Time{2000 + 100, 4000 + 100}},
		// One queue: one after the other at the full rate.
		{"fifo", 2, two(1, 1, 1000, 3000), [2]engine.Time{1000 + 100, 4000 + 100}},
		{"zero bytes", 1, two(0, 0, 0, 0), [2]engine.Time{100, 100}},
		// A transfer added while another is on the link slows it down: at
		// 1000 ns x has 1000 bytes left, y 500; both at half rate until y
		// is through at 2000, then x alone.
		{"late", 2, func(l *link) []*xfer {
			x, y := &xfer{bytes: 2000}, &xfer{bytes: 500}
			l.add(0, 0, x)
			l.advance(1000, nil)
			l.add(1000, 1, y)
			return []*xfer{x, y}
		}, [2]engine.Time{2500 + 100, 2000 + 100}},
	} {
		if got := run(c.queues, c.add); got[0] != c.want[0] || got[1] != c.want[1] {
			t.Errorf("%s: land at %v, want %v", c.name, got, c.want)
		}
	}
}
