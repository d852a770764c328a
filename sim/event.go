package sim

import "github.com/kvsim/kvsim/sim/engine"

type eventKind uint8

const (
	evArrival     eventKind = 1 + iota // the next trace record arrives
	evForwardDone                      // the running forward pass finished
	evWake                             // a transfer finished while the GPU was idle
	evSample                           // take a timeline sample
	evRelease                          // closed loop: a held record is due (DepTracker)
	evPD                               // disaggregation: KV arrived or a request aborted (pd.go)
)

// event is one scheduled occurrence. Events are ordered by (at, seq): seq is
// bumped at every schedule, so simultaneous events run in the order they
// were scheduled and the run is deterministic.
type event struct {
	at   engine.Time
	seq  uint64
	kind eventKind
}

// eventHeap is a binary min-heap of events by (at, seq).
type eventHeap []event

func (h eventHeap) less(i, j int) bool {
	if h[i].at != h[j].at {
		return h[i].at < h[j].at
	}
	return h[i].seq < h[j].seq
}

func (h *eventHeap) push(e event) {
	*h = append(*h, e)
	s := *h
	for j := len(s) - 1; j > 0; {
		i := (j - 1) / 2
		if !s.less(j, i) {
			break
		}
		s[i], s[j] = s[j], s[i]
		j = i
	}
}

func (h *eventHeap) pop() event {
	s := *h
	top := s[0]
	n := len(s) - 1
	s[0] = s[n]
	s = s[:n]
	for i := 0; ; {
		j := 2*i + 1
		if j >= n {
			break
		}
		if r := j + 1; r < n && s.less(r, j) {
			j = r
		}
		if !s.less(j, i) {
			break
		}
		s[i], s[j] = s[j], s[i]
		i = j
	}
	*h = s
	return top
}
