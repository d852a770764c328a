package main

import (
	"cmp"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"slices"
	"time"

	"github.com/kvsim/kvsim/replay"
)

// pairKey names two requests, the smaller ID first.
type pairKey [2]string

func newPairKey(a, b string) pairKey {
	if b < a {
		a, b = b, a
	}
	return pairKey{a, b}
}

// timed reports whether r has a first token to compare: sent, not the
// warm-up, not failed, and with text before its end (llama-server's stream
// holds back incomplete UTF-8, so a request can have no first token).
func timed(r *replay.RequestResult) bool {
	return !r.Warmup && r.Sent && r.Failed == "" && r.FirstToken > r.Start
}

// callPairs returns the pairs of requests of one run whose first tokens
// reached the client within tol of each other: requests whose prompts ended
// in one llama_decode call. llama-server samples every slot of a call before
// it answers any, so such first tokens arrive within a fraction of a
// millisecond; two calls are at least one decode step (over a millisecond
// for kvsim's tiny model) apart. Requests are chained: three first tokens
// 0.3 ms apart form one group of three pairs.
func callPairs(run []replay.RequestResult, tol int64) map[pairKey]bool {
	type first struct {
		at int64
		id string
	}
	var fs []first
	for i := range run {
		if timed(&run[i]) {
			fs = append(fs, first{run[i].FirstToken, run[i].ID})
		}
	}
	slices.SortFunc(fs, func(a, b first) int { return cmp.Or(cmp.Compare(a.at, b.at), cmp.Compare(a.id, b.id)) })
	pairs := map[pairKey]bool{}
	for start := 0; start < len(fs); {
		end := start + 1
		for end < len(fs) && fs[end].at-fs[end-1].at <= tol {
			end++
		}
		for i := start; i < end; i++ {
			for j := i + 1; j < end; j++ {
				pairs[newPairKey(fs[i].id, fs[j].id)] = true
			}
		}
		start = end
	}
	return pairs
}

// groupReport is what groups found for one trace.
type groupReport struct {
	runs int
	// rows are the pairs that a majority of the real runs and the
	// simulator put differently, in the order of their first request.
	rows []groupRow
	// majority counts the pairs most real runs grouped, matched those of
	// them the simulator grouped too, extra the pairs the simulator grouped
	// that most real runs did not.
	majority, matched, extra int
	// mape is compare's TTFT MAPE against the per-request median of the
	// real runs, over total requests; share is the part of it (percentage
	// points) from the requests of the rows, n of them, whose own MAPE is
	// theirs; rest is the other requests' MAPE.
	mape, share, theirs, rest float64
	n, total                  int
}

type groupRow struct {
	pair pairKey
	real int
	sim  bool
}

// groupCompare sets the simulator's call groupings beside the real runs'.
// Only requests with a first token in every run and in the prediction take
// part: one without it in some run cannot be placed there.
func groupCompare(reals [][]replay.RequestResult, predicted []replay.RequestResult, tol int64) groupReport {
	rep := groupReport{runs: len(reals)}
	runs := append(slices.Clone(reals), predicted)
	seenIn := map[string]int{}
	for _, run := range runs {
		for i := range run {
			if timed(&run[i]) {
				seenIn[run[i].ID]++
			}
		}
	}
	keep := func(run []replay.RequestResult) []replay.RequestResult {
		var out []replay.RequestResult
		for _, r := range run {
			if seenIn[r.ID] == len(runs) {
				out = append(out, r)
			}
		}
		return out
	}
	count := map[pairKey]int{}
	for _, run := range reals {
		for p := range callPairs(keep(run), tol) {
			count[p]++
		}
	}
	sim := callPairs(keep(predicted), tol)
	start := map[string]int64{}
	for _, r := range reals[0] {
		start[r.ID] = r.Start
	}
	for p := range sim {
		if _, ok := count[p]; !ok {
			count[p] = 0 // a pair only the simulator grouped
		}
	}
	for p, k := range count {
		most := 2*k > len(reals)
		if most {
			rep.majority++
			if sim[p] {
				rep.matched++
			}
		} else if sim[p] {
			rep.extra++
		}
		if most != sim[p] {
			rep.rows = append(rep.rows, groupRow{p, k, sim[p]})
		}
	}
	slices.SortFunc(rep.rows, func(a, b groupRow) int {
		return cmp.Or(cmp.Compare(start[a.pair[0]], start[b.pair[0]]), cmp.Compare(a.pair[0], b.pair[0]),
			cmp.Compare(start[a.pair[1]], start[b.pair[1]]), cmp.Compare(a.pair[1], b.pair[1]))
	})
	off := map[string]bool{}
	for _, row := range rep.rows {
		off[row.pair[0]], off[row.pair[1]] = true, true
	}
	// The TTFT errors as kvsim compare computes them.
	med := replay.MedianRun(reals)
	byID := map[string]replay.RequestResult{}
	for _, p := range predicted {
		byID[p.ID] = p
	}
	var all, mine float64
	n := 0
	for _, m := range med {
		p, ok := byID[m.ID]
		if !ok || m.Warmup || !m.Sent || !p.Sent || m.Failed != "" || p.Failed != "" || m.TTFT() <= 0 || p.TTFT() <= 0 {
			continue
		}
		e := math.Abs(float64(p.TTFT()-m.TTFT())) / float64(m.TTFT())
		all += e
		n++
		if off[m.ID] {
			mine += e
			rep.n++
		}
	}
	rep.total = n
	if n > 0 {
		rep.mape, rep.share = 100*all/float64(n), 100*mine/float64(n)
	}
	if rep.n > 0 {
		rep.theirs = 100 * mine / float64(rep.n)
	}
	if n > rep.n {
		rep.rest = 100 * (all - mine) / float64(n-rep.n)
	}
	return rep
}

// groups reports which requests shared a prompt call in the real runs and
// in the simulator's prediction, and how much of the TTFT error comes from
// the requests the two grouped differently.
func groups(args []string, w io.Writer) error {
	fs := flag.NewFlagSet("groups", flag.ContinueOnError)
	predPath := fs.String("predicted", "", "the simulator's kvsim replay --per-request file")
	tol := fs.Duration("tol", 500*time.Microsecond, "first tokens at most this far apart shared a call")
	name := fs.String("name", "", "what to call the run in the output (default: the predicted file)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *predPath == "" || fs.NArg() == 0 {
		return errors.New("usage: fidelity groups -predicted PRED.jsonl [-tol 500us] [-name NAME] REAL.jsonl...")
	}
	if *tol < 0 {
		return fmt.Errorf("-tol %v: expected a duration >= 0", *tol)
	}
	pred, reals, err := loadRuns(*predPath, fs.Args())
	if err != nil {
		return err
	}
	label := cmp.Or(*name, *predPath)
	rep := groupCompare(reals, pred, tol.Nanoseconds())
	fmt.Fprintf(w, "%s: requests whose first tokens came within %v of each other (one prompt call), %d real run(s) against the simulator\n", label, *tol, rep.runs)
	fmt.Fprintf(w, "  %d pair(s) shared a call in most real runs; the simulator put %d of them together, and %d pair(s) that most real runs did not\n", rep.majority, rep.matched, rep.extra)
	if len(rep.rows) == 0 {
		return nil
	}
	fmt.Fprintf(w, "  the %d request(s) of the %d pair(s) grouped differently carry %.1f pp of the %.1f%% TTFT MAPE (their own MAPE %.1f%%, the other %d requests' %.1f%%):\n",
		rep.n, len(rep.rows), rep.share, rep.mape, rep.theirs, rep.total-rep.n, rep.rest)
	for _, row := range rep.rows {
		sim := "apart"
		if row.sim {
			sim = "together"
		}
		fmt.Fprintf(w, "    %s and %s: together in %d of %d real runs, %s in the simulator\n", row.pair[0], row.pair[1], row.real, rep.runs, sim)
	}
	return nil
}

// loadRuns reads the simulator's per-request file and the real runs'.
func loadRuns(predPath string, realPaths []string) (pred []replay.RequestResult, reals [][]replay.RequestResult, err error) {
	if pred, err = replay.ReadResults(predPath); err != nil {
		return nil, nil, err
	}
	for _, path := range realPaths {
		run, err := replay.ReadResults(path)
		if err != nil {
			return nil, nil, err
		}
		reals = append(reals, run)
	}
	return pred, reals, nil
}
