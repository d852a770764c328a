package fleet

import (
	"fmt"

	"github.com/kvsim/kvsim/internal/invariants"
	"github.com/kvsim/kvsim/sim/engine"
)

// checkInvariants panics, with -tags invariants, if the router's books and
// the replicas disagree at the end of an instant (every replica checks its
// own state after each of its events in that build). In a regular fleet
// the router's in-flight count to each replica is the requests submitted
// to it and not finished, and the replica holds no more than those (a
// llama-server replica sees a request only after its request delay); in
// a disaggregated one each
// pool's in-flight counts add up to the requests in flight, every request
// being counted once on each leg for its whole life, and each replica
// holds no more than the requests submitted to it and not finished there
// (an aborted request leaves both its replicas). A regular fleet's record
// of each replica's next event time is the engine's.
func (r *run) checkInvariants() {
	if !invariants.Enabled {
		return
	}
	if r.pd != nil {
		var legs [2]int
		for i := range r.f.engines {
			k := 0
			if r.pd.pd.roles[i] == Decode {
				k = 1
			}
			legs[k] += r.f.inFlight(i)
		}
		if n := len(r.pd.reqs); legs[0] != n || legs[1] != n {
			panic(fmt.Sprintf("fleet: at %d ns the prefill and decode routers count %d and %d requests in flight, the fleet has %d", r.now, legs[0], legs[1], n))
		}
	}
	for i, e := range r.f.engines {
		if at, has := e.Next(); r.pd == nil {
			if !has {
				at = engine.Never
			}
			if r.due.at[i] != at {
				panic(fmt.Sprintf("fleet: at %d ns replica %d's next event is at %d ns, the fleet has it at %d ns", r.now, i, at, r.due.at[i]))
			}
		}
		if in, open := r.f.inFlight(i), r.open[i]; r.pd == nil && in != open {
			panic(fmt.Sprintf("fleet: at %d ns the router counts %d requests in flight to replica %d, which has %d submitted and not finished", r.now, in, i, open))
		}
		if held := e.Active(); held > r.open[i] {
			panic(fmt.Sprintf("fleet: at %d ns replica %d holds %d requests, more than the %d submitted to it and not finished", r.now, i, held, r.open[i]))
		}
	}
}
