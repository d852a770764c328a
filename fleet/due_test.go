package fleet

import (
	"slices"
	"testing"

	"github.com/kvsim/kvsim/sim/engine"
	"pgregory.net/rapid"
)

// drawDue draws a replica's next event time in [0, 30], or engine.Never
// one time in five.
func drawDue(t *rapid.T, label string) engine.Time {
	if rapid.IntRange(0, 4).Draw(t, label+"_never") == 0 {
		return engine.Never
	}
	return engine.Time(rapid.Int64Range(0, 30).Draw(t, label))
}

// dueTimes against a slice that is scanned: the next instant is the
// slice's least time, and the replicas due at an instant are those at or
// before it, in index order (what the fleet read from every replica at
// every step before).
func TestDueTimesMatchesScan(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		n := rapid.IntRange(1, 20).Draw(t, "replicas")
		d := newDueTimes(n)
		model := make([]engine.Time, n) // all due at 0
		for step := range rapid.IntRange(1, 60).Draw(t, "steps") {
			if rapid.Bool().Draw(t, "take") {
				now := engine.Time(rapid.Int64Range(0, 30).Draw(t, "now"))
				var want []int
				for i, at := range model {
					if at <= now {
						want = append(want, i)
					}
				}
				got := d.takeDue(now, nil)
				if !slices.Equal(got, want) {
					t.Fatalf("step %d: due at %d: %v, want %v (times %v)", step, now, got, want, model)
				}
				for _, i := range got { // each run replica gets its next time
					at := drawDue(t, "next")
					if at != engine.Never && at <= now {
						at = now + 1
					}
					model[i] = at
					d.set(i, at)
				}
			} else {
				i := rapid.IntRange(0, n-1).Draw(t, "i")
				model[i] = drawDue(t, "at")
				d.set(i, model[i])
			}
			want, wantOK := engine.Never, false
			for _, at := range model {
				if at < want {
					want, wantOK = at, true
				}
			}
			if got, ok := d.next(); got != want || ok != wantOK {
				t.Fatalf("step %d: next = %d, %v; want %d, %v (times %v)", step, got, ok, want, wantOK, model)
			}
			if !d.h.Valid() {
				t.Fatalf("step %d: heap order broken", step)
			}
		}
	})
}
