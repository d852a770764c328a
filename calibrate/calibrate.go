package calibrate

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"

	"github.com/pelletier/go-toml/v2"
	"gonum.org/v1/gonum/mat"

	"github.com/kvsim/kvsim/configs"
	"github.com/kvsim/kvsim/sim/hw"
	"github.com/kvsim/kvsim/traces"
)

// Config says how the measured server ran the calibration requests.
type Config struct {
	// ChunkedPrefillSize is the server's chunked_prefill_size in tokens
	// (<= 0: no chunking). A prompt with more new tokens than this is
	// prefilled in page-aligned chunks, one forward each, and its TTFT is
	// their sum.
	ChunkedPrefillSize int64
	// PageSize is the server's page size in tokens (default 1).
	PageSize int
	// Relative weighs each sample by 1/measured time, so that the fit
	// minimises relative rather than absolute error (short and long
	// prompts count alike). Default true via Default.
	Relative bool
}

// Default returns SGLang's default chunking (8192), page size 1 and
// relative weights.
func Default() Config {
	return Config{ChunkedPrefillSize: 8192, PageSize: 1, Relative: true}
}

// Calibration is a fitted cost model and how well it fits.
type Calibration struct {
	Fitted hw.Fitted `json:"fitted"`
	// PrefillSamples and DecodeSamples are the TTFTs and ITLs fitted.
	PrefillSamples int `json:"prefill_samples"`
	DecodeSamples  int `json:"decode_samples"`
	// PrefillR2 and DecodeR2 are the coefficients of determination of the
	// fits (unweighted, on the measured times).
	PrefillR2 float64 `json:"prefill_r2"`
	DecodeR2  float64 `json:"decode_r2"`
	// TTFTMAPE and ITLMAPE are the fits' mean absolute percentage errors.
	TTFTMAPE float64 `json:"ttft_mape_pct"`
	ITLMAPE  float64 `json:"itl_mape_pct"`
	// Method names the solver.
	Method string `json:"method"`
}

// Calibrate fits the fitted cost model's coefficients ([hw.Fitted], with
// the features of [hw.PrefillFeatures] and [hw.DecodeFeatures]) to the
// measured requests of a per-request trace (kvsim replay --per-request or
// kvsim capture). The requests must have been sent one at a time
// (concurrency 1), so that:
//
//   - TTFT is the prefill of the prompt's new tokens (prompt - cached) over
//     the cached ones: one forward, or one per chunk;
//   - the j-th inter-token latency is one decode step at batch 1 over a
//     context of prompt + j tokens.
//
// At batch 1 the intercept and the per-request slope (a0 and a3, b0 and
// b1) are indistinguishable: the fit puts the whole per-forward constant
// in the intercept and writes a3 = b1 = 0, which predicts batch-1 forwards
// exactly and larger batches without a per-request term.
//
// The slopes must be >= 0 (hw.Fitted requires it): the fit is non-negative
// least squares with a free intercept, solved with the active-set method
// of Lawson and Hanson (Solving Least Squares Problems, 1974, ch. 23) on
// columns scaled to unit norm, each step a least-squares solve of gonum/mat.
// Failed requests, requests without a reported cached count, and (for
// TTFT) requests whose cached count is unknown are skipped.
func Calibrate(recs []traces.Record, cfg Config) (*Calibration, error) {
	if cfg.PageSize <= 0 {
		cfg.PageSize = 1
	}
	var px [][]float64
	var py []float64
	var dx [][]float64
	var dy []float64
	for i := range recs {
		r := &recs[i]
		o := r.Observed
		if o == nil || (o.Status != "ok" && o.Status != "") || r.Kind == "warmup" {
			continue
		}
		if o.TTFT > 0 && o.CachedTokens >= 0 && o.CachedTokens < r.InputLen {
			f := chunkFeatures(int64(r.InputLen), int64(o.CachedTokens), cfg)
			px = append(px, []float64{f[0], f[1], f[2]})
			py = append(py, float64(o.TTFT))
		}
		for j, itl := range o.ITL {
			if itl <= 0 {
				continue
			}
			f := hw.DecodeFeatures(1, int64(r.InputLen+j+1))
			dx = append(dx, []float64{f[0], f[2]})
			dy = append(dy, float64(itl))
		}
	}
	if len(py) < 3 {
		return nil, fmt.Errorf("calibrate: %d usable TTFT samples, need at least 3 (successful requests with ttft_ns and cached_tokens)", len(py))
	}
	if len(dy) < 2 {
		return nil, fmt.Errorf("calibrate: %d usable ITL samples, need at least 2 (requests with more than one output token)", len(dy))
	}
	pc, err := nnlsFreeIntercept(px, py, cfg.Relative)
	if err != nil {
		return nil, fmt.Errorf("calibrate prefill: %w", err)
	}
	dc, err := nnlsFreeIntercept(dx, dy, cfg.Relative)
	if err != nil {
		return nil, fmt.Errorf("calibrate decode: %w", err)
	}
	c := &Calibration{
		Fitted:         hw.Fitted{Prefill: [4]float64{pc[0], pc[1], pc[2], 0}, Decode: [3]float64{dc[0], 0, dc[1]}},
		PrefillSamples: len(py), DecodeSamples: len(dy),
		Method: "non-negative least squares (Lawson-Hanson active set, free intercept), " + map[bool]string{true: "relative", false: "absolute"}[cfg.Relative] + " weights",
	}
	c.PrefillR2, c.TTFTMAPE = fitQuality(px, py, pc)
	c.DecodeR2, c.ITLMAPE = fitQuality(dx, dy, dc)
	if err := c.Fitted.Validate(); err != nil {
		return nil, fmt.Errorf("calibrate: %w", err)
	}
	return c, nil
}

// chunkFeatures sums hw.PrefillFeatures over the forwards that prefill
// new = input - cached tokens after cached ones (intercept, Σnew, Σpairs).
func chunkFeatures(input, cached int64, cfg Config) [3]float64 {
	var sum [3]float64
	chunk := cfg.ChunkedPrefillSize
	if chunk > 0 {
		ps := int64(cfg.PageSize)
		chunk = max(chunk/ps*ps, ps)
	}
	for left := input - cached; left > 0; {
		n := left
		if chunk > 0 && n > chunk {
			n = chunk
		}
		f := hw.PrefillFeatures([]hw.Extend{{New: n, Cached: cached}})
		sum[0] += f[0]
		sum[1] += f[1]
		sum[2] += f[2]
		cached += n
		left -= n
	}
	return sum
}

// nnlsFreeIntercept solves min ||W(Ax - y)|| subject to x[j] >= 0 for
// j >= 1 (x[0], the intercept, is free); W = diag(1/y) when relative.
func nnlsFreeIntercept(rows [][]float64, y []float64, relative bool) ([]float64, error) {
	n, k := len(rows), len(rows[0])
	a := mat.NewDense(n, k, nil)
	b := mat.NewVecDense(n, nil)
	for i, r := range rows {
		w := 1.0
		if relative {
			w = 1 / y[i]
		}
		for j, v := range r {
			a.Set(i, j, v*w)
		}
		b.SetVec(i, y[i]*w)
	}
	// Scale columns to unit norm for conditioning (pairs run to 1e8 and
	// more, the intercept is 1).
	scale := make([]float64, k)
	for j := range k {
		scale[j] = mat.Norm(a.ColView(j), 2)
		if scale[j] == 0 {
			scale[j] = 1
		}
		for i := range n {
			a.Set(i, j, a.At(i, j)/scale[j])
		}
	}
	x, err := lawsonHanson(a, b)
	if err != nil {
		return nil, err
	}
	for j := range x {
		x[j] /= scale[j]
	}
	return x, nil
}

// lawsonHanson is NNLS with column 0 free (always in the passive set).
func lawsonHanson(a *mat.Dense, b *mat.VecDense) ([]float64, error) {
	n, k := a.Dims()
	passive := make([]bool, k)
	passive[0] = true
	x := make([]float64, k)
	solve := func() ([]float64, error) {
		var cols []int
		for j := range k {
			if passive[j] {
				cols = append(cols, j)
			}
		}
		sub := mat.NewDense(n, len(cols), nil)
		for c, j := range cols {
			for i := range n {
				sub.Set(i, c, a.At(i, j))
			}
		}
		var s mat.VecDense
		if err := s.SolveVec(sub, b); err != nil {
			return nil, err
		}
		out := make([]float64, k)
		for c, j := range cols {
			out[j] = s.AtVec(c)
		}
		return out, nil
	}
	s, err := solve()
	if err != nil {
		return nil, err
	}
	copy(x, s)
	const tol = 1e-12
	for iter := 0; iter < 10*k; iter++ {
		// Gradient of the residual: w = Aᵀ(b - Ax).
		var ax, res, w mat.VecDense
		ax.MulVec(a, mat.NewVecDense(k, x))
		res.SubVec(b, &ax)
		w.MulVec(a.T(), &res)
		best, bj := tol*mat.Norm(b, 2), -1
		for j := 1; j < k; j++ {
			if !passive[j] && w.AtVec(j) > best {
				best, bj = w.AtVec(j), j
			}
		}
		if bj < 0 {
			return x, nil
		}
		passive[bj] = true
		for inner := 0; inner < 10*k; inner++ {
			s, err := solve()
			if err != nil {
				return nil, err
			}
			feasible := true
			alpha := math.Inf(1)
			for j := 1; j < k; j++ {
				if passive[j] && s[j] <= 0 {
					feasible = false
					if d := x[j] - s[j]; d > 0 {
						alpha = min(alpha, x[j]/d)
					}
				}
			}
			if feasible {
				copy(x, s)
				break
			}
			if math.IsInf(alpha, 1) {
				alpha = 0
			}
			for j := range k {
				x[j] += alpha * (s[j] - x[j])
			}
			for j := 1; j < k; j++ {
				if passive[j] && x[j] <= tol {
					passive[j], x[j] = false, 0
				}
			}
		}
	}
	return nil, errors.New("the active-set iteration did not converge")
}

// fitQuality returns R² and MAPE (percent) of coefficients c on (rows, y).
func fitQuality(rows [][]float64, y, c []float64) (r2, mape float64) {
	var mu float64
	for _, v := range y {
		mu += v
	}
	mu /= float64(len(y))
	var ssRes, ssTot, ape float64
	for i, r := range rows {
		var p float64
		for j, v := range r {
			p += c[j] * v
		}
		p = max(p, 0)
		ssRes += (y[i] - p) * (y[i] - p)
		ssTot += (y[i] - mu) * (y[i] - mu)
		ape += math.Abs(p-y[i]) / y[i]
	}
	r2 = 1.0
	if ssTot > 0 {
		r2 = 1 - ssRes/ssTot
	}
	return r2, 100 * ape / float64(len(y))
}

// WriteTOML writes the calibration as the [cost] section configs loads
// (kind = "fitted" with cost.fitted.prefill and decode), preceded by
// comments that say where it came from and how well it fits. The section
// is a configs.CostSection marshalled with go-toml, so its keys are the
// ones configs reads; the coefficients have six significant digits.
func (c *Calibration) WriteTOML(w io.Writer, source string) error {
	var doc struct {
		Cost configs.CostSection `toml:"cost"`
	}
	doc.Cost.Kind = "fitted"
	doc.Cost.Fitted = roundFitted(c.Fitted)
	return writeTOML(w, fmt.Sprintf(`Fitted by kvsim calibrate from %s
%d TTFT samples: R² %.4f, MAPE %.2f%%; %d ITL samples: R² %.4f, MAPE %.2f%%
%s.
prefill ns = a0 + a1*new_tokens + a2*attention_pairs + a3*requests
decode ns  = b0 + b1*batch + b2*context_tokens
(a3 and b1 cannot be told from the intercepts at concurrency 1: 0 here.)
`, source, c.PrefillSamples, c.PrefillR2, c.TTFTMAPE, c.DecodeSamples, c.DecodeR2, c.ITLMAPE, c.Method), &doc)
}

// writeTOML writes comment, each line prefixed with "# ", and then doc
// marshalled as TOML.
func writeTOML(w io.Writer, comment string, doc any) error {
	var b bytes.Buffer
	for line := range strings.Lines(comment) {
		b.WriteString("# " + line)
	}
	if err := toml.NewEncoder(&b).Encode(doc); err != nil {
		return err
	}
	_, err := w.Write(b.Bytes())
	return err
}

// round6 is x to six significant digits, the precision the snippets
// write.
func round6(x float64) float64 {
	r, err := strconv.ParseFloat(strconv.FormatFloat(x, 'g', 6, 64), 64)
	if err != nil {
		panic("calibrate: " + err.Error()) // FormatFloat's output always parses
	}
	return r
}

// roundFitted is f with every coefficient to six significant digits.
func roundFitted(f hw.Fitted) hw.Fitted {
	for i := range f.Prefill {
		f.Prefill[i] = round6(f.Prefill[i])
	}
	for i := range f.Decode {
		f.Decode[i] = round6(f.Decode[i])
	}
	return f
}
