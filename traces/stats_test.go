package traces

import (
	"fmt"
	"math"
	"slices"
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/kvsim/kvsim/internal/testutil"
)

func statsOf(t *testing.T, path string, f Format, opt StatsOptions) *Stats {
	t.Helper()
	st, err := ComputeStats(func() (*Reader, error) { return Open(path, f) }, opt)
	if err != nil {
		t.Fatal(err)
	}
	return st
}

func near(a, b, tol float64) bool { return math.Abs(a-b) <= tol }

// TestStatsMooncakeGolden reproduces the published figures of the shared
// traces README (Mooncake FAST'25, kvcache-ai/Mooncake@3b5a594, Apache-2.0).
func TestStatsMooncakeGolden(t *testing.T) {
	cases := []struct {
		rel           string
		requests      int
		total, unique int
		ideal         float64
		lru           []float64 // at 1/5/10/25/50%
		opt           []float64 // at 1/5/10/25/50% (kvsim's, not published)
		inMean        float64
	}{
		{"mooncake_fast25/conversation_trace.jsonl", 12031, 288500, 182790, 0.366, []float64{0.052, 0.195, 0.278, 0.353, 0.363},
			[]float64{0.246, 0.366, 0.366, 0.366, 0.366}, 12035},
		{"mooncake_fast25/synthetic_trace.jsonl", 3993, 121877, 43924, 0.640, []float64{0.034, 0.155, 0.260, 0.443, 0.589},
			[]float64{0.185, 0.396, 0.506, 0.626, 0.640}, 15325},
	}
	for _, c := range cases {
		t.Run(c.rel, func(t *testing.T) {
			p := testutil.SharedTrace(t, c.rel)
			start := time.Now()
			st := statsOf(t, p, FormatAuto, StatsOptions{})
			t.Logf("stats in %v", time.Since(start))
			if st.Requests != c.requests || st.TotalBlocks != c.total || st.UniqueBlocks != c.unique {
				t.Fatalf("requests/total/unique = %d/%d/%d, want %d/%d/%d", st.Requests, st.TotalBlocks, st.UniqueBlocks, c.requests, c.total, c.unique)
			}
			if !near(*st.IdealHitRate, c.ideal, 0.0005) {
				t.Errorf("ideal hit = %.4f, want %.3f", *st.IdealHitRate, c.ideal)
			}
			for i, f := range DefaultLRUFractions {
				key := fmt.Sprint(f)
				if got := st.LRUHitRate[key]; !near(got, c.lru[i], 0.0005) {
					t.Errorf("LRU %s = %.4f, want %.3f", key, got, c.lru[i])
				}
				if got := st.OPTHitRate[key]; !near(got, c.opt[i], 0.0005) {
					t.Errorf("OPT %s = %.4f, want %.3f", key, got, c.opt[i])
				}
			}
			if !near(st.Input.Mean, c.inMean, 0.5) {
				t.Errorf("input mean = %.1f, want %.0f", st.Input.Mean, c.inMean)
			}
		})
	}
}

func TestStatsShareGPTGolden(t *testing.T) {
	p := testutil.SharedTrace(t, "llmservingsim/sharegpt-llama-3.1-8b-300-sps10.jsonl")
	st := statsOf(t, p, FormatAuto, StatsOptions{})
	if st.PrefixInfo != "tokens" || !near(*st.IdealHitRate, 0.077, 0.0005) {
		t.Fatalf("prefix %s ideal %.4f, want tokens 0.077", st.PrefixInfo, *st.IdealHitRate)
	}
}

func TestStatsAzureHasNoPrefix(t *testing.T) {
	st := statsOf(t, "testdata/azure.csv", FormatAuto, StatsOptions{})
	if st.PrefixInfo != "none" || st.IdealHitRate != nil || st.LRUHitRate != nil || st.Note == "" {
		t.Fatalf("azure stats claim prefix information: %+v", st)
	}
}

// TestLengthCountsDist checks the distribution from counts against the
// plain definition over a sorted slice: the same figures to the bit.
func TestLengthCountsDist(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		xs := rapid.SliceOfN(rapid.IntRange(0, 300), 1, 200).Draw(t, "lengths")
		c := lengthCounts{}
		for _, x := range xs {
			c[x]++
		}
		s := slices.Sorted(slices.Values(xs))
		sum := 0.0
		for _, x := range s {
			sum += float64(x)
		}
		pct := func(p float64) float64 {
			pos := p / 100 * float64(len(s)-1)
			lo := int(math.Floor(pos))
			hi := min(lo+1, len(s)-1)
			return float64(s[lo]) + (pos-float64(lo))*float64(s[hi]-s[lo])
		}
		want := Dist{Mean: sum / float64(len(s)), P50: pct(50), P90: pct(90), P99: pct(99), Max: s[len(s)-1]}
		if got := c.dist(); got != want {
			t.Fatalf("dist(%v) = %+v, want %+v", xs, got, want)
		}
	})
}
