package configs

import (
	"strings"

	"github.com/kvsim/kvsim/internal/fielderr"
	"github.com/kvsim/kvsim/sim/hw"
)

// coefficientLists are the fitted cost models' coefficient arrays. TOML
// decodes a short list into a Go array by padding it with zeros and a long
// one by dropping the rest, which would turn "prefill = [1.0]" into a
// server whose prompts are free; each list must be written whole.
var coefficientLists = []struct {
	table, key string
	n          int
	names      string
}{
	{"cost.fitted", "prefill", hw.NumPrefillFeatures, "[a0 per forward, a1 per new token, a2 per attention (query, key) pair, a3 per request] in ns"},
	{"cost.fitted", "decode", hw.NumDecodeFeatures, "[b0 per step, b1 per request, b2 per context token] in ns"},
	{"llamacpp.cost", "prefill", hw.NumPrefillFeatures, "[a0 per prompt call, a1 per new token, a2 per causal pair, a3 per prompt chunk] in ns"},
	{"llamacpp.cost", "decode", hw.NumDecodeFeatures, "[b0 per decode call, b1 per generating slot, b2 per context token] in ns"},
}

// coefficientErrors checks the written length of every coefficient list in
// the decoded document raw, and that the lists the file's cost model needs
// are there: cost.fitted's with cost.kind = "fitted", llamacpp.cost's
// with engine.kind = "llamacpp".
func coefficientErrors(raw map[string]any, f *File) []error {
	var errs []error
	for _, c := range coefficientLists {
		key := c.table + "." + c.key
		v, ok := lookup(raw, key)
		if !ok {
			switch {
			case c.table == "cost.fitted" && f.enums.cost == costFitted && !f.IsLlamaCpp():
				errs = append(errs, fielderr.New(fielderr.Dotted("cost.kind"), `"fitted" needs %s: %d coefficients %s (got none)`, key, c.n, c.names))
			case c.table == "llamacpp.cost" && f.IsLlamaCpp():
				errs = append(errs, fielderr.New(fielderr.Dotted(key), "must be set: %d coefficients %s (kvsim calibrate writes them) (got none)", c.n, c.names))
			}
			continue
		}
		if c.table == "cost.fitted" && f.enums.cost != costFitted && !f.IsLlamaCpp() {
			// Coefficients the roofline would silently ignore.
			kind := f.Cost.Kind
			if kind == "" {
				kind = "roofline"
			}
			errs = append(errs, fielderr.New(fielderr.Dotted(key), `given, but cost.kind is %q: set cost.kind = "fitted" to use it, or remove it`, kind))
			continue
		}
		list, ok := v.([]any)
		if !ok {
			continue // the decoder reports the type
		}
		if len(list) != c.n {
			errs = append(errs, fielderr.New(fielderr.Dotted(key), "must have %d coefficients %s (got %d)", c.n, c.names, len(list)))
		}
	}
	return errs
}

// lookup finds a dotted key path in a decoded TOML document.
func lookup(doc map[string]any, path string) (any, bool) {
	parts := strings.Split(path, ".")
	var cur any = doc
	for _, p := range parts {
		m, ok := cur.(map[string]any)
		if !ok {
			return nil, false
		}
		if cur, ok = m[p]; !ok {
			return nil, false
		}
	}
	return cur, true
}
