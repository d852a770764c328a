package main

import (
	"cmp"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"

	"github.com/kvsim/kvsim/replay"
)

// maxRefRuns bounds the real runs refs takes: it compares with every choice
// of k of them, and C(16, 8) = 12870 is still quick.
const maxRefRuns = 16

// refStats summarises the MAPEs of one predictor against every reference
// of one size.
type refStats struct {
	maxTTFT, maxE2E  float64 // the bounds
	n                int     // references compared with
	meets            int     // references against which both MAPEs met their bounds
	ttftSum, e2eSum  float64
	ttftMin, ttftMax float64
	e2eMin, e2eMax   float64
}

func (s *refStats) add(c replay.Comparison) {
	if s.n == 0 {
		s.ttftMin, s.ttftMax, s.e2eMin, s.e2eMax = c.TTFTMAPE, c.TTFTMAPE, c.E2EMAPE, c.E2EMAPE
	}
	s.n++
	s.ttftSum += c.TTFTMAPE
	s.e2eSum += c.E2EMAPE
	s.ttftMin, s.ttftMax = min(s.ttftMin, c.TTFTMAPE), max(s.ttftMax, c.TTFTMAPE)
	s.e2eMin, s.e2eMax = min(s.e2eMin, c.E2EMAPE), max(s.e2eMax, c.E2EMAPE)
	if c.TTFTMAPE <= s.maxTTFT && c.E2EMAPE <= s.maxE2E {
		s.meets++
	}
}

// cells are the stats as table cells: TTFT and E2E MAPE min / mean / max,
// and the share of references against which both met their bounds.
func (s *refStats) cells() []string {
	if s.n == 0 {
		return []string{"-", "-", "-"}
	}
	f := float64(s.n)
	return []string{
		fmt.Sprintf("%.1f / %.1f / %.1f", s.ttftMin, s.ttftSum/f, s.ttftMax),
		fmt.Sprintf("%.1f / %.1f / %.1f", s.e2eMin, s.e2eSum/f, s.e2eMax),
		fmt.Sprintf("%d of %d (%.0f%%)", s.meets, s.n, 100*float64(s.meets)/f),
	}
}

// refRow is what refs found for one reference size k: the simulator
// against the per-request median of every choice of k real runs, and the
// median of the runs not chosen against the same reference.
type refRow struct {
	k, refs     int
	sim, others refStats
}

// refCompare compares, for each k in ks, the prediction and the median of
// the other real runs with the per-request median of every choice of k of
// the real runs, as kvsim compare does (replay.MedianRun, replay.Compare).
// A reference and a prediction with no request in common (the files of
// two traces) are an error: their MAPEs would be 0.
func refCompare(reals [][]replay.RequestResult, predicted []replay.RequestResult, ks []int, maxTTFT, maxE2E float64) ([]refRow, error) {
	var rows []refRow
	var err error
	for _, k := range ks {
		row := refRow{k: k}
		row.sim.maxTTFT, row.sim.maxE2E = maxTTFT, maxE2E
		row.others.maxTTFT, row.others.maxE2E = maxTTFT, maxE2E
		choose(len(reals), k, func(in []bool) {
			var ref, rest [][]replay.RequestResult
			for i, run := range reals {
				if in[i] {
					ref = append(ref, run)
				} else {
					rest = append(rest, run)
				}
			}
			med := replay.MedianRun(ref)
			row.refs++
			c := replay.Compare(med, predicted)
			if c.Requests == 0 && err == nil {
				err = errors.New("the prediction and the real runs have no successful request in common (the files of two traces?)")
			}
			row.sim.add(c)
			if len(rest) > 0 {
				row.others.add(replay.Compare(med, replay.MedianRun(rest)))
			}
		})
		if err != nil {
			return nil, err
		}
		rows = append(rows, row)
	}
	return rows, nil
}

// choose calls f with every choice of k of n items, in lexicographic order
// of the chosen indices; in[i] says whether item i is chosen (f must not
// keep it).
func choose(n, k int, f func(in []bool)) {
	in := make([]bool, n)
	var rec func(from, left int)
	rec = func(from, left int) {
		if left == 0 {
			f(in)
			return
		}
		for i := from; i <= n-left; i++ {
			in[i] = true
			rec(i+1, left-1)
			in[i] = false
		}
	}
	rec(0, k)
}

// parseKs parses -k: a comma-separated list of reference sizes, each in
// [1, n]; "" gives every odd size below n and n itself.
func parseKs(s string, n int) ([]int, error) {
	if s == "" {
		var ks []int
		for k := 1; k < n; k += 2 {
			ks = append(ks, k)
		}
		return append(ks, n), nil
	}
	var ks []int
	for _, f := range strings.Split(s, ",") {
		k, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || k < 1 || k > n {
			return nil, fmt.Errorf("-k %q: %q is not a number of real runs from 1 to %d", s, f, n)
		}
		ks = append(ks, k)
	}
	return ks, nil
}

// refs says how the simulator's MAPE depends on the number of real runs it
// is compared with, and how far real runs themselves get against the same
// references: the median of k real runs is the measured side of kvsim
// compare, and with a server as noisy as llama-server on a shared 2-vCPU
// machine a median of few runs is a noisy reference.
func refs(args []string, w io.Writer) error {
	fs := flag.NewFlagSet("refs", flag.ContinueOnError)
	predPath := fs.String("predicted", "", "the simulator's kvsim replay --per-request file")
	kList := fs.String("k", "", "comma-separated reference sizes (default: every odd number of runs below the count, and the count)")
	maxTTFT := fs.Float64("max-ttft-mape", 15, "TTFT MAPE bound, percent")
	maxE2E := fs.Float64("max-e2e-mape", 10, "E2E MAPE bound, percent")
	name := fs.String("name", "", "what to call the run in the output (default: the predicted file)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *predPath == "" || fs.NArg() == 0 {
		return errors.New("usage: fidelity refs -predicted PRED.jsonl [-k 1,3,5] [-max-ttft-mape 15] [-max-e2e-mape 10] [-name NAME] REAL.jsonl...")
	}
	if fs.NArg() > maxRefRuns {
		return fmt.Errorf("%d real runs: refs compares with every choice of them and takes at most %d", fs.NArg(), maxRefRuns)
	}
	for _, b := range []struct {
		flag string
		v    float64
	}{{"-max-ttft-mape", *maxTTFT}, {"-max-e2e-mape", *maxE2E}} {
		if math.IsNaN(b.v) || b.v < 0 {
			return fmt.Errorf("%s %v: expected a percentage >= 0", b.flag, b.v)
		}
	}
	ks, err := parseKs(*kList, fs.NArg())
	if err != nil {
		return err
	}
	pred, reals, err := loadRuns(*predPath, fs.Args())
	if err != nil {
		return err
	}
	label := cmp.Or(*name, *predPath)
	rows, err := refCompare(reals, pred, ks, *maxTTFT, *maxE2E)
	if err != nil {
		return fmt.Errorf("%s: %w", *predPath, err)
	}
	fmt.Fprintf(w, "%s: the simulator, and the median of the other real runs, against the per-request median of k of the %d real runs (every choice of k); bounds TTFT MAPE %g%%, E2E MAPE %g%%\n",
		label, len(reals), *maxTTFT, *maxE2E)
	fmt.Fprintln(w, "| k | references | sim TTFT MAPE min / mean / max | sim E2E MAPE | sim meets both | other runs' median: TTFT MAPE | E2E MAPE | meets both |")
	fmt.Fprintln(w, "|---|---|---|---|---|---|---|---|")
	for _, row := range rows {
		cells := append([]string{strconv.Itoa(row.k), strconv.Itoa(row.refs)}, row.sim.cells()...)
		cells = append(cells, row.others.cells()...)
		fmt.Fprintf(w, "| %s |\n", strings.Join(cells, " | "))
	}
	return nil
}
