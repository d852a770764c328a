package hw

import (
	"errors"
	"math"

	"github.com/kvsim/kvsim/internal/fielderr"
)

// The feature vectors of the fitted model. A fitter (least squares over
// measured forwards) and [Fitted] share these definitions, so coefficients
// fitted from [PrefillFeatures]/[DecodeFeatures] plug straight into Fitted.
const (
	// NumPrefillFeatures is the length of [PrefillFeatures]' result.
	NumPrefillFeatures = 4
	// NumDecodeFeatures is the length of [DecodeFeatures]' result.
	NumDecodeFeatures = 3
)

// PrefillFeatureNames and DecodeFeatureNames name the features, in order.
var (
	PrefillFeatureNames = [NumPrefillFeatures]string{"1", "new_tokens", "attention_pairs", "requests"}
	DecodeFeatureNames  = [NumDecodeFeatures]string{"1", "batch", "context_tokens"}
)

// PrefillFeatures returns the prefill features of a batch:
//
//	[0] 1 (the intercept)
//	[1] Σ new
//	[2] Σ (new*cached + new*(new+1)/2), the (query, key) pairs causal
//	    attention scores: the i-th new token sees cached + i keys
//	[3] the number of requests
//
// Entries with New == 0 take no part. The result is an array (no
// allocation); use f[:] for a slice.
func PrefillFeatures(batch []Extend) [NumPrefillFeatures]float64 {
	var f [NumPrefillFeatures]float64
	f[0] = 1
	for _, e := range batch {
		if e.New <= 0 {
			continue
		}
		n, c := float64(e.New), float64(e.Cached)
		f[1] += n
		f[2] += n*c + n*(n+1)/2
		f[3]++
	}
	return f
}

// DecodeFeatures returns the decode features of a step: [1, batchSize,
// contextTokens].
func DecodeFeatures(batchSize int, contextTokens int64) [NumDecodeFeatures]float64 {
	return [NumDecodeFeatures]float64{1, float64(batchSize), float64(contextTokens)}
}

// Fitted is a cost model linear in its coefficients, fitted to measured
// forwards of a real server:
//
//	prefill ns = a0 + a1*Σnew + a2*Σpairs + a3*requests
//	decode ns  = b0 + b1*batch + b2*context
//
// with the features of [PrefillFeatures] and [DecodeFeatures]. The
// intercepts may be negative (a least-squares artefact); the slopes must be
// >= 0 so that time never falls as work grows, and a negative total is
// clamped to 0.
type Fitted struct {
	// Prefill holds a0..a3 in ns per feature unit.
	Prefill [NumPrefillFeatures]float64 `toml:"prefill"`
	// Decode holds b0..b2 in ns per feature unit.
	Decode [NumDecodeFeatures]float64 `toml:"decode"`
}

// Validate reports every invalid coefficient at once, each a
// [fielderr.Error] at hw.fitted.<key>[i].
func (f Fitted) Validate() error {
	var errs []error
	check := func(key string, i int, v float64) {
		switch {
		case math.IsNaN(v) || math.IsInf(v, 0):
			errs = append(errs, fielderr.New(fielderr.Key("hw", "fitted", key).At(i), "must be finite (got %v)", v))
		case i > 0 && v < 0:
			errs = append(errs, fielderr.New(fielderr.Key("hw", "fitted", key).At(i), "slope must be >= 0 (got %v)", v))
		}
	}
	for i, v := range f.Prefill {
		check("prefill", i, v)
	}
	for i, v := range f.Decode {
		check("decode", i, v)
	}
	return errors.Join(errs...)
}

// PrefillTime returns round(max(0, a·PrefillFeatures(batch))) ns, or 0 for
// a batch with no new tokens.
func (f *Fitted) PrefillTime(batch []Extend) int64 {
	x := PrefillFeatures(batch)
	if x[3] == 0 {
		return 0
	}
	var t float64
	for i, a := range f.Prefill {
		t += a * x[i]
	}
	return int64(math.Round(max(0, t)))
}

// DecodeTime returns round(max(0, b·DecodeFeatures(batchSize,
// contextTokens))) ns, or 0 for an empty batch.
func (f *Fitted) DecodeTime(batchSize int, contextTokens int64) int64 {
	if batchSize <= 0 {
		return 0
	}
	x := DecodeFeatures(batchSize, contextTokens)
	var t float64
	for i, b := range f.Decode {
		t += b * x[i]
	}
	return int64(math.Round(max(0, t)))
}

// Check evaluates the model at the largest forwards w of a server and
// returns an error for each that would take longer than [MaxStep] (or not
// be a finite number), naming the coefficient (hw.fitted.prefill[i] or
// decode[i]) behind its largest term. A model that passes cannot overflow
// Time.
func (f *Fitted) Check(w Worst) error {
	var errs []error
	check := func(key string, prefill bool, coef, x []float64) {
		total, big := 0.0, 0
		terms := make([]float64, len(coef))
		for i := range coef {
			terms[i] = coef[i] * x[i]
			total += terms[i]
			if !(terms[i] <= terms[big]) {
				big = i
			}
		}
		if total <= float64(MaxStep) {
			return
		}
		errs = append(errs, fielderr.New(fielderr.Key("hw", "fitted", key).At(big), "makes %s take %s, over the %s a step may take (%s of it from %g ns per %s times %g) (got %g)",
			w.describe(prefill), seconds(total), MaxStep, seconds(terms[big]), coef[big], featureName(prefill, big), x[big], coef[big]))
	}
	tokens, pairs, _, seqs := w.prefillSums()
	check("prefill", true, f.Prefill[:], []float64{1, tokens, pairs, seqs})
	dx := DecodeFeatures(w.DecodeBatch, w.DecodeContext)
	check("decode", false, f.Decode[:], dx[:])
	return errors.Join(errs...)
}

func featureName(prefill bool, i int) string {
	if prefill {
		return PrefillFeatureNames[i]
	}
	return DecodeFeatureNames[i]
}
