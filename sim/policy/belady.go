package policy

import (
	"fmt"

	"github.com/kvsim/kvsim/traces"
)

// runBelady replays reqs in the given order through Belady's offline
// optimum at l1Pages (see doc.go, "The offline optimum"). each, when not
// nil, is called after every request with its index in reqs, its L1 hits
// and the run (for the tests' invariant checks).
func runBelady(l1Pages int, reqs []Request, order []int, each func(index, l1Hits int, run *traces.OPTRun)) (Result, error) {
	b := traces.NewOPTBuilder()
	for _, i := range order {
		if err := b.Add(reqs[i].Pages); err != nil {
			return Result{}, fmt.Errorf("belady: %w", err)
		}
	}
	opt := b.Build()
	run := opt.NewRun(l1Pages)
	for _, i := range order {
		h := run.Step()
		if each != nil {
			each(i, h, run)
		}
	}
	o := run.Result()
	r := Result{
		Policy:          Belady,
		Requests:        opt.Requests(),
		TotalInputPages: opt.TotalPages(),
		L1HitPages:      o.HitPages,
		MissPages:       opt.TotalPages() - o.HitPages,
		L1Evictions:     o.Evictions,
		DPages:          o.Cached,
	}
	r.UniqueCachedPages = r.DPages
	if r.TotalInputPages > 0 {
		r.L1HitRate = float64(r.L1HitPages) / float64(r.TotalInputPages)
		r.L1L2HitRate = r.L1HitRate
	}
	return r, nil
}
