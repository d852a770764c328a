package hw

import (
	"fmt"
	"strconv"
	"time"
)

// MaxStep is the longest one forward (a prefill batch or a decode step)
// may take: one simulated hour. No real server is that slow, so a cost
// model that exceeds it at a server's largest batch has a wrong number in
// it (an efficiency of 1e-12, a coefficient in the wrong unit), and
// refusing it keeps every simulated time far from int64's overflow
// (2^63 ns is 292 years).
const MaxStep = time.Hour

// Worst is the largest work one forward of a server can hold, at which
// [Roofline.Check] and [Fitted.Check] evaluate a cost model.
type Worst struct {
	// PrefillRequests requests, each extending Prefill.New tokens behind
	// Prefill.Cached, make the largest prefill batch: the most requests,
	// new tokens and cached context the server's limits allow together.
	// (A count rather than a slice, so that absurd limits cost no memory.)
	PrefillRequests int64
	Prefill         Extend
	// DecodeBatch and DecodeContext are the largest decode step: the most
	// running requests and the KV tokens they can hold.
	DecodeBatch   int
	DecodeContext int64
}

// prefillSums are the prefill batch's new tokens, (query, key) pairs,
// cached tokens and requests, as PrefillFeatures and the roofline count
// them.
func (w Worst) prefillSums() (tokens, pairs, cached, seqs float64) {
	if w.Prefill.New <= 0 || w.PrefillRequests <= 0 {
		return 0, 0, 0, 0
	}
	k, n, c := float64(w.PrefillRequests), float64(w.Prefill.New), float64(w.Prefill.Cached)
	return k * n, k * (n*c + n*(n+1)/2), k * c, k
}

// describe names the prefill or decode forward of w for messages.
func (w Worst) describe(prefill bool) string {
	if !prefill {
		return fmt.Sprintf("the largest decode step (%d requests over %d context tokens)", w.DecodeBatch, w.DecodeContext)
	}
	return fmt.Sprintf("the largest prefill forward (%d requests of %d new tokens behind %d cached)", w.PrefillRequests, w.Prefill.New, w.Prefill.Cached)
}

// seconds formats ns for messages: "2.8e+09 s", "41 s", "NaN s".
func seconds(ns float64) string {
	return strconv.FormatFloat(ns/1e9, 'g', 2, 64) + " s"
}
