package sim

import (
	"fmt"
	"slices"

	"github.com/kvsim/kvsim/internal/invariants"
)

// checkInvariants checks, under -tags invariants, what the simulator
// conserves between steps: the radix tree's own invariants, every lane's
// KV held by requests against the pool's count, no KV held by a waiting
// request, and the host reservations and rate-limit account of the
// prefetches in flight.
func (s *Sim) checkInvariants() {
	if !invariants.Enabled {
		return
	}
	if err := s.tree.Check(); err != nil {
		panic("sim: " + err.Error())
	}
	held := make([]int64, s.lanes)
	add := func(r *request) {
		for o, v := range r.held {
			held[o] += v
		}
		if r.last != nil && r.last.Parent() == nil && !r.last.IsRoot() {
			panic(fmt.Sprintf("sim: request %q holds a lock on a deleted node", r.id))
		}
	}
	for _, r := range s.running {
		add(r)
	}
	for _, r := range s.batch {
		if !s.decode {
			add(r)
		}
	}
	if s.chunked != nil && !slices.Contains(s.batch, s.chunked) {
		add(s.chunked)
	}
	s.pdHeld(add)
	for o := 0; o < s.lanes; o++ {
		if held[o] != s.tree.Held(o) {
			panic(fmt.Sprintf("sim: lane %d: requests hold %d tokens, the pool says %d (KV not conserved)", o, held[o], s.tree.Held(o)))
		}
	}
	for _, r := range s.waiting {
		if r.last != nil || slices.ContainsFunc(r.held, func(v int64) bool { return v != 0 }) {
			panic(fmt.Sprintf("sim: waiting request %q holds KV", r.id))
		}
	}
	if s.st != nil {
		// Host reservations and the rate-limit account are exactly the
		// prefetches in flight, all of them for waiting requests.
		res := make([]int64, s.lanes)
		var occ int64
		for _, r := range s.waiting {
			if op := r.prefetch; op != nil {
				addLanesTo(res, op.lanes)
				occ += op.hit
			}
		}
		for o := 0; o < s.lanes; o++ {
			if res[o] != s.tree.HostReserved(o) {
				panic(fmt.Sprintf("sim: lane %d: prefetches reserve %d host tokens, the tree says %d", o, res[o], s.tree.HostReserved(o)))
			}
		}
		if occ != s.st.occupied {
			panic(fmt.Sprintf("sim: prefetches occupy %d tokens, the account says %d", occ, s.st.occupied))
		}
	}
}

func addLanesTo(dst, lanes []int64) {
	for o, v := range lanes {
		dst[o] += v
	}
}
