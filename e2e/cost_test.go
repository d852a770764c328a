//go:build e2e

package e2e

import (
	"fmt"
	"math"
	"slices"
	"sync"
	"testing"

	"gonum.org/v1/gonum/mat"
)

// TestMeasureCPUCost measures llama-server's llama_decode time on this
// machine with the tiny model and fits sim/llamacpp's CPUCost
// coefficients (hw.Fitted layout) by least squares:
//
//	prompt call ns = a0 + a1*new + a2*(new*cached + new*(new+1)/2)
//	decode step ns = b0 + b1*batch + b2*context
//
// Prompt points: one request at a time (one call each, prompts up to
// -b 2048), cold and behind a cached prefix, server-measured prompt_ms.
// Decode points: batch requests sent together whose prompts fit one call,
// so that their decode steps run in lockstep; the step time is
// predicted_ms / predicted_n averaged over the batch, the context the mean
// over the steps. Each point is the minimum of three runs: on a shared
// 2-vCPU machine other processes only ever add time (a preempted thread of
// llama.cpp's spinning thread pool stalls a whole call), so the fastest run
// is the best estimate of the undisturbed cost. The test fails
// only when a fit is impossible; the coefficients are logged (go test -v)
// and copied by hand into sim/llamacpp.TinyCPU with the date.
func TestMeasureCPUCost(t *testing.T) {
	s := startServer(t, serverOpts{NP: 4, Ctx: 4 * 2048})
	seed := uint64(1000)
	fresh := func(n int) []int32 { seed++; return tokens(seed, n) }

	// Prompt calls.
	var px [][]float64
	var py []float64
	addPrompt := func(what string, newTok, cached int, ms []float64) {
		m := minimum(ms)
		n, c := float64(newTok), float64(cached)
		px = append(px, []float64{1, n, n*c + n*(n+1)/2})
		py = append(py, m*1e6)
		t.Logf("prompt %-28s new %4d cached %4d: %8.2f ms (runs %v)", what, newTok, cached, m, rounded(ms))
	}
	for _, l := range []int{16, 64, 256, 512, 1024, 1536, 2000} {
		var ms []float64
		for range 3 {
			r := s.complete(fresh(l), 1, nil)
			if r.Status != 200 || r.Cached != 0 || r.Timings.PromptN != l {
				t.Fatalf("cold %d: %+v", l, r)
			}
			ms = append(ms, r.Timings.PromptMs)
		}
		addPrompt("cold", l, 0, ms)
	}
	for _, c := range []int{512, 1536} {
		for _, n := range []int{32, 256, 480} {
			var ms []float64
			for range 3 {
				base := fresh(c)
				s.complete(base, 1, nil)
				r := s.complete(slices.Concat(base, fresh(n)), 1, nil)
				if r.Status != 200 || r.Cached != c {
					t.Fatalf("cached %d + %d: got cache_n %d (%+v)", c, n, r.Cached, r)
				}
				ms = append(ms, r.Timings.PromptMs)
			}
			addPrompt("behind a cached prefix", n, c, ms)
		}
	}

	// Decode steps.
	const out = 48
	var dx [][]float64
	var dy []float64
	for _, pt := range []struct{ batch, ctx int }{{1, 16}, {1, 500}, {1, 1000}, {1, 1900}, {2, 16}, {2, 500}, {2, 1000}, {3, 16}, {3, 500}, {4, 16}, {4, 400}} {
		var ms []float64
		for range 3 {
			rs := make([]result, pt.batch)
			prompts := make([][]int32, pt.batch)
			for i := range prompts {
				prompts[i] = fresh(pt.ctx)
			}
			var wg sync.WaitGroup
			for i := range rs {
				wg.Go(func() { rs[i] = s.complete(prompts[i], out, nil) })
			}
			wg.Wait()
			var per float64
			for _, r := range rs {
				if r.Status != 200 || r.Timings.PredictedN != out {
					t.Fatalf("decode batch %d ctx %d: %+v", pt.batch, pt.ctx, r)
				}
				per += r.Timings.PredictedMs / float64(out) / float64(pt.batch)
			}
			ms = append(ms, per)
		}
		m := minimum(ms)
		ctx := float64(pt.batch) * (float64(pt.ctx) + out/2)
		dx = append(dx, []float64{1, float64(pt.batch), ctx})
		dy = append(dy, m*1e6)
		t.Logf("decode batch %d, context %4d each: %6.2f ms/step (runs %v)", pt.batch, pt.ctx, m, rounded(ms))
	}

	a := fitNonNeg(t, px, py)
	b := fitNonNeg(t, dx, dy)
	t.Logf("fitted prompt  [a0 a1 a2 a3] = [%.6g, %.6g, %.6g, 0] ns; fit MAPE %.1f%%", a[0], a[1], a[2], mape(px, py, a))
	t.Logf("fitted decode  [b0 b1 b2]    = [%.6g, %.6g, %.6g] ns; fit MAPE %.1f%%", b[0], b[1], b[2], mape(dx, dy, b))
	t.Logf("server %s", s.version())
}

// fitNonNeg solves least squares on relative errors (each row divided by
// its measured time, so that a 2 ms point counts as much as a 400 ms one),
// dropping any slope that comes out
// negative and refitting without it (time must not fall as work grows).
func fitNonNeg(t *testing.T, x [][]float64, y []float64) []float64 {
	t.Helper()
	k := len(x[0])
	use := make([]bool, k)
	for i := range use {
		use[i] = true
	}
	for {
		var cols []int
		for j, u := range use {
			if u {
				cols = append(cols, j)
			}
		}
		A := mat.NewDense(len(x), len(cols), nil)
		for i := range x {
			for c, j := range cols {
				A.Set(i, c, x[i][j]/y[i])
			}
		}
		var sol mat.VecDense
		ones := make([]float64, len(y))
		for i := range ones {
			ones[i] = 1
		}
		if err := sol.SolveVec(A, mat.NewVecDense(len(y), ones)); err != nil {
			t.Fatalf("least squares: %v", err)
		}
		coef := make([]float64, k)
		neg := -1
		for c, j := range cols {
			coef[j] = sol.AtVec(c)
			if j > 0 && coef[j] < 0 && neg < 0 {
				neg = j
			}
		}
		if neg < 0 {
			return coef
		}
		use[neg] = false
	}
}

func mape(x [][]float64, y, coef []float64) float64 {
	var s float64
	for i := range x {
		var p float64
		for j := range coef {
			p += coef[j] * x[i][j]
		}
		s += math.Abs(p-y[i]) / y[i]
	}
	return 100 * s / float64(len(x))
}

func minimum(xs []float64) float64 {
	m := math.Inf(1)
	for _, x := range xs {
		m = min(m, x)
	}
	return m
}

func rounded(xs []float64) string {
	out := ""
	for i, x := range xs {
		if i > 0 {
			out += " "
		}
		out += fmt.Sprintf("%.1f", x)
	}
	return out
}
