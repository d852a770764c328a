package policy

import "github.com/kvsim/kvsim/traces"

// CheckInvariants exposes the O(n) self-check to the tests, whatever the
// build tags.
func (s *Simulator) CheckInvariants() { s.checkInvariants() }

// RunBeladyEach is runBelady in replay order with a per-request callback.
func RunBeladyEach(l1Pages int, reqs []Request, each func(index, l1Hits int, run *traces.OPTRun)) (Result, error) {
	return runBelady(l1Pages, reqs, replayOrder(reqs), each)
}

// Arena returns the node slots the simulator holds (the root included) and
// how many hold a page of the trie.
func (s *Simulator) Arena() (slots, live int) { return len(s.nodes), s.live }
