package policy

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"testing"

	"github.com/kvsim/kvsim/traces"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata/")

// traceDir holds the shared public traces, relative to this package: the
// repository root's ../shared/data/traces.
const traceDir = "../../../shared/data/traces"

// mooncake describes one Mooncake FAST'25 trace (kvcache-ai/Mooncake @
// 3b5a594133958449a1feaf1c9e0fc1b553e34a28, FAST25-release/traces/,
// Apache-2.0).
type mooncake struct {
	name, file string
}

var mooncakeTraces = []mooncake{
	{"mooncake_conversation", "mooncake_fast25/conversation_trace.jsonl"},
	{"mooncake_synthetic", "mooncake_fast25/synthetic_trace.jsonl"},
}

// loadTrace reads a trace with package traces, skipping the test when the
// shared data is absent.
func loadTrace(tb testing.TB, rel string) []Request {
	tb.Helper()
	path := filepath.Join(traceDir, rel)
	if _, err := os.Stat(path); err != nil {
		tb.Skipf("shared trace %s not available: %v", path, err)
	}
	rd, err := traces.Open(path, traces.FormatAuto)
	if err != nil {
		tb.Fatal(err)
	}
	defer rd.Close()
	var reqs []Request
	for {
		rec, err := rd.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			tb.Fatal(err)
		}
		reqs = append(reqs, Request{Timestamp: rec.Arrival, Pages: rec.Blocks})
	}
	return reqs
}

func uniquePages(reqs []Request) int {
	type key struct {
		parent int
		page   uint64
	}
	seen := map[key]int{}
	for _, r := range reqs {
		parent := 0
		for _, p := range r.Pages {
			k := key{parent, p}
			id, ok := seen[k]
			if !ok {
				id = len(seen) + 1
				seen[k] = id
			}
			parent = id
		}
	}
	return len(seen)
}

// TestGoldenMooncake pins every counter on both Mooncake traces for both
// policies at L1 = 1%, 5% and 10% of the trace's unique pages and L2 = 1x
// and 2x L1 (plus no L2 at 5%). The figures were cross-checked against a
// transcription of SGLang's simulator (lazy heaps and all); see the
// package doc.
func TestGoldenMooncake(t *testing.T) {
	for _, tr := range mooncakeTraces {
		t.Run(tr.name, func(t *testing.T) {
			reqs := loadTrace(t, tr.file)
			u := uniquePages(reqs)
			var b bytes.Buffer
			fmt.Fprintf(&b, "# kvsim policy mode on %s\n", tr.file)
			fmt.Fprintf(&b, "# (kvcache-ai/Mooncake @ 3b5a594133958449a1feaf1c9e0fc1b553e34a28, FAST25-release/traces/, Apache-2.0)\n")
			fmt.Fprintf(&b, "# %d requests, %d unique pages; l1 = max(1, floor(unique*pct/100)), write-through threshold 1\n", len(reqs), u)
			type capacity struct{ pct, mult int }
			caps := []capacity{{1, 1}, {1, 2}, {5, 0}, {5, 1}, {5, 2}, {10, 1}, {10, 2}}
			for _, c := range caps {
				l1 := max(1, u*c.pct/100)
				for _, p := range Policies() {
					cfg := Config{Policy: p, L1Pages: l1, L2Pages: l1 * c.mult, WriteThroughThreshold: 1}
					r, err := Run(cfg, reqs)
					if err != nil {
						t.Fatalf("%+v: %v", cfg, err)
					}
					js, err := json.Marshal(r)
					if err != nil {
						t.Fatal(err)
					}
					fmt.Fprintf(&b, "%s l1=%d (%d%%) l2=%d: %s dh_to_d_l2_dedup_evictions=%d h_to_deleted_evictions=%d dh_pages=%d unique_cached_pages=%d\n",
						p, cfg.L1Pages, c.pct, cfg.L2Pages, js, r.DedupL2Evictions, r.DeletedL2Evictions, r.DHPages, r.UniqueCachedPages)
				}
			}
			golden := filepath.Join("testdata", tr.name+".golden")
			if *update {
				if err := os.WriteFile(golden, b.Bytes(), 0o644); err != nil {
					t.Fatal(err)
				}
				return
			}
			want, err := os.ReadFile(golden)
			if err != nil {
				t.Fatalf("%v (run with -update to create it)", err)
			}
			if !bytes.Equal(b.Bytes(), want) {
				t.Errorf("%s differs (rerun with -update and review the diff):\ngot:\n%s", golden, b.String())
			}
		})
	}
}

// BenchmarkPolicyMooncakeConversation replays the Mooncake conversation
// trace (288,500 pages) with L1 = 5% of its unique pages and L2 = 2x L1.
func BenchmarkPolicyMooncakeConversation(b *testing.B) {
	reqs := loadTrace(b, mooncakeTraces[0].file)
	u := uniquePages(reqs)
	pages := 0
	for _, r := range reqs {
		pages += len(r.Pages)
	}
	for _, p := range Policies() {
		b.Run(p.String(), func(b *testing.B) {
			cfg := Config{Policy: p, L1Pages: u * 5 / 100, L2Pages: u * 5 / 100 * 2, WriteThroughThreshold: 1}
			b.ReportAllocs()
			var r Result
			for b.Loop() {
				var err error
				if r, err = Run(cfg, reqs); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(pages)*float64(b.N)/b.Elapsed().Seconds(), "pages/s")
			b.ReportMetric(r.L1L2HitRate, "l1+l2-hit-rate")
		})
	}
}
