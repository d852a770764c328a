package policy

import (
	"bytes"
	"encoding/json"
	"fmt"
	"path/filepath"
	"testing"

	"github.com/kvsim/kvsim/internal/golden"
	"github.com/kvsim/kvsim/internal/testutil"
	"github.com/kvsim/kvsim/traces"
)

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
	return loadTraceFile(tb, testutil.SharedTrace(tb, rel))
}

// loadTraceFile reads the trace at path.
func loadTraceFile(tb testing.TB, path string) []Request {
	tb.Helper()
	rd, err := traces.Open(path, traces.FormatAuto)
	if err != nil {
		tb.Fatal(err)
	}
	defer rd.Close()
	var reqs []Request
	for _, rec := range testutil.ReadAll(tb, rd.Next) {
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
			golden.Check(t, filepath.Join("testdata", tr.name+".golden"), b.Bytes())
		})
	}
}

// BenchmarkPolicyMooncakeConversation replays the Mooncake conversation
// trace (288,500 pages) with L1 = 5% of its unique pages and L2 = 2x L1.
func BenchmarkPolicyMooncakeConversation(b *testing.B) {
	reqs := loadTrace(b, mooncakeTraces[0].file)
	benchPolicies(b, reqs, uniquePages(reqs))
}

// benchPolicies runs a sub-benchmark per policy of SGLang's that replays
// reqs with L1 = 5% of u pages and L2 = 2x L1.
func benchPolicies(b *testing.B, reqs []Request, u int) {
	for _, p := range Policies() {
		b.Run(p.String(), func(b *testing.B) {
			cfg := Config{Policy: p, L1Pages: u * 5 / 100, L2Pages: u * 5 / 100 * 2, WriteThroughThreshold: 1}
			r := benchRun(b, cfg, reqs)
			b.ReportMetric(r.L1L2HitRate, "l1+l2-hit-rate")
		})
	}
}

// benchRun replays reqs under cfg at every b.Loop, reports the pages and
// CPU time per replay (reportPages), and returns the last result.
func benchRun(b *testing.B, cfg Config, reqs []Request) Result {
	pages := 0
	for _, r := range reqs {
		pages += len(r.Pages)
	}
	b.ReportAllocs()
	var r Result
	cpu := startCPU()
	for b.Loop() {
		var err error
		if r, err = Run(cfg, reqs); err != nil {
			b.Fatal(err)
		}
	}
	reportPages(b, pages, cpu)
	return r
}

// BenchmarkPolicyMooncakeConversationRepeated replays the conversation
// trace repeated 16 times back to back (issue 19's production-scale run):
// each copy starts after the previous one ends and has its block ids
// shifted past every earlier copy's, so copies share no page and each hour
// behaves like the first. Capacities are the single trace's, as in
// BenchmarkPolicyMooncakeConversation, so the cache state stays the same
// size while the distinct pages grow 16-fold.
func BenchmarkPolicyMooncakeConversationRepeated(b *testing.B) {
	const copies = 16
	one := loadTrace(b, mooncakeTraces[0].file)
	u := uniquePages(one)
	var maxKey uint64
	var span int64
	for _, r := range one {
		for _, p := range r.Pages {
			maxKey = max(maxKey, p)
		}
		span = max(span, r.Timestamp)
	}
	reqs := make([]Request, 0, copies*len(one))
	for c := range copies {
		shift := uint64(c) * (maxKey + 1)
		for _, r := range one {
			ps := make([]uint64, len(r.Pages))
			for i, p := range r.Pages {
				ps[i] = p + shift
			}
			reqs = append(reqs, Request{Timestamp: r.Timestamp + int64(c)*(span+1), Pages: ps})
		}
	}
	benchPolicies(b, reqs, u)
}

// bundledConversation is the Mooncake conversation trace bundled with
// kvsim (configs/traces/NOTICE).
const bundledConversation = "../../configs/traces/mooncake_conversation.jsonl.zst"

// TestGoldenBelady pins Belady's counters on the bundled conversation
// trace at a few thousand pages and at 1%, 5%, 10%, 25% and 50% of its
// unique pages, each beside LRU's (main_write_through without L2) L1 hit
// rate at the same capacity.
func TestGoldenBelady(t *testing.T) {
	reqs := loadTraceFile(t, bundledConversation)
	u := uniquePages(reqs)
	var b bytes.Buffer
	fmt.Fprintf(&b, "# kvsim policy --policy belady on configs/traces/mooncake_conversation.jsonl.zst\n")
	fmt.Fprintf(&b, "# %d requests, %d unique pages; pct: l1 = floor(unique*pct/100); lru = main_write_through with l2 = 0\n", len(reqs), u)
	type capacity struct {
		label string
		pages int
	}
	caps := []capacity{{"", 1024}, {"", 2048}, {"", 4096}}
	for _, pct := range []int{1, 5, 10, 25, 50} {
		caps = append(caps, capacity{fmt.Sprintf(" (%d%%)", pct), u * pct / 100})
	}
	for _, c := range caps {
		r, err := Run(Config{Policy: Belady, L1Pages: c.pages, WriteThroughThreshold: 1}, reqs)
		if err != nil {
			t.Fatal(err)
		}
		lru, err := Run(Config{Policy: MainWriteThrough, L1Pages: c.pages, WriteThroughThreshold: 1}, reqs)
		if err != nil {
			t.Fatal(err)
		}
		js, err := json.Marshal(r)
		if err != nil {
			t.Fatal(err)
		}
		fmt.Fprintf(&b, "belady l1=%d%s: %s lru_l1_hit_rate=%.6f\n", c.pages, c.label, js, lru.L1HitRate)
	}
	golden.Check(t, filepath.Join("testdata", "belady_mooncake_conversation.golden"), b.Bytes())
}

// BenchmarkBeladyMooncakeConversation replays the bundled conversation
// trace (288,500 pages) under Belady with L1 = 5% of its unique pages,
// including building the oracle's next references.
func BenchmarkBeladyMooncakeConversation(b *testing.B) {
	reqs := loadTraceFile(b, bundledConversation)
	u := uniquePages(reqs)
	r := benchRun(b, Config{Policy: Belady, L1Pages: u * 5 / 100, WriteThroughThreshold: 1}, reqs)
	b.ReportMetric(r.L1HitRate, "l1-hit-rate")
}

// startCPU returns the process's CPU time, or -1 when it cannot be read.
func startCPU() int64 {
	if ns, ok := processCPUNanos(); ok {
		return ns
	}
	return -1
}

// reportPages reports the pages replayed per second of wall time
// ("pages/s") and, when the CPU time can be read, per second of the
// process's CPU time ("pages/cpu-s", all threads, so the garbage collector
// counts): on a shared machine the second is far less noisy, since time
// spent waiting for a core does not count. pages is the pages of one
// iteration; cpu is startCPU's value before the loop.
func reportPages(b *testing.B, pages int, cpu int64) {
	total := float64(pages) * float64(b.N)
	b.ReportMetric(total/b.Elapsed().Seconds(), "pages/s")
	if now, ok := processCPUNanos(); ok && cpu >= 0 && now > cpu {
		b.ReportMetric(total/(float64(now-cpu)/1e9), "pages/cpu-s")
	}
}
